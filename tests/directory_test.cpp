#include "shardkit/directory.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "shardkit/errors.hpp"

namespace {

using shardkit::BucketDirectory;
using shardkit::DirectoryError;

TEST(BucketDirectory, EvenSplitOverTwoShards) {
  const auto d = BucketDirectory::EvenSplit(2);
  EXPECT_EQ(d.ShardOf(0), 0);
  EXPECT_EQ(d.ShardOf(31), 0);
  EXPECT_EQ(d.ShardOf(32), 1);
  EXPECT_EQ(d.ShardOf(63), 1);
  EXPECT_EQ(d.BucketsOf(0).size(), 32U);
  EXPECT_EQ(d.Version(), 1);
}

TEST(BucketDirectory, EvenSplitOverThreeShardsCoversAll) {
  const auto d = BucketDirectory::EvenSplit(3);
  EXPECT_EQ(d.BucketsOf(0).size() + d.BucketsOf(1).size() + d.BucketsOf(2).size(), 64U);
  EXPECT_GE(d.BucketsOf(2).size(), 21U);
}

TEST(BucketDirectory, RejectsShardOutOfRangeNamingTheBucket) {
  auto table = BucketDirectory::EvenSplit(2).AssignmentTable();
  table[17] = 5;
  try {
    (void)BucketDirectory::FromAssignments(table, 2, 1);
    FAIL() << "expected DirectoryError";
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), 17);
    EXPECT_EQ(e.shard(), 5);
    EXPECT_NE(std::string(e.what()).find("bucket 17"), std::string::npos) << e.what();
  }
}

TEST(BucketDirectory, RowsMustMapEveryBucketExactlyOnce) {
  std::vector<std::pair<int, int>> rows;
  for (int b = 0; b < 64; ++b) rows.emplace_back(b, b < 32 ? 0 : 1);
  EXPECT_NO_THROW((void)BucketDirectory::FromRows(rows, 2, 3));

  auto missing = rows;
  missing.erase(missing.begin() + 40);
  try {
    (void)BucketDirectory::FromRows(missing, 2, 1);
    FAIL();
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), 40);
    EXPECT_NE(std::string(e.what()).find("not mapped"), std::string::npos) << e.what();
  }

  auto twice = rows;
  twice.emplace_back(7, 1);
  try {
    (void)BucketDirectory::FromRows(twice, 2, 1);
    FAIL();
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), 7);
    EXPECT_NE(std::string(e.what()).find("more than once"), std::string::npos) << e.what();
  }

  auto unknown = rows;
  unknown.emplace_back(64, 0);
  EXPECT_THROW((void)BucketDirectory::FromRows(unknown, 2, 1), DirectoryError);
}

TEST(BucketDirectory, RejectsBadShardCountAndVersion) {
  EXPECT_THROW((void)BucketDirectory::EvenSplit(0), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(65), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2, 0), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2).ShardOf(64), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2).ShardOf(-1), DirectoryError);
}

TEST(BucketDirectory, MovingABucketBumpsTheVersion) {
  const auto before = BucketDirectory::EvenSplit(2);
  const auto after = before.WithBucketMoved(44, 0);
  EXPECT_EQ(after.Version(), 2);
  EXPECT_EQ(after.ShardFor(4242), 0);
  EXPECT_EQ(before.ShardFor(4242), 1);  // the old snapshot is unchanged
  EXPECT_THROW((void)before.WithBucketMoved(44, 2), DirectoryError);
}

TEST(DirectoryHolder, PublishRequiresAHigherVersionAndSameShardCount) {
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(2, 5)};
  EXPECT_THROW(holder.Publish(BucketDirectory::EvenSplit(2, 5)), DirectoryError);
  EXPECT_THROW(holder.Publish(BucketDirectory::EvenSplit(3, 9)), DirectoryError);
  holder.Publish(BucketDirectory::EvenSplit(2, 6).WithBucketMoved(0, 1));
  EXPECT_EQ(holder.Current()->Version(), 7);
}

TEST(DirectoryHolder, ReadersSeeWholeSnapshotsWhileWritersSwap) {
  // Writers alternate between two placements; every snapshot a reader sees
  // must be exactly one of them (never a mix), and versions never go back.
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(2, 1)};
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0};
  std::atomic<long> backwards{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      std::int64_t last = 0;
      while (!stop.load()) {
        auto snapshot = holder.Current();
        const auto version = snapshot->Version();
        if (version < last) ++backwards;
        last = version;
        // Even versions have every bucket on shard 0 .. odd ones the even split.
        const int expected_shard_63 = version % 2 == 0 ? 0 : 1;
        if (snapshot->ShardOf(63) != expected_shard_63 || snapshot->ShardOf(0) != 0) ++torn;
      }
    });
  }
  shardkit::BucketDirectory::Assignments all_zero{};
  for (std::int64_t v = 2; v <= 20000; ++v) {
    holder.Publish(v % 2 == 0 ? BucketDirectory::FromAssignments(all_zero, 2, v) : BucketDirectory::EvenSplit(2, v));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(backwards.load(), 0);
}

}  // namespace
