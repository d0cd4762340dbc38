// shardkit/workers/job_queue.hpp — an outbox of jobs on every shard, worked off by
// partition owners with fenced completions.
//
// The worker-sharding case: background work (notifications for orders, say) split over the
// 64 partitions, each owned by one worker process at a time
// (partition_lease.hpp). A job is a row of shardkit_jobs (sql/020_jobs.sql)
// on its customer's shard, written in the same transaction as the order
// that causes it, with its partition fixed at write time (hot_keys.hpp):
//
//   shardkit::JobQueue queue{{.queue = "outbox"}, registry};   // registry: salted hot keys, may be null
//   pqxx::work tx{*resolver->PoolFor(customer).Acquire()};
//   tx.exec_params("INSERT INTO orders ...", ...);
//   queue.Enqueue(tx, {.customer_id = customer, .job_id = ids.Next(), .kind = "order_placed",
//                      .stream_key = order_id, .seq = 1});
//   tx.commit();                                               // the order and its job, or neither
//
// A worker process:
//
//   auto leases = shardkit::PartitionLeases::Join(catalog_dsn, {.group = "outbox"});
//   shardkit::JobWorker worker{*resolver, leases, queue};
//   worker.Run(stop_token, {.process = [](const shardkit::Job& job, const shardkit::JobContext& ctx) {
//                             send_email(job);          // outside any transaction; ctx.StillOwned()
//                           },
//                           .apply = [](const shardkit::Job& job, pqxx::transaction_base& tx) {
//                             tx.exec_params("INSERT INTO notification_log ...");  // the job's effects
//                           }});
//
// A round: for the partitions it holds (PartitionLeases::StartTake), the
// worker first adopts each newly claimed partition on every shard that can
// hold its jobs (jobs a previous owner left running go back to pending with
// the new fence, so that owner's completions are refused from then on),
// then takes pending jobs of its partitions in created order:
//
//   ... WHERE state = 'pending' AND partition = p AND fence <= v
//       ORDER BY created LIMIT n FOR UPDATE SKIP LOCKED   -> state 'running', fence = v
//
// (one ordered index range per partition; SKIP LOCKED and LIMIT may return
// fewer rows than asked). It processes them one by one — `process` outside
// any transaction, then the fenced completion in one transaction on the
// job's shard:
//
//   UPDATE shardkit_jobs SET state = 'done' ... WHERE id = :id AND state = 'running' AND fence <= :v
//   -- 0 rows: a newer owner exists: ROLLBACK, do not retry; else `apply`, COMMIT
//
// so a job's database effects commit at most once, whatever the timing
// (a worker frozen past its lease, a renewal that raced a takeover). A lost
// partition's remaining jobs are abandoned at once (the next owner adopts
// them). `process` should be idempotent toward the outside world (an e-mail
// may go out twice if a worker dies between sending and committing): the
// fence guarantees at most once for effects in the database, at least once
// for the rest.
//
// Ordering: one partition's jobs are processed in created order by one
// worker at a time. Across a takeover two owners can briefly overlap (the
// old one finishing a job the new one skipped as locked), so where a stream
// must never go backwards (the worker-sharding case: "delivered" overwritten by "shipped")
// the effect guards itself with the job's sequence number:
//
//   UPDATE order_tracking SET status = $1, status_seq = $2 WHERE ... AND status_seq < $2
//
// Thread-safety: JobQueue is immutable apart from its registry (thread-safe).
// A JobWorker runs one loop (Run or RunOnce) at a time; Stats() may be
// called from any thread. One JobWorker per PartitionLeases: a round puts
// back jobs it finds running under its own fence, which it can only do
// because no other round of the same owner is in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/workers/hot_keys.hpp"
#include "shardkit/workers/partition_lease.hpp"

namespace pqxx {
class transaction_base;
}  // namespace pqxx

namespace shardkit {

class BucketDirectory;
class BucketShardResolver;

struct JobQueueOptions {
  std::string queue = "default";
  // The partitions of the queue's worker group (PartitionLeaseOptions::partition_count).
  int partition_count = kBucketCount;
};

struct NewJob {
  CustomerId customer_id{};
  std::int64_t job_id = 0;  // a global ID (snowflake.hpp, bucketed_id.hpp)
  std::string kind;
  std::string payload;
  // Jobs of one stream (an order's status changes) share a key: a salted
  // customer's stream stays in one partition, in order.
  std::optional<std::int64_t> stream_key;
  std::int64_t seq = 0;  // the job's position in its stream
  // Not before this long from now (0: at once).
  std::chrono::milliseconds delay{0};
};

struct Job {
  CustomerId customer_id{};
  BucketId bucket{};
  std::int64_t job_id = 0;
  int partition = 0;
  std::string kind;
  std::string payload;
  std::optional<std::int64_t> stream_key;
  std::int64_t seq = 0;
  int attempts = 0;        // including this one
  std::int64_t fence = 0;  // the partition lease version it was taken under
  ShardId shard{};
  std::chrono::system_clock::time_point created;  // the shard server's clock
};

class JobQueue {
 public:
  explicit JobQueue(JobQueueOptions options = {}, std::shared_ptr<HotKeyRegistry> hot_keys = nullptr);

  // Inserts the job in the caller's transaction, which must be on the
  // customer's shard (the order's transaction). Returns the partition.
  // Throws JobError naming the queue and job (a duplicate job_id, a missing
  // table...).
  int Enqueue(pqxx::transaction_base& tx, const NewJob& job) const;

  // Where a new job of this customer goes (salted or home partition).
  [[nodiscard]] int PartitionFor(CustomerId customer_id, std::int64_t salt_key) const;
  // Every partition a customer's jobs may be in (readers of salted keys).
  [[nodiscard]] std::vector<int> PartitionsOf(CustomerId customer_id) const;
  // The shards that may hold jobs of `partition`: the owners of the buckets
  // of its home customers, and the shards of salted customers that reach it.
  [[nodiscard]] std::vector<ShardId> ShardsFor(int partition, const BucketDirectory& directory) const;

  [[nodiscard]] const std::string& Name() const noexcept { return options_.queue; }
  [[nodiscard]] int PartitionCount() const noexcept { return options_.partition_count; }
  [[nodiscard]] std::shared_ptr<const HotKeys> HotKeysNow() const;
  [[nodiscard]] const std::shared_ptr<HotKeyRegistry>& Registry() const noexcept { return hot_keys_; }

 private:
  JobQueueOptions options_;
  std::shared_ptr<HotKeyRegistry> hot_keys_;
};

// Handed to `process`: whether the job's partition is still held (checked
// now, against the local lease deadline). A long job should check between
// steps and stop when it is not.
class JobContext {
 public:
  JobContext(const PartitionLeases& leases, const Job& job) : leases_(leases), job_(job) {}
  [[nodiscard]] bool StillOwned() const { return leases_.Holds(job_.partition, job_.fence); }

 private:
  const PartitionLeases& leases_;
  const Job& job_;
};

struct JobHandler {
  // The work, outside any transaction. Throw to fail this attempt (the job
  // is retried after a backoff, or marked dead after max_attempts).
  std::function<void(const Job&, const JobContext&)> process;
  // The job's database effects, inside the fenced completion transaction on
  // the job's shard, only if the fence let it through. May be empty.
  std::function<void(const Job&, pqxx::transaction_base&)> apply;
};

struct JobWorkerOptions {
  int batch_size = 32;  // per shard and round
  int max_attempts = 10;
  std::chrono::milliseconds retry_backoff{1000};  // doubled per attempt
  std::chrono::milliseconds max_retry_backoff{60'000};
  std::chrono::milliseconds idle_poll_min{10};  // backoff while there is nothing to do
  std::chrono::milliseconds idle_poll_max{500};
  // Jobs left running under an older fence are adopted when a partition is
  // claimed, and swept up again this often (a shard that was unreachable,
  // a customer salted since).
  std::chrono::milliseconds sweep_interval{5000};
  std::chrono::milliseconds hot_keys_refresh{2000};
  std::chrono::milliseconds acquire_timeout{2000};  // a shard connection from its pool
};

// Per-partition counters of one worker (the worker-sharding case: measure per partition,
// not the average — three idle workers hide a stuck one).
struct PartitionMetrics {
  int partition = 0;
  std::uint64_t taken = 0;
  std::uint64_t completed = 0;
  std::uint64_t refused = 0;                   // fenced completion updated 0 rows: a newer owner exists
  std::uint64_t failed = 0;                    // process threw; retried later
  std::uint64_t abandoned = 0;                 // the partition was lost before the job ran
  std::uint64_t adopted = 0;                   // jobs of a previous owner put back to pending
  std::chrono::microseconds busy{0};           // time spent processing and completing
  std::chrono::microseconds max_latency{0};    // created -> done
  std::chrono::microseconds total_latency{0};  // over completed
};

struct JobRound {
  int partitions = 0;  // granted this round
  int taken = 0;
  int completed = 0;
  int refused = 0;
  int failed = 0;
  int abandoned = 0;
  std::vector<std::string> errors;  // shards that could not be read or written this round
};

class JobWorker {
 public:
  JobWorker(BucketShardResolver& resolver, std::shared_ptr<PartitionLeases> leases, JobQueue queue,
            JobWorkerOptions options = {});
  ~JobWorker();
  JobWorker(const JobWorker&) = delete;
  JobWorker& operator=(const JobWorker&) = delete;

  // One round: adopt new partitions, take a batch per shard, process and complete.
  JobRound RunOnce(const JobHandler& handler);
  // Rounds until `stop`; sleeps (idle_poll_min doubling to idle_poll_max) while there is nothing to do.
  void Run(std::stop_token stop, const JobHandler& handler);

  // Called for every job whose completion was refused by the fence (for logs).
  void OnRefused(std::function<void(const Job&)> callback) { on_refused_ = std::move(callback); }

  [[nodiscard]] std::vector<PartitionMetrics> Stats() const;  // partitions with any activity
  [[nodiscard]] const JobQueue& Queue() const noexcept { return queue_; }
  [[nodiscard]] PartitionLeases& Leases() const noexcept { return *leases_; }

 private:
  struct Counters;
  enum class Outcome { kCompleted, kRefused, kFailed, kAbandoned };
  void Adopt(const std::vector<PartitionGrant>& grants, bool sweep, JobRound& round);
  std::vector<Job> Take(ShardId shard, const std::vector<PartitionGrant>& grants, JobRound& round);
  Outcome ProcessOne(const Job& job, const JobHandler& handler, JobRound& round);

  BucketShardResolver& resolver_;
  std::shared_ptr<PartitionLeases> leases_;
  JobQueue queue_;
  JobWorkerOptions options_;
  std::function<void(const Job&)> on_refused_;
  std::map<int, std::int64_t> adopted_;  // partition -> version adopted on every shard
  std::chrono::steady_clock::time_point last_sweep_{};
  std::unique_ptr<Counters[]> counters_;
};

// Per-partition backlog of a queue, read from every shard.
struct PartitionBacklog {
  int partition = 0;
  std::int64_t pending = 0;
  std::int64_t running = 0;
  std::int64_t dead = 0;
  std::int64_t done_recently = 0;  // done within the window
  double oldest_pending_s = 0;     // age of the oldest pending job
};
// Throws JobError naming the shard that cannot be read.
[[nodiscard]] std::vector<PartitionBacklog> ReadBacklog(BucketShardResolver& resolver, const std::string& queue,
                                                        int partition_count,
                                                        std::chrono::seconds window = std::chrono::seconds(60));

}  // namespace shardkit
