// The local cluster's replicas (SHARDKIT_REPLICAS=1 lab/cluster start): each
// shard's replica is a hot standby that streams from it, copies every
// database (scratch ones included) and refuses writes.
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace {

using shardkit::test::ScratchCluster;
using shardkit::test::ScratchOptions;

TEST(Replicas, EachShardsReplicaIsAStreamingHotStandby) {
  if (!shardkit::test::HasReplicas()) GTEST_SKIP() << shardkit::test::kNoReplicas;
  const auto config = shardkit::test::LoadTestConfig();
  for (const auto& shard : config.shards) {
    ASSERT_FALSE(shard.replicas.empty()) << shard.name;
    for (const auto& replica : shard.replicas) {
      pqxx::connection standby{replica.dsn.Reveal()};
      pqxx::nontransaction tx{standby};
      EXPECT_TRUE(tx.exec("SELECT pg_is_in_recovery()")[0][0].as<bool>()) << replica.name;
      // The shard sees it streaming under its name (pg_stat_replication's
      // details need a superuser).
      pqxx::connection primary{shard.AdminDsn().Reveal()};
      pqxx::nontransaction ptx{primary};
      EXPECT_EQ(ptx.exec_params("SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = "
                                "'streaming'",
                                replica.name)[0][0]
                    .as<int>(),
                1)
          << replica.name;
    }
  }
}

TEST(Replicas, AReplicaCopiesTheShardsDatabasesAndRefusesWrites) {
  if (!shardkit::test::HasReplicas()) GTEST_SKIP() << shardkit::test::kNoReplicas;
  ScratchCluster cluster{"replicas_pgtest", ScratchOptions().WithReplicas()};
  cluster.CatchUpReplicas();
  for (int s = 0; s < cluster.ShardCount(); ++s) {
    const auto& shard = cluster.Config().shards[static_cast<std::size_t>(s)];
    ASSERT_EQ(shard.replicas.size(), 1U);
    cluster.ExecOnShard(
        s, "CREATE TABLE replicated (k int PRIMARY KEY, v text); INSERT INTO replicated VALUES (1, 'one')");
    pqxx::connection standby{shard.replicas[0].dsn.Reveal()};
    ASSERT_TRUE(shardkit::test::WaitFor([&] {
      pqxx::nontransaction tx{standby};
      return tx.exec("SELECT count(*) FROM pg_class WHERE relname = 'replicated'")[0][0].as<int>() == 1 &&
             tx.exec("SELECT count(*) FROM replicated")[0][0].as<int>() == 1;
    }));
    pqxx::nontransaction tx{standby};
    EXPECT_EQ(tx.exec("SELECT v FROM replicated WHERE k = 1")[0][0].as<std::string>(), "one");
    try {
      tx.exec("INSERT INTO replicated VALUES (2, 'two')");
      FAIL() << "a replica took a write";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(std::string(e.sqlstate()), "25006") << e.what();  // read_only_sql_transaction
    }
  }
}

}  // namespace
