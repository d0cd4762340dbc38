// Failover on servers of the test's own (a primary and its streaming
// replica, TemporaryServer) for shard 0, shard 1 on the local cluster, the
// catalog a scratch one: writers keep writing through a Cluster while the
// replica is promoted, and every write the Cluster acknowledged is on the
// new primary; the old primary, fenced or restarted after a crash, never
// acknowledges a write again, nor answers a read for a router that cannot
// confirm it is still the primary. And read-your-writes on the replica by
// how the primary's commits wait for it (synchronous_commit).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/primary_leases.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/schema/verify.hpp"
#include "shardkit/topology/failover.hpp"
#include "shardkit/writes/in_doubt.hpp"
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

constexpr const char* kReplicaName = "tmp-replica";
constexpr const char* kSecondReplicaName = "tmp-replica2";

// How the primary's commits wait for the replica, as lab/cluster's
// SHARDKIT_REPLICATION: not at all; until it has the commit's WAL
// (synchronous_standby_names); until it has applied it (remote_apply).
enum class Replication { kAsync, kSync, kRemoteApply };

class Failover : public ::testing::Test {
 protected:
  // A primary and its replica (shard0-replica1), and with `two` a second
  // replica (shard0-replica2), both streaming through slots of their own.
  void StartServers(Replication replication, bool two = false) {
    primary_ = std::make_unique<TemporaryServer>();
    replica_ = primary_->MakeReplica(kReplicaName);
    if (two) replica2_ = primary_->MakeReplica(kSecondReplicaName);
    if (replication != Replication::kAsync) {
      primary_->Exec("ALTER SYSTEM SET synchronous_standby_names = '*'");  // its one standby
      primary_->Exec(fmt::format("ALTER SYSTEM SET synchronous_commit = '{}'",
                                 replication == Replication::kRemoteApply ? "remote_apply" : "on"));
      primary_->Exec("SELECT pg_reload_conf()");
    }
    ShardConfig failing{"tmp", primary_->AppDsn(), primary_->Dsn()};
    ReplicaConfig replica{kReplicaName, replica_->AppDsn()};
    replica.admin_dsn = replica_->Dsn();
    failing.replicas.push_back(replica);
    if (replica2_) {
      ReplicaConfig second{kSecondReplicaName, replica2_->AppDsn()};
      second.admin_dsn = replica2_->Dsn();
      failing.replicas.push_back(second);
    }
    ShardConfig steady = test::LoadTestConfig().shards.at(1);
    steady.replicas.clear();
    cluster_ = std::make_unique<ScratchCluster>("failover_pgtest", ScratchOptions().Shards(2).On({failing, steady}));
    cluster_->CatchUpReplicas();
    for (int c = 1; customers_.size() < 16; ++c) {
      if (cluster_->Config().directory.ShardFor(CustomerId{c}) == ShardId{0}) customers_.push_back(c);
    }
  }
  void TearDown() override {
    // An old primary still waiting for its synchronous standby would hold
    // the scratch databases' DROP forever.
    try {
      if (primary_) primary_->Exec("ALTER SYSTEM RESET synchronous_standby_names");
      if (primary_) primary_->Exec("ALTER SYSTEM RESET synchronous_commit");
      if (primary_) primary_->Exec("SELECT pg_reload_conf()");
    } catch (const std::exception&) {
      // Down: nothing waits there.
    }
    cluster_.reset();
    replica2_.reset();
    replica_.reset();
    primary_.reset();
  }

  static ClusterOptions QuickWatcher() {
    ClusterOptions options;
    options.watcher.check_interval = milliseconds(200);
    return options;
  }

  // Order ids present on a server's scratch database of shard 0.
  std::set<std::int64_t> OrdersOn(const Dsn& server) const {
    pqxx::connection c{test::WithDatabase(server, cluster_->ShardDatabaseName(0)).Reveal()};
    pqxx::nontransaction tx{c};
    std::set<std::int64_t> ids;
    for (const auto& row : tx.exec("SELECT order_id FROM orders WHERE order_id >= 900000000")) {
      ids.insert(row[0].as<std::int64_t>());
    }
    return ids;
  }

  // Writers on shard 0's customers until stopped.
  using Writers = test::OrderWriters;

  void ExpectEveryAcknowledgedWriteOnTheNewPrimary(Writers& writers) {
    const std::set<std::int64_t> present = OrdersOn(replica_->Dsn());
    std::vector<std::int64_t> lost;
    for (const std::int64_t id : writers.acknowledged) {
      if (present.count(id) == 0) lost.push_back(id);
    }
    EXPECT_TRUE(lost.empty()) << lost.size() << " acknowledged writes are not on the new primary, e.g. order "
                              << lost.front();
    std::cout << writers.acknowledged.size() << " writes acknowledged, " << lost.size() << " lost, " << writers.unknown
              << " outcome unknown, " << writers.failed << " failed\n";
    for (const auto& e : writers.errors) std::cout << "  " << e.substr(0, 300) << "\n";
    RecordProperty("acknowledged_writes", static_cast<int>(writers.acknowledged.size()));
    RecordProperty("lost_writes", static_cast<int>(lost.size()));
  }

  // After a failover of shard 0: verify (as shardctl verify runs it) and
  // the migrations' server list reach the new primary, never the old one.
  void ExpectToolsReadTheNewPrimary() const {
    VerifyOptions options;
    options.mirrored_tables.clear();  // the writers wrote to the shards only
    // As primaries.hpp shows it (VerifyCluster applies it once more itself).
    const VerifyReport report = VerifyCluster(AtCurrentPrimaries(cluster_->Config()), options);
    ASSERT_FALSE(report.servers.empty());
    const ServerCounts& shard0 = report.servers[0];
    EXPECT_TRUE(shard0.reachable);
    const auto orders = std::find_if(shard0.tables.begin(), shard0.tables.end(),
                                     [](const TableCounts& t) { return t.table == "orders"; });
    ASSERT_NE(orders, shard0.tables.end());
    pqxx::connection c{test::WithDatabase(replica_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    EXPECT_EQ(orders->rows, pqxx::nontransaction{c}.exec1("SELECT count(*) FROM orders")[0].as<std::int64_t>());
    for (const auto& finding : report.findings) {
      EXPECT_NE(finding.kind, FindingKind::kUnreachable) << finding.detail;
    }
    const auto servers = MigrationServers(AtCurrentPrimaries(cluster_->Config()));  // as shardctl migrate
    ASSERT_FALSE(servers.empty());
    EXPECT_NE(servers[0].dsn.Redacted().find(fmt::format("port={}", replica_->Port())), std::string::npos)
        << servers[0].dsn.Redacted();
  }

  // shardctl with a configuration file of the scratch cluster (replicas
  // included); its exit status and what it printed.
  using Ran = test::ShardctlRun;
  Ran Shardctl(const std::string& args) const { return test::RunShardctl(SHARDCTL_PATH, cluster_->Config(), args); }

  // shardctl SIGKILLed as soon as it prints a line that starts with
  // `step` (a failover prints each step as it is done, before journaling
  // it): what it printed, and whether the signal killed it.
  using Killed = test::ShardctlKilled;
  Killed ShardctlKilledAt(const std::string& args, const std::string& step) const {
    return test::RunShardctlKilledAt(SHARDCTL_PATH, cluster_->Config(), args, step);
  }

  // One order of shard 0's first customer through a router that does not
  // read the catalog (its directory from the file): it writes to the
  // configured primary, whatever the catalog says.
  void WriteThroughStaleRouter(std::int64_t order_id) const {
    ClusterConfig stale = cluster_->Config();
    stale.directory_source = DirectorySource::kConfig;
    auto stale_cluster = Cluster::Open(stale);
    RoutedOptions quick;
    quick.deadline = std::chrono::steady_clock::now() + milliseconds(1500);
    (void)test::WriteOrder(*stale_cluster, customers_[0], order_id, quick);
  }

  std::unique_ptr<TemporaryServer> primary_;
  std::unique_ptr<TemporaryServer> replica_;
  std::unique_ptr<TemporaryServer> replica2_;
  std::unique_ptr<ScratchCluster> cluster_;
  std::vector<int> customers_;
};

// A reachable primary is fenced, the replica catches up, is promoted and
// published; the writers' Cluster follows without a restart and loses no
// acknowledged write; the old primary refuses writes from then on.
TEST_F(Failover, AReachablePrimaryIsFencedAndNoAcknowledgedWriteIsLost) {
  StartServers(Replication::kAsync);
  // Bad names: usage errors (exit 2) that list what exists, nothing done.
  const Ran no_shard = Shardctl("failover shard9");
  EXPECT_EQ(no_shard.status, 2) << no_shard.out;
  EXPECT_NE(no_shard.out.find("no shard named shard9 (its shards: shard0, shard1)"), std::string::npos) << no_shard.out;
  const Ran no_replica = Shardctl("failover shard0 --to shard0-replica7");
  EXPECT_EQ(no_replica.status, 2) << no_replica.out;
  EXPECT_NE(no_replica.out.find("its replicas: shard0-replica1"), std::string::npos) << no_replica.out;
  auto cluster = Cluster::Open(cluster_->Config(), QuickWatcher());
  Writers writers;
  writers.Start(*cluster, customers_, 4);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
  std::vector<std::string> steps;
  FailoverOptions options;
  options.on_step = [&](const std::string& step, const std::string&) { steps.push_back(step); };
  const FailoverReport report = shardkit::Failover(cluster_->Config(), "shard0", options);
  const std::size_t before = writers.Acknowledged();
  // Writes go on, on the new primary.
  EXPECT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 50; }));
  writers.Stop();

  EXPECT_EQ(report.from_server, "shard0");
  EXPECT_EQ(report.to_server, "shard0-replica1");
  EXPECT_EQ(report.epoch, 1);
  EXPECT_TRUE(report.old_primary_fenced);
  EXPECT_EQ(report.loss.rfind("none", 0), 0U) << report.loss;
  EXPECT_EQ(steps,
            (std::vector<std::string>{"planned", "fenced", "caught_up", "promoted", "published", "repointed", "done"}));
  EXPECT_TRUE(report.replicas.empty());  // no other replica
  RecordProperty("writes_paused_ms", static_cast<int>(report.writes_paused.count()));
  std::cout << "failover took " << report.took.count() << " ms, writes paused " << report.writes_paused.count()
            << " ms\n";
  ExpectEveryAcknowledgedWriteOnTheNewPrimary(writers);

  EXPECT_NE(cluster->Route(CustomerId{customers_[0]}).pool.RedactedDsn().find(std::to_string(replica_->Port())),
            std::string::npos);
  EXPECT_GE(cluster->Stats().watcher->primary_changes, 1U);
  // A Cluster opened now starts on the new primary.
  auto later = Cluster::Open(cluster_->Config());
  EXPECT_EQ(later->Resolver().Servers(ShardId{0}).primary.name, "shard0-replica1");

  // The tools follow the catalog: verify counts the new primary's rows (the
  // old one lacks the writes after the fence) and migrations go there.
  ExpectToolsReadTheNewPrimary();

  // The old primary: read-only, even for a session that never heard of the
  // failover, and after a restart.
  primary_->Stop();
  ExpectToolsReadTheNewPrimary();  // the old one down is no finding either
  primary_->Start();
  pqxx::connection old{test::WithDatabase(primary_->AppDsn(), cluster_->ShardDatabaseName(0)).Reveal()};
  pqxx::nontransaction tx{old};
  EXPECT_THROW(
      tx.exec("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES (1, 0, 1, now(), 1)"),
      pqxx::sql_error);
  // A router that does not read the catalog (directory from its file) is
  // refused there, and never told its write committed.
  EXPECT_THROW(WriteThroughStaleRouter(1), ShardError);
  // Nor does it read there: the old primary says it is read-only, and
  // without the catalog nothing confirms it is still the primary (its
  // successor holds the writes above), for a routed read and a scatter.
  ClusterConfig stale = cluster_->Config();
  stale.directory_source = DirectorySource::kConfig;
  auto stale_cluster = Cluster::Open(stale);
  RoutedOptions read;
  read.read_only = true;
  try {
    stale_cluster->Run(
        CustomerId{customers_[0]},
        [](pqxx::transaction_base& t, const RoutedContext&) { t.exec("SELECT count(*) FROM orders"); }, read);
    FAIL() << "a router without the catalog read the fenced old primary";
  } catch (const ShardUnavailable& e) {
    EXPECT_EQ(e.sqlstate(), "25006") << e.what();
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  try {
    (void)stale_cluster->Scatter("SELECT count(*) FROM orders");
    FAIL() << "a scatter without the catalog read the fenced old primary";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1U) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{0});
    EXPECT_EQ(e.failures()[0].sqlstate, "25006") << e.what();
  }
  // The Cluster that follows the catalog reads the new primary: its count
  // of the writers' orders is the new primary's own.
  ScatterOptions shard0;
  shard0.shards = std::vector<ShardId>{ShardId{0}};
  const ScatterResult counted = cluster->Scatter("SELECT count(*) FROM orders WHERE order_id >= 900000000", {}, shard0);
  ASSERT_EQ(counted.shards.size(), 1U);
  EXPECT_EQ(counted.shards[0].server, "shard0-replica1");
  EXPECT_EQ(counted.shards[0].rows[0][0].as<std::size_t>(), OrdersOn(replica_->Dsn()).size());
}

// The primary is killed (SIGKILL) under synchronous replication: without
// --force the failover refuses (it cannot fence a server it cannot reach);
// forced, it promotes the replica and no acknowledged write is lost. The
// old primary, restarted, still waits for its synchronous standby: a stale
// router's write there is never acknowledged.
TEST_F(Failover, AKilledPrimaryUnderSynchronousReplicationLosesNoAcknowledgedWrite) {
  StartServers(Replication::kSync);
  auto cluster = Cluster::Open(cluster_->Config(), QuickWatcher());
  Writers writers;
  writers.Start(*cluster, customers_, 4);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
  primary_->Kill();
  // A write waits for the primary or a failover until its deadline, then
  // says so.
  try {
    RoutedOptions quick;
    quick.deadline = std::chrono::steady_clock::now() + milliseconds(300);
    (void)test::WriteOrder(*cluster, customers_[0], 899999998, quick);
    FAIL() << "a write was acknowledged with the primary down and no failover";
  } catch (const ShardUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("stayed unreachable for"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no failover named another"), std::string::npos) << e.what();
  }
  // As an operator would: shardctl, refused, then forced.
  const Ran refused = Shardctl("failover shard0");
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find("unreachable"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("--force"), std::string::npos) << refused.out;
  const Ran forced = Shardctl("--json failover shard0 --force");
  ASSERT_EQ(forced.status, 0) << forced.out;
  const auto report = nlohmann::json::parse(forced.out.substr(forced.out.find('{')));
  EXPECT_EQ(report["to"], "shard0-replica1") << forced.out;
  EXPECT_EQ(report["epoch"], 1) << forced.out;
  EXPECT_FALSE(report["old_primary_fenced"].get<bool>()) << forced.out;
  EXPECT_EQ(report["loss"].get<std::string>().rfind("unknown", 0), 0U) << forced.out;
  // The journal: the refused attempt failed, the forced one is done.
  {
    pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
    pqxx::nontransaction tx{catalog};
    const auto rows = tx.exec("SELECT state, forced FROM shardkit_failovers ORDER BY failover_id");
    ASSERT_EQ(rows.size(), 2U);
    EXPECT_STREQ(rows[0][0].c_str(), "failed");
    EXPECT_STREQ(rows[1][0].c_str(), "done");
    EXPECT_TRUE(rows[1][1].as<bool>());
  }
  const std::size_t before = writers.Acknowledged();
  EXPECT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 50; }));
  writers.Stop();
  ExpectEveryAcknowledgedWriteOnTheNewPrimary(writers);
  // Writes in flight while the primary was down waited (10 s deadlines) for
  // the failover and went on there: none failed (those cut at COMMIT by the
  // kill are OutcomeUnknown).
  EXPECT_EQ(writers.failed, 0);

  // The old primary comes back (crash recovery) as a primary of nobody.
  primary_->Start();
  try {
    WriteThroughStaleRouter(899999999);
    FAIL() << "the old primary acknowledged a write after the failover";
  } catch (const OutcomeUnknown& e) {
    EXPECT_NE(std::string(e.what()).find("synchronous standby"), std::string::npos) << e.what();
  }
}

// `shardctl failover` SIGKILLed after each of its steps, with writers on:
// running the same command again finishes that failover (never a second
// one): one primary in the catalog, the replica promoted, the old primary
// fenced, the journal closed, and every acknowledged write on the new
// primary.
TEST_F(Failover, AFailoverKilledAfterAnyStepIsFinishedByRunningItAgain) {
  for (const std::string step : {"planned", "fenced", "caught_up", "promoted", "published", "repointed"}) {
    SCOPED_TRACE("killed after " + step);
    StartServers(Replication::kAsync);
    {
      auto cluster = Cluster::Open(cluster_->Config(), QuickWatcher());
      Writers writers;
      writers.Start(*cluster, customers_, 2);
      ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 20; }));
      const Killed killed = ShardctlKilledAt("failover shard0", step);
      ASSERT_TRUE(killed.by_signal) << "shardctl finished before the kill landed:\n" << killed.out;
      const Ran again = Shardctl("--json failover shard0");
      ASSERT_EQ(again.status, 0) << again.out;
      const auto report = nlohmann::json::parse(again.out.substr(again.out.find('{')));
      EXPECT_EQ(report["to"], "shard0-replica1") << again.out;
      EXPECT_EQ(report["epoch"], 1) << again.out;
      EXPECT_FALSE(report["resumed_failover_id"].is_null()) << again.out;
      const std::size_t before = writers.Acknowledged();
      EXPECT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 20; }));
      writers.Stop();
      ExpectEveryAcknowledgedWriteOnTheNewPrimary(writers);  // the fence ends sessions: some OutcomeUnknown
    }
    {
      pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
      pqxx::nontransaction tx{catalog};
      const auto primary = tx.exec("SELECT server, epoch FROM shardkit_primaries WHERE shard = 'shard0'");
      ASSERT_EQ(primary.size(), 1U);
      EXPECT_STREQ(primary[0][0].c_str(), "shard0-replica1");
      EXPECT_EQ(primary[0][1].as<int>(), 1);
      EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_failovers WHERE state NOT IN ('done', 'failed')")[0].as<int>(),
                0);
      EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_failovers WHERE state = 'done'")[0].as<int>(), 1);
    }
    pqxx::connection promoted{test::WithDatabase(replica_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    EXPECT_FALSE(pqxx::nontransaction{promoted}.exec1("SELECT pg_is_in_recovery()")[0].as<bool>());
    pqxx::connection old{test::WithDatabase(primary_->AppDsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    pqxx::nontransaction tx{old};
    EXPECT_THROW(
        tx.exec("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES (1, 0, 1, now(), 1)"),
        pqxx::sql_error);
    TearDown();
  }
}

// The WAL receiver of a server: its status, timeline and the port it
// streams from ("" and 0 when it has none).
struct Receiver {
  std::string status;
  int timeline = 0;
  int sender_port = 0;
};
Receiver ReceiverOf(const TemporaryServer& server) {
  pqxx::connection c{server.Dsn().Reveal()};
  const auto rows = pqxx::nontransaction{c}.exec("SELECT status, received_tli, sender_port FROM pg_stat_wal_receiver");
  if (rows.empty()) return {};
  return {rows[0][0].c_str(), rows[0][1].as<int>(0), rows[0][2].as<int>(0)};
}

const ReplicaStatus* StatusOf(const std::vector<ReplicaStatus>& all, const std::string& name) {
  const auto it = std::find_if(all.begin(), all.end(), [&](const ReplicaStatus& r) { return r.name == name; });
  return it == all.end() ? nullptr : &*it;
}

// Two replicas, the primary killed, a forced failover: the most caught-up
// replica is promoted and the other follows it (re-pointed, through a slot
// created there, on the new timeline): a row written on the new primary
// appears there, and reads with replica preference go there again.
TEST_F(Failover, WithTwoReplicasTheOtherOneFollowsTheNewPrimary) {
  StartServers(Replication::kAsync, /*two=*/true);
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  // Both replicas follow the primary before (the check passes healthy ones).
  ASSERT_TRUE(test::WaitFor([&] {
    cluster->Replicas()->ProbeNow();
    const auto all = cluster->Replicas()->Status();
    return all.size() == 2 && all[0].follows_primary && all[1].follows_primary;
  })) << cluster->Replicas()->Status().at(0).not_following;
  (void)test::WriteOrder(*cluster, customers_[0], 920000000);
  primary_->Kill();
  FailoverOptions forced;
  forced.force = true;
  const FailoverReport report = shardkit::Failover(cluster_->Config(), "shard0", forced);
  const bool first = report.to_server == "shard0-replica1";
  const std::string other_name = first ? "shard0-replica2" : "shard0-replica1";
  TemporaryServer& promoted = first ? *replica_ : *replica2_;
  TemporaryServer& other = first ? *replica2_ : *replica_;
  ASSERT_EQ(report.replicas.size(), 1U);
  EXPECT_EQ(report.replicas[0].name, other_name);
  EXPECT_TRUE(report.replicas[0].follows) << report.replicas[0].detail;
  std::cout << "promoted " << report.to_server << "; " << other_name << ": " << report.replicas[0].detail << "\n";
  {
    pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
    const auto events =
        pqxx::nontransaction{catalog}.exec("SELECT detail FROM shardkit_failover_events WHERE state = 'repointed'");
    ASSERT_EQ(events.size(), 1U);
    EXPECT_EQ(std::string(events[0][0].c_str()).rfind(other_name + ": follows", 0), 0U) << events[0][0].c_str();
  }
  // It streams from the new primary, on the timeline the promotion began.
  const Receiver receiver = ReceiverOf(other);
  EXPECT_EQ(receiver.status, "streaming");
  EXPECT_EQ(receiver.timeline, 2);
  EXPECT_EQ(receiver.sender_port, promoted.Port());
  // A write through the Cluster (on the new primary) reaches it.
  ASSERT_TRUE(test::WaitFor([&] {
    try {
      (void)test::WriteOrder(*cluster, customers_[0], 920000001);
      return true;
    } catch (const ShardError&) {
      return false;
    }
  }));
  const std::set<std::int64_t> expected{920000000, 920000001};
  EXPECT_TRUE(test::WaitFor([&] { return OrdersOn(other.Dsn()) == expected; }));
  // Routers read it again: it follows the current primary.
  EXPECT_TRUE(test::WaitFor([&] {
    cluster->Replicas()->ProbeNow();
    const ReplicaStatus* r = StatusOf(cluster->Replicas()->Status(), other_name);
    return r != nullptr && r->follows_primary && r->lag.has_value();
  }));
  ReadPolicy read;
  read.preference = ReadPreference::kReplicaOnly;
  read.max_lag = std::chrono::hours(1);
  RoutedOutcome outcome;
  const auto rows =
      cluster->Transactions().Read(CustomerId{customers_[0]}, "SELECT count(*) FROM orders WHERE order_id >= 920000000",
                                   {}, test::Reading(read), &outcome);
  EXPECT_TRUE(outcome.on_replica);
  EXPECT_EQ(outcome.server, other_name);
}

// The second replica is down during the failover, so it cannot be
// re-pointed (the report and the journal say so); back, it streams from
// the deposed primary, on the old timeline, and that primary (unfenced by
// hand: two primaries) writes enough that the replica's replay position
// looks far ahead of the new primary's: its lag in bytes and time says
// "caught up". Reads never go there, and writes go on.
TEST_F(Failover, ReadsNeverGoToAReplicaThatDoesNotFollowTheCurrentPrimary) {
  StartServers(Replication::kAsync, /*two=*/true);
  ClusterOptions options = test::QuickProbes(milliseconds(50));
  options.watcher.check_interval = milliseconds(200);
  auto cluster = Cluster::Open(cluster_->Config(), options);
  replica2_->Stop();
  FailoverOptions to_first;
  to_first.to = "shard0-replica1";
  const FailoverReport report = shardkit::Failover(cluster_->Config(), "shard0", to_first);
  ASSERT_EQ(report.replicas.size(), 1U);
  EXPECT_EQ(report.replicas[0].name, "shard0-replica2");
  EXPECT_FALSE(report.replicas[0].follows);
  EXPECT_NE(report.replicas[0].detail.find("unreachable"), std::string::npos) << report.replicas[0].detail;

  replica2_->Start();
  primary_->Exec("ALTER SYSTEM RESET default_transaction_read_only");
  primary_->Exec("SELECT pg_reload_conf()");
  primary_->Exec("CREATE TABLE wal_filler AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 100000) g");
  const auto ahead = [&] {
    cluster->Replicas()->ProbeNow();
    const ReplicaStatus* r = StatusOf(cluster->Replicas()->Status(), "shard0-replica2");
    return r != nullptr && r->reachable && r->in_recovery && r->replay_lsn && r->primary_lsn &&
           *r->replay_lsn > *r->primary_lsn && r->lag_bytes == 0U && r->lag.has_value();
  };
  // By position it looks caught up: only whom it follows tells.
  ASSERT_TRUE(test::WaitFor(ahead));
  const auto all = cluster->Replicas()->Status();
  const ReplicaStatus* second = StatusOf(all, "shard0-replica2");
  ASSERT_NE(second, nullptr);
  EXPECT_FALSE(second->follows_primary);
  EXPECT_NE(second->not_following.find("does not follow the primary shard0-replica1"), std::string::npos)
      << second->not_following;
  std::cout << "shard0-replica2: " << second->not_following << "\n";

  ReadPolicy read;
  read.preference = ReadPreference::kReplicaPreferred;
  read.max_lag = std::chrono::hours(1);
  for (int i = 0; i < 200; ++i) {
    const int customer = customers_[static_cast<std::size_t>(i) % customers_.size()];
    (void)test::WriteOrder(*cluster, customer, 930000000 + i);  // writes go on, on the new primary
    RoutedOutcome outcome;
    (void)cluster->Transactions().Read(CustomerId{customer}, "SELECT count(*) FROM orders", {}, test::Reading(read),
                                       &outcome);
    ASSERT_FALSE(outcome.on_replica) << "read on " << outcome.server;
    EXPECT_EQ(outcome.server, "shard0-replica1");
  }
  read.preference = ReadPreference::kReplicaOnly;
  try {
    (void)cluster->Transactions().Read(CustomerId{customers_[0]}, "SELECT 1", {}, test::Reading(read));
    FAIL() << "a replicas-only read found a replica";
  } catch (const ReplicaUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("shard0-replica2: does not follow"), std::string::npos) << e.what();
  }
  // shardctl shards says so.
  const Ran shards = Shardctl("shards");
  EXPECT_NE(shards.out.find("follows the primary: NO, does not follow the primary shard0-replica1"), std::string::npos)
      << shards.out;
}

// Read-your-writes on the replica, by how the primary's commits wait:
// with synchronous_commit = remote_apply a COMMIT returns once the replica
// has applied it, so a read given the write's token finds it replayed there
// without waiting (only WAL written by others between the commit and the
// token's position can hold one back); with plain synchronous replication
// the replica has the WAL but may not have applied it yet.
TEST_F(Failover, UnderRemoteApplyTokenReadsFindTheirWritesOnTheReplica) {
  for (const Replication replication : {Replication::kSync, Replication::kRemoteApply}) {
    StartServers(replication);
    auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
    ASSERT_TRUE(test::WaitFor([&] {
      cluster->Replicas()->ProbeNow();
      return cluster->Replicas()->Status().at(0).lag.has_value();
    }));
    const int pairs = 1000;
    int on_replica = 0;
    int stale = 0;
    for (int i = 0; i < pairs; ++i) {
      const int customer = customers_[static_cast<std::size_t>(i) % customers_.size()];
      const std::int64_t order_id = 910000000 + i;
      const RoutedOutcome written = test::WriteOrder(*cluster, customer, order_id);
      ReadPolicy read;
      read.preference = ReadPreference::kReplicaPreferred;
      read.max_lag = std::chrono::hours(1);
      read.after = written.token;  // and no waiting: not replayed, the primary answers
      RoutedOutcome outcome;
      const auto rows =
          cluster->Transactions().Read(CustomerId{customer}, "SELECT count(*) FROM orders WHERE order_id = $1",
                                       {std::to_string(order_id)}, test::Reading(read), &outcome);
      if (rows[0][0].as<int>() != 1) ++stale;
      if (outcome.on_replica) ++on_replica;
    }
    const char* mode = replication == Replication::kRemoteApply ? "remote_apply" : "on";
    std::cout << "synchronous_commit = " << mode << ": " << on_replica << " of " << pairs
              << " token reads served by the replica, " << stale << " stale\n";
    RecordProperty(fmt::format("replica_reads_{}", mode), on_replica);
    EXPECT_EQ(stale, 0) << mode;
    if (replication == Replication::kRemoteApply) {
      EXPECT_GE(on_replica, pairs * 99 / 100);
    }
    cluster.reset();
    TearDown();
  }
}

// A cross-shard transaction decided in the catalog and prepared on both
// shards, its coordinator stopped before COMMIT PREPARED; the primary of
// one shard then dies. Synchronous replication carried the PREPARE to the
// replica: after the forced failover the recovery pass finds the part on
// the new primary and commits it there, as the catalog decided.
TEST_F(Failover, APreparedCrossShardPartIsSettledOnTheNewPrimary) {
  StartServers(Replication::kSync);
  ClusterOptions options = QuickWatcher();
  options.in_doubt_interval = milliseconds(0);  // the test runs the pass
  auto cluster = Cluster::Open(cluster_->Config(), options);
  const int a = customers_[0];  // shard 0: the one that fails over
  int b = 1;
  while (cluster_->Config().directory.ShardFor(CustomerId{b}) != ShardId{1}) ++b;
  for (const int id : {a, b}) {
    (void)cluster->Execute("INSERT INTO store_credit (customer_id, balance_cents) VALUES ($1, 100)",
                           {std::to_string(id)});
  }
  CrossShardOptions stop_after_decision;
  stop_after_decision.on_step = [](const CrossShardStep& step) {
    if (step.kind == CrossShardStep::Kind::kDecided) throw std::runtime_error("coordinator stops here");
  };
  EXPECT_THROW(cluster->TransactAcross(
                   {CustomerId{a}, CustomerId{b}},
                   [&](CrossShardTransaction& tx) {
                     tx.On(CustomerId{a})
                         .Execute("UPDATE store_credit SET balance_cents = balance_cents - 40 WHERE customer_id = $1",
                                  {std::to_string(a)});
                     tx.On(CustomerId{b})
                         .Execute("UPDATE store_credit SET balance_cents = balance_cents + 40 WHERE customer_id = $1",
                                  {std::to_string(b)});
                   },
                   stop_after_decision),
               std::runtime_error);

  primary_->Kill();
  const Ran forced = Shardctl("failover shard0 --force");
  ASSERT_EQ(forced.status, 0) << forced.out;
  ASSERT_TRUE(test::WaitFor([&] {
    return cluster->Resolver().Servers(ShardId{0}).primary.name != cluster->Resolver().ShardName(ShardId{0});
  }));

  std::vector<std::string> failures;
  const auto listed = ListInDoubt(cluster->Resolver(), cluster_->Config().catalog_dsn, failures);
  ASSERT_EQ(listed.size(), 2U) << "the replica replayed the PREPARE: the part is on the new primary";
  const InDoubtReport report = RecoverInDoubt(cluster->Resolver(), cluster_->CatalogDsn());
  EXPECT_EQ(report.committed.size(), 2U);
  EXPECT_TRUE(report.failures.empty()) << report.failures.front();
  const auto balance = [&](int id) {
    return cluster->Execute("SELECT balance_cents FROM store_credit WHERE customer_id = $1", {std::to_string(id)})
        .rows.at(0)
        .at(0)
        .value_or("?");
  };
  EXPECT_EQ(balance(a), "60");
  EXPECT_EQ(balance(b), "140");
}

// Leases on (1 s): a router without the catalog writes through the whole
// story while the primary is SIGKILLed, failed over with --force (it could
// not be fenced) and restarted writable. The forced failover waits the
// leases out before it promotes, so the old primary, back, commits none of
// that router's writes: 0 rows there from after the kill. Synchronous
// replication, so the catalog router's acknowledged writes are all on the
// new primary too (asynchronous, the last ones may be lost, as its loss says).
TEST_F(Failover, WithLeasesADeposedPrimaryCommitsNoWriteAfterThePromotion) {
  StartServers(Replication::kSync);
  SetLeaseTtl(cluster_->Config(), milliseconds(1000));
  auto cluster = Cluster::Open(cluster_->Config(), QuickWatcher());  // it keeps the leases
  ASSERT_TRUE(test::WaitFor([&] { return cluster->Leases()->Stats().extended >= 2; }));
  const auto lease_until = [&](const TemporaryServer& server) {
    pqxx::connection c{test::WithDatabase(server.Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    return pqxx::nontransaction{c}.exec1("SELECT shardkit_lease_until()")[0].as<std::int64_t>();
  };
  EXPECT_GT(lease_until(*primary_), 0);

  ClusterConfig blind = cluster_->Config();
  blind.directory_source = DirectorySource::kConfig;
  blind.catalog_dsn.reset();
  auto stale = Cluster::Open(blind);
  EXPECT_EQ(stale->Leases(), nullptr);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> next_stale{910000000};
  std::atomic<int> stale_acknowledged{0};
  std::mutex mutex;
  std::vector<std::string> stale_errors;
  std::thread stale_writer([&] {
    while (!stop) {
      RoutedOptions quick;
      quick.deadline = std::chrono::steady_clock::now() + milliseconds(400);
      try {
        (void)test::WriteOrder(*stale, customers_[1], next_stale++, quick);
        ++stale_acknowledged;
      } catch (const std::exception& e) {
        const std::lock_guard lock(mutex);
        stale_errors.emplace_back(e.what());
      }
    }
  });
  Writers writers;
  writers.Start(*cluster, customers_, 2);
  ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 30 && stale_acknowledged >= 10; }));

  primary_->Kill();
  const std::int64_t first_after_kill = next_stale.load();
  FailoverOptions forced;
  forced.force = true;
  std::vector<std::string> steps;
  forced.on_step = [&](const std::string& step, const std::string& detail) { steps.push_back(step + ": " + detail); };
  const FailoverReport report = shardkit::Failover(cluster_->Config(), "shard0", forced);
  EXPECT_FALSE(report.old_primary_fenced);
  EXPECT_NE(report.loss.find("leases ran out before the promotion"), std::string::npos) << report.loss;
  EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [](const std::string& s) { return s.rfind("leases: ", 0) == 0; }))
      << fmt::format("{}", fmt::join(steps, "\n"));

  // Back, writable (never fenced), and the stale router still sends it
  // writes: each is refused at its COMMIT.
  primary_->Start();
  const std::size_t errors_before = [&] {
    const std::lock_guard lock(mutex);
    return stale_errors.size();
  }();
  ASSERT_TRUE(test::WaitFor([&] {
    const std::lock_guard lock(mutex);
    return stale_errors.size() >= errors_before + 3;
  }));
  const std::size_t before = writers.Acknowledged();
  EXPECT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= before + 30; }));
  stop = true;
  stale_writer.join();
  writers.Stop();

  std::vector<std::int64_t> deposed_took;
  for (const std::int64_t id : OrdersOn(primary_->Dsn())) {
    if (id >= first_after_kill) deposed_took.push_back(id);
  }
  EXPECT_TRUE(deposed_took.empty()) << deposed_took.size() << " writes committed on the deposed primary, e.g. order "
                                    << deposed_took.front();
  {
    const std::lock_guard lock(mutex);
    EXPECT_NE(stale_errors.back().find("lease as its shard's primary ran out"), std::string::npos)
        << stale_errors.back();
    std::cout << stale_acknowledged << " stale writes acknowledged before the kill, " << stale_errors.size()
              << " refused or failed after it, " << deposed_took.size() << " committed on the deposed primary\n";
  }
  ExpectEveryAcknowledgedWriteOnTheNewPrimary(writers);
  EXPECT_EQ(writers.failed, 0);
  // The catalog router keeps the new primary's lease.
  EXPECT_TRUE(test::WaitFor([&] { return lease_until(*replica_) > lease_until(*primary_); }));
}

// A transaction held open past its primary's lease cannot commit; writes
// that are not shardkit's are not checked; shardctl leases shows, changes
// and turns leases off, which releases the lease.
TEST_F(Failover, ALeaseThatRunsOutRefusesTheCommitOfAnOpenTransaction) {
  StartServers(Replication::kAsync);
  // The sharded tables of shard 0's primary that check the lease at COMMIT,
  // and all of them.
  const auto lease_checks = [&] {
    pqxx::connection c{test::WithDatabase(primary_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    const auto row = pqxx::nontransaction{c}.exec1(
        "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = 'shardkit_lease'), "
        "(SELECT count(*) FROM shardkit_sharded_tables)");
    return std::pair{row[0].as<int>(), row[1].as<int>()};
  };
  const Ran off = Shardctl("leases");
  EXPECT_EQ(off.status, 0) << off.out;
  EXPECT_NE(off.out.find("leases off"), std::string::npos) << off.out;
  EXPECT_EQ(lease_checks().first, 0) << "leases off: no write pays for a check";
  const Ran on = Shardctl("--json leases --ttl-ms 300");
  ASSERT_EQ(on.status, 0) << on.out;
  const auto shown = nlohmann::json::parse(on.out.substr(on.out.find('{')));
  EXPECT_TRUE(shown["on"].get<bool>()) << on.out;
  EXPECT_EQ(shown["ttl_ms"], 300) << on.out;
  ASSERT_EQ(shown["shards"].size(), 2U) << on.out;
  EXPECT_FALSE(shown["shards"][0]["in_force"].get<bool>()) << on.out;  // nobody granted one yet
  EXPECT_TRUE(shown["shards"][0]["enforced"].get<bool>()) << on.out;
  EXPECT_TRUE(shown["shards"][1]["enforced"].get<bool>()) << on.out;
  const auto [checked, sharded] = lease_checks();
  EXPECT_GT(sharded, 0);
  EXPECT_EQ(checked, sharded);
  EXPECT_EQ(LeaseTtl(cluster_->Config()), milliseconds(300));
  // A table sharded while leases are on checks them too.
  {
    pqxx::connection c{test::WithDatabase(primary_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    pqxx::work tx{c};
    tx.exec(
        "CREATE TABLE lease_later (customer_id integer NOT NULL, bucket smallint NOT NULL "
        "CHECK (bucket = bucket_of(customer_id)), note_id bigint NOT NULL, PRIMARY KEY (customer_id, note_id))");
    tx.exec("SELECT shardkit_shard_table('lease_later')");
    tx.commit();
    EXPECT_EQ(lease_checks().first, sharded + 1);
  }
  // One check per transaction, however many rows it writes; rows written
  // after SET CONSTRAINTS ... IMMEDIATE ran the check queue another.
  {
    pqxx::connection c{test::WithDatabase(primary_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    pqxx::nontransaction{c}.exec("SET track_functions = 'pl'");
    pqxx::work tx{c};
    tx.exec("SET LOCAL shardkit.buckets = 'all'");
    tx.exec("SELECT shardkit_lease_extend(((extract(epoch FROM clock_timestamp()) + 60) * 1000000)::bigint)");
    const auto insert = [&](int first, int count) {
      tx.exec_params(
          "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
          "SELECT $1, $2, g, now(), 1 FROM generate_series($3::bigint, $3::bigint + $4 - 1) g",
          customers_[0], ToInt(BucketOf(CustomerId{customers_[0]})), 940000000 + first, count);
    };
    const auto checks_run = [&] {
      tx.exec("SET CONSTRAINTS shardkit_lease IMMEDIATE");
      return tx
          .exec1(
              "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
              "WHERE funcname = 'shardkit_lease_at_commit'")[0]
          .as<int>();
    };
    insert(0, 20);
    insert(20, 1);
    EXPECT_EQ(checks_run(), 1);
    insert(21, 5);
    EXPECT_EQ(checks_run(), 2);
    tx.abort();
    pqxx::nontransaction{c}.exec("SELECT shardkit_lease_release()");
  }

  const auto resolver = cluster_->MakeResolver();
  ClusterConfig blind = cluster_->Config();
  blind.directory_source = DirectorySource::kConfig;
  blind.catalog_dsn.reset();
  auto router = Cluster::Open(blind);
  {
    PrimaryLeases keeper{*resolver, cluster_->CatalogDsn()};
    ASSERT_TRUE(test::WaitFor([&] { return keeper.Stats().extended >= 2; }));
    const Ran granted = Shardctl("leases");
    EXPECT_NE(granted.out.find("leases on: time to live 300 ms"), std::string::npos) << granted.out;
    EXPECT_NE(granted.out.find("lease runs out in"), std::string::npos) << granted.out;
    EXPECT_NO_THROW((void)test::WriteOrder(*router, customers_[0], 919999999));  // kept: admitted
    ASSERT_EQ(keeper.RenewNow(), 2);
  }
  // Nobody renews now: the transaction's COMMIT comes after the lease's end.
  RoutedOptions once;
  once.deadline = std::chrono::steady_clock::now() + milliseconds(1500);
  int attempts = 0;
  std::string refused;
  try {
    router->Run(
        CustomerId{customers_[0]},
        [&](pqxx::transaction_base& tx, const RoutedContext& at) {
          tx.exec_params(
              "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
              "VALUES ($1, $2, $3, now(), 1)",
              customers_[0], at.bucket, 920000000 + attempts++);
          if (attempts == 1) std::this_thread::sleep_for(milliseconds(700));
        },
        once);
  } catch (const ShardError& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("lease as its shard's primary ran out"), std::string::npos) << refused;
  EXPECT_GE(attempts, 2);
  const auto present = OrdersOn(primary_->Dsn());
  EXPECT_EQ(present.count(919999999), 1U);
  EXPECT_EQ(std::count_if(present.begin(), present.end(), [](std::int64_t id) { return id >= 920000000; }), 0)
      << "a write committed after its lease ran out";
  // Not a shardkit transaction (no fence statement): not checked.
  {
    pqxx::connection c{test::WithDatabase(primary_->Dsn(), cluster_->ShardDatabaseName(0)).Reveal()};
    pqxx::work tx{c};
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 1)",
        customers_[0], ToInt(BucketOf(CustomerId{customers_[0]})), 930000000);
    tx.commit();
  }
  // Off: released, and the router writes again.
  const Ran turned_off = Shardctl("leases --off");
  EXPECT_EQ(turned_off.status, 0) << turned_off.out;
  EXPECT_NE(turned_off.out.find("no lease in force"), std::string::npos) << turned_off.out;
  EXPECT_EQ(LeaseTtl(cluster_->Config()), std::nullopt);
  EXPECT_EQ(lease_checks().first, 0) << "leases off: the checks are dropped";
  EXPECT_NO_THROW((void)test::WriteOrder(*router, customers_[0], 930000001));

  // Turned off behind a keeper's back (or its renewal raced shardctl's
  // release): it releases the leases it kept once it reads that they are
  // off, so none is left to run out and refuse writes.
  SetLeaseTtl(cluster_->Config(), milliseconds(300));
  PrimaryLeases keeper{*resolver, cluster_->CatalogDsn()};
  ASSERT_TRUE(test::WaitFor([&] { return keeper.Stats().extended >= 2; }));
  {
    pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
    pqxx::nontransaction tx{catalog};
    tx.exec("DELETE FROM shardkit_lease_settings");
  }
  ASSERT_TRUE(test::WaitFor([&] { return !keeper.Stats().on; }));
  for (const PrimaryLeaseState& state : ListPrimaryLeases(cluster_->Config())) {
    EXPECT_FALSE(state.in_force) << state.shard << ": " << state.remaining.count() << " ms left";
  }
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_NO_THROW((void)test::WriteOrder(*router, customers_[0], 930000002));
}

}  // namespace
}  // namespace shardkit
