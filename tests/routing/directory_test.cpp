#include "shardkit/routing/directory.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/wait.hpp"

namespace {

using shardkit::BucketDirectory;
using shardkit::BucketId;
using shardkit::CustomerId;
using shardkit::DirectoryError;
using shardkit::ShardId;

TEST(BucketDirectory, EvenSplitOverTwoShards) {
  const auto d = BucketDirectory::EvenSplit(2);
  EXPECT_EQ(d.ShardOf(BucketId{0}), ShardId{0});
  EXPECT_EQ(d.ShardOf(BucketId{31}), ShardId{0});
  EXPECT_EQ(d.ShardOf(BucketId{32}), ShardId{1});
  EXPECT_EQ(d.ShardOf(BucketId{63}), ShardId{1});
  EXPECT_EQ(d.BucketsOf(ShardId{0}).size(), 32U);
  EXPECT_EQ(d.Version(), 1);
}

TEST(BucketDirectory, EvenSplitOverThreeShardsCoversAll) {
  const auto d = BucketDirectory::EvenSplit(3);
  EXPECT_EQ(d.BucketsOf(ShardId{0}).size() + d.BucketsOf(ShardId{1}).size() + d.BucketsOf(ShardId{2}).size(), 64U);
  EXPECT_GE(d.BucketsOf(ShardId{2}).size(), 21U);
}

TEST(BucketDirectory, RejectsShardOutOfRangeNamingTheBucket) {
  auto table = BucketDirectory::EvenSplit(2).AssignmentTable();
  table[17] = ShardId{5};
  try {
    (void)BucketDirectory::FromAssignments(table, 2, 1);
    FAIL() << "expected DirectoryError";
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), BucketId{17});
    EXPECT_EQ(e.shard(), ShardId{5});
    EXPECT_NE(std::string(e.what()).find("bucket 17"), std::string::npos) << e.what();
  }
}

TEST(BucketDirectory, RowsMustMapEveryBucketExactlyOnce) {
  std::vector<std::pair<BucketId, ShardId>> rows;
  for (int b = 0; b < 64; ++b) rows.emplace_back(BucketId{b}, ShardId{b < 32 ? 0 : 1});
  EXPECT_NO_THROW((void)BucketDirectory::FromRows(rows, 2, 3));

  auto missing = rows;
  missing.erase(missing.begin() + 40);
  try {
    (void)BucketDirectory::FromRows(missing, 2, 1);
    FAIL();
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), BucketId{40});
    EXPECT_NE(std::string(e.what()).find("not mapped"), std::string::npos) << e.what();
  }

  auto twice = rows;
  twice.emplace_back(BucketId{7}, ShardId{1});
  try {
    (void)BucketDirectory::FromRows(twice, 2, 1);
    FAIL();
  } catch (const DirectoryError& e) {
    EXPECT_EQ(e.bucket(), BucketId{7});
    EXPECT_NE(std::string(e.what()).find("more than once"), std::string::npos) << e.what();
  }

  auto unknown = rows;
  unknown.emplace_back(BucketId{64}, ShardId{0});
  EXPECT_THROW((void)BucketDirectory::FromRows(unknown, 2, 1), DirectoryError);
}

TEST(BucketDirectory, RejectsBadShardCountAndVersion) {
  EXPECT_THROW((void)BucketDirectory::EvenSplit(0), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(65), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2, 0), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2).ShardOf(BucketId{64}), DirectoryError);
  EXPECT_THROW((void)BucketDirectory::EvenSplit(2).ShardOf(BucketId{-1}), DirectoryError);
}

TEST(BucketDirectory, MovingABucketBumpsTheVersion) {
  const auto before = BucketDirectory::EvenSplit(2);
  const auto after = before.WithBucketMoved(BucketId{44}, ShardId{0});
  EXPECT_EQ(after.Version(), 2);
  EXPECT_EQ(after.ShardFor(CustomerId{4242}), ShardId{0});
  EXPECT_EQ(before.ShardFor(CustomerId{4242}), ShardId{1});  // the old snapshot is unchanged
  EXPECT_THROW((void)before.WithBucketMoved(BucketId{44}, ShardId{2}), DirectoryError);
}

TEST(BucketDirectory, AddingAShardMovesTheFewestBuckets) {
  for (int shards = 1; shards < 8; ++shards) {
    SCOPED_TRACE(shards);
    const auto before = BucketDirectory::EvenSplit(shards, 4);
    const auto after = before.WithShardAdded();
    EXPECT_EQ(after.ShardCount(), shards + 1);
    EXPECT_EQ(after.Version(), 5);
    int moved = 0;
    for (const BucketId b : shardkit::AllBuckets()) {
      if (after.ShardOf(b) != before.ShardOf(b)) {
        ++moved;
        EXPECT_EQ(after.ShardOf(b), ShardId{shards}) << "bucket " << b << " moved between old shards";
      }
    }
    // The new shard's fair share, and not one bucket more.
    EXPECT_EQ(moved, 64 / (shards + 1));
    for (const ShardId s : shardkit::FirstShards(shards + 1)) {
      EXPECT_GE(after.BucketsOf(s).size(), static_cast<std::size_t>(64 / (shards + 1))) << "shard " << s;
      EXPECT_LE(after.BucketsOf(s).size(), static_cast<std::size_t>((64 + shards) / (shards + 1))) << "shard " << s;
    }
  }
}

TEST(DirectoryHolder, PublishRequiresAHigherVersionAndSameShardCount) {
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(2, 5)};
  EXPECT_THROW(holder.Publish(BucketDirectory::EvenSplit(2, 5)), DirectoryError);
  EXPECT_THROW(holder.Publish(BucketDirectory::EvenSplit(3, 9)), DirectoryError);
  holder.Publish(BucketDirectory::EvenSplit(2, 6).WithBucketMoved(BucketId{0}, ShardId{1}));
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
        const ShardId expected_shard_63{version % 2 == 0 ? 0 : 1};
        if (snapshot->ShardOf(BucketId{63}) != expected_shard_63 || snapshot->ShardOf(BucketId{0}) != ShardId{0})
          ++torn;
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

// The routing words: readers of ShardFor/PlacementOf pay one atomic load and
// still never see a (version, shard) pair that was not published together,
// nor a version going back, while writers publish 20,000 versions.
TEST(DirectoryHolder, PlacementsAreWholeAndMonotonicWhileWritersPublish) {
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(2, 1)};
  constexpr shardkit::CustomerId kCustomer{4242};  // bucket 44: shard 1 in the even split
  const BucketId bucket = shardkit::BucketOf(kCustomer);
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::atomic<long> torn{0};
  std::atomic<long> backwards{0};
  std::atomic<long> snapshot_behind{0};
  std::atomic<long> mid_publish_reads{0};  // a publish happened between two reads of one reader
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      std::int64_t last = 0;
      long n = 0;
      ++started;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto placement = holder.PlacementOf(kCustomer);
        if (placement.bucket != bucket) ++torn;
        if (placement.version < last) ++backwards;
        if (last > 1 && placement.version > last) ++mid_publish_reads;
        last = placement.version;
        // Even versions have every bucket on shard 0, odd ones the even split.
        const ShardId expected{placement.version % 2 == 0 ? 0 : 1};
        if (placement.shard != expected) ++torn;
        const ShardId shard = holder.ShardFor(kCustomer);
        if (shard != ShardId{0} && shard != ShardId{1}) ++torn;
        // The snapshot is never behind a version the routing words showed.
        if ((n & 63) == 0 && holder.Current()->Version() < placement.version) ++snapshot_behind;
        ++n;
      }
    });
  }
  ASSERT_TRUE(shardkit::test::WaitFor([&] { return started.load() == 3; }));
  shardkit::BucketDirectory::Assignments all_zero{};
  auto publish = [&](std::int64_t v) {
    holder.Publish(v % 2 == 0 ? BucketDirectory::FromAssignments(all_zero, 2, v) : BucketDirectory::EvenSplit(2, v));
  };
  std::int64_t v = 2;
  for (; v <= 20000; ++v) publish(v);
  // On a busy machine the readers may not have run during those: go on
  // until they did (bounded), so that the test really races them.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (mid_publish_reads.load() == 0 && std::chrono::steady_clock::now() < give_up) publish(v++);
  const std::int64_t final_version = v - 1;
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(backwards.load(), 0);
  EXPECT_EQ(snapshot_behind.load(), 0);
  EXPECT_GT(mid_publish_reads.load(), 0) << "the readers never ran while versions were published";
  EXPECT_EQ(holder.Version(), final_version);
  EXPECT_EQ(holder.PlacementOf(kCustomer).version, final_version);
}

TEST(DirectoryHolder, ShardForAgreesWithTheSnapshotForEveryBucket) {
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(3, 4)};
  holder.Publish(holder.Current()->WithBucketMoved(BucketId{44}, ShardId{0}));
  const auto snapshot = holder.Current();
  for (std::int32_t id = -5000; id <= 5000; ++id) {
    const shardkit::CustomerId customer{id};
    ASSERT_EQ(holder.ShardFor(customer), snapshot->ShardFor(customer)) << id;
    const auto placement = holder.PlacementOf(customer);
    ASSERT_EQ(placement.bucket, shardkit::BucketOf(customer));
    ASSERT_EQ(placement.shard, snapshot->ShardFor(customer));
    ASSERT_EQ(placement.version, 5);
  }
  EXPECT_EQ(holder.ShardFor(shardkit::CustomerId{4242}), ShardId{0});  // bucket 44 moved
}

TEST(DirectoryHolder, RefusesVersionsThatDoNotFitTheRoutingWords) {
  EXPECT_THROW(shardkit::DirectoryHolder{BucketDirectory::EvenSplit(2, std::int64_t{1} << 56)}, DirectoryError);
  shardkit::DirectoryHolder holder{BucketDirectory::EvenSplit(2, (std::int64_t{1} << 56) - 2)};
  EXPECT_NO_THROW(holder.Publish(BucketDirectory::EvenSplit(2, (std::int64_t{1} << 56) - 1)));
  EXPECT_THROW(holder.Publish(BucketDirectory::EvenSplit(2, std::int64_t{1} << 56)), DirectoryError);
  EXPECT_EQ(holder.Version(), (std::int64_t{1} << 56) - 1);
}

}  // namespace
