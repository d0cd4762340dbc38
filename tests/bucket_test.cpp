#include "shardkit/bucket.hpp"

#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cstdint>
#include <random>

#include "shardkit/directory.hpp"

namespace {

// Seed 001's C# expression, transcribed literally with 64-bit arithmetic:
// (int)((((ulong)(uint)customerId * 2654435761UL) % 4294967296UL) >> 26)
int ReferenceBucket(std::int32_t customer_id) {
  const std::uint64_t widened = static_cast<std::uint32_t>(customer_id);
  return static_cast<int>(((widened * 2654435761ULL) % 4294967296ULL) >> 26);
}

TEST(BucketOf, SeedVectors) {
  const auto directory = shardkit::BucketDirectory::EvenSplit(2);
  EXPECT_EQ(shardkit::BucketOf(4242), 44);
  EXPECT_EQ(shardkit::BucketOf(4243), 20);
  EXPECT_EQ(shardkit::BucketOf(77777), 53);
  EXPECT_EQ(directory.ShardFor(4242), 1);
  EXPECT_EQ(directory.ShardFor(4243), 0);
  EXPECT_EQ(directory.ShardFor(77777), 1);
}

TEST(BucketOf, EdgeValuesMatchReference) {
  std::vector<std::int32_t> ids = {INT32_MIN, INT32_MIN + 1, -65536, -2, -1, 0, 1, 2, 65535, 65536, INT32_MAX - 1, INT32_MAX};
  for (int bit = 0; bit < 31; ++bit) {
    const auto power = static_cast<std::int32_t>(1U << bit);
    ids.push_back(power);
    ids.push_back(-power);
    ids.push_back(power - 1);
  }
  for (const auto id : ids) {
    SCOPED_TRACE(id);
    EXPECT_EQ(shardkit::BucketOf(id), ReferenceBucket(id));
    EXPECT_GE(shardkit::BucketOf(id), 0);
    EXPECT_LT(shardkit::BucketOf(id), shardkit::kBucketCount);
  }
}

TEST(BucketOf, MillionsOfRandomIdsMatchReference) {
  std::mt19937 random(20261130);
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  for (int i = 0; i < 5'000'000; ++i) {
    const auto id = any(random);
    ASSERT_EQ(shardkit::BucketOf(id), ReferenceBucket(id)) << "customer_id " << id;
  }
}

TEST(BucketOf, NotAllInBucketZero) {
  // The classic bug: a 64-bit multiply shifted by 26 sends every id to bucket 0
  // (or beyond 63). Distinct small ids must reach many buckets.
  std::array<int, shardkit::kBucketCount> seen{};
  for (std::int32_t id = 1; id <= 64; ++id) ++seen[static_cast<std::size_t>(shardkit::BucketOf(id))];
  int used = 0;
  for (int count : seen) used += count > 0 ? 1 : 0;
  EXPECT_GT(used, 32);
}

TEST(BucketOf, SequentialIdsSpreadEvenly) {
  constexpr int kIds = 6'400'000;
  std::array<int, shardkit::kBucketCount> counts{};
  for (std::int32_t id = 1; id <= kIds; ++id) ++counts[static_cast<std::size_t>(shardkit::BucketOf(id))];
  const double expected = static_cast<double>(kIds) / shardkit::kBucketCount;
  for (int bucket = 0; bucket < shardkit::kBucketCount; ++bucket) {
    SCOPED_TRACE(bucket);
    const double deviation = std::abs(counts[static_cast<std::size_t>(bucket)] - expected) / expected;
    EXPECT_LT(deviation, 0.01) << counts[static_cast<std::size_t>(bucket)] << " ids, expected " << expected;
  }
}

TEST(BucketOf, IsConstexpr) {
  static_assert(shardkit::BucketOf(0) == 0);
  constexpr int bucket = shardkit::BucketOf(77777);
  EXPECT_EQ(bucket, 53);
}

}  // namespace
