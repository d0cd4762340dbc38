// The library's own migration files, compiled in from sql/ at build time
// (cmake/embed-migrations.cmake writes their definition).
#pragma once

#include <span>
#include <string_view>

namespace shardkit::detail {

struct EmbeddedMigration {
  std::string_view file_name;  // "001_bucket_of.sql"
  std::string_view text;
};

// Every file of sql/, in file-name order.
[[nodiscard]] std::span<const EmbeddedMigration> LibraryMigrationFiles() noexcept;

}  // namespace shardkit::detail
