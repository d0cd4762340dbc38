// Rebalance plans: fewest moves, even spread, and back again.
#include "shardkit/resharding/rebalance.hpp"

#include <gtest/gtest.h>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

BucketDirectory Widened(const BucketDirectory& d, int shard_count) {
  return BucketDirectory::FromAssignments(d.AssignmentTable(), shard_count, d.Version());
}

std::vector<ShardId> Shards(int n) {
  std::vector<ShardId> out;
  for (const ShardId s : FirstShards(n)) out.push_back(s);
  return out;
}

int Differing(const BucketDirectory& a, const BucketDirectory& b) {
  int n = 0;
  for (const BucketId x : AllBuckets()) n += a.ShardOf(x) != b.ShardOf(x) ? 1 : 0;
  return n;
}

TEST(PlanRebalance, AddingAShardIsTheLabsFewestMovesPlan) {
  for (int n = 1; n <= 8; ++n) {
    const BucketDirectory before = Widened(BucketDirectory::EvenSplit(n), n + 1);
    const RebalancePlan plan = PlanRebalance(before, Shards(n + 1));
    const BucketDirectory expected = BucketDirectory::EvenSplit(n).WithShardAdded();
    EXPECT_EQ(plan.after.AssignmentTable(), expected.AssignmentTable()) << n << " -> " << n + 1 << " shards";
    EXPECT_EQ(static_cast<int>(plan.moves.size()), Differing(before, plan.after));
    for (const auto& m : plan.moves) {
      EXPECT_EQ(m.to, ShardId{n});
      EXPECT_EQ(before.ShardOf(m.bucket), m.from);
    }
    EXPECT_EQ(plan.after.Version(), before.Version() + static_cast<std::int64_t>(plan.moves.size()));
  }
}

TEST(PlanRebalance, DrainingTheAddedShardGivesBackTheOldPlacement) {
  for (int n = 1; n <= 8; ++n) {
    const BucketDirectory before = Widened(BucketDirectory::EvenSplit(n), n + 1);
    const RebalancePlan out = PlanRebalance(before, Shards(n + 1));
    const RebalancePlan back = PlanRebalance(out.after, Shards(n));
    EXPECT_EQ(back.after.AssignmentTable(), before.AssignmentTable()) << n + 1 << " -> " << n << " shards";
    EXPECT_EQ(back.moves.size(), out.moves.size());
  }
}

TEST(PlanRebalance, EveryShardOfTheSetGetsItsShareAndOthersNone) {
  const BucketDirectory uneven = BucketDirectory::EvenSplit(4).WithBucketMoved(BucketId{0}, ShardId{3});
  for (const auto& set : std::vector<std::vector<ShardId>>{
           {ShardId{0}, ShardId{2}}, {ShardId{1}, ShardId{2}, ShardId{3}}, {ShardId{3}}, Shards(4)}) {
    const RebalancePlan plan = PlanRebalance(uneven, set);
    const int n = static_cast<int>(set.size());
    for (const ShardId s : FirstShards(4)) {
      const int held = static_cast<int>(plan.after.BucketsOf(s).size());
      if (std::find(set.begin(), set.end(), s) == set.end()) {
        EXPECT_EQ(held, 0) << "shard " << s;
      } else {
        EXPECT_GE(held, kBucketCount / n) << "shard " << s;
        EXPECT_LE(held, (kBucketCount + n - 1) / n) << "shard " << s;
      }
    }
    EXPECT_EQ(static_cast<int>(plan.moves.size()), Differing(uneven, plan.after));
  }
  // Already balanced: nothing moves.
  EXPECT_TRUE(PlanRebalance(BucketDirectory::EvenSplit(3), Shards(3)).moves.empty());
}

TEST(PlanRebalance, RefusesBadShardSets) {
  const auto d = BucketDirectory::EvenSplit(2);
  EXPECT_THROW((void)PlanRebalance(d, {}), DirectoryError);
  EXPECT_THROW((void)PlanRebalance(d, {ShardId{2}}), DirectoryError);
  EXPECT_THROW((void)PlanRebalance(d, {ShardId{0}, ShardId{0}}), DirectoryError);
}

}  // namespace
}  // namespace shardkit
