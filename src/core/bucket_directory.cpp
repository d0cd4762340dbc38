// BucketDirectory: validation and the placements derived from one (bucket_directory.hpp).
#include "shardkit/core/bucket_directory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

void CheckShardCount(int shard_count) {
  if (shard_count < 1 || shard_count > kBucketCount) {
    throw DirectoryError(fmt::format("shard count {} is out of range: 64 buckets need 1..64 shards", shard_count));
  }
}

void CheckVersion(std::int64_t version) {
  if (version < 1) throw DirectoryError(fmt::format("version {} must be >= 1", version));
}

}  // namespace

BucketDirectory BucketDirectory::FromAssignments(const Assignments& bucket_to_shard, int shard_count,
                                                 std::int64_t version) {
  CheckShardCount(shard_count);
  CheckVersion(version);
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    const ShardId shard = bucket_to_shard[static_cast<std::size_t>(bucket)];
    if (ToInt(shard) < 0 || ToInt(shard) >= shard_count) {
      throw DirectoryError(
          fmt::format("bucket {} is mapped to shard {}, but shards are 0..{}", bucket, shard, shard_count - 1),
          BucketId{bucket}, shard);
    }
  }
  return BucketDirectory(bucket_to_shard, shard_count, version);
}

BucketDirectory BucketDirectory::FromRows(std::span<const std::pair<BucketId, ShardId>> rows, int shard_count,
                                          std::int64_t version) {
  CheckShardCount(shard_count);
  Assignments table{};
  std::array<bool, kBucketCount> seen{};
  for (const auto& [bucket, shard] : rows) {
    if (ToInt(bucket) < 0 || ToInt(bucket) >= kBucketCount) {
      throw DirectoryError(fmt::format("bucket {} does not exist (buckets are 0..63)", bucket), bucket);
    }
    auto index = static_cast<std::size_t>(ToInt(bucket));
    if (seen[index]) {
      throw DirectoryError(fmt::format("bucket {} is mapped more than once", bucket), bucket);
    }
    seen[index] = true;
    table[index] = shard;
  }
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    if (!seen[static_cast<std::size_t>(bucket)]) {
      throw DirectoryError(fmt::format("bucket {} is not mapped to any shard", bucket), BucketId{bucket});
    }
  }
  return FromAssignments(table, shard_count, version);
}

BucketDirectory BucketDirectory::EvenSplit(int shard_count, std::int64_t version) {
  CheckShardCount(shard_count);
  Assignments table{};
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    table[static_cast<std::size_t>(bucket)] = ShardId{bucket * shard_count / kBucketCount};
  }
  return FromAssignments(table, shard_count, version);
}

ShardId BucketDirectory::ShardOf(BucketId bucket) const {
  if (ToInt(bucket) < 0 || ToInt(bucket) >= kBucketCount) {
    throw DirectoryError(fmt::format("bucket {} does not exist (buckets are 0..63)", bucket), bucket);
  }
  return assignments_[static_cast<std::size_t>(ToInt(bucket))];
}

std::vector<BucketId> BucketDirectory::BucketsOf(ShardId shard) const {
  std::vector<BucketId> buckets;
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    if (assignments_[static_cast<std::size_t>(bucket)] == shard) buckets.push_back(BucketId{bucket});
  }
  return buckets;
}

BucketDirectory BucketDirectory::WithBucketMoved(BucketId bucket, ShardId to_shard) const {
  Assignments next = assignments_;
  (void)ShardOf(bucket);  // validates the bucket
  next[static_cast<std::size_t>(ToInt(bucket))] = to_shard;
  return FromAssignments(next, shard_count_, version_ + 1);
}

BucketDirectory BucketDirectory::WithShardAdded() const {
  const int old_count = shard_count_;
  const ShardId new_shard{old_count};
  const int floor_share = kBucketCount / (old_count + 1);
  const int ceil_share = (kBucketCount + old_count) / (old_count + 1);
  Assignments next = assignments_;
  std::vector<std::vector<BucketId>> held(static_cast<std::size_t>(old_count + 1));
  for (const BucketId b : AllBuckets()) {
    held[static_cast<std::size_t>(ToInt(next[static_cast<std::size_t>(ToInt(b))]))].push_back(b);
  }
  auto fullest = [&] {
    std::size_t best = 0;
    for (std::size_t s = 1; s < static_cast<std::size_t>(old_count); ++s) {
      if (held[s].size() > held[best].size()) best = s;
    }
    return best;
  };
  auto& arrivals = held[static_cast<std::size_t>(old_count)];
  while (true) {
    auto& donor = held[fullest()];
    if (static_cast<int>(arrivals.size()) >= floor_share && static_cast<int>(donor.size()) <= ceil_share) break;
    const BucketId bucket = donor.back();
    donor.pop_back();
    arrivals.push_back(bucket);
    next[static_cast<std::size_t>(ToInt(bucket))] = new_shard;
  }
  return FromAssignments(next, old_count + 1, version_ + 1);
}

}  // namespace shardkit
