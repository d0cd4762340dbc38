// Cluster::Execute while buckets move: statements of every plan kind run in
// a loop (routed to a customer of the moving bucket, merged over every
// shard, restricted by customer_id IN (...) to the moving bucket's shard,
// finished by the server, DISTINCT without the key, a set operation, exact
// top-k, exact percentiles and COUNT(DISTINCT), gathered: a window over
// every shard, a CTE over every shard, stddev) while the bucket moves to
// another shard and back. The data does not change: every answer must equal
// the reference server's, and none may fail.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "support/sql_bookstore.hpp"

namespace shardkit {
namespace {

class SqlMovePg : public test::SqlBookstorePg {
 protected:
  static void SetUpTestSuite() { SetUpBookstore("sql_move_pgtest"); }
};

struct Case {
  std::string sql;
  SqlParams params;
  bool ordered = true;
  bool gathered = false;  // must take the gather path
};

TEST_F(SqlMovePg, EveryPlanKindAnswersExactlyWhileABucketMoves) {
  // A bucket of shard 0 and customers of it who have orders.
  const BucketId bucket{5};
  std::vector<std::string> customers;
  for (const auto& row :
       OnReference("SELECT DISTINCT customer_id FROM orders WHERE bucket = $1 ORDER BY 1 LIMIT 4", {"5"}).rows) {
    customers.push_back(*row[0]);
  }
  ASSERT_GE(customers.size(), 2U);
  const std::string in_list = fmt::format("{{{}}}", fmt::join(customers, ","));
  const std::vector<Case> cases = {
      {"SELECT order_id, total FROM orders WHERE customer_id = $1 ORDER BY order_id", {customers.front()}},
      {"SELECT status, count(*), sum(total), avg(total) FROM orders GROUP BY status ORDER BY status", {}},
      {"SELECT customer_id, count(*), sum(total) FROM orders WHERE customer_id = ANY($1) GROUP BY 1 ORDER BY 1",
       {in_list}},
      {"SELECT status, round(avg(total), 2), sum(total) - min(total) FROM orders GROUP BY status "
       "HAVING count(*) > 1 OR max(total) > 0 ORDER BY 1",
       {}},
      {"SELECT DISTINCT status FROM orders ORDER BY 1", {}},
      {"SELECT customer_id FROM orders WHERE customer_id = ANY($1) UNION SELECT customer_id FROM customers "
       "WHERE customer_id = $2 ORDER BY 1",
       {in_list, customers.back()}},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 5",
       {}},
      {"SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 7", {}},
      {"SELECT status, percentile_cont(0.5) WITHIN GROUP (ORDER BY total), count(DISTINCT book_id) FROM orders "
       "JOIN order_items USING (customer_id, order_id) GROUP BY status ORDER BY status",
       {}},
      // Gathered: each shard ships its rows (the filter applied there), one
      // shard runs the statement over all of them.
      {"SELECT order_id, rank() OVER (ORDER BY total DESC, order_id) FROM orders WHERE order_id % 7 = 1 "
       "ORDER BY order_id",
       {},
       true,
       true},
      {"WITH per_customer AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) "
       "SELECT n, count(*) FROM per_customer GROUP BY n ORDER BY n",
       {},
       true,
       true},
      {"SELECT status, stddev_samp(total) FROM orders GROUP BY status ORDER BY status", {}, true, true},
  };
  std::vector<Rows> want;
  for (const Case& c : cases) {
    Rows rows = OnReference(c.sql, c.params).rows;
    ASSERT_FALSE(rows.empty()) << c.sql;
    want.push_back(c.ordered ? rows : Sorted(rows));
  }

  std::atomic<bool> stop{false};
  std::atomic<int> runs{0};
  std::mutex failures_mutex;
  std::map<std::string, std::string> failures;  // statement -> first failure
  std::thread reader([&] {
    while (!stop.load()) {
      for (std::size_t i = 0; i < cases.size(); ++i) {
        try {
          const SqlResult got = cluster_->Execute(cases[i].sql, cases[i].params);
          if (cases[i].gathered && !got.plan.merge.starts_with("gathered")) {
            const std::lock_guard lock(failures_mutex);
            failures.emplace(cases[i].sql, "not gathered: " + got.plan.Describe());
          }
          if (got.rows != want[i]) {
            const std::lock_guard lock(failures_mutex);
            failures.emplace(cases[i].sql,
                             fmt::format("wrong answer: {} rows ({})", got.rows.size(), got.plan.Describe()));
          }
        } catch (const std::exception& e) {
          const std::lock_guard lock(failures_mutex);
          failures.emplace(cases[i].sql, e.what());
        }
        ++runs;
      }
    }
  });
  MoveOptions quick;
  quick.cleanup_grace = std::chrono::milliseconds(0);
  BucketMover mover{scratch_->Config(), quick};
  const int before = runs.load();
  for (const int target : {2, 0, 1, 0}) (void)mover.Move(bucket, ShardId{target});
  const int during = runs.load() - before;
  // A few rounds on the final directory too.
  const int settled = runs.load();
  while (runs.load() < settled + static_cast<int>(cases.size()) * 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  reader.join();
  for (const auto& [sql, failure] : failures) ADD_FAILURE() << sql << "\n  " << failure;
  EXPECT_GT(during, static_cast<int>(cases.size())) << "the statements hardly ran while the bucket moved";
  std::printf("%d statements while the bucket moved 4 times, %d in all\n", during, runs.load());
}

}  // namespace
}  // namespace shardkit
