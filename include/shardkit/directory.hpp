// shardkit/directory.hpp — which shard holds each of the 64 buckets.
//
// A BucketDirectory is an immutable, validated, versioned snapshot. Changing
// the placement means building a new snapshot with a higher version and
// publishing it through a DirectoryHolder; readers that already hold the old
// snapshot keep a consistent view, new readers see the new one.
//
//   auto dir = shardkit::BucketDirectory::EvenSplit(2);      // 0-31 -> 0, 32-63 -> 1
//   shardkit::ShardId s = dir.ShardFor(shardkit::CustomerId{4242});   // ShardId{1}
//   holder.Publish(dir.WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{0}));  // version + 1
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "shardkit/bucket.hpp"

namespace pqxx {
class connection_base;
class transaction_base;
}

namespace shardkit {

// Immutable once built, so any number of threads may read one at once.
class BucketDirectory {
 public:
  using Assignments = std::array<ShardId, kBucketCount>;

  // Validates: every shard index in [0, shard_count), shard_count >= 1,
  // version >= 1. Throws DirectoryError naming the bucket or shard.
  static BucketDirectory FromAssignments(const Assignments& bucket_to_shard, int shard_count,
                                         std::int64_t version);
  // From (bucket, shard) rows, e.g. the shard_directory table: every bucket
  // must appear exactly once.
  static BucketDirectory FromRows(std::span<const std::pair<BucketId, ShardId>> rows,
                                  int shard_count, std::int64_t version);
  // Contiguous ranges of equal size: with 2 shards, 0-31 -> 0 and 32-63 -> 1.
  static BucketDirectory EvenSplit(int shard_count, std::int64_t version = 1);

  [[nodiscard]] ShardId ShardOf(BucketId bucket) const;  // throws DirectoryError if out of range
  [[nodiscard]] ShardId ShardFor(CustomerId customer_id) const noexcept {
    return assignments_[static_cast<std::size_t>(ToInt(BucketOf(customer_id)))];
  }
  [[nodiscard]] std::vector<BucketId> BucketsOf(ShardId shard) const;
  [[nodiscard]] int ShardCount() const noexcept { return shard_count_; }
  [[nodiscard]] std::int64_t Version() const noexcept { return version_; }
  [[nodiscard]] const Assignments& AssignmentTable() const noexcept { return assignments_; }

  // A copy with one bucket reassigned and the version increased by one.
  [[nodiscard]] BucketDirectory WithBucketMoved(BucketId bucket, ShardId to_shard) const;
  // A copy with one more shard that takes its fair share (64 / shards, rounded
  // down) moving as few buckets as possible: each time, the fullest shard
  // gives up its highest-numbered bucket, so the old shards keep ranges.
  // Version increased by one.
  [[nodiscard]] BucketDirectory WithShardAdded() const;

  friend bool operator==(const BucketDirectory&, const BucketDirectory&) = default;

 private:
  BucketDirectory(const Assignments& a, int shard_count, std::int64_t version)
      : assignments_(a), shard_count_(shard_count), version_(version) {}
  Assignments assignments_{};
  int shard_count_ = 0;
  std::int64_t version_ = 0;
};

// Reads the shard_directory table (sql/) through an open connection.
[[nodiscard]] BucketDirectory LoadDirectory(pqxx::connection_base& connection, int shard_count);
// Replaces the shard_directory table's rows with `directory`, in one transaction.
// Refuses (DirectoryError) if the stored version is not lower than the new one.
void StoreDirectory(pqxx::connection_base& connection, const BucketDirectory& directory);
// Compare-and-set: replaces the shard_directory rows with `next` only if the
// stored version is exactly `expected_version`, and returns whether it did.
// `next` must have a higher version (DirectoryError otherwise). The catalog's
// trigger (sql/012) NOTIFYs routers of the new version at commit. The
// transaction overload leaves the commit to the caller (a move flips the
// directory and writes its journal in one transaction).
[[nodiscard]] bool CompareAndSetDirectory(pqxx::connection_base& connection, std::int64_t expected_version,
                                          const BucketDirectory& next);
[[nodiscard]] bool CompareAndSetDirectory(pqxx::transaction_base& tx, std::int64_t expected_version,
                                          const BucketDirectory& next);

// The current snapshot, swapped atomically for concurrent readers.
// Thread-safe: Current() and Publish() may be called from any thread.
class DirectoryHolder {
 public:
  explicit DirectoryHolder(BucketDirectory initial);
  [[nodiscard]] std::shared_ptr<const BucketDirectory> Current() const noexcept {
    return current_.load(std::memory_order_acquire);
  }
  // Publishes `next` if its version is higher than the current one and it has
  // the same shard count; throws DirectoryError otherwise.
  void Publish(BucketDirectory next);

 private:
  std::atomic<std::shared_ptr<const BucketDirectory>> current_;
};

}  // namespace shardkit
