// Pieces the migrator's files share (migrate.cpp, migration_status.cpp and
// the per-server parts beside them); defined in migrate.cpp.
#pragma once

#include <exception>
#include <string>

#include "shardkit/schema/migrate.hpp"

namespace shardkit::detail {

// `text` without trailing newlines and spaces, its lines joined by spaces.
[[nodiscard]] std::string OneLine(std::string text);

// An exception's message for a report or a history row: one line, any
// password in a connection string redacted.
[[nodiscard]] std::string ErrorText(const std::exception& e);

// A version as the files name it: 7 -> "007".
[[nodiscard]] std::string VersionText(int version);

// "schema.index on table", for messages.
[[nodiscard]] std::string DescribeIndex(const InvalidIndex& index);

}  // namespace shardkit::detail
