// The resolver against real shards: a routed statement lands on the shard
// that owns the customer, the bucket CHECK guards misplaced rows, and the
// directory round-trips through the shard_directory table.
#include "shardkit/resolver.hpp"

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "support/test_cluster.hpp"

namespace {

using shardkit::test::ScratchCluster;

int CountCustomer(shardkit::ConnectionPool& pool, int customer_id) {
  auto lease = pool.Acquire();
  pqxx::read_transaction tx{*lease};
  return tx.exec_params("SELECT count(*) FROM customers WHERE customer_id = $1", customer_id)[0][0].as<int>();
}

TEST(BucketShardResolver, RoutedWritesAndReadsLandOnTheOwningShardOnly) {
  ScratchCluster cluster{"resolver_pgtest"};
  auto resolver = cluster.MakeResolver();
  ASSERT_EQ(resolver->ShardCount(), 2);
  for (const int customer : {4242, 4243, 77777}) {
    auto lease = resolver->PoolFor(customer).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params("INSERT INTO customers (customer_id, bucket, name, email) VALUES ($1, $2, $3, $4)", customer,
                   shardkit::BucketOf(customer), "c" + std::to_string(customer), "c@example.com");
    tx.commit();
  }
  EXPECT_EQ(resolver->ShardFor(4242), 1);
  EXPECT_EQ(resolver->ShardFor(4243), 0);
  EXPECT_EQ(resolver->ShardFor(77777), 1);
  for (const int customer : {4242, 4243, 77777}) {
    const int owner = resolver->ShardFor(customer);
    EXPECT_EQ(CountCustomer(resolver->Pool(owner), customer), 1) << customer;
    EXPECT_EQ(CountCustomer(resolver->Pool(1 - owner), customer), 0) << customer;  // visibly only there
  }
  EXPECT_THROW((void)resolver->Pool(2), shardkit::UnknownShard);
}

TEST(BucketShardResolver, TheBucketCheckRejectsAWrongBucket) {
  ScratchCluster cluster{"resolver_check_pgtest"};
  EXPECT_THROW(cluster.ExecOnShard(0, "INSERT INTO customers (customer_id, bucket, name, email) "
                                      "VALUES (4242, 3, 'x', 'x')"),
               pqxx::check_violation);
}

TEST(BucketShardResolver, DirectoryFromTheDatabaseAndAtomicRepublish) {
  ScratchCluster cluster{"resolver_dir_pgtest"};
  {
    pqxx::connection c{cluster.ShardDsn(0)};
    shardkit::StoreDirectory(c, shardkit::BucketDirectory::EvenSplit(2, 3).WithBucketMoved(44, 0));
    EXPECT_THROW(shardkit::StoreDirectory(c, shardkit::BucketDirectory::EvenSplit(2, 2)), shardkit::DirectoryError);
    const auto loaded = shardkit::LoadDirectory(c, 2);
    EXPECT_EQ(loaded.Version(), 4);
    EXPECT_EQ(loaded.ShardFor(4242), 0);
    EXPECT_EQ(loaded.ShardFor(77777), 1);
  }
  auto config = cluster.Config();
  config.directory_source = shardkit::DirectorySource::kDatabase;
  auto resolver = shardkit::BucketShardResolver::FromConfig(config);
  EXPECT_EQ(resolver->Directory()->Version(), 4);
  EXPECT_EQ(resolver->ShardFor(4242), 0);
  resolver->PublishDirectory(resolver->Directory()->WithBucketMoved(44, 1));
  EXPECT_EQ(resolver->ShardFor(4242), 1);
  EXPECT_THROW(resolver->PublishDirectory(shardkit::BucketDirectory::EvenSplit(2, 1)), shardkit::DirectoryError);
}

TEST(BucketShardResolver, MixedVersionsInTheTableAreRefused) {
  ScratchCluster cluster{"resolver_mixed_pgtest"};
  pqxx::connection c{cluster.ShardDsn(0)};
  shardkit::StoreDirectory(c, shardkit::BucketDirectory::EvenSplit(2, 1));
  {
    pqxx::work tx{c};
    tx.exec("UPDATE shard_directory SET version = 2 WHERE bucket = 9");
    tx.commit();
  }
  EXPECT_THROW((void)shardkit::LoadDirectory(c, 2), shardkit::DirectoryError);
}

}  // namespace
