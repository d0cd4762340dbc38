#include "support/settled_cluster.hpp"

#include <gtest/gtest.h>

#include <pqxx/pqxx>
#include <vector>

#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/schema/verify.hpp"
#include "support/bookstore_rows.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::test {

void ExpectSettled(const ScratchCluster& cluster, const std::string& where) {
  SCOPED_TRACE(where);
  std::vector<std::string> extra;
  EXPECT_EQ(Differences(ShardDigests(cluster, &extra), ReferenceDigests(cluster)), std::vector<std::string>{});
  EXPECT_EQ(extra, std::vector<std::string>{});
  pqxx::connection catalog{cluster.CatalogDsn().Reveal()};
  const BucketDirectory directory = LoadDirectory(catalog, cluster.ShardCount());
  const auto per_shard = DigestsPerShard(cluster);
  for (int s = 0; s < cluster.ShardCount(); ++s) {
    pqxx::connection c{cluster.ShardDsn(s).Reveal()};
    const ShardOwnership own = ReadOwnership(c);
    const BucketSet assigned = BucketSet::Of(directory, ShardId{s});
    EXPECT_EQ(own.InState(OwnershipState::kOwned), assigned) << "shard " << s;
    EXPECT_EQ(own.buckets.size(), static_cast<std::size_t>(assigned.Size()))
        << "shard " << s << " has ownership rows in other states";
    for (const auto& b : own.buckets) EXPECT_FALSE(b.move_id) << "shard " << s << " bucket " << b.bucket;
    // The fence's fast path never admits a bucket the shard does not own.
    EXPECT_EQ(BucketSet(own.fast_path.Bits() & ~own.InState(OwnershipState::kOwned).Bits()), BucketSet{})
        << "shard " << s << " fast path " << own.fast_path.Ranges();
    for (const auto& [key, digest] : per_shard[static_cast<std::size_t>(s)]) {
      EXPECT_EQ(directory.ShardOf(BucketId{key.second}), ShardId{s})
          << key.first << " rows of bucket " << key.second << " on shard " << s;
    }
  }
  EXPECT_EQ(LeftoverReplicationObjects(cluster.Config()), std::vector<std::string>{});
  BucketMover mover{cluster.Config()};
  EXPECT_EQ(mover.List(true).size(), 0U);
  const VerifyReport report = VerifyCluster(cluster.Config());
  for (const auto& f : report.findings) ADD_FAILURE() << "verify: " << f.detail;
}

}  // namespace shardkit::test
