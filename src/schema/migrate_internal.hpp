// Pieces the migrator's files share (migrate.cpp, migration_status.cpp and
// the per-server parts beside them); defined in migrate.cpp.
#pragma once

#include <string>

#include "shardkit/schema/migrate.hpp"

namespace shardkit::detail {

// A version as the files name it: 7 -> "007".
[[nodiscard]] std::string VersionText(int version);

// "schema.index on table", for messages.
[[nodiscard]] std::string DescribeIndex(const InvalidIndex& index);

}  // namespace shardkit::detail
