// The job/outbox table and its workers (job_queue.hpp, sql/020_jobs.sql).
#include "shardkit/workers/job_queue.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <pqxx/pqxx>
#include <set>

#include "pg/pg_array.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;

void ValidateQueue(const JobQueueOptions& o) {
  if (o.queue.empty()) throw ConfigError("jobs.queue", "must not be empty");
  if (!ValidPartitionCount(o.partition_count)) {
    throw ConfigError("jobs.partition_count",
                      fmt::format("{} is not a power of two in 1..{} (64 = the buckets)", o.partition_count,
                                  kMaxPartitions));
  }
}

// The grants as two parallel SQL arrays (partition[], version[]) for unnest().
struct GrantArrays {
  std::string partitions;
  std::string versions;
};
GrantArrays ToArrays(const std::vector<PartitionGrant>& grants) {
  std::vector<int> parts;
  std::vector<std::int64_t> versions;
  for (const auto& g : grants) {
    parts.push_back(g.partition);
    versions.push_back(g.version);
  }
  return {detail::PgArrayOf(parts), detail::PgArrayOf(versions)};
}

void AtomicMax(std::atomic<std::int64_t>& target, std::int64_t value) {
  std::int64_t seen = target.load(std::memory_order_relaxed);
  while (seen < value && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

// ----------------------------------------------------------------- queue

JobQueue::JobQueue(JobQueueOptions options, std::shared_ptr<HotKeyRegistry> hot_keys)
    : options_(std::move(options)), hot_keys_(std::move(hot_keys)) {
  ValidateQueue(options_);
  if (hot_keys_ && (hot_keys_->Queue() != options_.queue || hot_keys_->PartitionCount() != options_.partition_count)) {
    throw ConfigError("jobs.hot_keys",
                      fmt::format("the hot-key registry is for queue '{}' with {} partitions, the queue is '{}' with {}",
                                  hot_keys_->Queue(), hot_keys_->PartitionCount(), options_.queue,
                                  options_.partition_count));
  }
}

std::shared_ptr<const HotKeys> JobQueue::HotKeysNow() const {
  if (hot_keys_) return hot_keys_->Current();
  static const auto kNone = std::make_shared<const HotKeys>(kBucketCount);
  return options_.partition_count == kBucketCount ? kNone
                                                  : std::make_shared<const HotKeys>(options_.partition_count);
}

int JobQueue::PartitionFor(CustomerId customer_id, std::int64_t salt_key) const {
  if (!hot_keys_) return HomePartition(customer_id, options_.partition_count);
  return hot_keys_->Current()->PartitionFor(customer_id, salt_key);
}

std::vector<int> JobQueue::PartitionsOf(CustomerId customer_id) const {
  if (!hot_keys_) return {HomePartition(customer_id, options_.partition_count)};
  return hot_keys_->Current()->PartitionsOf(customer_id);
}

std::vector<ShardId> JobQueue::ShardsFor(int partition, const BucketDirectory& directory) const {
  std::set<ShardId> shards;
  for (const BucketId b : BucketsOfPartition(partition, options_.partition_count)) shards.insert(directory.ShardOf(b));
  if (hot_keys_) {
    const auto hot = hot_keys_->Current();
    for (const auto& [customer, entry] : hot->Entries()) {
      if (entry.max_salt <= 1) continue;
      const auto parts = hot->PartitionsOf(customer);
      if (std::find(parts.begin(), parts.end(), partition) != parts.end()) shards.insert(directory.ShardFor(customer));
    }
  }
  return {shards.begin(), shards.end()};
}

int JobQueue::Enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  if (job.kind.empty()) throw ConfigError("jobs.kind", fmt::format("job {} has no kind", job.job_id));
  const int partition = PartitionFor(job.customer_id, job.stream_key.value_or(job.job_id));
  // libpqxx 6 passes a null const char* as NULL (it has no optional parameters).
  const std::string stream_text = job.stream_key ? std::to_string(*job.stream_key) : std::string();
  const char* stream_key = job.stream_key ? stream_text.c_str() : nullptr;
  try {
    tx.exec_params(
        "INSERT INTO shardkit_jobs (customer_id, bucket, job_id, queue, partition, kind, payload, stream_key, seq, "
        "run_after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, "
        "CASE WHEN $10::bigint > 0 THEN clock_timestamp() + make_interval(secs => $10::double precision / 1000) "
        "ELSE '-infinity'::timestamptz END)",
        job.customer_id, BucketOf(job.customer_id), job.job_id, options_.queue, partition, job.kind, job.payload,
        stream_key, job.seq, static_cast<long long>(job.delay.count()));
  } catch (const pqxx::undefined_table& e) {
    throw JobError(fmt::format("queue '{}': shardkit_jobs does not exist on this shard; apply sql/020_jobs.sql ({})",
                               options_.queue, e.what()));
  } catch (const pqxx::unique_violation& e) {
    throw JobError(fmt::format("queue '{}': job {} of customer {} is already enqueued ({})", options_.queue,
                               job.job_id, job.customer_id, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw JobError(fmt::format("queue '{}': enqueueing job {} of customer {} failed: {}", options_.queue, job.job_id,
                               job.customer_id, e.what()));
  }
  return partition;
}

// ---------------------------------------------------------------- worker

struct JobWorker::Counters {
  std::atomic<std::uint64_t> taken{0}, completed{0}, refused{0}, failed{0}, abandoned{0}, adopted{0};
  std::atomic<std::int64_t> busy_us{0}, max_latency_us{0}, total_latency_us{0};
};

JobWorker::JobWorker(BucketShardResolver& resolver, std::shared_ptr<PartitionLeases> leases, JobQueue queue,
                     JobWorkerOptions options)
    : resolver_(resolver), leases_(std::move(leases)), queue_(std::move(queue)), options_(options) {
  if (!leases_) throw ConfigError("jobs.leases", "a JobWorker needs the partition leases of its worker group");
  if (leases_->PartitionCount() != queue_.PartitionCount()) {
    throw ConfigError("jobs.partition_count",
                      fmt::format("queue '{}' has {} partitions, worker group '{}' has {}", queue_.Name(),
                                  queue_.PartitionCount(), leases_->Options().group, leases_->PartitionCount()));
  }
  if (options_.batch_size < 1) throw ConfigError("jobs.batch_size", "must be at least 1");
  if (options_.max_attempts < 1) throw ConfigError("jobs.max_attempts", "must be at least 1");
  counters_ = std::make_unique<Counters[]>(static_cast<std::size_t>(queue_.PartitionCount()));
}

JobWorker::~JobWorker() = default;

void JobWorker::Adopt(const std::vector<PartitionGrant>& grants, bool sweep, JobRound& round) {
  // Which grants need it: new (partition, version) pairs, or all on a sweep.
  std::vector<PartitionGrant> todo;
  for (const auto& g : grants) {
    const auto it = adopted_.find(g.partition);
    if (sweep || it == adopted_.end() || it->second != g.version) todo.push_back(g);
  }
  if (todo.empty()) return;
  const auto directory = resolver_.Directory();
  std::map<ShardId, std::vector<PartitionGrant>> by_shard;
  for (const auto& g : todo) {
    for (const ShardId s : queue_.ShardsFor(g.partition, *directory)) by_shard[s].push_back(g);
  }
  std::set<int> failed;
  for (const auto& [shard, list] : by_shard) {
    const GrantArrays arrays = ToArrays(list);
    try {
      auto lease = resolver_.Pool(shard).Acquire(Clock::now() + options_.acquire_timeout);
      pqxx::nontransaction tx{*lease};
      // Jobs left running under an older fence (a previous owner), or under
      // this one by a round that failed midway: back to pending, fenced with
      // the current version so a late completion of the old owner is refused.
      // A JobWorker runs one round at a time, so none of its own jobs is in
      // flight now. SKIP LOCKED: a row locked by a completing old owner is
      // left to it, and swept up later if that completion fails.
      const pqxx::result rows = tx.exec_params(R"(
WITH stale AS (
  SELECT j.customer_id, j.job_id, m.version
    FROM shardkit_jobs AS j
    JOIN unnest($2::integer[], $3::bigint[]) AS m(partition, version) ON j.partition = m.partition
   WHERE j.queue = $1 AND j.state = 'running' AND j.fence <= m.version
   FOR UPDATE OF j SKIP LOCKED)
UPDATE shardkit_jobs AS j
   SET state = 'pending', fence = stale.version, owner = NULL
  FROM stale
 WHERE j.customer_id = stale.customer_id AND j.job_id = stale.job_id
RETURNING j.partition)",
                                               queue_.Name(), arrays.partitions, arrays.versions);
      for (const auto& row : rows) {
        const int p = row[0].as<int>();
        if (p >= 0 && p < queue_.PartitionCount()) counters_[static_cast<std::size_t>(p)].adopted += 1;
      }
    } catch (const std::exception& e) {
      for (const auto& g : list) failed.insert(g.partition);
      round.errors.push_back(
          fmt::format("{}: adopting partitions of queue '{}' failed: {}", resolver_.ShardName(shard), queue_.Name(),
                      RedactDsn(e.what())));
    }
  }
  for (const auto& g : todo) {
    if (failed.count(g.partition) == 0) adopted_[g.partition] = g.version;
  }
}

std::vector<Job> JobWorker::Take(ShardId shard, const std::vector<PartitionGrant>& grants, JobRound& round) {
  std::vector<Job> jobs;
  const GrantArrays arrays = ToArrays(grants);
  try {
    auto lease = resolver_.Pool(shard).Acquire(Clock::now() + options_.acquire_timeout);
    pqxx::nontransaction tx{*lease};
    // One ordered index range per partition (the partial pending index),
    // the oldest n of them overall, then lock what nobody else holds. A
    // single statement: nothing stays locked if this process stops.
    const pqxx::result rows = tx.exec_params(R"(
WITH candidates AS (
  SELECT c.customer_id, c.job_id, c.created, m.version
    FROM unnest($2::integer[], $3::bigint[]) AS m(partition, version)
    CROSS JOIN LATERAL (
      SELECT j.customer_id, j.job_id, j.created
        FROM shardkit_jobs AS j
       WHERE j.queue = $1 AND j.partition = m.partition AND j.state = 'pending'
         AND j.fence <= m.version AND j.run_after <= clock_timestamp()
       ORDER BY j.created, j.job_id
       LIMIT $4) AS c
   ORDER BY c.created, c.job_id
   LIMIT $4),
locked AS (
  SELECT j.customer_id, j.job_id, candidates.version
    FROM shardkit_jobs AS j
    JOIN candidates ON j.customer_id = candidates.customer_id AND j.job_id = candidates.job_id
   WHERE j.state = 'pending' AND j.fence <= candidates.version
   FOR UPDATE OF j SKIP LOCKED)
UPDATE shardkit_jobs AS j
   SET state = 'running', fence = locked.version, attempts = j.attempts + 1, owner = $5,
       taken_at = clock_timestamp()
  FROM locked
 WHERE j.customer_id = locked.customer_id AND j.job_id = locked.job_id
RETURNING j.customer_id, j.bucket, j.job_id, j.partition, j.kind, j.payload, j.stream_key, j.seq, j.attempts,
          j.fence, (extract(epoch FROM j.created) * 1000000)::bigint)",
                                             queue_.Name(), arrays.partitions, arrays.versions,
                                             options_.batch_size, leases_->Owner());
    jobs.reserve(rows.size());
    for (const auto& row : rows) {
      Job j;
      j.customer_id = CustomerId{row[0].as<std::int32_t>()};
      j.bucket = BucketId{row[1].as<int>()};
      j.job_id = row[2].as<std::int64_t>();
      j.partition = row[3].as<int>();
      j.kind = row[4].as<std::string>();
      j.payload = row[5].as<std::string>();
      j.stream_key = detail::OptionalField<std::int64_t>(row[6]);
      j.seq = row[7].as<std::int64_t>();
      j.attempts = row[8].as<int>();
      j.fence = row[9].as<std::int64_t>();
      j.shard = shard;
      j.created = std::chrono::system_clock::time_point(microseconds(row[10].as<std::int64_t>()));
      jobs.push_back(std::move(j));
    }
  } catch (const std::exception& e) {
    round.errors.push_back(fmt::format("{}: taking jobs of queue '{}' failed: {}", resolver_.ShardName(shard),
                                       queue_.Name(), RedactDsn(e.what())));
  }
  return jobs;
}

JobWorker::Outcome JobWorker::ProcessOne(const Job& job, const JobHandler& handler, JobRound& round) {
  Counters& c = counters_[static_cast<std::size_t>(job.partition)];
  const PartitionGrant grant{job.partition, job.fence};
  // Self-fencing: a partition lost (taken over, or its lease ran out
  // locally) is not worked on any more; the next owner adopts the job.
  if (!leases_->Holds(job.partition, job.fence)) {
    c.abandoned += 1;
    ++round.abandoned;
    leases_->Finished(grant);
    return Outcome::kAbandoned;
  }
  const auto started = Clock::now();
  auto finish = [&](Outcome outcome) {
    c.busy_us += duration_cast<microseconds>(Clock::now() - started).count();
    leases_->Finished(grant);
    return outcome;
  };
  std::string failure;
  try {
    if (handler.process) handler.process(job, JobContext{*leases_, job});
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  try {
    auto lease = resolver_.Pool(job.shard).Acquire(Clock::now() + options_.acquire_timeout);
    pqxx::work tx{*lease, "complete_job"};
    if (!failure.empty()) {
      // Back to pending after a backoff, or dead; fenced like a completion.
      const auto shift = std::min(job.attempts - 1, 20);
      const auto backoff = std::min<std::int64_t>(options_.retry_backoff.count() << std::max(shift, 0),
                                                  options_.max_retry_backoff.count());
      const pqxx::result r = tx.exec_params(
          "UPDATE shardkit_jobs SET state = CASE WHEN attempts >= $5 THEN 'dead' ELSE 'pending' END, "
          "run_after = clock_timestamp() + make_interval(secs => $6::double precision / 1000), "
          "last_error = $7, owner = NULL "
          "WHERE customer_id = $1 AND job_id = $2 AND queue = $3 AND state = 'running' AND fence <= $4",
          job.customer_id, job.job_id, queue_.Name(), job.fence, options_.max_attempts, static_cast<long long>(backoff),
          failure.substr(0, 1000));
      tx.commit();
      c.failed += 1;
      ++round.failed;
      (void)r;
      return finish(Outcome::kFailed);
    }
    // The fenced completion: 0 rows means a newer owner took the job (or
    // adopted it): roll back, nothing of this attempt may commit.
    const pqxx::result r = tx.exec_params(
        "UPDATE shardkit_jobs SET state = 'done', done_at = clock_timestamp(), last_error = NULL "
        "WHERE customer_id = $1 AND job_id = $2 AND queue = $3 AND state = 'running' AND fence <= $4 "
        "RETURNING (extract(epoch FROM clock_timestamp() - created) * 1000000)::bigint",
        job.customer_id, job.job_id, queue_.Name(), job.fence);
    if (r.empty()) {
      tx.abort();
      c.refused += 1;
      ++round.refused;
      if (on_refused_) on_refused_(job);
      return finish(Outcome::kRefused);
    }
    if (handler.apply) handler.apply(job, tx);
    tx.commit();
    const auto latency = r[0][0].as<std::int64_t>();
    c.completed += 1;
    c.total_latency_us += latency;
    AtomicMax(c.max_latency_us, latency);
    ++round.completed;
    return finish(Outcome::kCompleted);
  } catch (const std::exception& e) {
    // Not completed (a shard unreachable, an effect that failed): the job
    // stays running under this fence and the next sweep puts it back.
    c.failed += 1;
    ++round.failed;
    round.errors.push_back(fmt::format("{}: completing job {} of customer {} (partition {}) failed: {}",
                                       resolver_.ShardName(job.shard), job.job_id, job.customer_id, job.partition,
                                       RedactDsn(e.what())));
    return finish(Outcome::kFailed);
  }
}

JobRound JobWorker::RunOnce(const JobHandler& handler) {
  JobRound round;
  if (auto registry = queue_.Registry()) (void)registry->RefreshIfOlder(options_.hot_keys_refresh);
  const std::vector<PartitionGrant> grants = leases_->StartTake();
  round.partitions = static_cast<int>(grants.size());
  if (grants.empty()) return round;

  const auto now = Clock::now();
  const bool sweep = now - last_sweep_ >= options_.sweep_interval;
  Adopt(grants, sweep, round);
  if (sweep) last_sweep_ = now;

  // Take from every shard that may hold jobs of an adopted grant.
  const auto directory = resolver_.Directory();
  std::map<ShardId, std::vector<PartitionGrant>> by_shard;
  for (const auto& g : grants) {
    const auto it = adopted_.find(g.partition);
    if (it == adopted_.end() || it->second != g.version) continue;  // adoption failed: not this round
    for (const ShardId s : queue_.ShardsFor(g.partition, *directory)) by_shard[s].push_back(g);
  }
  std::vector<Job> jobs;
  for (const auto& [shard, list] : by_shard) {
    auto taken = Take(shard, list, round);
    jobs.insert(jobs.end(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
  }
  std::map<int, int> per_partition;
  for (const auto& j : jobs) {
    ++per_partition[j.partition];
    counters_[static_cast<std::size_t>(j.partition)].taken += 1;
  }
  std::vector<int> counts;
  counts.reserve(grants.size());
  for (const auto& g : grants) counts.push_back(per_partition.count(g.partition) ? per_partition[g.partition] : 0);
  leases_->EndTake(grants, counts);
  round.taken = static_cast<int>(jobs.size());

  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.created != b.created ? a.created < b.created : a.job_id < b.job_id;
  });
  for (const auto& job : jobs) (void)ProcessOne(job, handler, round);
  return round;
}

void JobWorker::Run(std::stop_token stop, const JobHandler& handler) {
  std::mutex mutex;
  std::condition_variable_any wakeup;
  auto idle = options_.idle_poll_min;
  while (!stop.stop_requested()) {
    const JobRound round = RunOnce(handler);
    if (round.taken > 0) {
      idle = options_.idle_poll_min;
      continue;
    }
    std::unique_lock lock(mutex);
    wakeup.wait_for(lock, stop, idle, [] { return false; });
    idle = std::min(idle * 2, options_.idle_poll_max);
  }
}

std::vector<PartitionMetrics> JobWorker::Stats() const {
  std::vector<PartitionMetrics> out;
  for (int p = 0; p < queue_.PartitionCount(); ++p) {
    const Counters& c = counters_[static_cast<std::size_t>(p)];
    PartitionMetrics m;
    m.partition = p;
    m.taken = c.taken.load();
    m.completed = c.completed.load();
    m.refused = c.refused.load();
    m.failed = c.failed.load();
    m.abandoned = c.abandoned.load();
    m.adopted = c.adopted.load();
    m.busy = microseconds(c.busy_us.load());
    m.max_latency = microseconds(c.max_latency_us.load());
    m.total_latency = microseconds(c.total_latency_us.load());
    if (m.taken + m.adopted + m.refused + m.abandoned > 0) out.push_back(m);
  }
  return out;
}

// --------------------------------------------------------------- backlog

std::vector<PartitionBacklog> ReadBacklog(BucketShardResolver& resolver, const std::string& queue, int partition_count,
                                          std::chrono::seconds window) {
  std::map<int, PartitionBacklog> merged;
  for (const ShardId s : FirstShards(resolver.ShardCount())) {
    try {
      auto lease = resolver.Pool(s).Acquire();
      pqxx::read_transaction tx{*lease};
      for (const auto& row : tx.exec_params(
               "SELECT partition, count(*) FILTER (WHERE state = 'pending'), "
               "count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'dead'), "
               "count(*) FILTER (WHERE state = 'done'), "
               "coalesce(extract(epoch FROM clock_timestamp() - min(created) FILTER (WHERE state = 'pending')), 0)"
               "::float8 "
               "FROM shardkit_jobs WHERE queue = $1 AND (state <> 'done' OR done_at > clock_timestamp() - "
               "make_interval(secs => $2::double precision)) GROUP BY partition",
               queue, static_cast<double>(window.count()))) {
        auto& b = merged[row[0].as<int>()];
        b.partition = row[0].as<int>();
        b.pending += row[1].as<std::int64_t>();
        b.running += row[2].as<std::int64_t>();
        b.dead += row[3].as<std::int64_t>();
        b.done_recently += row[4].as<std::int64_t>();
        b.oldest_pending_s = std::max(b.oldest_pending_s, row[5].as<double>());
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw JobError(fmt::format("{}: reading the backlog of queue '{}' failed: {}", resolver.ShardName(s), queue,
                                 RedactDsn(e.what())),
                     s);
    }
  }
  std::vector<PartitionBacklog> out;
  for (int p = 0; p < partition_count; ++p) {
    auto it = merged.find(p);
    PartitionBacklog b;
    b.partition = p;
    out.push_back(it == merged.end() ? b : it->second);
  }
  return out;
}

}  // namespace shardkit
