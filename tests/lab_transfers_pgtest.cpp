// The bank (lab/src/transfers.hpp), Jepsen-style: coordinator processes
// (`bookstore-lab transfers`) move store credit between customers on two
// shard servers of the test's own (TemporaryServer) through
// Cluster::TransactAcross and are SIGKILLed at every step of the two-phase
// commit; after each kill a shard server crashes and restarts, a recovery
// pass settles what was left in doubt, and the checker finds the total
// exact, nothing prepared, every acknowledged transfer applied once on both
// sides and every refused one not at all; also with a failover of a shard
// in between (its prepared parts settled on the new primary). A planted
// fault (each side committed on its own) must make the checker fail.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "shardkit/cluster.hpp"
#include "shardkit/topology/failover.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"
#include "transfers.hpp"
#include "transfers_process.hpp"
#include "worker_process.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using lab::BankCheck;
using lab::CoordinatorProcess;
using test::ScratchCluster;
using test::ScratchOptions;
using test::TemporaryServer;

class Bank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    servers_[0] = new TemporaryServer();
    servers_[1] = new TemporaryServer();
  }
  static void TearDownTestSuite() {
    for (TemporaryServer*& server : servers_) {
      delete server;
      server = nullptr;
    }
  }

  void SetUp() override {
    std::vector<ShardConfig> on;
    for (int i = 0; i < 2; ++i) {
      on.push_back(ShardConfig{fmt::format("bank{}", i), servers_[i]->AppDsn(), servers_[i]->Dsn()});
    }
    Open(on);
  }

  // The scratch cluster on these shard servers, the bank's accounts, the
  // coordinators' config file and journal.
  void Open(const std::vector<ShardConfig>& on) {
    scratch_ = std::make_unique<ScratchCluster>("lab_transfers_pgtest", ScratchOptions().Shards(2).On(on));
    ClusterOptions options;
    options.in_doubt_interval = 0ms;  // the test runs its recovery passes itself
    options.watcher.check_interval = 200ms;
    cluster_ = Cluster::Open(scratch_->Config(), options);
    dir_ = std::filesystem::temp_directory_path() / fmt::format("lab_transfers_pgtest-{}", ::getpid());
    std::filesystem::create_directories(dir_);
    config_file_ = lab::WriteConfigFile(scratch_->Config(), dir_, /*with_replicas=*/true);
    journal_ = dir_ / "journal.txt";
    std::filesystem::remove(journal_);
    lab::SetUpBank(*cluster_, bank_);
  }

  void TearDown() override {
    cluster_.reset();
    scratch_.reset();  // rolls back whatever a failed test left prepared
    std::filesystem::remove_all(dir_);
  }

  // A coordinator process: `transfers` transfers over 4 threads, stopped
  // (sleeping) at `stop_at` (none: it runs to the end).
  std::unique_ptr<CoordinatorProcess> Coordinator(int transfers, const std::string& stop_at, int seed) const {
    std::vector<std::string> args{"transfers",
                                  "--config",
                                  config_file_.string(),
                                  "--journal",
                                  journal_.string(),
                                  "--customers",
                                  std::to_string(bank_.customers),
                                  "--first-customer",
                                  std::to_string(bank_.first_customer),
                                  "--transfers",
                                  std::to_string(transfers),
                                  "--threads",
                                  "4",
                                  "--seed",
                                  std::to_string(seed)};
    if (!stop_at.empty()) args.insert(args.end(), {"--stop-at", stop_at});
    return std::make_unique<CoordinatorProcess>(BOOKSTORE_LAB_EXE, args);
  }

  // Recovery passes once the parts are past the bound.
  InDoubtReport Settle() const {
    InDoubtOptions options;
    options.settle_after = 1s;
    std::chrono::milliseconds took{0};
    return lab::SettleInDoubt(*cluster_, scratch_->CatalogDsn(), options, took);
  }

  BankCheck Check() const { return lab::CheckBank(*cluster_, bank_, lab::ReadJournal(journal_)); }

  inline static TemporaryServer* servers_[2] = {nullptr, nullptr};
  lab::BankOptions bank_{40, 1000, 1000};  // customers 1000-1039, 1,000 cents each
  std::unique_ptr<ScratchCluster> scratch_;
  std::unique_ptr<Cluster> cluster_;
  std::filesystem::path dir_;
  std::filesystem::path config_file_;
  std::filesystem::path journal_;
};

TEST_F(Bank, CoordinatorKilledAtEveryStepShardsRestartedThenRecovered) {
  struct Kill {
    const char* stop_at;
    std::size_t least_in_doubt;  // the stopped transaction's parts, at least
  };
  // Before any prepare, after the prepares, after the decision, after the
  // commits (the PREPAREs, and the COMMIT PREPAREDs, of a transaction go out
  // in one round trip: a stop after the first one's step finds them all
  // done; one shard prepared or committed without the other is
  // cross_shard_pgtest's).
  const Kill kills[] = {{"logged:5", 0}, {"prepared:5", 2}, {"decided:5", 2}, {"committed:5", 0}};
  int seed = 1;
  int committed = 0;
  int rolled_back = 0;
  for (const Kill& kill : kills) {
    SCOPED_TRACE(kill.stop_at);
    const auto coordinator = Coordinator(100, kill.stop_at, seed);
    const auto stopped = coordinator->WaitForLine("stopped ", std::chrono::steady_clock::now() + 60s);
    ASSERT_TRUE(stopped.has_value()) << "the coordinator never reached " << kill.stop_at;
    coordinator->Kill();
    std::vector<std::string> failures;
    const auto in_doubt = ListInDoubt(cluster_->Resolver(), scratch_->Config().catalog_dsn, failures);
    EXPECT_GE(in_doubt.size(), kill.least_in_doubt) << *stopped;
    // A shard server crashes and comes back: its prepared parts survive.
    TemporaryServer& server = *servers_[seed % 2];
    server.Kill();
    server.Start();
    const InDoubtReport report = Settle();
    EXPECT_TRUE(report.failures.empty()) << report.failures.front();
    committed += static_cast<int>(report.committed.size());
    rolled_back += static_cast<int>(report.rolled_back.size());
    const BankCheck check = Check();
    EXPECT_TRUE(check.Ok()) << check.Describe();
    fmt::print("after the kill at {} ({}): {}", kill.stop_at, *stopped, check.Describe());
    ++seed;
  }
  EXPECT_GT(committed, 0) << "the kill after the decision leaves parts that recovery commits";
  EXPECT_GT(rolled_back, 0) << "the kills before it leave parts that recovery rolls back";

  // And to the end, with no kill.
  const auto coordinator = Coordinator(150, "", seed);
  EXPECT_EQ(coordinator->Wait(), 0);
  const BankCheck check = Check();
  EXPECT_TRUE(check.Ok()) << check.Describe();
  EXPECT_GT(check.acknowledged, 150);
  EXPECT_GT(check.refused, 0);
  fmt::print("at the end: {}", check.Describe());
  CoordinatorProcess checker{
      BOOKSTORE_LAB_EXE,
      {"transfers", "--check", "--config", config_file_.string(), "--journal", journal_.string(), "--customers",
       std::to_string(bank_.customers), "--first-customer", std::to_string(bank_.first_customer)}};
  EXPECT_EQ(checker.Wait(), 0);
}

// Shard 0 on a primary of its own with a synchronous replica (PREPARE
// waits for it as COMMIT does): a coordinator killed after its decision,
// then the primary killed and the replica promoted; recovery finds the
// prepared parts on the new primary and commits them.
class BankFailover : public Bank {
 protected:
  void SetUp() override {
    primary_ = std::make_unique<TemporaryServer>();
    replica_ = primary_->MakeReplica("shard0-replica1");
    primary_->Exec("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary_->Exec("SELECT pg_reload_conf()");
    ShardConfig failing{"bank0", primary_->AppDsn(), primary_->Dsn()};
    ReplicaConfig replica{"shard0-replica1", replica_->AppDsn()};
    replica.admin_dsn = replica_->Dsn();
    failing.replicas.push_back(replica);
    Open({failing, ShardConfig{"bank1", servers_[1]->AppDsn(), servers_[1]->Dsn()}});
    scratch_->CatchUpReplicas();
  }
  void TearDown() override {
    // The old primary, back, must not wait for a standby it no longer has.
    try {
      primary_->Start();
      primary_->Exec("ALTER SYSTEM RESET synchronous_standby_names");
      primary_->Exec("SELECT pg_reload_conf()");
    } catch (const std::exception&) {
      // Gone: nothing waits there.
    }
    Bank::TearDown();
    replica_.reset();
    primary_.reset();
  }
  std::unique_ptr<TemporaryServer> primary_;
  std::unique_ptr<TemporaryServer> replica_;
};

TEST_F(BankFailover, PreparedPartsAreSettledOnTheNewPrimary) {
  const auto coordinator = Coordinator(100, "decided:5", 7);
  ASSERT_TRUE(coordinator->WaitForLine("stopped ", std::chrono::steady_clock::now() + 60s).has_value());
  coordinator->Kill();
  primary_->Kill();
  FailoverOptions force;
  force.force = true;  // the old primary is down
  const FailoverReport failover = Failover(scratch_->Config(), "shard0", force);
  EXPECT_EQ(failover.to_server, "shard0-replica1");
  ASSERT_TRUE(
      test::WaitFor([&] { return cluster_->Resolver().Servers(ShardId{0}).primary.name == "shard0-replica1"; }, 20s));
  std::vector<std::string> failures;
  const auto in_doubt = ListInDoubt(cluster_->Resolver(), scratch_->Config().catalog_dsn, failures);
  int on_new_primary = 0;
  for (const InDoubtPart& part : in_doubt) on_new_primary += part.shard == ShardId{0} ? 1 : 0;
  EXPECT_GE(on_new_primary, 1) << "the decided transaction's part, carried by the replica";
  const InDoubtReport report = Settle();
  EXPECT_TRUE(report.failures.empty()) << report.failures.front();
  EXPECT_GE(report.committed.size(), 2U);
  const BankCheck check = Check();
  EXPECT_TRUE(check.Ok()) << check.Describe();
  EXPECT_EQ(check.prepared.at("shard0"), 0);
  fmt::print("after the kill at decided:5 and the failover of shard0: {}", check.Describe());
  // And on, on the new primary.
  const auto after = Coordinator(60, "", 8);
  EXPECT_EQ(after->Wait(), 0);
  const BankCheck end = Check();
  EXPECT_TRUE(end.Ok()) << end.Describe();
}

TEST_F(Bank, APlantedFaultIsCaught) {
  // Each side committed on its own (a service without cross-shard
  // transactions): killed between the two, the sender's side stays alone.
  ASSERT_EQ(::setenv("BOOKSTORE_LAB_FAULT", "write-twice", 1), 0);
  const auto coordinator = Coordinator(100, "committed:5", 1);
  ::unsetenv("BOOKSTORE_LAB_FAULT");
  ASSERT_TRUE(coordinator->WaitForLine("stopped ", std::chrono::steady_clock::now() + 60s).has_value());
  coordinator->Kill();
  (void)Settle();
  const BankCheck check = Check();
  EXPECT_FALSE(check.Ok()) << check.Describe();
  EXPECT_FALSE(check.half_applied.empty()) << check.Describe();
  EXPECT_NE(check.total_cents, check.expected_total_cents) << check.Describe();
  fmt::print("with the planted fault: {}", check.Describe());
  // The checker's command says so too.
  CoordinatorProcess checker{
      BOOKSTORE_LAB_EXE,
      {"transfers", "--check", "--config", config_file_.string(), "--journal", journal_.string(), "--customers",
       std::to_string(bank_.customers), "--first-customer", std::to_string(bank_.first_customer)}};
  EXPECT_EQ(checker.Wait(), 1);
  EXPECT_TRUE(checker.WaitForLine("VIOLATION: applied on one side only", std::chrono::steady_clock::now() + 10s));
}

}  // namespace
}  // namespace shardkit
