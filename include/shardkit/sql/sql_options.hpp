// shardkit/sql/sql_options.hpp — options of one Cluster::Execute call.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "shardkit/routing/read_policy.hpp"
#include "shardkit/writes/routed.hpp"

namespace shardkit {

struct SqlOptions {
  // Absolute deadline for the statement, its retries after a bucket move
  // included. Default: now + 5 s (routed.hpp).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  Isolation isolation = Isolation::kReadCommitted;
  // For messages and statistics.
  std::string label = "sql";
  // Where a SELECT may run: the primaries (default) or replicas
  // (read_policy.hpp), routed and over every shard alike. A SELECT answered
  // by exact top-k reads the primaries (its phases aggregate into a
  // temporary table, which a hot standby cannot make): with replicas asked
  // for, the merge plan answers it instead, as exactly.
  ReadPolicy read;
  // A SELECT that neither routes to one shard nor merges from per-shard
  // partials (joins off the shard key, subqueries and CTEs over every
  // shard, windows, aggregates such as stddev) is answered by gathering the
  // rows of the sharded tables it reads onto one server, which runs it:
  // refused when that is more than this many rows (all tables, all shards).
  // Default: the configuration's [sql] max_gather_rows (100,000).
  std::optional<std::int64_t> max_gather_rows;
  // ... and when the rows received, as the shards send them (each table's
  // rows as one array in text), are more than this many bytes, all tables
  // and shards together: refused as soon as the shards' answers pass it.
  // 0: no bound. Default: the configuration's [sql] max_gather_bytes
  // (256 MiB).
  std::optional<std::int64_t> max_gather_bytes;
};

}  // namespace shardkit
