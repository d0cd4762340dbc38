// Failovers checked the way Jepsen checks a database: clients run while
// faults are injected, every operation and what it returned is recorded in
// a history, and the history is checked against the final state.
//
// Shard 0 is two servers of the test's own (A, configured as the primary,
// and B, its replica) under synchronous replication; shard 1 is the local
// cluster's; the catalog a scratch one. The clients:
//   - writers through a router that follows the catalog: each acknowledged
//     write is read back at once with its read token, replicas preferred
//     (a read that misses it is a stale read);
//   - two stale routers without the catalog's primaries, one configured
//     with A as the primary and one with B, writing in a loop: at any time
//     one of them aims at the deposed server;
//   - a scatter reader counting every shard's orders: a count below the
//     writes acknowledged before it began is a lost or invisible write.
// The faults, in rounds: a planned failover; the replica paused (SIGSTOP);
// the primary SIGKILLed and `shardctl failover --force`, the old primary
// restarted while the stale routers write; `shardctl failover` SIGKILLed
// mid-way and run again. After each failover the old primary is rebuilt as
// a replica (`shardctl replica rebuild --from-old-primary`).
//
// Checked: 0 acknowledged writes lost, 0 written twice, 0 stale token
// reads, 0 scatter counts below the acknowledged floor, 0 writes
// acknowledged by a deposed primary (they would be lost: the rebuild rewinds
// it onto the new primary's history), every OutcomeUnknown found present or
// absent; then a planted fault (an acknowledged order deleted) that the
// same check must report.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
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

constexpr std::int64_t kFirstOrder = 900000000;

// Everything the clients did and saw.
struct History {
  std::mutex mutex;
  std::set<std::int64_t> attempted;
  std::set<std::int64_t> acknowledged;
  std::set<std::int64_t> unknown;  // OutcomeUnknown: the client cannot tell
  std::set<std::int64_t> failed;   // a definite failure: nothing kept
  std::set<std::int64_t> acknowledged_by_stale_routers;
  std::map<std::int64_t, int> customer_of;  // each attempted order's customer
  int token_reads = 0;
  int token_reads_on_replicas = 0;
  std::vector<std::string> stale_reads;
  int scatter_reads = 0;
  std::vector<std::string> below_floor;
  std::vector<std::string> errors;  // the first few, for the log

  void Note(const std::string& what) {
    if (errors.size() < 12) errors.push_back(what.substr(0, 240));
  }
};

// What the final state says of a history.
struct Verdict {
  std::vector<std::int64_t> lost;        // acknowledged, not on the primary
  std::vector<std::int64_t> duplicated;  // on the primary more than once
  std::vector<std::int64_t> unexpected;  // on the primary, never attempted
  int unknown_present = 0;
  int unknown_absent = 0;
  [[nodiscard]] bool Clean() const { return lost.empty() && duplicated.empty() && unexpected.empty(); }
};

// `orders`: every order id of the range on the final primaries, with
// repetitions (a write applied twice shows twice).
Verdict Check(History& history, const std::vector<std::int64_t>& orders) {
  std::lock_guard lock(history.mutex);
  Verdict v;
  std::set<std::int64_t> present;
  for (const std::int64_t id : orders) {
    if (!present.insert(id).second) v.duplicated.push_back(id);
    if (history.attempted.count(id) == 0) v.unexpected.push_back(id);
  }
  for (const std::int64_t id : history.acknowledged) {
    if (present.count(id) == 0) v.lost.push_back(id);
  }
  for (const std::int64_t id : history.unknown) (present.count(id) != 0 ? v.unknown_present : v.unknown_absent)++;
  return v;
}

class FailoverHistory : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<TemporaryServer>();
    // pg_rewind needs hint bits logged; the replica copies these settings.
    a_->Exec("ALTER SYSTEM SET wal_log_hints = on");
    a_->Exec("ALTER SYSTEM SET synchronous_standby_names = '*'");
    a_->Exec("ALTER SYSTEM SET synchronous_commit = on");
    a_->Stop();
    a_->Start();
    b_ = a_->MakeReplica("tmp-replica");
    ShardConfig shard0{"tmp", a_->AppDsn(), a_->Dsn()};
    ReplicaConfig replica{"tmp-replica", b_->AppDsn()};
    replica.admin_dsn = b_->Dsn();
    shard0.replicas.push_back(replica);
    ShardConfig steady = test::LoadTestConfig().shards.at(1);
    steady.replicas.clear();
    cluster_ =
        std::make_unique<ScratchCluster>("failover_history_pgtest", ScratchOptions().Shards(2).On({shard0, steady}));
    cluster_->CatchUpReplicas();
    for (int c = 1; customers_.size() < 24; ++c) customers_.push_back(c);  // on both shards
    for (int c = 1; shard0_customers_.size() < 8; ++c) {
      if (cluster_->Config().directory.ShardFor(CustomerId{c}) == ShardId{0}) shard0_customers_.push_back(c);
    }
  }
  void TearDown() override {
    StopClients();
    for (TemporaryServer* s : {a_.get(), b_.get()}) {
      if (s == nullptr) continue;
      Signal(*s, SIGCONT);
      try {  // a primary waiting for its synchronous standby would hold the DROP of the scratch databases
        s->Exec("ALTER SYSTEM RESET synchronous_standby_names");
        s->Exec("SELECT pg_reload_conf()");
      } catch (const std::exception&) {
      }
    }
    cluster_.reset();
    b_.reset();
    a_.reset();
  }

  // The router that follows the catalog; and one that does not, whose
  // shard 0 primary is `primary` (the other server its replica).
  std::unique_ptr<Cluster> Router() const {
    ClusterOptions options = test::QuickProbes(milliseconds(50));
    options.watcher.check_interval = milliseconds(200);
    return Cluster::Open(cluster_->Config(), options);
  }
  std::unique_ptr<Cluster> StaleRouter(const TemporaryServer& primary) const {
    ClusterConfig config = cluster_->Config();
    config.directory_source = DirectorySource::kConfig;
    ShardConfig& shard0 = config.shards.at(0);
    if (&primary == b_.get()) {
      std::swap(shard0.dsn, shard0.replicas.at(0).dsn);
      std::swap(shard0.admin_dsn, shard0.replicas.at(0).admin_dsn);
    }
    return Cluster::Open(config);
  }

  void StartClients() {
    router_ = Router();
    stale_a_ = StaleRouter(*a_);
    stale_b_ = StaleRouter(*b_);
    for (int w = 0; w < 3; ++w) clients_.emplace_back([this, w] { Writer(w); });
    clients_.emplace_back([this] { StaleWriter(*stale_a_, 0); });
    clients_.emplace_back([this] { StaleWriter(*stale_b_, 1); });
    clients_.emplace_back([this] { ScatterReader(); });
  }
  void StopClients() {
    stop_ = true;
    for (auto& t : clients_) t.join();
    clients_.clear();
  }

  std::int64_t Attempt(int customer) {
    const std::int64_t id = next_order_++;
    std::lock_guard lock(history_.mutex);
    history_.attempted.insert(id);
    history_.customer_of[id] = customer;
    return id;
  }
  // Records a write's outcome; true if it was acknowledged.
  bool Write(Cluster& router, int customer, std::int64_t id, bool stale, RoutedOutcome* outcome) {
    RoutedOptions options;
    options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(stale ? 2 : 10);
    try {
      *outcome = test::WriteOrder(router, customer, id, options);
      std::lock_guard lock(history_.mutex);
      history_.acknowledged.insert(id);
      if (stale) history_.acknowledged_by_stale_routers.insert(id);
      return true;
    } catch (const OutcomeUnknown& e) {
      std::lock_guard lock(history_.mutex);
      history_.unknown.insert(id);
      history_.Note(fmt::format("order {} unknown: {}", id, e.what()));
    } catch (const std::exception& e) {
      std::lock_guard lock(history_.mutex);
      history_.failed.insert(id);
      if (!stale) history_.Note(fmt::format("order {} failed: {}", id, e.what()));
    }
    return false;
  }

  void Writer(int w) {
    for (std::size_t i = 0; !stop_; ++i) {
      const int customer = customers_[(i * 5 + static_cast<std::size_t>(w)) % customers_.size()];
      const std::int64_t id = Attempt(customer);
      RoutedOutcome written;
      if (!Write(*router_, customer, id, false, &written)) continue;
      // Read it back with its token, replicas preferred.
      SqlOptions read;
      read.read.preference = ReadPreference::kReplicaPreferred;
      read.read.after = written.token;
      read.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      try {
        const SqlResult r = router_->Execute("SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2",
                                             {std::to_string(customer), std::to_string(id)}, read);
        std::lock_guard lock(history_.mutex);
        ++history_.token_reads;
        history_.token_reads_on_replicas += r.from_replicas;
        if (r.rows.at(0).at(0) != "1") {
          history_.stale_reads.push_back(fmt::format("order {} of customer {} not found with its token {} ({})", id,
                                                     customer, written.token.ToString(),
                                                     r.from_replicas > 0 ? "on a replica" : "on the primary"));
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(history_.mutex);
        history_.Note(fmt::format("read of order {} failed: {}", id, e.what()));
      }
    }
  }

  void StaleWriter(Cluster& router, int index) {
    for (std::size_t i = 0; !stop_; ++i) {
      RoutedOutcome ignored;
      const int customer = shard0_customers_[(i + static_cast<std::size_t>(index)) % shard0_customers_.size()];
      if (!Write(router, customer, Attempt(customer), true, &ignored)) {
        std::this_thread::sleep_for(milliseconds(20));  // refused: do not spin
      }
    }
  }

  void ScatterReader() {
    while (!stop_) {
      std::size_t floor = 0;
      {
        std::lock_guard lock(history_.mutex);
        floor = history_.acknowledged.size();
      }
      try {
        SqlOptions options;
        options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        const SqlResult r =
            router_->Execute(fmt::format("SELECT count(*) FROM orders WHERE order_id >= {}", kFirstOrder), {}, options);
        const auto count = std::stoull(*r.rows.at(0).at(0));
        std::lock_guard lock(history_.mutex);
        ++history_.scatter_reads;
        if (count < floor) {
          history_.below_floor.push_back(fmt::format("{} orders counted, {} acknowledged before", count, floor));
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(history_.mutex);
        history_.Note(fmt::format("scatter failed: {}", e.what()));
      }
      std::this_thread::sleep_for(milliseconds(30));
    }
  }

  // Waits until `more` further writes are acknowledged.
  void Progress(std::size_t more) {
    std::size_t from = 0;
    {
      std::lock_guard lock(history_.mutex);
      from = history_.acknowledged.size();
    }
    ASSERT_TRUE(test::WaitFor(
        [&] {
          std::lock_guard lock(history_.mutex);
          return history_.acknowledged.size() >= from + more;
        },
        std::chrono::seconds(60)))
        << "the writers stalled at " << from << " acknowledged writes";
  }

  test::ShardctlRun Shardctl(const std::string& args) const {
    return test::RunShardctl(SHARDCTL_PATH, cluster_->Config(), args);
  }
  void Rebuild(const TemporaryServer& old_primary) const {
    const auto r =
        Shardctl(fmt::format("replica rebuild shard0 --from-old-primary --pgdata '{}' --stream-timeout-ms 60000",
                             old_primary.DataDirectory().string()));
    ASSERT_EQ(r.status, 0) << r.out;
  }
  // SIGSTOP / SIGCONT to a server's postmaster and every process it started.
  static void Signal(const TemporaryServer& server, int signal) {
    std::ifstream pid_file(server.DataDirectory() / "postmaster.pid");
    pid_t postmaster = 0;
    if (!(pid_file >> postmaster) || postmaster <= 0) return;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string pid, name, state;
      pid_t parent = 0;
      if (stat >> pid >> name >> state >> parent && parent == postmaster) ::kill(std::stoi(pid), signal);
    }
    ::kill(postmaster, signal);
  }

  std::vector<std::int64_t> OrdersOnPrimaries() const {
    std::vector<std::int64_t> ids;
    auto router = Router();
    for (const auto& shard :
         router->Scatter(fmt::format("SELECT order_id FROM orders WHERE order_id >= {}", kFirstOrder)).shards) {
      for (const auto& row : shard.rows) ids.push_back(row[0].as<std::int64_t>());
    }
    return ids;
  }

  std::unique_ptr<TemporaryServer> a_;
  std::unique_ptr<TemporaryServer> b_;
  std::unique_ptr<ScratchCluster> cluster_;
  std::vector<int> customers_;
  std::vector<int> shard0_customers_;
  std::unique_ptr<Cluster> router_;
  std::unique_ptr<Cluster> stale_a_;
  std::unique_ptr<Cluster> stale_b_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> next_order_{kFirstOrder};
  std::vector<std::thread> clients_;
  History history_;
};

TEST_F(FailoverHistory, NoAcknowledgedWriteLostNoStaleReadNoWriteOnADeposedPrimary) {
  StartClients();
  Progress(40);

  // 1. A planned failover to B; A rebuilt as its replica.
  auto r = Shardctl("failover shard0");
  ASSERT_EQ(r.status, 0) << r.out;
  Progress(20);
  Rebuild(*a_);
  Progress(20);

  // 2. The replica (A) paused for 2 s, then resumed.
  Signal(*a_, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Signal(*a_, SIGCONT);
  Progress(20);

  // 3. The primary (B) killed; a forced failover to A; B restarted while
  // the stale routers write (one of them to B); then B rebuilt.
  b_->Kill();
  r = Shardctl("failover shard0 --force");
  ASSERT_EQ(r.status, 0) << r.out;
  Progress(20);
  b_->Start();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Rebuild(*b_);
  Progress(20);

  // 4. A failover to B killed once A is fenced and B promoted, then run again.
  const auto killed = test::RunShardctlKilledAt(SHARDCTL_PATH, cluster_->Config(), "failover shard0", "promoted");
  ASSERT_TRUE(killed.by_signal) << killed.out;
  r = Shardctl("failover shard0");
  ASSERT_EQ(r.status, 0) << r.out;
  Progress(20);
  Rebuild(*a_);
  Progress(20);
  StopClients();
  // The shard healed to synchronous replication after every failover.
  {
    pqxx::connection c{b_->Dsn().Reveal()};
    EXPECT_STREQ(pqxx::nontransaction{c}.exec1("SHOW synchronous_standby_names")[0].c_str(), "*");
  }

  const Verdict verdict = Check(history_, OrdersOnPrimaries());
  std::int64_t victim = 0;
  int victim_customer = 0;
  {
    std::lock_guard lock(history_.mutex);
    std::cout << history_.attempted.size() << " writes attempted: " << history_.acknowledged.size() << " acknowledged ("
              << history_.acknowledged_by_stale_routers.size() << " by the stale routers), " << history_.unknown.size()
              << " unknown (" << verdict.unknown_present << " present, " << verdict.unknown_absent << " absent), "
              << history_.failed.size() << " failed; " << history_.token_reads << " token reads ("
              << history_.token_reads_on_replicas << " on replicas), " << history_.scatter_reads << " scatter counts\n";
    for (const auto& e : history_.errors) std::cout << "  " << e << "\n";
    EXPECT_TRUE(verdict.lost.empty()) << verdict.lost.size() << " acknowledged writes lost, e.g. order "
                                      << verdict.lost.front();
    EXPECT_TRUE(verdict.duplicated.empty()) << "order " << verdict.duplicated.front() << " written twice";
    EXPECT_TRUE(verdict.unexpected.empty()) << "order " << verdict.unexpected.front() << " never written";
    EXPECT_TRUE(history_.stale_reads.empty())
        << history_.stale_reads.size() << " stale reads, e.g. " << history_.stale_reads.front();
    EXPECT_TRUE(history_.below_floor.empty())
        << history_.below_floor.size() << " counts below the floor, e.g. " << history_.below_floor.front();
    EXPECT_EQ(verdict.unknown_present + verdict.unknown_absent, static_cast<int>(history_.unknown.size()));
    EXPECT_GT(history_.token_reads_on_replicas, 0) << "no token read was served by a replica";
    EXPECT_GT(history_.scatter_reads, 0);
    RecordProperty("acknowledged", static_cast<int>(history_.acknowledged.size()));
    RecordProperty("lost", static_cast<int>(verdict.lost.size()));
    RecordProperty("stale_reads", static_cast<int>(history_.stale_reads.size()));
    ASSERT_FALSE(history_.acknowledged.empty());
    victim = *history_.acknowledged.begin();
    victim_customer = history_.customer_of.at(victim);
  }

  // The planted fault: an acknowledged order deleted on its primary. The
  // same check must find it.
  const auto deleted = router_->Execute("DELETE FROM orders WHERE customer_id = $1 AND order_id = $2",
                                        {std::to_string(victim_customer), std::to_string(victim)});
  ASSERT_EQ(deleted.affected, 1U);
  const Verdict planted = Check(history_, OrdersOnPrimaries());
  ASSERT_EQ(planted.lost.size(), 1U);
  EXPECT_EQ(planted.lost.front(), victim);
}

}  // namespace
}  // namespace shardkit
