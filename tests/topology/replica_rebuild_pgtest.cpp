// The shard heals: after a failover on servers of the test's own (a primary
// and its streaming replica, TemporaryServer, for shard 0; shard 1 on the
// local cluster; the catalog a scratch one), `shardctl replica rebuild`
// makes the deposed primary a streaming standby of the new primary, by
// pg_rewind or pg_basebackup, with writers on: it streams on the new
// timeline, has every acknowledged write, and routers read it as a replica
// again. A rebuild killed after any step is finished by running it again;
// what must not be rebuilt is refused, naming the server.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <set>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/topology/failover.hpp"
#include "support/order_writers.hpp"
#include "support/replica_reads.hpp"
#include "support/shardctl_runner.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace shardkit {
namespace {

using std::chrono::milliseconds;
using test::ScratchCluster;
using test::ScratchOptions;
using test::TemporaryServer;

class ReplicaRebuild : public ::testing::Test {
 protected:
  // A primary and its replica (shard0-replica1), with `two` a second one
  // (shard0-replica2). With `rewindable`, the servers run with
  // wal_log_hints = on, which pg_rewind needs.
  void StartServers(bool rewindable, bool two = false) {
    primary_ = std::make_unique<TemporaryServer>();
    if (rewindable) {
      primary_->Exec("ALTER SYSTEM SET wal_log_hints = on");
      primary_->Stop();
      primary_->Start();
    }
    replica_ = primary_->MakeReplica("tmp-replica");
    if (two) replica2_ = primary_->MakeReplica("tmp-replica2");
    ShardConfig failing{"tmp", primary_->AppDsn(), primary_->Dsn()};
    ReplicaConfig replica{"tmp-replica", replica_->AppDsn()};
    replica.admin_dsn = replica_->Dsn();
    failing.replicas.push_back(replica);
    if (replica2_) {
      ReplicaConfig second{"tmp-replica2", replica2_->AppDsn()};
      second.admin_dsn = replica2_->Dsn();
      failing.replicas.push_back(second);
    }
    ShardConfig steady = test::LoadTestConfig().shards.at(1);
    steady.replicas.clear();
    cluster_ =
        std::make_unique<ScratchCluster>("replica_rebuild_pgtest", ScratchOptions().Shards(2).On({failing, steady}));
    cluster_->CatchUpReplicas();
    customers_.clear();
    for (int c = 1; customers_.size() < 16; ++c) {
      if (cluster_->Config().directory.ShardFor(CustomerId{c}) == ShardId{0}) customers_.push_back(c);
    }
  }
  void TearDown() override {
    cluster_.reset();
    replica2_.reset();
    replica_.reset();
    primary_.reset();
  }

  static ClusterOptions QuickRouter() {
    ClusterOptions options = test::QuickProbes(milliseconds(50));
    options.watcher.check_interval = milliseconds(200);
    return options;
  }

  // Order ids present on a server's scratch database of shard 0.
  std::set<std::int64_t> OrdersOn(const TemporaryServer& server) const {
    pqxx::connection c{test::WithDatabase(server.Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    std::set<std::int64_t> ids;
    for (const auto& row : pqxx::nontransaction{c}.exec("SELECT order_id FROM orders WHERE order_id >= 900000000")) {
      ids.insert(row[0].as<std::int64_t>());
    }
    return ids;
  }

  test::ShardctlRun Shardctl(const std::string& args) const {
    return test::RunShardctl(SHARDCTL_PATH, cluster_->Config(), args);
  }
  std::string RebuildOldPrimary(const std::string& extra = "") const {
    return fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}' --stream-timeout-ms 60000 {}",
                       primary_->DataDirectory().string(), extra);
  }

  // The old primary is a hot standby streaming from the new primary on
  // timeline 2; every acknowledged write reaches it.
  void ExpectTheOldPrimaryFollows(test::OrderWriters& writers) { ExpectFollows(*primary_, "shard0", writers); }
  void ExpectFollows(const TemporaryServer& server, const std::string& name, test::OrderWriters& writers) {
    const std::string slot = name == "shard0" ? name : "shard0_replica2";
    pqxx::connection c{server.Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    EXPECT_TRUE(tx.exec1("SELECT pg_is_in_recovery()")[0].as<bool>());
    const auto receiver = tx.exec("SELECT status, received_tli, sender_port, slot_name FROM pg_stat_wal_receiver");
    ASSERT_EQ(receiver.size(), 1U);
    EXPECT_STREQ(receiver[0][0].c_str(), "streaming");
    EXPECT_EQ(receiver[0][1].as<int>(), 2);
    EXPECT_EQ(receiver[0][2].as<int>(), replica_->Port());
    EXPECT_EQ(receiver[0][3].c_str(), slot);
    // No slot left from its days as a primary (one would keep its WAL forever).
    EXPECT_EQ(tx.exec1("SELECT string_agg(slot_name, ', ') FROM pg_replication_slots")[0].as<std::string>("none"),
              "none");
    pqxx::connection p{replica_->Dsn().Reveal()};
    const auto sender =
        pqxx::nontransaction{p}.exec_params("SELECT state FROM pg_stat_replication WHERE application_name = $1", name);
    ASSERT_EQ(sender.size(), 1U);
    EXPECT_STREQ(sender[0][0].c_str(), "streaming");
    std::vector<std::int64_t> missing;
    EXPECT_TRUE(test::WaitFor([&] {
      const std::set<std::int64_t> present = OrdersOn(server);
      missing.clear();
      for (const std::int64_t id : writers.acknowledged) {
        if (present.count(id) == 0) missing.push_back(id);
      }
      return missing.empty();
    })) << missing.size()
        << " acknowledged writes never reached the rebuilt server, e.g. order " << missing.front();
    std::cout << writers.acknowledged.size() << " acknowledged writes, all on the rebuilt server; " << writers.unknown
              << " outcome unknown, " << writers.failed << " failed\n";
    RecordProperty("acknowledged_writes", static_cast<int>(writers.acknowledged.size()));
  }

  // Every rebuild in the catalog's journal: (state, method).
  std::vector<std::pair<std::string, std::string>> Rebuilds() const {
    pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& row : pqxx::nontransaction{catalog}.exec(
             "SELECT state, method FROM shardkit_replica_rebuilds ORDER BY rebuild_id")) {
      all.emplace_back(row[0].c_str(), row[1].c_str());
    }
    return all;
  }

  std::unique_ptr<TemporaryServer> primary_;
  std::unique_ptr<TemporaryServer> replica_;
  std::unique_ptr<TemporaryServer> replica2_;
  std::unique_ptr<ScratchCluster> cluster_;
  std::vector<int> customers_;
};

// pg_rewind: the fenced old primary, with writers on the new primary the
// whole time, becomes its streaming standby; a router reads it again.
TEST_F(ReplicaRebuild, TheOldPrimaryIsRewoundIntoAStandbyOfTheNewPrimary) {
  StartServers(/*rewindable=*/true);
  auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
  test::OrderWriters writers;
  writers.Start(*cluster, customers_, 4);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
  const FailoverReport failover = shardkit::Failover(cluster_->Config(), "shard0");
  ASSERT_EQ(failover.to_server, "shard0-replica1");
  std::size_t before = writers.Acknowledged();
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 50; }));

  const auto rebuilt = Shardctl("--json " + RebuildOldPrimary());
  ASSERT_EQ(rebuilt.status, 0) << rebuilt.out;
  const auto report = nlohmann::json::parse(rebuilt.out.substr(rebuilt.out.find('{')));
  EXPECT_EQ(report["server"], "shard0") << rebuilt.out;
  EXPECT_EQ(report["primary"], "shard0-replica1") << rebuilt.out;
  EXPECT_EQ(report["method"], "rewind") << rebuilt.out;
  EXPECT_EQ(report["timeline"], 2) << rebuilt.out;
  EXPECT_EQ(report["slot"], "shard0") << rebuilt.out;
  std::cout << "rebuilt by pg_rewind in " << report["took_ms"] << " ms\n";
  RecordProperty("rebuild_ms", report["took_ms"].get<int>());
  before = writers.Acknowledged();
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 50; }));
  writers.Stop();
  EXPECT_EQ(writers.failed, 0);
  ExpectTheOldPrimaryFollows(writers);
  EXPECT_EQ(Rebuilds(), (std::vector<std::pair<std::string, std::string>>{{"done", "rewind"}}));
  // Its saved configuration is gone, and a rerun has nothing to do.
  EXPECT_FALSE(std::filesystem::exists(primary_->DataDirectory().string() + ".shardkit-rebuild"));
  const auto again = Shardctl(RebuildOldPrimary());
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("already: nothing to do"), std::string::npos) << again.out;

  // Routers read it again: it follows the current primary, whatever the
  // configuration says the shard's primary is.
  ASSERT_TRUE(test::WaitFor([&] {
    cluster->Replicas()->ProbeNow();
    const auto all = cluster->Replicas()->Status();
    return std::any_of(all.begin(), all.end(), [](const ReplicaStatus& r) {
      return r.name == "shard0" && r.follows_primary && r.lag.has_value();
    });
  })) << "the rebuilt server never counted as a replica that follows";
  ReadPolicy read;
  read.preference = ReadPreference::kReplicaOnly;
  read.max_lag = std::chrono::hours(1);
  RoutedOutcome outcome;
  const auto rows =
      cluster->Transactions().Read(CustomerId{customers_[0]}, "SELECT count(*) FROM orders WHERE order_id >= 900000000",
                                   {}, test::Reading(read), &outcome);
  EXPECT_TRUE(outcome.on_replica);
  EXPECT_EQ(outcome.server, "shard0");
  // A Cluster opened now (its resolver from the catalog) reads it too.
  auto later = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  ASSERT_TRUE(test::WaitFor([&] {
    later->Replicas()->ProbeNow();
    try {
      RoutedOutcome o;
      (void)later->Transactions().Read(CustomerId{customers_[0]}, "SELECT 1", {}, test::Reading(read), &o);
      return o.on_replica && o.server == "shard0";
    } catch (const ReplicaUnavailable&) {
      return false;
    }
  }));
  // shardctl shards shows it streaming.
  const auto shards = Shardctl("shards");
  EXPECT_NE(shards.out.find("follows the primary: yes"), std::string::npos) << shards.out;
  const auto shards_json = Shardctl("--json shards");
  EXPECT_NE(shards_json.out.find("\"follows_primary\": true"), std::string::npos) << shards_json.out;
}

// pg_basebackup: a deposed primary that cannot be rewound (no
// wal_log_hints, no checksums) and that wrote after the failover (its data
// diverged) is copied again: what it wrote alone is gone, what the shard
// acknowledged is there.
TEST_F(ReplicaRebuild, ADivergedOldPrimaryThatCannotBeRewoundIsCopiedAgain) {
  StartServers(/*rewindable=*/false);
  auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
  test::OrderWriters writers;
  writers.Start(*cluster, customers_, 2);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 30; }));
  (void)shardkit::Failover(cluster_->Config(), "shard0");
  // Unfenced by hand, it writes on its own timeline.
  primary_->Exec("ALTER SYSTEM RESET default_transaction_read_only");
  primary_->Exec("SELECT pg_reload_conf()");
  primary_->Exec("CREATE TABLE diverged_after_failover AS SELECT generate_series(1, 1000) AS x");
  const auto rebuilt = Shardctl(RebuildOldPrimary());
  ASSERT_EQ(rebuilt.status, 0) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("copied "), std::string::npos) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("neither wal_log_hints = on nor data checksums"), std::string::npos) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("(by pg_basebackup)"), std::string::npos) << rebuilt.out;
  std::cout << rebuilt.out;
  writers.Stop();
  ExpectTheOldPrimaryFollows(writers);
  pqxx::connection c{primary_->Dsn().Reveal()};
  EXPECT_TRUE(pqxx::nontransaction{c}.exec1("SELECT to_regclass('diverged_after_failover') IS NULL")[0].as<bool>());
  EXPECT_EQ(Rebuilds(), (std::vector<std::pair<std::string, std::string>>{{"done", "basebackup"}}));
}

// A primary killed (SIGKILL) under writers and failed over with --force:
// its data directory, not shut down cleanly and with WAL the replica never
// received, is recovered and rewound by pg_rewind.
TEST_F(ReplicaRebuild, AKilledOldPrimaryIsRewoundAfterAForcedFailover) {
  StartServers(/*rewindable=*/true);
  auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
  test::OrderWriters writers;
  writers.Start(*cluster, customers_, 4);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
  primary_->Kill();
  FailoverOptions forced;
  forced.force = true;
  (void)shardkit::Failover(cluster_->Config(), "shard0", forced);
  const std::size_t before = writers.Acknowledged();
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 50; }));
  const auto rebuilt = Shardctl(RebuildOldPrimary());
  ASSERT_EQ(rebuilt.status, 0) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("stopped    it was not running"), std::string::npos) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("(by pg_rewind)"), std::string::npos) << rebuilt.out;
  std::cout << rebuilt.out.substr(rebuilt.out.rfind("shard shard0:"));
  writers.Stop();
  // Acknowledged before the kill and not received by the replica: lost
  // with asynchronous replication (the failover was forced); the rest, and
  // everything after, is on the rebuilt server.
  {
    std::lock_guard lock(writers.mutex);
    const std::set<std::int64_t> on_new_primary = OrdersOn(*replica_);
    std::erase_if(writers.acknowledged, [&](std::int64_t id) { return on_new_primary.count(id) == 0; });
  }
  ExpectTheOldPrimaryFollows(writers);
}

// A replica that streamed from the deposed primary past the point where the
// new primary's timeline began (it was down during the failover, and the
// old primary, unfenced by hand, wrote on): rebuilt by name, it follows the
// new primary.
TEST_F(ReplicaRebuild, AReplicaPastTheForkIsRewoundByName) {
  StartServers(/*rewindable=*/true, /*two=*/true);
  auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
  replica2_->Stop();
  FailoverOptions to_first;
  to_first.to = "shard0-replica1";
  const FailoverReport report = shardkit::Failover(cluster_->Config(), "shard0", to_first);
  ASSERT_EQ(report.replicas.size(), 1U);
  EXPECT_FALSE(report.replicas[0].follows);
  replica2_->Start();
  primary_->Exec("ALTER SYSTEM RESET default_transaction_read_only");
  primary_->Exec("SELECT pg_reload_conf()");
  primary_->Exec("CREATE TABLE written_by_the_deposed_primary AS SELECT generate_series(1, 10000) AS x");
  ASSERT_TRUE(test::WaitFor([&] {
    pqxx::connection c{replica2_->Dsn().Reveal()};
    return pqxx::nontransaction{c}
        .exec1("SELECT to_regclass('written_by_the_deposed_primary') IS NOT NULL")[0]
        .as<bool>();
  }));
  test::OrderWriters writers;
  writers.Start(*cluster, customers_, 2);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
  const auto rebuilt = Shardctl(fmt::format("replica rebuild shard0 --server shard0-replica2 --pgdata '{}'",
                                            replica2_->DataDirectory().string()));
  ASSERT_EQ(rebuilt.status, 0) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("(by pg_rewind)"), std::string::npos) << rebuilt.out;
  writers.Stop();
  ExpectFollows(*replica2_, "shard0-replica2", writers);
  pqxx::connection c{replica2_->Dsn().Reveal()};
  EXPECT_TRUE(
      pqxx::nontransaction{c}.exec1("SELECT to_regclass('written_by_the_deposed_primary') IS NULL")[0].as<bool>());
  // Routers read it again.
  EXPECT_TRUE(test::WaitFor([&] {
    cluster->Replicas()->ProbeNow();
    const auto all = cluster->Replicas()->Status();
    return std::any_of(all.begin(), all.end(),
                       [](const ReplicaStatus& r) { return r.name == "shard0-replica2" && r.follows_primary; });
  }));
}

// The whole cycle twice: fail over, rebuild the old primary, fail back to
// it (a rebuilt primary may be promoted again), and rebuild the other one:
// the shard ends with its configured primary and its replica, both
// following, every acknowledged write on both.
TEST_F(ReplicaRebuild, AFailbackToTheRebuiltPrimaryThenTheOtherRebuilt) {
  StartServers(/*rewindable=*/true);
  auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
  test::OrderWriters writers;
  writers.Start(*cluster, customers_, 2);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 30; }));
  (void)shardkit::Failover(cluster_->Config(), "shard0");
  ASSERT_EQ(Shardctl(RebuildOldPrimary()).status, 0);
  FailoverOptions back;
  back.to = "shard0";
  const FailoverReport failback = shardkit::Failover(cluster_->Config(), "shard0", back);
  EXPECT_EQ(failback.from_server, "shard0-replica1");
  EXPECT_EQ(failback.to_server, "shard0");
  EXPECT_EQ(failback.epoch, 2);
  std::size_t before = writers.Acknowledged();
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 30; }));
  const auto rebuilt = Shardctl(fmt::format("--json replica rebuild shard0 --from-old-primary --pgdata '{}'",
                                            replica_->DataDirectory().string()));
  ASSERT_EQ(rebuilt.status, 0) << rebuilt.out;
  const auto report = nlohmann::json::parse(rebuilt.out.substr(rebuilt.out.find('{')));
  EXPECT_EQ(report["server"], "shard0-replica1") << rebuilt.out;
  EXPECT_EQ(report["primary"], "shard0") << rebuilt.out;
  EXPECT_EQ(report["timeline"], 3) << rebuilt.out;
  before = writers.Acknowledged();
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 30; }));
  writers.Stop();
  EXPECT_EQ(writers.failed, 0);
  const std::set<std::int64_t> on_primary = OrdersOn(*primary_);
  for (const std::int64_t id : writers.acknowledged) ASSERT_EQ(on_primary.count(id), 1U) << "order " << id;
  EXPECT_TRUE(test::WaitFor([&] { return OrdersOn(*replica_) == on_primary; }));
  EXPECT_TRUE(test::WaitFor([&] {
    cluster->Replicas()->ProbeNow();
    const auto all = cluster->Replicas()->Status();
    return all.size() == 1 && all[0].name == "shard0-replica1" && all[0].follows_primary;
  }));
  std::cout << writers.acknowledged.size() << " acknowledged writes on both servers after a failover and a failback\n";
}

// `shardctl replica rebuild` SIGKILLed after each of its steps (and in the
// middle of a pg_basebackup), with writers on: running the same command
// again finishes that rebuild: one rebuild, done, and the old primary
// streams with every acknowledged write.
TEST_F(ReplicaRebuild, ARebuildKilledAfterAnyStepIsFinishedByRunningItAgain) {
  struct Kill {
    std::string step;
    std::string extra;
    std::string method;
  };
  // (Killed after "stopped", the rerun may find a pg_rewind begun: it
  // copies then; "" accepts either.)
  for (const Kill& kill :
       {Kill{"planned", "", "rewind"}, Kill{"stopped", "", ""}, Kill{"rewound", "", "rewind"},
        Kill{"configured", "", "rewind"}, Kill{"started", "", "rewind"}, Kill{"copying", "--basebackup", "basebackup"},
        Kill{"copied", "--basebackup", "basebackup"}}) {
    SCOPED_TRACE("killed after " + kill.step);
    StartServers(/*rewindable=*/true);
    {
      auto cluster = Cluster::Open(cluster_->Config(), QuickRouter());
      test::OrderWriters writers;
      writers.Start(*cluster, customers_, 2);
      ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 20; }));
      (void)shardkit::Failover(cluster_->Config(), "shard0");
      const auto killed =
          test::RunShardctlKilledAt(SHARDCTL_PATH, cluster_->Config(), RebuildOldPrimary(kill.extra), kill.step);
      ASSERT_TRUE(killed.by_signal) << "shardctl finished before the kill landed:\n" << killed.out;
      const auto again = Shardctl("--json " + RebuildOldPrimary(kill.extra));
      ASSERT_EQ(again.status, 0) << again.out;
      const auto report = nlohmann::json::parse(again.out.substr(again.out.find('{')));
      EXPECT_FALSE(report["resumed_rebuild_id"].is_null()) << again.out;
      // A copy cut off mid-way is made again by pg_basebackup.
      if (!kill.method.empty()) {
        EXPECT_EQ(report["method"], kill.method) << again.out;
      }
      const std::size_t before = writers.Acknowledged();
      EXPECT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 20; }));
      writers.Stop();
      ExpectTheOldPrimaryFollows(writers);
    }
    const auto rebuilds = Rebuilds();
    ASSERT_EQ(rebuilds.size(), 1U);
    EXPECT_EQ(rebuilds[0].first, "done");
    if (!kill.method.empty()) {
      EXPECT_EQ(rebuilds[0].second, kill.method);
    }
    TearDown();
  }
}

// What must not be rebuilt is refused before anything changes, naming the
// server and what to do: the shard's primary, a data directory that is not
// the server's, a shard whose catalog cannot say which server is primary.
TEST_F(ReplicaRebuild, RefusalsNameTheServerAndChangeNothing) {
  StartServers(/*rewindable=*/true);
  const std::string old_dir = primary_->DataDirectory().string();
  const std::string new_dir = replica_->DataDirectory().string();
  // Before any failover the shard has no old primary.
  auto r = Shardctl(fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}'", old_dir));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("no failover of shard shard0 made its primary shard0"), std::string::npos) << r.out;
  // Bad usage: no server named, an unknown one.
  r = Shardctl(fmt::format("replica rebuild shard0 --pgdata '{}'", old_dir));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--server NAME (its servers: shard0, shard0-replica1)"), std::string::npos) << r.out;
  r = Shardctl(fmt::format("replica rebuild shard0 --server shard0-replica7 --pgdata '{}'", old_dir));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("no server named shard0-replica7"), std::string::npos) << r.out;

  (void)shardkit::Failover(cluster_->Config(), "shard0");
  // The current primary.
  r = Shardctl(fmt::format("replica rebuild shard0 --server shard0-replica1 --pgdata '{}'", new_dir));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("shard0-replica1 of shard shard0 is not rebuilt: it is the shard's primary"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("shardctl failover shard0"), std::string::npos) << r.out;
  // The old primary answers, from another data directory than the one given.
  r = Shardctl(fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}'", new_dir));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("shard0 of shard shard0 is not rebuilt: it runs from the data directory"), std::string::npos)
      << r.out;
  // The old primary down: the primary's data directory, another cluster's.
  primary_->Stop();
  r = Shardctl(fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}'", new_dir));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("shard0 of shard shard0 is not rebuilt: a server runs from"), std::string::npos) << r.out;
  TemporaryServer stranger;
  stranger.Stop();
  r = Shardctl(
      fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}'", stranger.DataDirectory().string()));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("belongs to another database cluster"), std::string::npos) << r.out;
  // The catalog cannot say which server is the primary.
  ClusterConfig lost = cluster_->Config();
  lost.catalog_dsn = Dsn("host=127.0.0.1 port=1 dbname=nothing user=nobody connect_timeout=1");
  r = test::RunShardctl(SHARDCTL_PATH, lost,
                        fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}'", old_dir));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("could not say which server is shard shard0's primary"), std::string::npos) << r.out;
  // Nothing was changed: no rebuild journaled, the old primary's data as it was.
  EXPECT_TRUE(Rebuilds().empty());
  primary_->Start();
  pqxx::connection c{primary_->Dsn().Reveal()};
  EXPECT_FALSE(pqxx::nontransaction{c}.exec1("SELECT pg_is_in_recovery()")[0].as<bool>());
}

}  // namespace
}  // namespace shardkit
