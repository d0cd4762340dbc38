// shardkit/workers/hot_keys.hpp — a job's partition, and salting for hot customers.
//
// Work is split into partitions (64 by default), each owned by one worker
// at a time (partition_lease.hpp). A job's partition is computed once, when
// it is written, and stored with it (shardkit_jobs.partition):
//
//   - Normally it is the customer's *home partition*: with 64 partitions
//     that is exactly the customer's bucket number, ToInt(BucketOf(customer_id)). Chosen
//     because then a partition's jobs all live on one shard (the one that
//     owns that bucket), a worker that owns partition p reads one shard for
//     it, a customer's jobs stay in order in one partition, and a bucket
//     move carries its jobs along. (Other powers of two work too: 128
//     partitions split each bucket in two, the seed's harmless doubling; 16
//     group four buckets.)
//   - A salted hot customer (the worker-sharding case: one customer made ~40% of all
//     notifications, its worker was pinned while three idled, and more
//     workers changed nothing) spreads over S partitions (S a power of two):
//         partition = (home + (PlacementHash(salt_key) mod S) * (P / S)) mod P
//     where salt_key is the job's stream key (an order id: one order's
//     status changes stay in one partition, in order) or else its job id.
//     The seed writes hash(customer || ':' || (id % S)) & 63. Two changes:
//     the key is hashed before the modulo, because ids are structured
//     (Snowflake IDs drawn four per order have sequence numbers that are
//     multiples of four, so id % 8 would use two of eight salts); and an even
//     stride from the home partition replaces the second hash, which
//     guarantees S *different* partitions (eight hashed salts collide in 64
//     partitions with probability ~37%) spread over the whole range, so
//     over different workers.
//   Salting changes which worker runs a job, not where it is stored: the job
//   row stays on its customer's shard (same transaction as the order), so a
//   worker owning partition p also reads the shards of salted customers
//   whose partitions include p. Readers know the salted keys:
//
//   auto registry = std::make_shared<shardkit::HotKeyRegistry>(catalog_dsn, "outbox", 64);
//   registry->Salt(shardkit::CustomerId{4242}, 8);    // table shardkit_hot_keys in the catalog
//   auto hot = registry->Current();                   // an immutable snapshot
//   int p = hot->PartitionFor(customer, order_id);    // write side: one of 8 partitions
//   std::vector<int> all = hot->PartitionsOf(customer);  // read side: every partition its jobs may be in
//
// Unsalting keeps the row (salt 1) with max_salt, the largest salt ever
// used: jobs written under it may still be pending in those partitions.
// HotKeys is immutable (thread-safe); HotKeyRegistry is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/resharding/placement.hpp"

namespace pqxx {
class connection_base;
}
namespace shardkit::detail {
struct LeaseConnection;
}

namespace shardkit {

inline constexpr int kMaxPartitions = 1024;

// True for 1, 2, 4, ..., 1024.
[[nodiscard]] constexpr bool ValidPartitionCount(int partitions) noexcept {
  return partitions >= 1 && partitions <= kMaxPartitions && (partitions & (partitions - 1)) == 0;
}

// The top log2(P) bits of the customer's Knuth product: BucketOf for P = 64.
// P must satisfy ValidPartitionCount.
[[nodiscard]] constexpr int HomePartition(CustomerId customer_id, int partitions) noexcept {
  const std::uint32_t product = static_cast<std::uint32_t>(ToInt(customer_id)) * kKnuthMultiplier;
  int bits = 0;
  while ((1 << bits) < partitions) ++bits;
  return bits == 0 ? 0 : static_cast<int>(product >> (32 - bits));
}
static_assert(HomePartition(CustomerId{4242}, 64) == ToInt(BucketOf(CustomerId{4242})) &&
              HomePartition(CustomerId{77777}, 64) == ToInt(BucketOf(CustomerId{77777})));
static_assert(HomePartition(CustomerId{4242}, 128) / 2 == ToInt(BucketOf(CustomerId{4242})),
              "doubling splits a bucket in two");

// (home + (PlacementHash(salt_key) mod salt) * (P / salt)) mod P; salt a
// power of two in 1..P.
[[nodiscard]] constexpr int SaltedPartition(CustomerId customer_id, std::int64_t salt_key, int salt,
                                            int partitions) noexcept {
  const int home = HomePartition(customer_id, partitions);
  if (salt <= 1) return home;
  const auto i = static_cast<int>(PlacementHash(salt_key) % static_cast<std::uint64_t>(salt));
  return (home + i * (partitions / salt)) % partitions;
}

// The buckets whose customers have home partition p (one bucket when P = 64).
[[nodiscard]] std::vector<BucketId> BucketsOfPartition(int partition, int partitions);

// Salted customers of one queue: an immutable snapshot.
class HotKeys {
 public:
  struct Entry {
    int salt = 1;      // partitions new jobs spread over
    int max_salt = 1;  // the largest salt ever used: where old jobs may be
  };
  explicit HotKeys(int partitions = kBucketCount, std::map<CustomerId, Entry> entries = {});

  // Where a new job goes. salt_key: the job's stream key, else its id.
  [[nodiscard]] int PartitionFor(CustomerId customer_id, std::int64_t salt_key) const noexcept;
  // Every partition the customer's jobs may be in (home first).
  [[nodiscard]] std::vector<int> PartitionsOf(CustomerId customer_id) const;
  [[nodiscard]] int SaltOf(CustomerId customer_id) const noexcept;
  [[nodiscard]] bool Empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] int PartitionCount() const noexcept { return partitions_; }
  [[nodiscard]] const std::map<CustomerId, Entry>& Entries() const noexcept { return entries_; }

 private:
  int partitions_;
  std::map<CustomerId, Entry> entries_;
};

// The catalog's shardkit_hot_keys rows of one queue (sql/021_partition_leases.sql).
class HotKeyRegistry {
 public:
  // Connects lazily; nothing is read until Refresh() (Current() is empty until then).
  HotKeyRegistry(Dsn catalog_dsn, std::string queue, int partitions = kBucketCount);
  ~HotKeyRegistry();
  HotKeyRegistry(const HotKeyRegistry&) = delete;
  HotKeyRegistry& operator=(const HotKeyRegistry&) = delete;

  [[nodiscard]] std::shared_ptr<const HotKeys> Current() const;
  // Reads the rows now. Throws JobError if the catalog cannot be read (the
  // previous snapshot stays current).
  std::shared_ptr<const HotKeys> Refresh();
  // Refreshes if the snapshot is older than max_age; never throws (a failed
  // refresh keeps the old snapshot and is retried next time). Returns the current one.
  std::shared_ptr<const HotKeys> RefreshIfOlder(std::chrono::milliseconds max_age) noexcept;

  // New jobs of the customer spread over `salt` partitions (a power of two,
  // 2..P, so that salts nest: PartitionsOf covers every salt used); 1 unsalts.
  // Takes effect for writers and readers at their next refresh. Throws
  // ConfigError for a bad salt, JobError if the catalog cannot be written.
  void Salt(CustomerId customer_id, int salt);
  void Unsalt(CustomerId customer_id) { Salt(customer_id, 1); }

  [[nodiscard]] const std::string& Queue() const noexcept { return queue_; }
  [[nodiscard]] int PartitionCount() const noexcept { return partitions_; }

 private:
  pqxx::connection_base& Connection() SHARDKIT_REQUIRES(mutex_);

  const Dsn dsn_;
  const std::string queue_;
  const int partitions_;
  mutable std::mutex mutex_;
  std::unique_ptr<detail::LeaseConnection> connection_ SHARDKIT_GUARDED_BY(mutex_);
  std::shared_ptr<const HotKeys> current_ SHARDKIT_GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point loaded_at_ SHARDKIT_GUARDED_BY(mutex_){};
  bool loaded_ SHARDKIT_GUARDED_BY(mutex_) = false;
};

}  // namespace shardkit
