#include "shardkit/core/bucket.hpp"

#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "shardkit/routing/directory.hpp"

namespace {

using shardkit::BucketId;
using shardkit::CustomerId;
using shardkit::ShardId;

// The bucket of a plain int32, as a number.
int Bucket(std::int32_t id) {
  return shardkit::ToInt(shardkit::BucketOf(CustomerId{id}));
}

// The Bookstore case's C# expression, transcribed literally with 64-bit arithmetic:
// (int)((((ulong)(uint)customerId * 2654435761UL) % 4294967296UL) >> 26)
int ReferenceBucket(std::int32_t customer_id) {
  const std::uint64_t widened = static_cast<std::uint32_t>(customer_id);
  return static_cast<int>(((widened * 2654435761ULL) % 4294967296ULL) >> 26);
}

TEST(BucketOf, SeedVectors) {
  const auto directory = shardkit::BucketDirectory::EvenSplit(2);
  EXPECT_EQ(Bucket(4242), 44);
  EXPECT_EQ(Bucket(4243), 20);
  EXPECT_EQ(Bucket(77777), 53);
  EXPECT_EQ(directory.ShardFor(CustomerId{4242}), ShardId{1});
  EXPECT_EQ(directory.ShardFor(CustomerId{4243}), ShardId{0});
  EXPECT_EQ(directory.ShardFor(CustomerId{77777}), ShardId{1});
}

TEST(BucketOf, EdgeValuesMatchReference) {
  std::vector<std::int32_t> ids = {INT32_MIN, INT32_MIN + 1, -65536,        -2,       -1, 0, 1, 2,
                                   65535,     65536,         INT32_MAX - 1, INT32_MAX};
  for (int bit = 0; bit < 31; ++bit) {
    const auto power = static_cast<std::int32_t>(1U << bit);
    ids.push_back(power);
    ids.push_back(-power);
    ids.push_back(power - 1);
  }
  for (const auto id : ids) {
    SCOPED_TRACE(id);
    EXPECT_EQ(Bucket(id), ReferenceBucket(id));
    EXPECT_GE(Bucket(id), 0);
    EXPECT_LT(Bucket(id), shardkit::kBucketCount);
  }
}

TEST(BucketOf, MillionsOfRandomIdsMatchReference) {
  std::mt19937 random(20261130);
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  for (int i = 0; i < 5'000'000; ++i) {
    const auto id = any(random);
    ASSERT_EQ(Bucket(id), ReferenceBucket(id)) << "customer_id " << id;
  }
}

TEST(BucketOf, NotAllInBucketZero) {
  // The classic bug: a 64-bit multiply shifted by 26 sends every id to bucket 0
  // (or beyond 63). Distinct small ids must reach many buckets.
  std::array<int, shardkit::kBucketCount> seen{};
  for (std::int32_t id = 1; id <= 64; ++id) ++seen[static_cast<std::size_t>(Bucket(id))];
  int used = 0;
  for (int count : seen) used += count > 0 ? 1 : 0;
  EXPECT_GT(used, 32);
}

TEST(BucketOf, SequentialIdsSpreadEvenly) {
  constexpr int kIds = 6'400'000;
  std::array<int, shardkit::kBucketCount> counts{};
  for (std::int32_t id = 1; id <= kIds; ++id) ++counts[static_cast<std::size_t>(Bucket(id))];
  const double expected = static_cast<double>(kIds) / shardkit::kBucketCount;
  for (int bucket = 0; bucket < shardkit::kBucketCount; ++bucket) {
    SCOPED_TRACE(bucket);
    const double deviation = std::abs(counts[static_cast<std::size_t>(bucket)] - expected) / expected;
    EXPECT_LT(deviation, 0.01) << counts[static_cast<std::size_t>(bucket)] << " ids, expected " << expected;
  }
}

TEST(BucketOf, IsConstexpr) {
  static_assert(shardkit::BucketOf(CustomerId{0}) == BucketId{0});
  constexpr BucketId bucket = shardkit::BucketOf(CustomerId{77777});
  EXPECT_EQ(bucket, BucketId{53});
}

// Customers, buckets and shards do not mix: a bucket where a customer is
// meant, or a bare number, does not compile.
TEST(Ids, DistinctTypes) {
  static_assert(!std::is_convertible_v<int, CustomerId>);
  static_assert(!std::is_convertible_v<BucketId, CustomerId>);
  static_assert(!std::is_convertible_v<ShardId, BucketId>);
  static_assert(!std::is_convertible_v<CustomerId, int>);
  static_assert(std::is_invocable_v<decltype(&shardkit::BucketDirectory::ShardFor), const shardkit::BucketDirectory&,
                                    CustomerId>);
  static_assert(
      !std::is_invocable_v<decltype(&shardkit::BucketDirectory::ShardFor), const shardkit::BucketDirectory&, BucketId>);
  static_assert(!std::is_invocable_v<decltype(&shardkit::BucketDirectory::ShardOf), const shardkit::BucketDirectory&,
                                     CustomerId>);
  std::vector<BucketId> buckets;
  for (const BucketId b : shardkit::AllBuckets()) buckets.push_back(b);
  ASSERT_EQ(buckets.size(), 64U);
  EXPECT_EQ(buckets.front(), BucketId{0});
  EXPECT_EQ(buckets.back(), BucketId{63});
  int shards = 0;
  for (const ShardId s : shardkit::FirstShards(3)) EXPECT_EQ(shardkit::ToInt(s), shards++);
  EXPECT_EQ(shards, 3);
  EXPECT_EQ(fmt::format("{} {} {}", CustomerId{4242}, BucketId{44}, ShardId{1}), "4242 44 1");
}

}  // namespace
