// The parts of the workers demo (demo_workers.cpp: RunWorkers): the load of
// orders and their jobs (workers_demo_load.cpp), the worker processes through
// join, SIGKILL, SIGSTOP and salting (workers_demo_run.cpp), the checker over
// every job and effect (workers_demo_checker.cpp), and what each phase did,
// measured and reported (workers_demo_report.cpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataset.hpp"
#include "demos.hpp"
#include "lab.hpp"
#include "order_ids.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"
#include "shardkit/workers/hot_keys.hpp"
#include "shardkit/workers/job_queue.hpp"
#include "shardkit/workers/partition_lease.hpp"
#include "worker_process.hpp"

namespace shardkit::lab::workers_demo {

using Clock = std::chrono::steady_clock;

inline constexpr CustomerId kHotCustomer{4242};
inline constexpr int kSalt = 8;
inline constexpr double kHotShare = 0.4;  // the worker-sharding case: one customer, ~40% of all notifications

[[nodiscard]] inline double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
[[nodiscard]] inline double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// ------------------------------------------------------------------- load

struct PlacedOrder {
  CustomerId customer{};
  std::int64_t order_id = 0;
  std::int64_t total_cents = 0;
  std::string ordered_at;  // the same value on the shard and the reference
  std::array<std::int64_t, 3> jobs{};
};

// Places orders: the order, its tracking row and its three notification
// jobs in one transaction on the customer's shard.
class OrderPlacer {
 public:
  OrderPlacer(Lab& lab, const JobQueue& queue, SnowflakeGenerator& ids) : lab_(lab), queue_(queue), ids_(ids) {}

  PlacedOrder Place(CustomerId customer, std::uint64_t random);

  [[nodiscard]] std::vector<PlacedOrder> Placed() const {
    std::lock_guard lock(mutex_);
    return placed_;
  }

 private:
  Lab& lab_;
  const JobQueue& queue_;
  SnowflakeGenerator& ids_;
  mutable std::mutex mutex_;
  std::vector<PlacedOrder> placed_;
};

// Order and job ids: Snowflake IDs from a leased worker id (a fixed one if
// the catalog has no lease table).
// Every customer of the shards, in order.
[[nodiscard]] std::vector<CustomerId> Customers(Lab& lab);

// A steady load: orders (3 jobs each) in their own transactions, at
// options.orders_per_second, on a thread of its own until Stop().
class SteadyLoad {
 public:
  SteadyLoad(const WorkersDemoOptions& options, const std::vector<CustomerId>& customers, OrderPlacer& placer);
  void Stop();
  [[nodiscard]] std::int64_t Produced() const { return produced_.load(); }

 private:
  std::atomic<bool> producing_{true};
  std::atomic<std::int64_t> produced_{0};
  std::jthread producer_;  // last: its thread uses the members above
};

// The demo's own rows, from an earlier run too: its orders and their
// tracking (shards and reference), its jobs and notifications, its leases.
void CleanUp(Lab& lab, const Dsn& catalog_dsn, const std::string& queue, bool keep_jobs);

// -------------------------------------------------------------------- run

// The worker processes (`bookstore-lab worker ...`) by name, and which of
// them are live.
struct Fleet {
  std::string executable;
  std::filesystem::path config_file;
  const WorkerSettings& ws;
  std::filesystem::path work_dir;
  std::map<std::string, std::unique_ptr<WorkerProcess>> workers;
  std::vector<std::string> live;

  void Start(const std::string& name);
  void Forget(const std::string& name);  // killed: no longer live
  // Every process terminated, the configuration file removed.
  void TerminateAll();
};

// What every phase uses and adds to.
struct Demo {
  Lab& lab;
  const WorkersDemoOptions& options;
  const WorkerSettings& ws;
  const std::string& queue_name;
  const Dsn& catalog;
  Fleet& fleet;
  DemoResult& r;
  Json& figures;
  // The timeline's zero (the jobs' done_at is compared with it: the servers
  // and the lab share a clock on loopback).
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
};

// An event on the demo's timeline (figures["timeline_events"]: the marks of
// the jobs-per-worker chart).
void Mark(Demo& d, const std::string& event);

// Polls until `done` or the deadline; true if it held.
bool WaitUntil(const std::function<bool()>& done, Clock::duration timeout,
               Clock::duration every = std::chrono::milliseconds(20));
// Jobs of the queue pending or running, on all shards.
[[nodiscard]] std::int64_t Unfinished(Lab& lab, const std::string& queue);
// Jobs of the queue done, on all shards.
[[nodiscard]] std::int64_t Done(Lab& lab, const std::string& queue);

// The phases, in the order the demo runs them.
// 1. Four worker processes share the partitions.
void FourShare(Demo& d);
// 2. A fifth worker joins: the others hand partitions over one at a time.
// Returns the median handoff pause (release -> claim), in ms.
double FifthJoins(Demo& d);
// 3. SIGKILL: no goodbye; its partitions wait for their leases to expire.
// Returns the killed worker's name.
std::string KillOne(Demo& d);
// 4. SIGSTOP in the middle of a job, past its lease, then SIGCONT.
void FreezeMidJob(Demo& d, const OrderPlacer& placer, Rng& rng);
// The steady load stops and drains; the shares settle again.
void DrainSteadyLoad(Demo& d, SteadyLoad& load);
// 5. A hot customer: 40% of a burst of orders, all in one partition; then
// salted over kSalt partitions.
void HotCustomer(Demo& d, OrderPlacer& placer, Rng& rng, const std::vector<CustomerId>& customers,
                 HotKeyRegistry& registry, SnowflakeGenerator& ids);
// 6. Everyone leaves gracefully. Returns the late completions the fence
// refused, over all workers, and each worker's final counts (also
// figures["workers"]).
struct Leaving {
  std::int64_t refusals = 0;
  Json per_worker = Json::object();
};
Leaving EveryoneLeaves(Demo& d, const std::string& killed);

// Jobs each worker completed per second since the demo started, from the
// jobs table (figures["jobs_over_time"]: the workers, then per second the
// second and each worker's count).
void JobsOverTime(Demo& d);

// ---------------------------------------------------------------- checker

struct JobCheck {
  std::int64_t enqueued = 0, done = 0, lost = 0, doubled = 0, missing_rows = 0, stray = 0;
  std::int64_t guard_skips = 0;  // late status updates the sequence guard ignored
};
// 7. Every enqueued job and every effect: nothing done twice, nothing lost,
// order statuses never backwards.
JobCheck CheckJobsAndEffects(Demo& d, const std::vector<PlacedOrder>& placed, const Leaving& leaving);
// The reference server holds the same orders, unsharded (mirrored first).
void CheckOrdersEqualReference(Demo& d, const std::vector<PlacedOrder>& placed);

// ----------------------------------------------------------------- report

// What one phase's jobs did, from the jobs table.
struct PhaseStats {
  std::int64_t jobs = 0;
  double drain_s = 0;  // first created -> last done
  std::map<int, std::int64_t> per_partition;
  std::map<int, double> partition_rate;  // jobs/s while the partition was being worked
  std::map<std::string, std::int64_t> per_worker;
  std::int64_t hot_jobs = 0;
  double hot_drain_s = 0;  // the hot customer's jobs: first created -> last done
  std::set<int> hot_partitions;
  [[nodiscard]] double HotJobsPerSecond() const {
    return hot_drain_s > 0 ? static_cast<double>(hot_jobs) / hot_drain_s : 0;
  }
  [[nodiscard]] double BusiestWorkerShare() const {
    std::int64_t most = 0;
    for (const auto& [w, n] : per_worker) most = std::max(most, n);
    return jobs > 0 ? static_cast<double>(most) / static_cast<double>(jobs) : 0;
  }
  // The partition that did the most jobs, and its throughput.
  [[nodiscard]] std::pair<int, double> BusiestPartition() const {
    int best = -1;
    std::int64_t most = 0;
    for (const auto& [p, n] : per_partition) {
      if (n > most) {
        most = n;
        best = p;
      }
    }
    return {best, best < 0 ? 0.0 : partition_rate.at(best)};
  }
};

// The done jobs of ids first_job..last_job.
[[nodiscard]] PhaseStats MeasurePhase(Lab& lab, const std::string& queue, std::int64_t first_job,
                                      std::int64_t last_job);
[[nodiscard]] Json PhaseJson(const PhaseStats& s);
[[nodiscard]] std::string DescribePhase(const PhaseStats& s);

// owner -> partitions, of unexpired leases.
[[nodiscard]] std::map<std::string, std::vector<int>> Holdings(const PartitionGroupView& g);
// "w1 16, w2 16, ...": each live worker's partitions.
[[nodiscard]] std::string Shares(const PartitionGroupView& g);

// The run's totals and settings, into d.figures.
void TotalsFigures(Demo& d, const JobCheck& jobs, std::size_t orders, const Leaving& leaving, double handoff_pause_ms);

}  // namespace shardkit::lab::workers_demo
