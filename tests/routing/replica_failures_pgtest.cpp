// Replicas that fall behind, pause or go away, on servers of the test's own
// (a primary and its streaming replica, TemporaryServer; the scratch
// catalog and reference on the local cluster): reads that must see their
// own writes never miss one, whatever the replica's replay does; a replica
// over the lag bound or down is skipped, and reads go to the primary.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "support/bookstore_rows.hpp"
#include "support/replica_reads.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace shardkit {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::ScratchCluster;
using test::ScratchOptions;
using test::TemporaryServer;

class PausedReplica : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    primary_ = new TemporaryServer();
    replica_ = primary_->MakeReplica("tmp-replica").release();
    ShardConfig server{"tmp", primary_->AppDsn(), primary_->Dsn()};
    server.replicas.push_back(ReplicaConfig{"tmp-replica", replica_->AppDsn()});
    // Two shards, both on the temporary primary (and so on its replica).
    cluster_ = new ScratchCluster("replica_failures_pgtest", ScratchOptions().Shards(2).On({server}));
    test::FillBookstore(*cluster_, 200);
    cluster_->CatchUpReplicas();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete replica_;
    delete primary_;
  }
  void TearDown() override {
    replica_->Start();
    Resume();
  }
  static void Pause() { replica_->Exec("SELECT pg_wal_replay_pause()"); }
  static void Resume() { replica_->Exec("SELECT pg_wal_replay_resume()"); }

  static TemporaryServer* primary_;
  static TemporaryServer* replica_;
  static ScratchCluster* cluster_;
};
TemporaryServer* PausedReplica::primary_ = nullptr;
TemporaryServer* PausedReplica::replica_ = nullptr;
ScratchCluster* PausedReplica::cluster_ = nullptr;

// Write-then-read pairs from eight threads while another pauses and resumes
// the replica's replay at random: every read given its write's token sees
// the write, from the replica when it has replayed it, else the primary.
TEST_F(PausedReplica, TokenReadsNeverMissTheirWriteWhileReplayPausesAndResumes) {
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(20), milliseconds(1000)));
  cluster->Replicas()->ProbeNow();
  constexpr int kThreads = 8;
  constexpr int kPairsPerThread = 1250;
  std::atomic<bool> done{false};
  std::atomic<int> stale{0};
  std::atomic<int> on_replica{0};
  std::atomic<int> on_primary{0};
  std::atomic<int> pauses{0};
  std::thread toggler([&] {
    std::minstd_rand random{7};
    bool paused = false;
    while (!done.load()) {
      std::this_thread::sleep_for(milliseconds(5 + random() % 40));
      paused ? Resume() : Pause();
      paused = !paused;
      pauses += paused ? 1 : 0;
    }
    if (paused) Resume();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPairsPerThread; ++i) {
        const int customer = 500000 + t * 1000 + i % 50;
        const std::int64_t order_id = 880000000 + t * kPairsPerThread + i;
        RoutedOutcome written;
        cluster->Run(
            CustomerId{customer},
            [&](pqxx::transaction_base& tx, const RoutedContext& at) {
              tx.exec_params(
                  "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, "
                  "$3, now(), 1)",
                  customer, at.bucket, order_id);
            },
            {}, &written);
        ReadPolicy read;
        read.preference = ReadPreference::kReplicaPreferred;
        read.max_lag = std::chrono::hours(1);  // the token, not the lag, decides here
        read.after = written.token;
        RoutedOutcome outcome;
        const auto rows = cluster->Transactions().Read(
            CustomerId{customer}, "SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2",
            {std::to_string(customer), std::to_string(order_id)}, test::Reading(read), &outcome);
        if (rows[0][0].as<int>() != 1) ++stale;
        ++(outcome.on_replica ? on_replica : on_primary);
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  toggler.join();
  EXPECT_EQ(stale.load(), 0);
  EXPECT_EQ(on_replica.load() + on_primary.load(), kThreads * kPairsPerThread);
  // Both paths were taken: the test exercised what it claims to.
  EXPECT_GT(on_replica.load(), 0);
  EXPECT_GT(on_primary.load(), 0);
  EXPECT_GT(pauses.load(), 0);
  RecordProperty("on_replica", on_replica.load());
  RecordProperty("on_primary", on_primary.load());
  std::cout << "pairs " << kThreads * kPairsPerThread << ": " << on_replica.load() << " read on the replica, "
            << on_primary.load() << " on the primary, " << pauses.load() << " pauses\n";
  cluster_->ExecOnShard(0, "DELETE FROM orders WHERE order_id >= 880000000");
  cluster_->ExecOnShard(1, "DELETE FROM orders WHERE order_id >= 880000000");
}

// A routed write's token names its transaction (sql/046). The replica shows
// it by its commit even while an older transaction of the primary still
// runs (a long batch), but a token that cannot say its other writes ended
// before it began waits for every older transaction; with replay paused,
// neither is shown.
TEST_F(PausedReplica, ATokenIsShownByItsTransactionsCommitOrByEveryOlderOneFinishing) {
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(20), milliseconds(1000)));
  cluster->Replicas()->ProbeNow();
  const int customer = 510001;
  const auto read = [&](const ReadToken& token, milliseconds wait, RoutedOutcome* outcome) {
    ReadPolicy policy;
    policy.preference = ReadPreference::kReplicaOnly;
    policy.max_lag = std::chrono::hours(1);
    policy.after = token;
    policy.replay_wait = wait;
    return cluster->Transactions()
        .Read(CustomerId{customer}, "SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id >= 881000000",
              {std::to_string(customer)}, test::Reading(policy), outcome)[0][0]
        .as<int>();
  };
  const auto replica_caught_up = [&] {
    const std::uint64_t wanted = test::WalPosition(primary_->Dsn());
    return test::WaitFor([&] { return test::WalPosition(replica_->Dsn()) >= wanted; });
  };

  pqxx::connection batch_connection{cluster_->ShardDsn(0).Reveal()};
  pqxx::work batch{batch_connection};
  const auto batch_xid = batch.exec1("SELECT pg_current_xact_id()::text")[0].as<std::uint64_t>();

  const RoutedOutcome written = test::WriteOrder(*cluster, customer, 881000000);
  const ReadToken::Entry* entry = written.token.Find(written.shard);
  ASSERT_NE(entry, nullptr);
  EXPECT_GT(entry->xid, batch_xid);
  EXPECT_GT(entry->horizon, 0U);
  EXPECT_LE(entry->horizon, batch_xid) << "the batch was running when the write began";
  EXPECT_TRUE(written.token.ToString().starts_with("v2_"));
  ASSERT_TRUE(replica_caught_up());

  // 1. Its own token: the replica shows the commit, the batch running.
  RoutedOutcome outcome;
  EXPECT_EQ(read(written.token, milliseconds(0), &outcome), 1);
  EXPECT_TRUE(outcome.on_replica);

  // 2. The same transaction in a token whose other writes may have run
  // beside it (horizon 0): every older transaction must have finished,
  // and the batch has not.
  const ReadToken unsure =
      ReadToken::Parse(fmt::format("v2_{}.{:X}.{:X}.0", ToInt(written.shard), entry->lsn, entry->xid));
  EXPECT_THROW((void)read(unsure, milliseconds(0), nullptr), ReplicaUnavailable);
  EXPECT_THROW((void)read(unsure, milliseconds(300), nullptr), ReplicaUnavailable) << "waited for the batch";
  batch.commit();
  outcome = {};
  EXPECT_EQ(read(unsure, seconds(10), &outcome), 1);
  EXPECT_TRUE(outcome.on_replica);

  // 3. Replay paused: a new write is shown neither way until it resumes.
  ASSERT_TRUE(replica_caught_up());
  Pause();
  const RoutedOutcome paused_write = test::WriteOrder(*cluster, customer, 881000001);
  EXPECT_THROW((void)read(paused_write.token, milliseconds(0), nullptr), ReplicaUnavailable);
  Resume();
  outcome = {};
  EXPECT_EQ(read(paused_write.token, seconds(10), &outcome), 2);
  EXPECT_TRUE(outcome.on_replica);
  cluster_->ExecOnShard(0, "DELETE FROM orders WHERE order_id >= 881000000");
  cluster_->ExecOnShard(1, "DELETE FROM orders WHERE order_id >= 881000000");
}

TEST_F(PausedReplica, AReplicaOverTheLagBoundIsSkippedUntilItCatchesUp) {
  cluster_->CatchUpReplicas();
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(20), milliseconds(1000)));
  ReadPolicy bounded;
  bounded.preference = ReadPreference::kReplicaOnly;
  bounded.max_lag = milliseconds(300);
  const auto read = [&](RoutedOutcome* outcome = nullptr) {
    return cluster->Transactions().Read(CustomerId{7}, "SELECT count(*) FROM orders WHERE customer_id = $1", {"7"},
                                        test::Reading(bounded), outcome);
  };
  ASSERT_TRUE(test::WaitFor([&] {
    try {
      RoutedOutcome outcome;
      (void)read(&outcome);
      return outcome.on_replica;
    } catch (const ReplicaUnavailable&) {
      return false;
    }
  }));
  Pause();
  // The primary moves on; the paused replica's lag grows past the bound.
  std::string reason;
  ASSERT_TRUE(test::WaitFor([&] {
    cluster_->ExecOnShard(0,
                          "INSERT INTO books (book_id, title, category, price) VALUES "
                          "((SELECT coalesce(max(book_id), 0) + 1 FROM books), 't', 'c', 1)");
    try {
      (void)read();
      return false;
    } catch (const ReplicaUnavailable& e) {
      reason = e.skipped().empty() ? "" : e.skipped()[0].reason;
      return true;
    }
  }));
  EXPECT_NE(reason.find("over max_lag 300 ms"), std::string::npos) << reason;
  EXPECT_NE(reason.find("replay is paused"), std::string::npos) << reason;
  // Preferring replicas, the primary answers, with the same rows.
  bounded.preference = ReadPreference::kReplicaPreferred;
  RoutedOutcome outcome;
  const auto rows = read(&outcome);
  EXPECT_FALSE(outcome.on_replica);
  EXPECT_EQ(rows[0][0].as<int>(), 7 % 5);
  // Resumed, it catches up and serves again.
  Resume();
  bounded.preference = ReadPreference::kReplicaOnly;
  EXPECT_TRUE(test::WaitFor([&] {
    try {
      RoutedOutcome again;
      (void)read(&again);
      return again.on_replica;
    } catch (const ReplicaUnavailable&) {
      return false;
    }
  }));
}

TEST_F(PausedReplica, AReplicaDownSendsReadsElsewhere) {
  cluster_->CatchUpReplicas();
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(20), milliseconds(1000)));
  cluster->Replicas()->ProbeNow();
  SqlOptions preferred;
  preferred.read.preference = ReadPreference::kReplicaPreferred;
  preferred.read.max_lag = std::chrono::hours(1);
  const std::string sql = "SELECT count(*), sum(total) FROM orders";
  const auto expected = [&] {
    pqxx::connection ref{cluster_->ReferenceDsn().Reveal()};
    pqxx::nontransaction tx{ref};
    const auto row = tx.exec(sql)[0];
    return std::vector<std::string>{row[0].c_str(), row[1].c_str()};
  }();
  const auto answer = [&](const SqlOptions& options) {
    const SqlResult r = cluster->Execute(sql, {}, options);
    EXPECT_EQ((std::vector<std::string>{*r.rows[0][0], *r.rows[0][1]}), expected);
    return r.from_replicas;
  };
  EXPECT_EQ(answer(preferred), 2);
  replica_->Stop();
  // At once, before any probe notices: the scatter's shards fall back to
  // the primary, and so does a routed read.
  EXPECT_EQ(answer(preferred), 0);
  RoutedOutcome outcome;
  RoutedOptions routed;
  routed.read = preferred.read;
  (void)cluster->Transactions().Read(CustomerId{7}, "SELECT 1", {}, routed, &outcome);
  EXPECT_FALSE(outcome.on_replica);
  // Replicas only: refused, naming the replica and why.
  routed.read.preference = ReadPreference::kReplicaOnly;
  try {
    (void)cluster->Transactions().Read(CustomerId{7}, "SELECT 1", {}, routed);
    FAIL() << "a replica that is down served a read";
  } catch (const ReplicaUnavailable& e) {
    ASSERT_EQ(e.skipped().size(), 1U);
    EXPECT_TRUE(e.skipped()[0].replica.ends_with("-replica1")) << e.what();
    EXPECT_NE(e.skipped()[0].reason.find("unreachable"), std::string::npos) << e.what();
  }
  cluster->Replicas()->ProbeNow();
  for (const auto& status : cluster->Replicas()->Status()) {
    EXPECT_FALSE(status.reachable) << status.name;
    EXPECT_FALSE(status.error.empty()) << status.name;
  }
  // Back up: it serves again once a probe has seen it.
  replica_->Start();
  EXPECT_TRUE(test::WaitFor([&] { return answer(preferred) == 2; }));
}

}  // namespace
}  // namespace shardkit
