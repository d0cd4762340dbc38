// The parts of the rebalance demo (demo_rebalance.cpp: RunRebalance): the
// load of writers and readers (rebalance_demo_load.cpp), the moves there and
// back (rebalance_demo_run.cpp), the checker (rebalance_demo_checker.cpp)
// and the report (rebalance_demo_report.cpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <pqxx/transaction_base>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "demos.hpp"
#include "lab.hpp"
#include "order_ids.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/writes/routed.hpp"

namespace shardkit::lab::rebalance_demo {

using Clock = std::chrono::steady_clock;

[[nodiscard]] inline double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// "{0,1,2}"
[[nodiscard]] std::string Sets(const std::vector<ShardId>& shards);

// ------------------------------------------------------------------- load

struct DemoOrder {
  CustomerId customer{};
  std::int64_t order_id = 0;
  int items = 0;
  std::int64_t total_cents = 0;
  std::string ordered_at;  // microseconds since the epoch, the same on the shard and the reference
};

// The order and its items, in `tx` (a shard's or the reference's).
void InsertOrder(pqxx::transaction_base& tx, const DemoOrder& o, BucketId bucket);

// One second of the timeline.
struct Second {
  std::uint64_t ok = 0, retried = 0, failed = 0, unknown = 0;
  std::uint64_t reads = 0, read_retried = 0, read_failed = 0;
  std::vector<double> latency_ms;
  std::string phase;
};

class Recorder {
 public:
  explicit Recorder(Clock::time_point start) : start_(start) {}
  void Phase(std::string name) {
    std::lock_guard lock(mutex_);
    phase_ = std::move(name);
  }
  Second& At(Clock::time_point t) {  // mutex held by the caller
    const auto s = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::seconds>(t - start_).count());
    if (seconds_.size() <= s) seconds_.resize(s + 1);
    if (seconds_[s].phase.empty()) seconds_[s].phase = phase_;
    return seconds_[s];
  }
  void Write(Clock::time_point began, Clock::time_point ended, bool ok, bool retried, bool unknown) {
    std::lock_guard lock(mutex_);
    Second& s = At(ended);
    if (unknown) {
      ++s.unknown;
    } else if (!ok) {
      ++s.failed;
    } else {
      ++s.ok;
      if (retried) ++s.retried;
      s.latency_ms.push_back(Millis(ended - began));
    }
  }
  void Read(Clock::time_point ended, bool ok, bool retried) {
    std::lock_guard lock(mutex_);
    Second& s = At(ended);
    ++s.reads;
    if (retried) ++s.read_retried;
    if (!ok) ++s.read_failed;
  }
  std::vector<Second> Seconds() const {
    std::lock_guard lock(mutex_);
    return seconds_;
  }
  // Seconds from the start of the timeline to `t`.
  [[nodiscard]] double Offset(Clock::time_point t) const { return std::chrono::duration<double>(t - start_).count(); }

 private:
  Clock::time_point start_;
  mutable std::mutex mutex_;
  std::string phase_ = "before";
  std::vector<Second> seconds_;
};

// What the readers compare against, from the reference: the cross-shard
// report up to the lab's "now", and a sample of customers with their
// orders up to then.
struct GroundTruth {
  std::int64_t report_count = 0, report_cents = 0;
  std::vector<std::pair<CustomerId, std::int64_t>> sample;  // customer, orders up to kLabNow
};
[[nodiscard]] GroundTruth ReadGroundTruth(Lab& lab);

// Order ids: Snowflake IDs from a leased worker id (a fixed one if the
// catalog has no lease table).
// What the writers and readers did, shared by their threads.
struct LoadResults {
  std::mutex orders_mutex;  // guards the orders, failed_writes and the errors
  std::vector<DemoOrder> acknowledged, unknown;
  std::uint64_t failed_writes = 0;
  std::atomic<std::uint64_t> report_runs{0}, report_wrong{0}, report_failed{0};
  std::atomic<std::uint64_t> my_orders_runs{0}, my_orders_wrong{0}, my_orders_failed{0};
  std::vector<std::string> read_errors;  // first few, for the text
  std::vector<std::string> write_errors;
};

// Everything the load's threads use.
struct Load {
  Lab& lab;
  const RebalanceDemoOptions& options;
  const GroundTruth& truth;
  SnowflakeGenerator& ids;
  RoutedTransactions& routed;
  ScatterGather& scatter;
  Recorder& recorder;
  const std::atomic<bool>& stop;
  LoadResults& results;
};

// The writer threads (orders with items, routed) and the reader threads
// ("my orders", the cross-shard report), running until `load.stop`.
[[nodiscard]] std::vector<std::thread> StartLoad(Load& load);

// Deletes the orders (and their items) the load wrote, acknowledged or of
// unknown outcome, from every shard and the reference, so that the data is
// the loaded data again; returns how many of them are still anywhere (0).
[[nodiscard]] std::int64_t RemoveDemoOrders(Lab& lab, const LoadResults& load);

// -------------------------------------------------------------------- run

// From the shards holding buckets to those plus the first empty one.
struct ShardSets {
  std::vector<ShardId> from;
  std::vector<ShardId> to;
};
// nullopt if every shard holds buckets.
[[nodiscard]] std::optional<ShardSets> GrowthShards(Lab& lab, const BucketDirectory& directory);

struct MovesResult {
  std::vector<MoveRecord> moved;
  std::map<std::int64_t, double> done_at_s;  // move id -> when it finished, on the timeline
  std::vector<std::string> move_failures;
  std::array<double, 2> leg_seconds{};
  double moves_seconds = 0;
};

// After `settle` of load, the moves to `shards.to`, `settle` again, and
// back to `shards.from` (unless the way there failed), the recorder's
// phases following; `say` gets a line per finished move.
[[nodiscard]] MovesResult MoveThereAndBack(Lab& lab, const RebalanceDemoOptions& options, const ShardSets& shards,
                                           Recorder& recorder, const std::function<void(const std::string&)>& say);

// ---------------------------------------------------------------- checker

// Per table, a row count and two checksums.
using Sums = std::map<std::string, std::array<std::int64_t, 3>>;

struct CheckerResult {
  std::int64_t unknown_committed = 0;  // outcome-unknown writes that committed (added to the reference)
  std::int64_t lost = 0, duplicated = 0, misplaced = 0, short_items = 0;
  Sums shards_sum;  // the union of the shards, every row they hold
  Sums reference_sum;
  std::string union_detail;
  std::vector<std::string> leftovers;  // replication objects left behind
  std::size_t live_moves = 0;
  std::int64_t directory_differs = 0;  // buckets elsewhere than at the start
};

// Every acknowledged order exists exactly once, with all its items, on the
// shard that owns its bucket (`final_directory`); unknown outcomes are
// looked up; the union of the shards equals the reference.
[[nodiscard]] CheckerResult CheckRebalance(Lab& lab, const BucketDirectory& start_directory,
                                           const BucketDirectory& final_directory, const LoadResults& load);

// ----------------------------------------------------------------- report

// The figures, the checks and the text of the demo, into `r`.
void Report(DemoResult& r, Lab& lab, const RebalanceDemoOptions& options, const ShardSets& shards,
            const std::vector<Second>& seconds, const MovesResult& moves, const LoadResults& load,
            const CheckerResult& checked, double total_seconds);

}  // namespace shardkit::lab::rebalance_demo
