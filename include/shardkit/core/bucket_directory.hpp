// shardkit/core/bucket_directory.hpp — which shard holds each of the 64 buckets.
//
// A BucketDirectory is an immutable, validated, versioned snapshot: a plain
// value, read from the configuration file or the catalog. Changing the
// placement means building a new snapshot with a higher version;
// routing/directory.hpp publishes it to a running process and stores it in
// the catalog.
//
//   auto dir = shardkit::BucketDirectory::EvenSplit(2);      // 0-31 -> 0, 32-63 -> 1
//   shardkit::ShardId s = dir.ShardFor(shardkit::CustomerId{4242});   // ShardId{1}
//   auto next = dir.WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{0});  // version + 1
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

// Immutable once built, so any number of threads may read one at once.
class BucketDirectory {
 public:
  using Assignments = std::array<ShardId, kBucketCount>;

  // Validates: every shard index in [0, shard_count), shard_count >= 1,
  // version >= 1. Throws DirectoryError naming the bucket or shard.
  static BucketDirectory FromAssignments(const Assignments& bucket_to_shard, int shard_count, std::int64_t version);
  // From (bucket, shard) rows, e.g. the shard_directory table: every bucket
  // must appear exactly once.
  static BucketDirectory FromRows(std::span<const std::pair<BucketId, ShardId>> rows, int shard_count,
                                  std::int64_t version);
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

}  // namespace shardkit
