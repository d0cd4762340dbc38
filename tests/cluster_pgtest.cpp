// The Cluster entry point on a scratch cluster with a catalog: routing,
// routed transactions, merges and top-k equal to the reference server, one
// place for statistics, and merges that keep answering exactly while a
// bucket moves.
#include "shardkit/cluster.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "shardkit/resharding/move.hpp"
#include "support/bookstore_rows.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::TwoOfThree;

using Clock = std::chrono::steady_clock;

class ClusterPg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new test::ScratchCluster("cluster_pgtest", test::ScratchOptions().Shards(3).Directory(TwoOfThree()));
    test::FillBookstore(*scratch_, 600);
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }
  static pqxx::result OnReference(const std::string& sql) {
    pqxx::connection c{scratch_->ReferenceDsn().Reveal()};
    pqxx::nontransaction tx{c};
    return tx.exec(sql);
  }
  static inline test::ScratchCluster* scratch_ = nullptr;
};

TEST_F(ClusterPg, AnswersLikeTheReferenceServer) {
  const auto cluster = Cluster::Open(scratch_->Config());
  ASSERT_NE(cluster->Watcher(), nullptr);  // the scratch config reads the catalog's directory
  EXPECT_EQ(cluster->ShardCount(), 3);

  // Routing: the directory's shard for the customer's bucket.
  const CustomerId customer{42};
  const Route route = cluster->Route(customer);
  EXPECT_EQ(route.bucket, BucketOf(customer));
  EXPECT_EQ(route.shard, scratch_->Directory().ShardFor(customer));

  // A routed read sees the customer's own rows, all of them.
  const auto orders = cluster->Run(customer, [&](pqxx::transaction_base& tx, const RoutedContext& at) {
    EXPECT_EQ(at.shard, route.shard);
    return tx.exec_params1("SELECT count(*) FROM orders WHERE customer_id = $1", ToInt(customer))[0].as<long>();
  });
  EXPECT_EQ(orders, OnReference("SELECT count(*) FROM orders WHERE customer_id = 42")[0][0].as<long>());

  // A merge: orders and their totals per status, as one server answers.
  const MergedResult merged = cluster->Merge(
      AggregateQuery::From("orders").GroupBy("status").Count("n").Sum("total", "total").OrderBy("status").Plan());
  const auto expected = OnReference("SELECT status, count(*), sum(total) FROM orders GROUP BY 1 ORDER BY 1");
  ASSERT_EQ(merged.rows.size(), expected.size());
  for (std::size_t i = 0; i < merged.rows.size(); ++i) {
    const auto row = expected[static_cast<pqxx::result::size_type>(i)];
    EXPECT_EQ(merged.rows[i][0].ToString(), row[0].c_str());
    EXPECT_EQ(merged.rows[i][1].ToString(), row[1].c_str());
    EXPECT_EQ(merged.rows[i][2].ToString(), row[2].c_str());
  }

  // Exact top-k: each key's total is the reference's, and no key outside
  // the answer has a larger total than the answer's smallest.
  TopKQuery best;
  best.from = "order_items";
  best.key = "book_id";
  best.measure = "quantity";
  best.k = 5;
  const auto top = cluster->TopK(best);
  std::map<std::string, long> totals;
  for (const auto& row : OnReference("SELECT book_id, sum(quantity) FROM order_items GROUP BY 1")) {
    totals[row[0].c_str()] = row[1].as<long>();
  }
  ASSERT_EQ(top.items.size(), 5U);
  long smallest = top.items.back().value;
  for (const auto& item : top.items) {
    EXPECT_EQ(item.value, totals.at(TopKKeyToString(item.key))) << TopKKeyToString(item.key);
    smallest = std::min(smallest, item.value);
  }
  int larger_outside = 0;
  for (const auto& [key, total] : totals) larger_outside += total > smallest ? 1 : 0;
  EXPECT_LE(larger_outside, 4);

  const ClusterStats stats = cluster->Stats();
  ASSERT_EQ(stats.shards.size(), 3U);
  std::size_t buckets = 0;
  std::size_t idle = 0;
  for (const ShardId shard : FirstShards(3)) {
    const ShardStats& one = stats.shards[static_cast<std::size_t>(ToInt(shard))];
    EXPECT_EQ(one.shard, shard);
    EXPECT_EQ(one.name, cluster->Resolver().ShardName(shard));
    EXPECT_EQ(one.buckets, scratch_->Directory().BucketsOf(shard).size());
    EXPECT_GT(one.pool.max_size, 0);
    buckets += one.buckets;
    idle += static_cast<std::size_t>(one.pool.idle);
  }
  EXPECT_EQ(buckets, static_cast<std::size_t>(kBucketCount));
  EXPECT_GT(idle, 0U);  // the scatters above left their connections idle
  EXPECT_GE(stats.scatters.scatters, 2U);
  EXPECT_EQ(stats.transactions.committed, 1U);
  ASSERT_TRUE(stats.watcher.has_value());
  EXPECT_EQ(stats.directory_version, scratch_->Directory().Version());

  cluster->CloseIdleConnections();
  for (const ShardStats& one : cluster->Stats().shards) EXPECT_EQ(one.pool.idle, 0) << one.name;
}

// Merges and top-k in a loop while a bucket moves to the empty shard: every
// answer is the reference's (the top-k the one before the move), none
// fails, and routing follows the move.
TEST_F(ClusterPg, MergesStayExactWhileABucketMoves) {
  const auto cluster = Cluster::Open(scratch_->Config());
  const MergePlan plan = AggregateQuery::From("order_items").Count("n").Sum("quantity", "q").Plan();
  const auto reference = OnReference("SELECT count(*), sum(quantity) FROM order_items");
  const std::string want_n = reference[0][0].c_str();
  const std::string want_q = reference[0][1].c_str();

  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::vector<std::string> errors;
  TopKQuery best;
  best.from = "order_items";
  best.key = "book_id";
  best.measure = "quantity";
  best.k = 5;
  const auto want_top = cluster->TopK(best).items;
  std::thread reader([&] {
    while (!stop.load()) {
      try {
        const MergedResult m = cluster->Merge(plan);
        if (m.rows.at(0).at(0).ToString() != want_n || m.rows.at(0).at(1).ToString() != want_q) ++wrong;
        if (cluster->TopK(best).items != want_top) ++wrong;
        ++answered;
      } catch (const std::exception& e) {
        errors.emplace_back(e.what());
        stop = true;
      }
    }
  });
  MoveOptions quick;
  quick.cleanup_grace = std::chrono::milliseconds(0);
  BucketMover mover{scratch_->Config(), quick};
  const MoveRecord done = mover.Move(BucketId{31}, ShardId{2});
  // Some answers after the flip too.
  const int before = answered.load();
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (answered.load() < before + 20 && Clock::now() < until && !stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(errors, std::vector<std::string>{});
  EXPECT_EQ(wrong.load(), 0) << "of " << answered.load();
  EXPECT_GT(answered.load(), 20);

  ASSERT_TRUE(done.directory_version.has_value());
  ASSERT_TRUE(cluster->Watcher()->WaitForVersion(*done.directory_version, Clock::now() + std::chrono::seconds(10)));
  CustomerId in_31{0};
  for (std::int32_t id = 1;; ++id) {
    if (BucketOf(CustomerId{id}) == BucketId{31}) {
      in_31 = CustomerId{id};
      break;
    }
  }
  EXPECT_EQ(cluster->Route(in_31).shard, ShardId{2});
}

}  // namespace
}  // namespace shardkit
