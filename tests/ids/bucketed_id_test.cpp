// Bucketed IDs: the layout, and that an ID alone routes to the shard of the
// customer it was made for, under several directories.
#include "shardkit/ids/bucketed_id.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/ids/id_clock.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {
namespace {

constexpr std::int64_t kStart = 1'717'243'200'000;  // 2024-06-01T12:00:00Z

TEST(BucketedId, LayoutAndDecode) {
  const BucketedIdParts parts{kStart, BucketId{44}, 255, 255};
  const std::int64_t id = ComposeBucketedId(parts);
  EXPECT_EQ(id, ((kStart - kDefaultIdEpochUnixMs) << 22) | (255 << 14) | (255 << 6) | 44);
  EXPECT_EQ(DecodeBucketedId(id), parts);
  EXPECT_EQ(BucketOfId(id), BucketId{44});
  EXPECT_EQ(DecodeBucketedId(ComposeBucketedId({kStart, BucketId{1}, 2, 3})),
            (BucketedIdParts{kStart, BucketId{1}, 2, 3}));
  static_assert(BucketOfId(63) == BucketId{63});
  static_assert(BucketOfId(std::int64_t{1} << 6) == BucketId{0});
  static_assert(BucketOfId((std::int64_t{1} << 22) - 1) == BucketId{63});
  EXPECT_THROW((void)ComposeBucketedId({kStart, BucketId{64}, 0, 0}), IdFormatError);
  EXPECT_THROW((void)ComposeBucketedId({kStart, BucketId{0}, 256, 0}), IdFormatError);
  EXPECT_THROW((void)ComposeBucketedId({kStart, BucketId{0}, 0, 256}), IdFormatError);
  EXPECT_THROW((void)DecodeBucketedId(-5), IdFormatError);
  EXPECT_THROW((void)ShardOfId(BucketDirectory::EvenSplit(2), -5), IdFormatError);
  EXPECT_THROW(BucketedIdGenerator(256), IdGeneratorError);
}

TEST(BucketedIdGenerator, SeedVectorsRouteLikeTheirCustomers) {
  // The Bookstore case: 4242 -> bucket 44 -> shard 1; 4243 -> 20 -> 0; 77777 -> 53 -> 1.
  BucketedIdGenerator generator{5};
  const BucketDirectory directory = BucketDirectory::EvenSplit(2);
  const std::int64_t a = generator.NextFor(CustomerId{4242});
  const std::int64_t b = generator.NextFor(CustomerId{4243});
  const std::int64_t c = generator.NextFor(CustomerId{77777});
  EXPECT_EQ(BucketOfId(a), BucketId{44});
  EXPECT_EQ(BucketOfId(b), BucketId{20});
  EXPECT_EQ(BucketOfId(c), BucketId{53});
  EXPECT_EQ(ShardOfId(directory, a), ShardId{1});
  EXPECT_EQ(ShardOfId(directory, b), ShardId{0});
  EXPECT_EQ(ShardOfId(directory, c), ShardId{1});
  EXPECT_EQ(DecodeBucketedId(a).worker_id, 5);
}

TEST(BucketedIdGenerator, IdsRouteToTheirCustomersShardForALargeRandomSample) {
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<std::int32_t> any_customer(std::numeric_limits<std::int32_t>::min(),
                                                           std::numeric_limits<std::int32_t>::max());
  std::vector<BucketDirectory> directories{BucketDirectory::EvenSplit(1), BucketDirectory::EvenSplit(2),
                                           BucketDirectory::EvenSplit(3), BucketDirectory::EvenSplit(4)};
  // After bucket moves, old IDs still route with the customer.
  directories.push_back(
      BucketDirectory::EvenSplit(2).WithBucketMoved(BucketId{44}, ShardId{0}).WithBucketMoved(BucketId{3}, ShardId{1}));
  // A manual clock: the generator's waits for the next millisecond (256 IDs
  // per ms) jump it forward instead of taking real time.
  SnowflakeOptions options;
  options.clock = std::make_shared<ManualIdClock>(kStart);
  BucketedIdGenerator generator{77, options};
  constexpr int kSample = 1'000'000;
  std::vector<std::pair<CustomerId, std::int64_t>> orders;
  orders.reserve(kSample);
  for (int i = 0; i < kSample; ++i) {
    const CustomerId customer{any_customer(rng)};
    orders.emplace_back(customer, generator.NextFor(customer));
  }
  std::vector<int> per_bucket(kBucketCount, 0);
  for (const auto& [customer, order_id] : orders) {
    ASSERT_EQ(BucketOfId(order_id), BucketOf(customer)) << "customer " << customer << " order " << order_id;
    ++per_bucket[static_cast<std::size_t>(BucketOfId(order_id))];
    for (const BucketDirectory& directory : directories) {
      ASSERT_EQ(ShardOfId(directory, order_id), directory.ShardFor(customer))
          << "customer " << customer << " order " << order_id << " directory v" << directory.Version();
    }
  }
  // Every bucket occurs: the field is really the customer's bucket, not a constant.
  EXPECT_TRUE(std::all_of(per_bucket.begin(), per_bucket.end(), [](int n) { return n > 0; }));
  // And the IDs are unique and increasing.
  for (std::size_t i = 1; i < orders.size(); ++i) ASSERT_LT(orders[i - 1].second, orders[i].second);
}

TEST(BucketedIdGenerator, ValidatesTheBucket) {
  BucketedIdGenerator generator{1};
  EXPECT_THROW((void)generator.Next(BucketId{64}), IdGeneratorError);
  EXPECT_THROW((void)generator.Next(BucketId{-1}), IdGeneratorError);
  EXPECT_EQ(BucketOfId(generator.Next(BucketId{63})), BucketId{63});
}

TEST(BucketedIdGenerator, SequenceIsPerWorkerAcrossBucketsAndWaitsAt256) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeOptions options;
  options.clock = clock;
  BucketedIdGenerator generator{2, options};
  for (int i = 0; i < BucketedIdGenerator::kIdsPerMs; ++i) {
    const auto parts = DecodeBucketedId(generator.Next(BucketId{i % kBucketCount}));
    ASSERT_EQ(parts.sequence, i);
    ASSERT_EQ(parts.unix_ms, kStart);
    ASSERT_EQ(parts.bucket, BucketId{i % kBucketCount});
  }
  EXPECT_EQ(clock->WaitCount(), 0);
  const auto parts = DecodeBucketedId(generator.Next(BucketId{7}));
  EXPECT_EQ(clock->WaitCount(), 1);
  EXPECT_EQ(parts, (BucketedIdParts{kStart + 1, BucketId{7}, 2, 0}));
}

TEST(BucketedIdGenerator, StepBackBehavesLikeSnowflake) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeOptions options;
  options.clock = clock;
  BucketedIdGenerator generator{2, options};
  (void)generator.Next(BucketId{1});
  clock->AdvanceMs(-4);
  EXPECT_NO_THROW((void)generator.Next(BucketId{1}));
  EXPECT_EQ(clock->WaitCount(), 1);
  clock->AdvanceMs(-50);
  EXPECT_THROW((void)generator.Next(BucketId{1}), IdGeneratorError);
}

TEST(BucketedIdGenerator, UniqueAcrossThreadsAndGenerators) {
  // 4 generators x 2 threads x 125,000 = 1,000,000 IDs over random buckets.
  constexpr int kGenerators = 4;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 125'000;
  std::vector<std::unique_ptr<BucketedIdGenerator>> generators;
  for (int g = 0; g < kGenerators; ++g) generators.push_back(std::make_unique<BucketedIdGenerator>(g));
  std::vector<std::vector<std::int64_t>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      auto& out = results[static_cast<std::size_t>(t)];
      out.reserve(kPerThread);
      auto& generator = *generators[static_cast<std::size_t>(t % kGenerators)];
      for (int i = 0; i < kPerThread; ++i) out.push_back(generator.Next(BucketId{static_cast<int>(rng() % 64)}));
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<std::int64_t> all;
  for (const auto& r : results) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate bucketed ID";
}

}  // namespace
}  // namespace shardkit
