// A job queue (job_queue.hpp: JobQueue, sql/020_jobs.sql): the partition a
// job goes to, and enqueueing it in the caller's transaction. Its workers
// are in job_worker.cpp, its backlog in job_backlog.cpp.
#include "shardkit/workers/job_queue.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <set>

#include "pg/pg_array.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

namespace {

void ValidateQueue(const JobQueueOptions& o) {
  if (o.queue.empty()) throw ConfigError("jobs.queue", "must not be empty");
  if (!ValidPartitionCount(o.partition_count)) {
    throw ConfigError("jobs.partition_count", fmt::format("{} is not a power of two in 1..{} (64 = the buckets)",
                                                          o.partition_count, kMaxPartitions));
  }
}

}  // namespace

JobQueue::JobQueue(JobQueueOptions options, std::shared_ptr<HotKeyRegistry> hot_keys)
    : options_(std::move(options)), hot_keys_(std::move(hot_keys)) {
  ValidateQueue(options_);
  if (hot_keys_ && (hot_keys_->Queue() != options_.queue || hot_keys_->PartitionCount() != options_.partition_count)) {
    throw ConfigError(
        "jobs.hot_keys",
        fmt::format("the hot-key registry is for queue '{}' with {} partitions, the queue is '{}' with {}",
                    hot_keys_->Queue(), hot_keys_->PartitionCount(), options_.queue, options_.partition_count));
  }
}

std::shared_ptr<const HotKeys> JobQueue::HotKeysNow() const {
  if (hot_keys_) return hot_keys_->Current();
  static const auto kNone = std::make_shared<const HotKeys>(kBucketCount);
  return options_.partition_count == kBucketCount ? kNone : std::make_shared<const HotKeys>(options_.partition_count);
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
    throw JobError(fmt::format("queue '{}': job {} of customer {} is already enqueued ({})", options_.queue, job.job_id,
                               job.customer_id, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw JobError(fmt::format("queue '{}': enqueueing job {} of customer {} failed: {}", options_.queue, job.job_id,
                               job.customer_id, e.what()));
  }
  return partition;
}

}  // namespace shardkit
