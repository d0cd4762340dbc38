// Bucket moves on real servers: three shards (shard i = database <name>_s<i>
// on shard server i % 2), a catalog, and the reference server as ground truth.
#include "shardkit/move.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include "shardkit/directory.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ownership.hpp"
#include "support/bookstore_rows.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::ScratchCluster;
using test::ScratchOptions;

// Buckets 0-31 on shard 0, 32-63 on shard 1, shard 2 empty: "two loaded
// shards and a new one".
BucketDirectory TwoOfThree() { return BucketDirectory::FromAssignments(BucketDirectory::EvenSplit(2).AssignmentTable(), 3, 1); }

MoveOptions Quick() {
  MoveOptions o;
  o.cleanup_grace = std::chrono::milliseconds(0);
  return o;
}

BucketDirectory CatalogDirectory(const ScratchCluster& cluster) {
  pqxx::connection c{cluster.CatalogDsn()};
  return LoadDirectory(c, cluster.ShardCount());
}

class Move : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new ScratchCluster("move_pgtest", ScratchOptions().Shards(3).Directory(TwoOfThree()));
    test::FillBookstore(*cluster_, 1500);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static ScratchCluster* cluster_;
};
ScratchCluster* Move::cluster_ = nullptr;

TEST_F(Move, MovesABucketWithItsRowsAndLeavesNothingBehind) {
  const auto before = CatalogDirectory(*cluster_);
  BucketMover mover{cluster_->Config(), cluster_->CatalogDsn(), Quick()};
  const MoveRecord done = mover.Move(BucketId{31}, ShardId{2});
  EXPECT_EQ(done.state, MoveState::kDone);
  EXPECT_GT(done.rows_copied, 0);
  EXPECT_EQ(done.rows_deleted, done.rows_copied);
  const auto after = CatalogDirectory(*cluster_);
  EXPECT_EQ(after.Version(), before.Version() + 1);
  EXPECT_EQ(after.ShardOf(BucketId{31}), ShardId{2});
  std::vector<std::string> extra;
  EXPECT_EQ(test::Differences(test::ShardDigests(*cluster_, &extra), test::ReferenceDigests(*cluster_)),
            std::vector<std::string>{});
  EXPECT_EQ(extra, std::vector<std::string>{});
  const auto per_shard = test::DigestsPerShard(*cluster_);
  EXPECT_TRUE(per_shard[2].contains({"orders", 31}));
  EXPECT_FALSE(per_shard[0].contains({"orders", 31}));
  EXPECT_EQ(LeftoverReplicationObjects(cluster_->Config()), std::vector<std::string>{});
  pqxx::connection s0{cluster_->ShardDsn(0)};
  pqxx::connection s2{cluster_->ShardDsn(2)};
  EXPECT_EQ(ReadOwnership(s0).Find(BucketId{31}), nullptr);
  ASSERT_NE(ReadOwnership(s2).Find(BucketId{31}), nullptr);
  EXPECT_EQ(ReadOwnership(s2).Find(BucketId{31})->state, OwnershipState::kOwned);
  const auto events = mover.Events(done.move_id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state, MoveState::kDone);
}

}  // namespace
}  // namespace shardkit
