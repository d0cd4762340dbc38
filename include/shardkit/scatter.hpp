// shardkit/scatter.hpp — run one statement on many shards in parallel.
//
// Each shard's statement runs on a connection from that shard's pool, on its
// own worker thread, all at once, so the total time is the slowest shard's,
// not the sum. Every scatter has a deadline that bounds connection
// acquisition and execution alike: each statement runs with a server-side
// statement_timeout set to the time left, is cancelled when the deadline
// passes, and the caller gets control back by the deadline (plus a short
// grace for the cancelled shards to report why) whatever a shard does.
// By default one failing shard fails the whole scatter (ScatterError naming
// every failed shard and its cause); with allow_partial the result carries
// the missing shards and a warning instead. Each shard's statement holds
// exactly one connection and never waits for a second one, so concurrent
// scatters over small pools cannot deadlock on each other.
//
//   shardkit::ScatterGather scatter{*resolver};
//   shardkit::ScatterOptions options;
//   options.deadline = std::chrono::steady_clock::now() + 2s;
//   options.label = "best-sellers";
//   auto result = scatter.Run("SELECT book_id, sum(quantity) FROM order_items "
//                             "WHERE created_at >= $1 GROUP BY 1", {"2026-01-01"}, options);
//   for (const auto& shard : result.shards) use(shard.shard, shard.rows);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pqxx/result>

#include "shardkit/bucket.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/session.hpp"

namespace shardkit {

class BucketShardResolver;

// Positional parameters $1..$n, in PostgreSQL text form; nullopt is NULL.
using SqlParams = std::vector<std::optional<std::string>>;

struct ScatterOptions {
  // Absolute deadline for the whole scatter (acquire + execute). Default:
  // now + 30 s at the time Run is called; at most now + 7 days.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Run only on these shards (default: all shards of the resolver). Each
  // shard at most once; an unknown shard throws UnknownShard.
  std::optional<std::vector<ShardId>> shards;
  // Return what the healthy shards answered instead of failing. A scatter
  // in which no shard answered still throws ScatterError.
  bool allow_partial = false;
  // Statements run in a READ ONLY transaction. Set false for writes; note
  // that a scatter is never atomic across shards (each commits on its own).
  bool read_only = true;
  // Send only the statement (one round trip instead of three: no BEGIN /
  // SET LOCAL statement_timeout / COMMIT). The deadline is then enforced by a
  // cancel request at the deadline instead of the server's statement_timeout,
  // and read_only is not enforced. For cheap, latency-critical reads.
  bool single_round_trip = false;
  // A label for statistics and messages, e.g. "best-sellers".
  std::string label;
};

struct ShardResult {
  ShardId shard{};
  pqxx::result rows;
  std::chrono::microseconds elapsed{0};  // acquire + execute on this shard
  std::chrono::microseconds queued{0};   // scatter start -> a worker thread took the statement
  std::size_t bytes = 0;                 // payload bytes received (sum of field sizes)
  // What the shard's pool read from its server once: collation and session
  // settings, for the merge's checks (scatter_merge.hpp).
  std::shared_ptr<const SessionFacts> session;
};

struct ScatterResult {
  std::vector<ShardResult> shards;                 // one per shard that answered, in shard order
  std::vector<ScatterError::Failure> failures;     // only with allow_partial, in shard order
  std::optional<std::string> warning;              // set when failures is not empty
  std::chrono::microseconds elapsed{0};            // wall time of the whole scatter
  std::optional<ShardId> slowest_shard;            // of the shards that answered
  std::chrono::microseconds slowest_elapsed{0};
  [[nodiscard]] std::size_t TotalRows() const noexcept;
  [[nodiscard]] std::size_t TotalBytes() const noexcept;
};

// Cumulative cross-shard statistics. A growing count of cross-shard queries
// is how a wrong shard key shows (seed 001).
struct ScatterStats {
  std::uint64_t scatters = 0;        // statements sent to more than one shard
  std::uint64_t single_shard = 0;    // calls that touched exactly one shard (not cross-shard)
  std::uint64_t shard_requests = 0;  // sum of fan-out over all calls
  std::uint64_t max_fanout = 0;
  std::uint64_t failed = 0;          // calls that threw ScatterError
  std::uint64_t partial = 0;         // calls answered with missing shards
  std::uint64_t shard_failures = 0;  // shards that failed or missed the deadline, over all calls
  std::uint64_t rows = 0;            // rows received
  std::uint64_t bytes = 0;           // payload bytes received
  std::chrono::microseconds total_slowest{0};  // sum of slowest-shard times
  std::chrono::microseconds max_slowest{0};
};

// Thread-safe: any number of threads may Run() scatters at once; they share
// the worker threads and the shards' pools.
class ScatterGather {
 public:
  // threads: how many statements may run at once (default: the shard count).
  // Statements beyond that wait for a free worker (their wait counts against
  // the deadline). Destroy the ScatterGather before the resolver: its
  // destructor waits for statements still running past a deadline (cut by
  // their statement_timeout or the cancel sent at the deadline).
  explicit ScatterGather(BucketShardResolver& resolver, std::optional<int> threads = {});
  ~ScatterGather();
  ScatterGather(const ScatterGather&) = delete;
  ScatterGather& operator=(const ScatterGather&) = delete;

  // The same statement on every selected shard. Throws ScatterError (see
  // above), UnknownShard or Error (a shard listed twice).
  [[nodiscard]] ScatterResult Run(const std::string& sql, const SqlParams& params = {},
                                  const ScatterOptions& options = {});
  // A different statement (or parameters) per shard; options.shards is
  // ignored, the statements name their shards (each at most once).
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
