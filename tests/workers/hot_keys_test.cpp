// Job partitions: the home partition is the bucket; salting spreads a hot
// customer over exactly S partitions; readers find every partition used.
#include "shardkit/workers/hot_keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

TEST(HomePartition, IsTheBucketWith64Partitions) {
  for (std::int64_t c = -200000; c <= 200000; c += 7) {
    const CustomerId id{static_cast<std::int32_t>(c)};
    ASSERT_EQ(HomePartition(id, 64), ToInt(BucketOf(id))) << c;
    // Doubling splits each bucket in two; halving groups buckets.
    ASSERT_EQ(HomePartition(id, 128) / 2, ToInt(BucketOf(id))) << c;
    ASSERT_EQ(HomePartition(id, 16), ToInt(BucketOf(id)) / 4) << c;
    ASSERT_EQ(HomePartition(id, 1), 0);
  }
  EXPECT_EQ(HomePartition(CustomerId{4242}, 64), 44);
}

TEST(BucketsOfPartition, CoversEveryBucketOnce) {
  for (const int partitions : {1, 2, 16, 64, 128, 1024}) {
    std::multiset<BucketId> seen;
    for (int p = 0; p < partitions; ++p) {
      for (const BucketId b : BucketsOfPartition(p, partitions)) seen.insert(b);
    }
    for (const BucketId b : AllBuckets()) {
      EXPECT_EQ(seen.count(b), partitions >= 64 ? static_cast<std::size_t>(partitions / 64) : 1U)
          << partitions << " partitions, bucket " << b;
    }
  }
  EXPECT_EQ(BucketsOfPartition(44, 64), std::vector<BucketId>{BucketId{44}});
  EXPECT_THROW((void)BucketsOfPartition(64, 64), ConfigError);
  EXPECT_THROW((void)BucketsOfPartition(0, 48), ConfigError);
}

TEST(Salting, SpreadsAHotKeyOverExactlySPartitions) {
  for (const int salt : {2, 4, 8, 16, 64}) {
    for (const CustomerId c : {CustomerId{4242}, CustomerId{4243}, CustomerId{77777}, CustomerId{-5}, CustomerId{0}}) {
      std::set<int> partitions;
      for (std::int64_t key = 0; key < 1000; ++key) partitions.insert(SaltedPartition(c, key, salt, 64));
      EXPECT_EQ(partitions.size(), static_cast<std::size_t>(salt)) << "customer " << c << ", salt " << salt;
      EXPECT_TRUE(partitions.count(ToInt(BucketOf(c)))) << "the home partition is one of them";
      // Evenly strided over the whole range, so over different owners.
      for (const int p : partitions) EXPECT_EQ(((p - ToInt(BucketOf(c))) % (64 / salt) + 64) % (64 / salt), 0);
    }
  }
  // The same key always lands in the same partition; salt 1 is home.
  EXPECT_EQ(SaltedPartition(CustomerId{4242}, -3, 8, 64), SaltedPartition(CustomerId{4242}, -3, 8, 64));
  EXPECT_EQ(SaltedPartition(CustomerId{4242}, 99, 1, 64), 44);
}

TEST(Salting, StructuredIdsStillUseEverySalt) {
  // Snowflake-style ids drawn four at a time (an order and its three jobs):
  // the low bits step by four, so id % 8 alone would use only two salts.
  std::set<int> partitions;
  for (std::int64_t ms = 0; ms < 50; ++ms) {
    for (std::int64_t seq = 0; seq < 16; seq += 4)
      partitions.insert(SaltedPartition(CustomerId{4242}, (ms << 22) | seq, 8, 64));
  }
  EXPECT_EQ(partitions.size(), 8U);
}

TEST(HotKeys, WritersSaltAndReadersKnowWhereToLook) {
  const CustomerId hot_customer{4242};
  const CustomerId cooled{77777};
  const HotKeys hot(64, {{hot_customer, {8, 8}}, {cooled, {1, 4}}});
  // Salted: new jobs spread; one stream (an order) stays in one partition.
  std::set<int> used;
  for (std::int64_t order = 0; order < 100; ++order) used.insert(hot.PartitionFor(hot_customer, order));
  EXPECT_EQ(used.size(), 8U);
  EXPECT_EQ(hot.PartitionFor(hot_customer, 12345), hot.PartitionFor(hot_customer, 12345));
  const auto readers = hot.PartitionsOf(hot_customer);
  EXPECT_EQ(readers.size(), 8U);
  EXPECT_EQ(readers.front(), 44);
  for (const int p : used) EXPECT_NE(std::find(readers.begin(), readers.end(), p), readers.end());
  // Unsalted since (salt 1) but salted with 4 before: new jobs go home,
  // readers still look in the 4 partitions.
  EXPECT_EQ(hot.PartitionFor(cooled, 3), ToInt(BucketOf(cooled)));
  EXPECT_EQ(hot.PartitionsOf(cooled).size(), 4U);
  // Salts nest: everything salt 2 or 4 ever wrote is among salt 8's partitions.
  const HotKeys eight(64, {{CustomerId{4243}, {8, 8}}});
  const auto all = eight.PartitionsOf(CustomerId{4243});
  for (const int s : {1, 2, 4, 8}) {
    for (std::int64_t k = 0; k < 16; ++k) {
      const int p = SaltedPartition(CustomerId{4243}, k, s, 64);
      EXPECT_NE(std::find(all.begin(), all.end(), p), all.end()) << "salt " << s;
    }
  }
  // Not salted at all: home only.
  EXPECT_EQ(hot.PartitionsOf(CustomerId{1}), std::vector<int>{ToInt(BucketOf(CustomerId{1}))});
  EXPECT_EQ(hot.SaltOf(CustomerId{1}), 1);
}

TEST(HotKeys, RefusesSaltsThatDoNotFit) {
  EXPECT_THROW(HotKeys(64, {{CustomerId{1}, {3, 3}}}), ConfigError);      // not a power of two
  EXPECT_THROW(HotKeys(64, {{CustomerId{1}, {128, 128}}}), ConfigError);  // more than the partitions
  EXPECT_THROW(HotKeys(48), ConfigError);
  HotKeyRegistry registry(Dsn("host=127.0.0.1 port=1 dbname=x user=x"), "q", 64);
  EXPECT_THROW(registry.Salt(CustomerId{1}, 6), ConfigError);
  EXPECT_TRUE(registry.Current()->Empty());
}

}  // namespace
}  // namespace shardkit
