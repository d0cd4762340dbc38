// shardkit/workers/partition_lease.hpp — which worker process handles which partition.
//
// The worker-sharding case's method 1: the work is split into a fixed number of partitions
// (the 64 buckets by default) and a lease table in the catalog says who owns
// each one (sql/021_partition_leases.sql). A worker joins a group and keeps
// a fair share of the partitions:
//
//   auto leases = shardkit::PartitionLeases::Join(catalog_dsn, {.group = "outbox"});
//   for (auto grant : leases->StartTake()) { ... take jobs of grant.partition under grant.version ... }
//   leases->Held();                  // what this worker owns now, with fencing tokens
//   leases->Leave(deadline);         // on shutdown: finish in-flight work, release everything
//
// Each Tick() (a background thread runs it; or call it yourself with
// run_in_background = false), in one catalog transaction:
//  1. heartbeat: the worker's row in shardkit_partition_workers, so a worker
//     that holds nothing yet still counts as live and others make room;
//  2. renew: UPDATE the (partition, claim_version) pairs held; a pair not
//     returned was taken over and is lost at once (self-fencing);
//  3. fair share: with n live workers (unexpired membership leases, judged by
//     clock_timestamp(), not now()), the first P mod n by join order get
//     ceil(P/n), the rest floor(P/n) — the seed's ceil(P/n), made exact so
//     that 7 workers end at 10,9,9,9,9,9,9 and not 10,10,10,10,10,10,4;
//  4. claim free or expired partitions up to the share with FOR UPDATE SKIP
//     LOCKED, bumping claim_version, the fencing token;
//  5. above the share (a worker joined), hand over one partition at a time:
//     mark it draining (StartTake stops granting it), wait until its
//     in-flight jobs are finished (the runner confirms through Finished),
//     release it (owner NULL, released_at), pause handoff_pause, next one.
//     A worker below its share ticks every claim_interval and takes it.
//
// The lease is safe without trusting clocks much: lease_until is the
// server's clock_timestamp() + lease_duration; locally each partition may be
// used until (time the claim/renewal was *sent*) + lease_duration -
// safety_margin on the steady clock — before the server can give it to
// anyone else. If the catalog is unreachable, renewals fail, the local
// deadlines pass and StartTake grants nothing: all work stops before any
// lease could have expired. Correctness does not rest on that alone: every
// job is written with its partition's claim_version as its fence, and a
// completion under an older version updates 0 rows (job_queue.hpp).
//
// This is worker_lease.hpp's idea (SKIP LOCKED claims, fencing token, a local
// deadline before lease_until) applied to many partitions at once; the two
// share their timing rules and bookkeeping (src/ids/lease_support.hpp).
//
// Thread-safe: StartTake/EndTake/Finished/Holds from any thread (the job
// runner), Tick from one thread at a time (the background thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/core/thread_annotations.hpp"

namespace pqxx {
class connection_base;
}  // namespace pqxx

namespace shardkit::detail {
struct LeaseConnection;
}

namespace shardkit {

struct PartitionLeaseOptions {
  // Workers of one group share its partitions; a job queue's workers use the
  // queue's name.
  std::string group = "default";
  // Fixed when the group's first worker joins; every worker must agree.
  int partition_count = kBucketCount;
  std::chrono::milliseconds lease_duration{30'000};
  std::chrono::milliseconds safety_margin{5'000};
  std::chrono::milliseconds renew_interval{10'000};
  // How often a worker below its share (or handing a partition over) ticks.
  std::chrono::milliseconds claim_interval{250};
  // Gradual handoff: the pause after releasing one surplus partition before
  // the next one starts draining (the seed's "breathe" of ~200 ms).
  std::chrono::milliseconds handoff_pause{200};
  // Join announces the worker, waits this long, then claims: workers started
  // together (a deploy) see each other and split the partitions at once,
  // instead of the first taking all and handing them over one by one.
  std::chrono::milliseconds join_grace{500};
  bool run_in_background = true;
  // Unique per live worker; default "<hostname>:<pid>".
  std::string owner;
};

// A partition the caller may take work from, under this fencing token.
struct PartitionGrant {
  int partition = 0;
  std::int64_t version = 0;
};

struct HeldPartition {
  int partition = 0;
  std::int64_t version = 0;                        // claim_version: the fencing token
  std::chrono::steady_clock::time_point deadline;  // local: work stops here unless renewed
  std::chrono::steady_clock::time_point claimed;
  bool draining = false;  // being handed over: no new work
  int in_flight = 0;      // jobs taken and not finished
};

struct PartitionLeaseStats {
  int live_workers = 0;
  int rank = 0;   // position by join order among the live workers
  int share = 0;  // partitions this worker should hold
  int held = 0;
  int draining = 0;
  std::uint64_t ticks = 0;
  std::uint64_t tick_failures = 0;
  std::uint64_t claimed = 0;                // partitions claimed, in total
  std::uint64_t released = 0;               // partitions handed over (and released by Leave)
  std::uint64_t lost = 0;                   // partitions found taken over at renewal, or expired locally
  std::chrono::microseconds last_tick{0};   // catalog round trip of the last tick
  std::chrono::microseconds last_claim{0};  // of the last tick that claimed something
  // Of the partitions this worker claimed after a graceful release: the time
  // between the release and the claim (the handoff pause), the largest seen.
  std::optional<std::chrono::microseconds> last_handoff_gap;
  std::chrono::microseconds max_handoff_gap{0};
  std::optional<std::string> last_error;
};

// What one Tick did.
struct PartitionTick {
  std::vector<PartitionGrant> claimed;
  std::vector<int> lost;
  std::vector<int> released;
  std::optional<int> started_draining;
  int share = 0;
  int live_workers = 0;
};

class PartitionLeases {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to the catalog (kept for the lease's life), registers the group
  // (or checks its partition count), announces the worker, waits join_grace
  // and runs the first Tick.
  // Throws ConfigError for bad options or a partition count that differs
  // from the group's, LeaseError if the catalog cannot be reached.
  [[nodiscard]] static std::shared_ptr<PartitionLeases> Join(const Dsn& catalog_dsn,
                                                             PartitionLeaseOptions options = {});

  class PrivateTag {
    explicit PrivateTag() = default;
    friend class PartitionLeases;
  };
  PartitionLeases(PrivateTag, Dsn dsn, PartitionLeaseOptions options);
  ~PartitionLeases();  // Leave() with a short deadline, best effort
  PartitionLeases(const PartitionLeases&) = delete;
  PartitionLeases& operator=(const PartitionLeases&) = delete;

  // One round of bookkeeping (see the file comment). Throws LeaseError if
  // the catalog cannot be reached; held partitions stay usable until their
  // local deadlines, then StartTake grants nothing.
  PartitionTick Tick();

  // For job runners. Grants every partition held, not draining and before
  // its local deadline, and counts one take in flight for each: call EndTake
  // with how many jobs each grant produced, then Finished per job done.
  [[nodiscard]] std::vector<PartitionGrant> StartTake();
  void EndTake(std::span<const PartitionGrant> grants, std::span<const int> jobs_taken);
  // Jobs taken under `grant` are finished (completed, refused or given up).
  void Finished(const PartitionGrant& grant, int jobs = 1);
  // Still held under `version` and before its local deadline (draining
  // partitions count: their in-flight jobs may finish).
  [[nodiscard]] bool Holds(int partition, std::int64_t version) const;

  [[nodiscard]] std::vector<HeldPartition> Held() const;
  [[nodiscard]] PartitionLeaseStats Stats() const;
  [[nodiscard]] const PartitionLeaseOptions& Options() const noexcept { return options_; }
  [[nodiscard]] const std::string& Owner() const noexcept { return options_.owner; }
  [[nodiscard]] int PartitionCount() const noexcept { return options_.partition_count; }

  // Stops granting work, waits until in-flight jobs are finished (or the
  // deadline), releases every partition and the membership. Idempotent;
  // after it nothing is granted again.
  void Leave(Clock::time_point deadline);

 private:
  PartitionTick TickImpl(bool may_claim);
  void Connect();
  void Register();
  void Loop(std::stop_token stop);
  [[nodiscard]] Clock::duration NextInterval() const SHARDKIT_REQUIRES(state_mutex_);
  [[nodiscard]] std::string Describe() const;

  const Dsn dsn_;
  PartitionLeaseOptions options_;

  std::mutex catalog_mutex_;  // the connection; one Tick at a time
  std::unique_ptr<detail::LeaseConnection> connection_ SHARDKIT_GUARDED_BY(catalog_mutex_);

  mutable std::mutex state_mutex_;
  std::condition_variable_any changed_;  // wakes Loop and Leave
  std::map<int, HeldPartition> held_ SHARDKIT_GUARDED_BY(state_mutex_);
  PartitionLeaseStats stats_ SHARDKIT_GUARDED_BY(state_mutex_);
  Clock::time_point last_release_ SHARDKIT_GUARDED_BY(state_mutex_){};
  bool last_tick_failed_ SHARDKIT_GUARDED_BY(state_mutex_) = false;
  bool leaving_ SHARDKIT_GUARDED_BY(state_mutex_) = false;  // no claims, nothing granted
  bool left_ SHARDKIT_GUARDED_BY(state_mutex_) = false;
  bool wake_ SHARDKIT_GUARDED_BY(state_mutex_) = false;

  std::jthread ticker_;  // last member: stopped and joined first
};

// What the catalog says about a group (for shardctl workers and the lab).
struct PartitionLeaseRow {
  int partition = 0;
  std::optional<std::string> owner;  // nullopt: free or released
  std::int64_t version = 0;
  bool expired = false;
  double lease_remaining_s = 0;       // negative once expired
  std::optional<double> lease_age_s;  // since claimed
  std::optional<double> released_ago_s;
};
struct PartitionWorkerRow {
  std::string owner;
  double joined_ago_s = 0;
  double lease_remaining_s = 0;
  bool live = false;
};
struct PartitionGroupView {
  std::string group;
  int partition_count = 0;
  std::vector<PartitionWorkerRow> workers;  // by join order
  std::vector<PartitionLeaseRow> partitions;
};
// Every group, or the named one. Throws LeaseError naming the table if the
// catalog lacks it.
[[nodiscard]] std::vector<PartitionGroupView> ReadPartitionGroups(pqxx::connection_base& catalog,
                                                                  const std::optional<std::string>& group = {});

}  // namespace shardkit
