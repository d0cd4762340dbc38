// The resolver against real shards: a routed statement lands on the shard
// that owns the customer, the bucket CHECK guards misplaced rows, and the
// directory round-trips through the catalog's shard_directory table; after
// a failover the deposed primary is listed among the shard's replicas.
#include "shardkit/routing/resolver.hpp"

#include <gtest/gtest.h>

#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/test_cluster.hpp"

namespace {

using shardkit::test::ScratchCluster;

int CountCustomer(shardkit::ConnectionPool& pool, shardkit::CustomerId customer_id) {
  auto lease = pool.Acquire();
  pqxx::read_transaction tx{*lease};
  return tx.exec_params("SELECT count(*) FROM customers WHERE customer_id = $1", customer_id)[0][0].as<int>();
}

TEST(BucketShardResolver, RoutedWritesAndReadsLandOnTheOwningShardOnly) {
  ScratchCluster cluster{"resolver_pgtest"};
  auto resolver = cluster.MakeResolver();
  ASSERT_EQ(resolver->ShardCount(), 2);
  for (const int id : {4242, 4243, 77777}) {
    const shardkit::CustomerId customer{id};
    auto lease = resolver->PoolFor(customer).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params("INSERT INTO customers (customer_id, bucket, name, email) VALUES ($1, $2, $3, $4)", customer,
                   shardkit::BucketOf(customer), "c" + std::to_string(id), "c@example.com");
    tx.commit();
  }
  EXPECT_EQ(resolver->ShardFor(shardkit::CustomerId{4242}), shardkit::ShardId{1});
  EXPECT_EQ(resolver->ShardFor(shardkit::CustomerId{4243}), shardkit::ShardId{0});
  EXPECT_EQ(resolver->ShardFor(shardkit::CustomerId{77777}), shardkit::ShardId{1});
  for (const int id : {4242, 4243, 77777}) {
    const shardkit::CustomerId customer{id};
    const shardkit::Route route = resolver->Resolve(customer);
    EXPECT_EQ(route.key, customer);
    EXPECT_EQ(route.bucket, shardkit::BucketOf(customer));
    EXPECT_EQ(route.shard, resolver->ShardFor(customer));
    EXPECT_EQ(&route.pool, &resolver->Pool(route.shard));
    EXPECT_EQ(route.directory_version, resolver->Directory()->Version());
    const shardkit::ShardId other{1 - shardkit::ToInt(route.shard)};
    EXPECT_EQ(CountCustomer(route.pool, customer), 1) << customer;
    EXPECT_EQ(CountCustomer(resolver->Pool(other), customer), 0) << customer;  // visibly only there
  }
  EXPECT_THROW((void)resolver->Pool(shardkit::ShardId{2}), shardkit::UnknownShard);
}

TEST(BucketShardResolver, TheBucketCheckRejectsAWrongBucket) {
  ScratchCluster cluster{"resolver_check_pgtest"};
  EXPECT_THROW(cluster.ExecOnShard(0,
                                   "INSERT INTO customers (customer_id, bucket, name, email) "
                                   "VALUES (4242, 3, 'x', 'x')"),
               pqxx::check_violation);
}

TEST(BucketShardResolver, DirectoryFromTheCatalogAndAtomicRepublish) {
  ScratchCluster cluster{"resolver_dir_pgtest"};
  {
    pqxx::connection c{cluster.CatalogDsn().Reveal()};
    shardkit::StoreDirectory(
        c, shardkit::BucketDirectory::EvenSplit(2, 3).WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{0}));
    EXPECT_THROW(shardkit::StoreDirectory(c, shardkit::BucketDirectory::EvenSplit(2, 2)), shardkit::DirectoryError);
    const auto loaded = shardkit::LoadDirectory(c, 2);
    EXPECT_EQ(loaded.Version(), 4);
    EXPECT_EQ(loaded.ShardFor(shardkit::CustomerId{4242}), shardkit::ShardId{0});
    EXPECT_EQ(loaded.ShardFor(shardkit::CustomerId{77777}), shardkit::ShardId{1});
  }
  auto config = cluster.Config();
  config.directory_source = shardkit::DirectorySource::kCatalog;
  auto resolver = shardkit::BucketShardResolver::FromConfig(config);
  EXPECT_EQ(resolver->Directory()->Version(), 4);
  EXPECT_EQ(resolver->ShardFor(shardkit::CustomerId{4242}), shardkit::ShardId{0});
  resolver->PublishDirectory(resolver->Directory()->WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{1}));
  EXPECT_EQ(resolver->ShardFor(shardkit::CustomerId{4242}), shardkit::ShardId{1});
  EXPECT_THROW(resolver->PublishDirectory(shardkit::BucketDirectory::EvenSplit(2, 1)), shardkit::DirectoryError);
}

TEST(BucketShardResolver, MixedVersionsInTheTableAreRefused) {
  ScratchCluster cluster{"resolver_mixed_pgtest"};
  pqxx::connection c{cluster.CatalogDsn().Reveal()};
  shardkit::StoreDirectory(c, shardkit::BucketDirectory::EvenSplit(2, 2));
  {
    pqxx::work tx{c};
    tx.exec("UPDATE shard_directory SET version = 3 WHERE bucket = 9");
    tx.commit();
  }
  EXPECT_THROW((void)shardkit::LoadDirectory(c, 2), shardkit::DirectoryError);
  EXPECT_THROW((void)shardkit::BucketShardResolver::FromConfig(cluster.Config()), shardkit::DirectoryError);
}

TEST(BucketShardResolver, ADatabaseWithoutTheDirectoryTableSaysToMigrate) {
  ScratchCluster cluster{"resolver_notable_pgtest"};
  pqxx::connection c{cluster.ShardDsn(0).Reveal()};  // a shard holds data, not the directory
  try {
    (void)shardkit::LoadDirectory(c, 2);
    FAIL() << "no error for a database without shard_directory";
  } catch (const shardkit::CatalogError& e) {
    EXPECT_NE(std::string(e.what()).find("shardctl migrate"), std::string::npos) << e.what();
  }
}

TEST(BucketShardResolver, AnUnreachableCatalogIsNamedWithoutItsPassword) {
  ScratchCluster cluster{"resolver_nocat_pgtest"};
  auto config = cluster.Config();
  config.catalog_dsn =
      shardkit::Dsn("host=127.0.0.1 port=1 dbname=nowhere user=bookstore password=s3cret connect_timeout=2");
  try {
    (void)shardkit::BucketShardResolver::FromConfig(config);
    FAIL() << "no error for an unreachable catalog";
  } catch (const shardkit::CatalogError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("catalog"), std::string::npos) << what;
    EXPECT_NE(what.find("port=1"), std::string::npos) << what;
    EXPECT_EQ(what.find("s3cret"), std::string::npos) << what;
  }
}

TEST(BucketShardResolver, AnUnmigratedCatalogSaysToMigrate) {
  ScratchCluster cluster{"resolver_bare_pgtest", shardkit::test::ScratchOptions().Unmigrated()};
  auto config = cluster.Config();
  config.directory_source = shardkit::DirectorySource::kCatalog;
  try {
    (void)shardkit::BucketShardResolver::FromConfig(config);
    FAIL() << "no error for a catalog without shard_directory";
  } catch (const shardkit::CatalogError& e) {
    EXPECT_NE(std::string(e.what()).find("shardctl migrate"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

std::vector<std::string> ReplicaNames(const shardkit::BucketShardResolver& resolver) {
  std::vector<std::string> names;
  for (const auto& r : resolver.Servers(shardkit::ShardId{0}).replicas) names.push_back(r.name);
  return names;
}

// After a failover every server of the shard but its primary is listed
// among its replicas, the deposed primary too: the ReplicaMonitor reads
// one only while it streams from the current primary, so a deposed
// primary rebuilt as a standby is read again.
TEST(BucketShardResolver, ADeposedPrimaryIsListedAmongTheShardsReplicas) {
  auto config = shardkit::test::LoadTestConfig();
  config.directory_source = shardkit::DirectorySource::kConfig;
  config.catalog_dsn.reset();
  auto& shard = config.shards.at(0);
  shard.replicas.clear();
  shard.replicas.push_back(shardkit::ReplicaConfig{"shard0-replica1", shard.dsn});
  shard.replicas.push_back(shardkit::ReplicaConfig{"shard0-replica2", shard.dsn});
  auto resolver = shardkit::BucketShardResolver::FromConfig(config);
  EXPECT_EQ(ReplicaNames(*resolver), (std::vector<std::string>{"shard0-replica1", "shard0-replica2"}));
  ASSERT_TRUE(resolver->SetPrimary(shardkit::ShardId{0}, "shard0-replica1"));
  EXPECT_EQ(resolver->Servers(shardkit::ShardId{0}).primary.name, "shard0-replica1");
  EXPECT_EQ(ReplicaNames(*resolver), (std::vector<std::string>{"shard0", "shard0-replica2"}));
  ASSERT_TRUE(resolver->SetPrimary(shardkit::ShardId{0}, "shard0"));  // failed back
  EXPECT_EQ(ReplicaNames(*resolver), (std::vector<std::string>{"shard0-replica1", "shard0-replica2"}));
}

}  // namespace
