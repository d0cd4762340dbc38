// Reads on the local cluster's replicas (SHARDKIT_REPLICAS=1 lab/cluster
// start; skipped, saying so, without them): answers equal the reference
// server's, every routed write returns a read token its reads honour, a
// replica over the read's lag bound is skipped, and a bucket moving under
// reads that prefer replicas is never answered wrong.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "support/bookstore_rows.hpp"
#include "support/replica_reads.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace shardkit {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::ScratchCluster;
using test::ScratchOptions;
using Clock = std::chrono::steady_clock;

// Until each replica's lag is known: right after a Cluster opens, a replica
// behind every position of its primary measured so far (the other tests
// write meanwhile; the lab's commits reach the replicas within the WAL
// writer's delay) has an unknown lag, which skips it for any bound.
void AwaitLagKnown(Cluster& cluster) {
  ASSERT_TRUE(test::WaitFor([&] {
    cluster.Replicas()->ProbeNow();
    const auto status = cluster.Replicas()->Status();
    return std::all_of(status.begin(), status.end(), [](const ReplicaStatus& r) { return r.lag.has_value(); });
  }));
}

// Replicas only, and any lag: these tests are about where reads run and
// what they answer, not about the bound.
ReadPolicy OnReplicas(ReadPreference preference = ReadPreference::kReplicaOnly) {
  ReadPolicy read;
  read.preference = preference;
  read.max_lag = std::chrono::hours(1);
  return read;
}

std::vector<std::vector<std::string>> ReferenceRows(const ScratchCluster& cluster, const std::string& sql,
                                                    const SqlParams& params = {}) {
  pqxx::connection c{cluster.ReferenceDsn().Reveal()};
  pqxx::nontransaction tx{c};
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params))) {
    auto& out = rows.emplace_back();
    for (const auto& field : row) out.emplace_back(field.is_null() ? "NULL" : field.c_str());
  }
  return rows;
}

std::vector<std::vector<std::string>> Rows(const SqlResult& result) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : result.rows) {
    auto& out = rows.emplace_back();
    for (const auto& field : row) out.push_back(field.value_or("NULL"));
  }
  return rows;
}

class LabReplicas : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::HasReplicas()) return;
    // Three shards on the two servers (shard 2 beside shard 0), buckets
    // 0-31 on shard 0, 32-63 on shard 1: room for a move to shard 2.
    cluster_ = new ScratchCluster("replica_reads_pgtest",
                                  ScratchOptions().Shards(3).Directory(test::TwoOfThree()).WithReplicas());
    test::FillBookstore(*cluster_, 400);
    cluster_->CatchUpReplicas();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << test::kNoReplicas;
  }
  static ScratchCluster* cluster_;
};
ScratchCluster* LabReplicas::cluster_ = nullptr;

TEST_F(LabReplicas, TheMonitorSeesEveryReplicaStreamingAndCaughtUp) {
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  ASSERT_NE(cluster->Replicas(), nullptr);
  cluster->Replicas()->ProbeNow();
  cluster->Replicas()->ProbeNow();
  const auto status = cluster->Replicas()->Status();
  ASSERT_EQ(status.size(), 3U);  // one per shard
  for (const auto& r : status) {
    EXPECT_TRUE(r.reachable) << r.name << ": " << r.error;
    EXPECT_TRUE(r.in_recovery) << r.name;
    ASSERT_TRUE(r.replay_lsn) << r.name;
    ASSERT_TRUE(r.primary_lsn) << r.name;
    ASSERT_TRUE(r.measured_at) << r.name;
    EXPECT_GT(r.probes, 0U) << r.name;
  }
  // The lag bound becomes known once the primary's position is one the
  // replica has replayed.
  AwaitLagKnown(*cluster);
  for (const auto& r : cluster->Replicas()->Status()) EXPECT_TRUE(r.lag_bytes) << r.name;
  EXPECT_EQ(cluster->Stats().replicas.size(), 3U);
}

TEST_F(LabReplicas, ReadsOnReplicasEqualTheReference) {
  cluster_->CatchUpReplicas();
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  AwaitLagKnown(*cluster);
  SqlOptions options;
  options.read = OnReplicas();
  // Over every shard: each answered by its replica.
  for (const std::string sql :
       {"SELECT count(*), sum(total) FROM orders",
        "SELECT bucket, count(*), sum(total) FROM orders GROUP BY bucket ORDER BY bucket",
        "SELECT customer_id, order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 7"}) {
    const SqlResult r = cluster->Execute(sql, {}, options);
    EXPECT_EQ(r.from_replicas, 3) << sql;
    EXPECT_EQ(Rows(r), ReferenceRows(*cluster_, sql)) << sql;
  }
  // The best-sellers shape, answered by the merge plan on the replicas.
  const std::string best =
      "SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id ORDER BY 2 DESC, book_id LIMIT 5";
  const SqlResult top = cluster->Execute(best, {}, options);
  EXPECT_EQ(top.from_replicas, 3);
  EXPECT_EQ(Rows(top), ReferenceRows(*cluster_, best));
  // Finished by the server over the merged rows, DISTINCT without the key,
  // a set operation: the shards' parts from the replicas.
  for (const std::string sql :
       {"SELECT status, round(sum(total) / count(*), 2) FROM orders GROUP BY status ORDER BY 1",
        "SELECT DISTINCT status FROM orders ORDER BY 1",
        "SELECT customer_id FROM orders WHERE total > 50 INTERSECT SELECT customer_id FROM customers ORDER BY 1"}) {
    const SqlResult r = cluster->Execute(sql, {}, options);
    EXPECT_GE(r.from_replicas, 3) << sql;
    EXPECT_EQ(Rows(r), ReferenceRows(*cluster_, sql)) << sql;
  }
  // Exact percentiles keep each shard's rows in a temporary table, which a
  // hot standby cannot make: refused for replicas only, on the primaries
  // when replicas are only preferred.
  const std::string median = "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders";
  EXPECT_THROW((void)cluster->Execute(median, {}, options), SqlError);
  SqlOptions preferred;
  preferred.read = OnReplicas(ReadPreference::kReplicaPreferred);
  EXPECT_EQ(Rows(cluster->Execute(median, {}, preferred)), ReferenceRows(*cluster_, median));
  ScatterOptions top_on_replicas;
  top_on_replicas.read = OnReplicas();
  TopKQuery top_query;
  top_query.from = "order_items";
  top_query.key = "book_id";
  top_query.measure = "quantity";
  top_query.k = 5;
  EXPECT_THROW((void)cluster->TopK(top_query, TopKMethod::kAuto, top_on_replicas), Error);
  // Routed: one customer's rows from its shard's replica.
  const std::string mine = "SELECT order_id, total FROM orders WHERE customer_id = $1 ORDER BY order_id";
  for (const int customer : {4, 44, 244, 399}) {
    const SqlResult r = cluster->Execute(mine, {std::to_string(customer)}, options);
    EXPECT_EQ(r.from_replicas, 1) << customer;
    EXPECT_EQ(Rows(r), ReferenceRows(*cluster_, mine, {std::to_string(customer)})) << customer;
  }
  // Routed through the transactions: on the replica of the customer's shard.
  RoutedOptions routed;
  routed.read = OnReplicas();
  RoutedOutcome outcome;
  const auto rows = cluster->Transactions().Read(CustomerId{44}, "SELECT count(*) FROM orders WHERE customer_id = $1",
                                                 {"44"}, routed, &outcome);
  EXPECT_TRUE(outcome.on_replica);
  EXPECT_EQ(outcome.server, cluster_->Config().shards[static_cast<std::size_t>(ToInt(outcome.shard))].replicas[0].name);
  EXPECT_EQ(rows[0][0].as<int>(), 44 % 5);
  const int run = cluster->Run(
      CustomerId{44},
      [](pqxx::transaction_base& tx, const RoutedContext& at) {
        EXPECT_TRUE(at.on_replica);
        return tx.exec_params("SELECT count(*) FROM orders WHERE customer_id = $1", at.key)[0][0].as<int>();
      },
      test::Reading(OnReplicas(), /*read_only=*/true));
  EXPECT_EQ(run, 44 % 5);
  EXPECT_GE(cluster->Stats().transactions.replica_reads, 2U);
  EXPECT_GE(cluster->Stats().scatters.replica_requests, 12U);
  // The default still reads the primaries.
  EXPECT_EQ(cluster->Execute("SELECT count(*) FROM orders").from_replicas, 0);
}

TEST_F(LabReplicas, EveryRoutedWriteReturnsATokenItsReadsHonour) {
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  AwaitLagKnown(*cluster);
  ReadToken session;
  int on_replica = 0;
  int stale = 0;
  const int pairs = 300;
  for (int i = 0; i < pairs; ++i) {
    const int customer = 900000 + i % 37;
    const std::int64_t order_id = 777000000 + i;
    const RoutedOutcome written = test::WriteOrder(*cluster, customer, order_id);
    ASSERT_FALSE(written.token.Empty());
    const ReadToken::Entry* entry = written.token.Find(written.shard);
    ASSERT_NE(entry, nullptr);
    EXPECT_GT(entry->lsn, 0U);
    session.Combine(written.token);
    // The token as a client carries it: text and back.
    ReadPolicy read = OnReplicas(ReadPreference::kReplicaPreferred);
    read.after = ReadToken::Parse(session.ToString());
    // Every tenth read waits for the replica instead of reading the primary.
    if (i % 10 == 0) read.replay_wait = seconds(5);
    RoutedOutcome outcome;
    const auto rows = cluster->Transactions().Read(
        CustomerId{customer}, "SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2",
        {std::to_string(customer), std::to_string(order_id)}, test::Reading(read), &outcome);
    if (rows[0][0].as<int>() != 1) ++stale;
    if (outcome.on_replica) ++on_replica;
    if (i % 10 == 0) {
      EXPECT_TRUE(outcome.on_replica) << "waited for the replica: pair " << i;
    }
  }
  EXPECT_EQ(stale, 0);
  EXPECT_GE(on_replica, pairs / 10);
  // Plain SQL writes return their token too.
  const SqlResult inserted =
      cluster->Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, $2, now(), 2)",
                       {"900100", "777999999"});
  EXPECT_FALSE(inserted.token.Empty());
  SqlOptions options;
  options.read = OnReplicas(ReadPreference::kReplicaPreferred);
  options.read.after = inserted.token;
  options.read.replay_wait = seconds(5);
  const SqlResult read = cluster->Execute("SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2",
                                          {"900100", "777999999"}, options);
  EXPECT_EQ(*read.rows[0][0], "1");
  EXPECT_EQ(read.from_replicas, 1);
  // Leave the reference's totals intact for the other tests.
  for (int s = 0; s < cluster_->ShardCount(); ++s) {
    cluster_->ExecOnShard(s, "DELETE FROM orders WHERE order_id BETWEEN 777000000 AND 777999999");
  }
  cluster_->CatchUpReplicas();
}

TEST_F(LabReplicas, AReplicaOverTheLagBoundIsSkipped) {
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  AwaitLagKnown(*cluster);
  ReadPolicy strict;
  strict.preference = ReadPreference::kReplicaOnly;
  strict.max_lag = milliseconds(0);  // no replica is ever that close: every one over the bound
  try {
    (void)cluster->Transactions().Read(CustomerId{44}, "SELECT 1", {}, test::Reading(strict));
    FAIL() << "a replica over the bound served a replicas-only read";
  } catch (const ReplicaUnavailable& e) {
    ASSERT_EQ(e.skipped().size(), 1U) << e.what();
    EXPECT_NE(e.skipped()[0].reason.find("over max_lag 0 ms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(e.skipped()[0].replica), std::string::npos) << e.what();
  }
  // Preferring replicas: the primary answers.
  strict.preference = ReadPreference::kReplicaPreferred;
  RoutedOutcome outcome;
  (void)cluster->Transactions().Read(CustomerId{44}, "SELECT 1", {}, test::Reading(strict), &outcome);
  EXPECT_FALSE(outcome.on_replica);
  // A scatter too: every shard on its primary, or refused as a whole.
  SqlOptions options;
  options.read = strict;
  EXPECT_EQ(cluster->Execute("SELECT count(*) FROM orders", {}, options).from_replicas, 0);
  options.read.preference = ReadPreference::kReplicaOnly;
  EXPECT_THROW((void)cluster->Execute("SELECT count(*) FROM orders", {}, options), ReplicaUnavailable);
}

// A bucket moves to shard 2 and back while threads read it on replicas:
// routed reads of its customers and scatters over every bucket. Each
// answer equals the reference or is refused; none is wrong.
TEST_F(LabReplicas, AMoveWithReplicaReadsInALoopStaysExact) {
  cluster_->CatchUpReplicas();
  auto cluster = Cluster::Open(cluster_->Config(), test::QuickProbes(milliseconds(50)));
  AwaitLagKnown(*cluster);
  const BucketId moving{7};
  std::vector<int> customers;
  for (int id = 1; id <= 400 && customers.size() < 6; ++id) {
    if (BucketOf(CustomerId{id}) == moving) customers.push_back(id);
  }
  ASSERT_FALSE(customers.empty());
  const std::string per_bucket = "SELECT bucket, count(*), sum(total) FROM orders GROUP BY bucket ORDER BY bucket";
  const std::string mine = "SELECT order_id, total FROM orders WHERE customer_id = $1 ORDER BY order_id";
  const auto expected_buckets = ReferenceRows(*cluster_, per_bucket);
  std::map<int, std::vector<std::vector<std::string>>> expected_mine;
  for (const int c : customers) expected_mine[c] = ReferenceRows(*cluster_, mine, {std::to_string(c)});

  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<int> answered_on_replicas{0};
  std::atomic<int> answered{0};
  std::atomic<int> refused{0};
  std::mutex first_wrong_mutex;
  std::string first_wrong;
  auto reader = [&](ReadPreference preference, int seed) {
    SqlOptions options;
    options.read = OnReplicas(preference);
    for (int i = seed; !stop.load(); ++i) {
      try {
        if (i % 3 == 0) {
          const SqlResult r = cluster->Execute(per_bucket, {}, options);
          if (Rows(r) != expected_buckets) {
            ++wrong;
            std::lock_guard lock(first_wrong_mutex);
            if (first_wrong.empty()) first_wrong = "scatter differs from the reference";
          }
          answered_on_replicas += r.from_replicas == 3 ? 1 : 0;
        } else {
          const int c = customers[static_cast<std::size_t>(i) % customers.size()];
          const SqlResult r = cluster->Execute(mine, {std::to_string(c)}, options);
          if (Rows(r) != expected_mine[c]) {
            ++wrong;
            std::lock_guard lock(first_wrong_mutex);
            if (first_wrong.empty()) first_wrong = fmt::format("customer {} differs from the reference", c);
          }
          answered_on_replicas += r.from_replicas;
        }
        ++answered;
      } catch (const Error& e) {
        // Replicas only: refused while its replica has not replayed the
        // handover (or a deadline): never a wrong answer.
        ++refused;
      }
    }
  };
  std::vector<std::thread> readers;
  readers.emplace_back(reader, ReadPreference::kReplicaPreferred, 0);
  readers.emplace_back(reader, ReadPreference::kReplicaPreferred, 1);
  readers.emplace_back(reader, ReadPreference::kReplicaOnly, 2);
  MoveOptions quick;
  quick.cleanup_grace = milliseconds(0);
  BucketMover mover{cluster_->Config(), quick};
  const MoveRecord there = mover.Move(moving, ShardId{2});
  EXPECT_EQ(there.state, MoveState::kDone);
  std::this_thread::sleep_for(milliseconds(300));
  const MoveRecord back = mover.Move(moving, ShardId{0});
  EXPECT_EQ(back.state, MoveState::kDone);
  std::this_thread::sleep_for(milliseconds(300));
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0) << first_wrong;
  EXPECT_GT(answered.load(), 10);
  EXPECT_GT(answered_on_replicas.load(), 0);
  RecordProperty("answered", answered.load());
  RecordProperty("refused", refused.load());
}

}  // namespace
}  // namespace shardkit
