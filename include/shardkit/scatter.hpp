// shardkit/scatter.hpp — run one statement on many shards in parallel.
//
// Each shard's statement runs on a connection from that shard's pool, all at
// once, so the total time is the slowest shard's, not the sum. Every scatter
// has a deadline. By default one failing shard fails the whole scatter
// (ScatterError naming the shards and causes); with allow_partial the result
// carries the missing shards and a warning instead. Connections for a
// scatter are acquired in shard order, so concurrent scatters over small
// pools cannot deadlock on each other.
//
//   shardkit::ScatterGather scatter{*resolver};
//   auto result = scatter.Run("SELECT book_id, sum(quantity) FROM order_items "
//                             "WHERE bucket = ANY($1) GROUP BY 1", {"{1,2}"});
//   for (const auto& shard : result.shards) use(shard.shard, shard.rows);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/result>

#include "shardkit/bucket.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

class BucketShardResolver;

// Positional parameters $1..$n, in PostgreSQL text form; nullopt is NULL.
using SqlParams = std::vector<std::optional<std::string>>;

struct ScatterOptions {
  // Absolute deadline for the whole scatter (acquire + execute). Default:
  // now + 30 s at the time Run is called.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Run only on these shards (default: all shards of the resolver).
  std::optional<std::vector<ShardId>> shards;
  // Return what the healthy shards answered instead of failing.
  bool allow_partial = false;
  // A label for statistics and messages, e.g. "best-sellers".
  std::string label;
};

struct ShardResult {
  ShardId shard = 0;
  pqxx::result rows;
  std::chrono::microseconds elapsed{0};  // acquire + execute on this shard
  std::size_t bytes = 0;                 // payload bytes received (sum of field sizes)
};

struct ScatterResult {
  std::vector<ShardResult> shards;                 // one per shard that answered, in shard order
  std::vector<ScatterError::Failure> failures;     // only with allow_partial
  std::optional<std::string> warning;              // set when failures is not empty
  std::chrono::microseconds elapsed{0};            // wall time of the whole scatter
  std::optional<ShardId> slowest_shard;
  std::chrono::microseconds slowest_elapsed{0};
  [[nodiscard]] std::size_t TotalRows() const noexcept;
  [[nodiscard]] std::size_t TotalBytes() const noexcept;
};

// Cumulative cross-shard statistics. A growing count of cross-shard queries
// is how a wrong shard key shows (seed 001).
struct ScatterStats {
  std::uint64_t scatters = 0;        // statements sent to more than one shard
  std::uint64_t shard_requests = 0;  // sum of fan-out
  std::uint64_t failed = 0;          // scatters that threw
  std::uint64_t partial = 0;         // scatters answered with missing shards
  std::uint64_t rows = 0;            // rows received
  std::chrono::microseconds total_slowest{0};  // sum of slowest-shard times
  std::chrono::microseconds max_slowest{0};
};

class ScatterGather {
 public:
  // threads: how many statements may run at once (default: the shard count).
  explicit ScatterGather(BucketShardResolver& resolver, std::optional<int> threads = {});
  ~ScatterGather();
  ScatterGather(const ScatterGather&) = delete;
  ScatterGather& operator=(const ScatterGather&) = delete;

  // The same statement on every selected shard.
  [[nodiscard]] ScatterResult Run(const std::string& sql, const SqlParams& params = {},
                                  const ScatterOptions& options = {});
  // A different statement (or parameters) per shard: sql_for(shard) -> (sql, params).
  struct Statement {
    std::string sql;
    SqlParams params;
  };
  [[nodiscard]] ScatterResult RunPerShard(const std::vector<std::pair<ShardId, Statement>>& statements,
                                          const ScatterOptions& options = {});

  [[nodiscard]] ScatterStats Stats() const;
  [[nodiscard]] BucketShardResolver& Resolver() const noexcept { return resolver_; }

 private:
  struct Impl;
  BucketShardResolver& resolver_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit
