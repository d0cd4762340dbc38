// shardkit/resharding/rebalance.hpp — spread the buckets over a set of shards with the
// fewest moves, and run those moves.
//
// PlanRebalance() answers "which buckets move where" for a target set of
// shards: every shard of the set ends with 64/n buckets (rounded down or
// up), shards outside the set end with none, and no bucket moves that need
// not. Adding one shard reproduces BucketDirectory::WithShardAdded() (the
// fullest shard gives up its highest-numbered bucket, so shards keep
// ranges); draining a shard sends each of its buckets to the shard of the
// nearest lower-numbered bucket that stays, so a shard added and drained
// again gives back exactly the old placement.
//
//   auto plan = shardkit::PlanRebalance(*resolver->Directory(), {ShardId{0}, ShardId{1}, ShardId{2}});
//   shardkit::RebalanceReport report = shardkit::ApplyRebalance(config, plan, {.parallel = 2});
//
// ApplyRebalance() runs the plan's moves (move.hpp), `parallel` at a time;
// each move's cleanup waits out its grace period while the next moves run.
// Live moves that a stopped run left (any bucket) are resumed first where
// they stopped (a move still 'aborting' is rolled back), and the plan is
// made again from the directory they leave, onto plan.shards (a plan
// without shards keeps its moves, less those already done): a rebalance
// applied again after one was killed finishes the job. A failed move stops
// new ones from starting; the report says which moved.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/core/bucket.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {

struct PlannedMove {
  BucketId bucket{};
  ShardId from{};
  ShardId to{};
  std::int64_t rows = 0;  // filled by CountRowsPerBucket, if asked
};

struct RebalancePlan {
  BucketDirectory before = BucketDirectory::EvenSplit(1);
  BucketDirectory after = BucketDirectory::EvenSplit(1);  // version: before + number of moves
  std::vector<ShardId> shards;                            // the shards that hold the buckets afterwards
  std::vector<PlannedMove> moves;                         // in the order they run
  [[nodiscard]] std::int64_t TotalRows() const noexcept;
};

// Throws DirectoryError for an empty or invalid shard set.
[[nodiscard]] RebalancePlan PlanRebalance(const BucketDirectory& current, const std::vector<ShardId>& shards);

// Rows per bucket over every registered sharded table, counted on the
// shards (each shard for every row it holds), in parallel.
[[nodiscard]] std::array<std::int64_t, kBucketCount> CountRowsPerBucket(const ClusterConfig& config);

struct RebalanceProgress {
  int finished = 0;  // moves done (or failed)
  int total = 0;
  MoveProgress move;  // the move that reported
};

struct RebalanceOptions {
  int parallel = 1;
  MoveOptions move;                                           // on_progress is replaced; after_step is kept
  std::function<void(const RebalanceProgress&)> on_progress;  // serialised
};

struct RebalanceReport {
  std::int64_t plan_id = 0;
  std::vector<MoveRecord> moves;      // finished moves, in the order they finished
  std::vector<std::string> failures;  // one line per failed move
  std::vector<PlannedMove> not_started;
  std::vector<std::int64_t> resumed;  // live moves found at the start, resumed (or rolled back, if aborting)
  std::chrono::microseconds elapsed{0};
  [[nodiscard]] bool Ok() const noexcept { return failures.empty() && not_started.empty(); }
};

[[nodiscard]] RebalanceReport ApplyRebalance(const ClusterConfig& config, const RebalancePlan& plan,
                                             const RebalanceOptions& options = {});

}  // namespace shardkit
