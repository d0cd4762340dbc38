# Installs the debug info of SHARDKIT_DEBUG_FILES (the build tree's files, not
# stripped) as <prefix>/lib/debug/.build-id/<xx>/<rest of the build ID>.debug,
# compressed: `cmake --install <build> --component debug` runs it (CMakeLists.txt).
foreach(file IN LISTS SHARDKIT_DEBUG_FILES)
  execute_process(COMMAND "${SHARDKIT_READELF}" --notes "${file}" OUTPUT_VARIABLE notes COMMAND_ERROR_IS_FATAL ANY)
  if(NOT notes MATCHES "Build ID: ([0-9a-f][0-9a-f])([0-9a-f]+)")
    message(FATAL_ERROR "${file} has no build ID, so a debugger could not match it with its debug info")
  endif()
  set(debug "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/debug/.build-id/${CMAKE_MATCH_1}/${CMAKE_MATCH_2}.debug")
  message(STATUS "Installing: ${debug}")
  get_filename_component(dir "${debug}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  execute_process(COMMAND "${SHARDKIT_OBJCOPY}" --only-keep-debug --compress-debug-sections=zlib "${file}" "${debug}"
                  COMMAND_ERROR_IS_FATAL ANY)
  # objcopy keeps the executable's mode; debug info is data.
  file(CHMOD "${debug}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${debug}")
endforeach()
