# cmake -DSQL_DIR=<dir> -DOUTPUT=<file.cpp> -P embed-migrations.cmake
#
# Writes the library's own migration files (SQL_DIR/NNN_name.sql) into a C++
# source as raw string literals, so the schema shardkit needs is compiled into
# the library that needs it (MigrationSet::Library()) and can never be found
# at another version than the code's.
file(GLOB files RELATIVE "${SQL_DIR}" "${SQL_DIR}/*.sql")
list(SORT files)
set(body "")
foreach(name IN LISTS files)
  file(READ "${SQL_DIR}/${name}" text)
  string(FIND "${text}" ")shardkit_sql\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${name} contains the raw string delimiter )shardkit_sql\"")
  endif()
  string(APPEND body "    {\"${name}\", R\"shardkit_sql(${text})shardkit_sql\"},\n")
endforeach()
set(content "// Generated from sql/*.sql by cmake/embed-migrations.cmake: do not edit.
#include \"schema/library_migrations.hpp\"

namespace shardkit::detail {

std::span<const EmbeddedMigration> LibraryMigrationFiles() noexcept {
  static constexpr EmbeddedMigration kFiles[] = {
${body}  };
  return kFiles;
}

}  // namespace shardkit::detail
")
# Rewritten only when it changes: no rebuild for an unchanged schema.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${content}")
