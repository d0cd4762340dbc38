// shardkit/sql/sql_options.hpp — options of one Cluster::Execute call.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "shardkit/writes/routed.hpp"

namespace shardkit {

struct SqlOptions {
  // Absolute deadline for the statement, its retries after a bucket move
  // included. Default: now + 5 s (routed.hpp).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  Isolation isolation = Isolation::kReadCommitted;
  // For messages and statistics.
  std::string label = "sql";
};

}  // namespace shardkit
