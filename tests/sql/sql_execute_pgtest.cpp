// Cluster::Execute on a scratch cluster loaded with the Bookstore: a corpus
// of routed statements answers exactly what the unsharded reference server
// answers; writes land on the owning shard only, with the right bucket;
// refusals and syntax errors come back as SqlError; transactions bound to one
// customer take SQL that stays on its bucket and refuse the rest; and
// shardctl sql exits 1 with the position of a syntax error.
#include "shardkit/cluster.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/sql_bookstore.hpp"
#include "support/test_cluster.hpp"

extern char** environ;

namespace shardkit {
namespace {

class SqlExecutePg : public test::SqlBookstorePg {
 protected:
  static void SetUpTestSuite() { SetUpBookstore("sql_execute_pgtest"); }

  // Every row of a sharded table on each shard, all buckets visible.
  static std::vector<std::int64_t> CountPerShard(const std::string& where) {
    std::vector<std::int64_t> counts;
    for (int s = 0; s < scratch_->ShardCount(); ++s) {
      pqxx::connection c{scratch_->ShardDsn(s).Reveal()};
      pqxx::work tx{c};
      tx.exec("SET LOCAL shardkit.buckets = 'all'");
      counts.push_back(tx.exec("SELECT count(*) FROM " + where)[0][0].as<std::int64_t>());
    }
    return counts;
  }

  // `sql` is refused, naming `construct` and saying `reason` (a part of it).
  static void ExpectRefused(const std::string& sql, const SqlParams& params, const std::string& construct,
                            const std::string& reason) {
    SCOPED_TRACE(sql);
    try {
      (void)cluster_->Execute(sql, params);
      ADD_FAILURE() << "ran";
    } catch (const SqlError& e) {
      EXPECT_EQ(e.kind(), SqlError::Kind::kRefused) << e.what();
      EXPECT_EQ(e.construct(), construct) << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
      EXPECT_FALSE(e.advice().empty()) << e.what();
    }
  }
};

struct Case {
  std::string sql;  // {c}: the customer; $1 is the customer when `param`
  bool ordered;     // ORDER BY orders the rows completely
  bool param = false;
};

const std::vector<Case>& Corpus() {
  static const std::vector<Case> corpus = {
      {"SELECT order_id, ordered_at, total FROM orders WHERE customer_id = {c} ORDER BY ordered_at DESC, order_id",
       true},
      {"SELECT count(*), sum(total), avg(total), min(ordered_at), max(ordered_at) FROM orders WHERE customer_id = {c}",
       true},
      {"SELECT o.order_id, i.line_no, b.title, i.quantity * i.unit_price AS amount FROM orders o JOIN order_items i "
       "ON i.customer_id = o.customer_id AND i.order_id = o.order_id JOIN books b ON b.book_id = i.book_id "
       "WHERE o.customer_id = {c} ORDER BY 1, 2",
       true},
      {"SELECT b.category, sum(i.quantity) FROM order_items i JOIN books b USING (book_id) WHERE i.customer_id = {c} "
       "GROUP BY b.category",
       false},
      {"SELECT * FROM orders WHERE customer_id = {c} AND total > (SELECT avg(total) FROM orders o2 "
       "WHERE o2.customer_id = {c})",
       false},
      {"WITH mine AS (SELECT order_id, total FROM orders WHERE customer_id = {c}) SELECT order_id, total, "
       "sum(total) OVER (ORDER BY order_id) FROM mine ORDER BY order_id",
       true},
      {"SELECT order_id, total, rank() OVER (ORDER BY total DESC, order_id) FROM orders WHERE customer_id = $1 "
       "ORDER BY 3",
       true, true},
      {"SELECT c.name, c.email, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c "
       "WHERE c.customer_id = $1",
       true, true},
      {"SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
       "WHERE c.customer_id = {c}",
       false},
      {"SELECT order_id FROM orders WHERE customer_id = {c} ORDER BY total DESC, order_id LIMIT 2", true},
      {"SELECT status, count(*) FROM orders WHERE customer_id = {c} GROUP BY status ORDER BY status", true},
      {"SELECT i.order_id, count(*), sum(i.quantity) FROM order_items i WHERE i.customer_id = {c} GROUP BY i.order_id "
       "HAVING count(*) > 1",
       false},
      {"SELECT c.customer_id, c.bucket, c.name, c.email FROM customers c WHERE c.customer_id = {c} AND "
       "EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)",
       true},
      {"SELECT o.order_id, last.book_id FROM orders o, LATERAL (SELECT book_id FROM order_items i "
       "WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id ORDER BY line_no DESC LIMIT 1) last "
       "WHERE o.customer_id = {c}",
       false},
      {"SELECT order_id FROM orders WHERE customer_id = {c} UNION SELECT order_id FROM order_items "
       "WHERE customer_id = {c} ORDER BY 1",
       true},
      {"SELECT o.order_id, o.total, coalesce(sum(i.quantity * i.unit_price), 0) FROM orders o LEFT JOIN order_items i "
       "USING (customer_id, order_id) WHERE customer_id = $1 GROUP BY o.order_id, o.total",
       false, true},
      {"SELECT b.title, b.price FROM books b WHERE b.book_id IN (SELECT book_id FROM order_items "
       "WHERE customer_id = {c}) ORDER BY b.book_id",
       true},
      {"SELECT date_trunc('month', ordered_at) AS m, count(*) FROM orders WHERE customer_id = {c}::int GROUP BY 1 "
       "ORDER BY 1",
       true},
      {"SELECT row_number() OVER w, order_id, lag(total) OVER w FROM orders WHERE customer_id = '{c}'::integer "
       "WINDOW w AS (ORDER BY ordered_at, order_id) ORDER BY 1",
       true},
      {"SELECT count(DISTINCT book_id), max(quantity), string_agg(book_id::text, ',' ORDER BY order_id, line_no) "
       "FROM order_items WHERE customer_id = {c}",
       true},
      {"SELECT o.order_id, i.line_no FROM orders o JOIN order_items i ON i.customer_id = {c} AND "
       "o.customer_id = i.customer_id AND o.order_id = i.order_id ORDER BY 1, 2",
       true},
      {"SELECT c.name, o.total FROM orders o RIGHT JOIN customers c USING (customer_id) WHERE customer_id = $1", false,
       true},
  };
  return corpus;
}

TEST_F(SqlExecutePg, RoutedStatementsAnswerAsTheReferenceServer) {
  int statements = 0;
  int nonempty = 0;
  for (const int customer : {1, 42, 77, 150, 299}) {
    for (const Case& c : Corpus()) {
      std::string sql = c.sql;
      for (std::size_t at; (at = sql.find("{c}")) != std::string::npos;) sql.replace(at, 3, std::to_string(customer));
      const SqlParams params = c.param ? SqlParams{std::to_string(customer)} : SqlParams{};
      SCOPED_TRACE(sql);
      const SqlResult got = cluster_->Execute(sql, params);
      const Rows want = OnReference(sql, params).rows;
      EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kRouted);
      ASSERT_TRUE(got.plan.key);
      EXPECT_EQ(*got.plan.key, shardkit::CustomerId{customer});
      EXPECT_EQ(got.plan.shard, cluster_->Route(CustomerId{customer}).shard);
      if (c.ordered) {
        EXPECT_EQ(got.rows, want);
      } else {
        EXPECT_EQ(Sorted(got.rows), Sorted(want));
      }
      ++statements;
      if (!want.empty()) ++nonempty;
    }
  }
  EXPECT_GE(statements, 60);
  EXPECT_GE(nonempty, statements / 2);

  // A key parameter is read as the server reads an integer: spaces, a sign.
  const std::string by_key = "SELECT order_id, total FROM orders WHERE customer_id = $1 ORDER BY order_id";
  for (const char* text : {" 42", "+42", "42\t", " +42 "}) {
    const SqlResult got = cluster_->Execute(by_key, {text});
    ASSERT_TRUE(got.plan.key) << text;
    EXPECT_EQ(*got.plan.key, shardkit::CustomerId{42}) << text;
    EXPECT_EQ(got.rows, OnReference(by_key, {text}).rows) << text;
    EXPECT_FALSE(got.rows.empty());
  }

  // Reference tables alone: any shard.
  const std::string books = "SELECT category, count(*), min(price), max(title) FROM books GROUP BY 1 ORDER BY 1";
  const SqlResult got = cluster_->Execute(books);
  EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kAnyShard);
  EXPECT_EQ(got.rows, OnReference(books, {}).rows);
  EXPECT_EQ(got.columns, (std::vector<std::string>{"category", "count", "min", "max"}));
  EXPECT_EQ(got.types, (std::vector<unsigned>{25, 20, 1700, 25}));
}

TEST_F(SqlExecutePg, WritesLandOnTheOwningShardWithTheirBucket) {
  const CustomerId customer{4242};  // bucket 44
  const Route route = cluster_->Route(customer);
  const auto owner = static_cast<std::size_t>(ToInt(route.shard));

  const SqlResult inserted =
      cluster_->Execute("INSERT INTO customers (customer_id, name, email) VALUES (4242, 'Ada', 'ada@example.org')");
  EXPECT_EQ(inserted.affected, 1U);
  EXPECT_EQ(inserted.plan.shard, route.shard);
  EXPECT_EQ(inserted.plan.Describe(), fmt::format("routed: shard {} (bucket 44, customer 4242)", ToInt(route.shard)));
  std::vector<std::int64_t> expected(static_cast<std::size_t>(scratch_->ShardCount()), 0);
  expected[owner] = 1;
  EXPECT_EQ(CountPerShard("customers WHERE customer_id = 4242 AND bucket = 44"), expected);
  // An upsert on a unique key with customer_id: the conflict is decided on the row's shard.
  EXPECT_EQ(cluster_
                ->Execute("INSERT INTO customers (customer_id, name, email) VALUES (4242, 'Ada', 'x') ON CONFLICT "
                          "(customer_id) DO NOTHING")
                .affected,
            0U);
  const SqlResult upserted = cluster_->Execute(
      "INSERT INTO customers (customer_id, name, email) VALUES ($1, 'Ada L.', 'ada@example.org') ON CONFLICT "
      "(customer_id) DO UPDATE SET name = EXCLUDED.name WHERE customers.email = EXCLUDED.email RETURNING name, bucket",
      {"4242"});
  EXPECT_EQ(upserted.rows, (Rows{{"Ada L.", "44"}}));
  EXPECT_EQ(CountPerShard("customers WHERE customer_id = 4242 AND name = 'Ada L.'"), expected);

  const SqlResult order = cluster_->Execute(
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, $2, now(), 12.50), "
      "($1, $3, now(), 7) RETURNING bucket, order_id",
      {"4242", "900001", "900002"});
  EXPECT_EQ(order.affected, 2U);
  ASSERT_EQ(order.rows.size(), 2U);
  EXPECT_EQ(order.rows[0][0], "44");
  expected[owner] = 2;
  EXPECT_EQ(CountPerShard("orders WHERE customer_id = 4242 AND bucket = 44"), expected);
  // INSERT ... SELECT of the customer's own rows: on its shard, with its bucket.
  const SqlResult copied = cluster_->Execute(
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) SELECT $1, order_id + 10, ordered_at, total * 2 "
      "FROM orders WHERE customer_id = $1 AND order_id IN (900001, 900002) RETURNING order_id, total, bucket",
      {"4242"});
  EXPECT_EQ(Sorted(copied.rows), (Rows{{"900011", "25.00", "44"}, {"900012", "14.00", "44"}}));
  expected[owner] = 4;
  EXPECT_EQ(CountPerShard("orders WHERE customer_id = 4242 AND bucket = 44"), expected);
  EXPECT_EQ(cluster_->Execute("DELETE FROM orders WHERE customer_id = 4242 AND order_id > 900002").affected, 2U);
  expected[owner] = 2;

  const SqlResult updated =
      cluster_->Execute("UPDATE orders SET status = 'shipped' WHERE customer_id = $1 AND order_id = 900001", {"4242"});
  EXPECT_EQ(updated.affected, 1U);
  expected[owner] = 1;
  EXPECT_EQ(CountPerShard("orders WHERE customer_id = 4242 AND status = 'shipped'"), expected);
  const SqlResult mine =
      cluster_->Execute("SELECT order_id, status, total FROM orders WHERE customer_id = 4242 ORDER BY order_id");
  EXPECT_EQ(mine.rows, (Rows{{"900001", "shipped", "12.50"}, {"900002", "placed", "7.00"}}));

  const SqlResult deleted = cluster_->Execute("DELETE FROM orders WHERE customer_id = 4242");
  EXPECT_EQ(deleted.affected, 2U);
  expected[owner] = 0;
  EXPECT_EQ(CountPerShard("orders WHERE customer_id = 4242"), expected);
  EXPECT_EQ(cluster_->Execute("DELETE FROM customers WHERE customer_id = 4242").affected, 1U);

  // Explain runs nothing.
  const SqlPlanInfo plan =
      cluster_->Explain("INSERT INTO customers (customer_id, name, email) VALUES ($1, 'x', 'y')", {"4242"});
  EXPECT_EQ(plan.shard, route.shard);
  EXPECT_FALSE(plan.read_only);
  EXPECT_EQ(CountPerShard("customers WHERE customer_id = 4242"),
            std::vector<std::int64_t>(static_cast<std::size_t>(scratch_->ShardCount()), 0));
}

// The first customer after `after` whose bucket is (or is not) `bucket`.
CustomerId CustomerOfBucket(BucketId bucket, int after, bool same = true) {
  for (int c = after + 1;; ++c) {
    if ((BucketOf(CustomerId{c}) == bucket) == same) return CustomerId{c};
  }
}

TEST_F(SqlExecutePg, TransactionsTakeSqlThatStaysOnTheirBucket) {
  const CustomerId customer{4242};  // bucket 44
  const CustomerId neighbour = CustomerOfBucket(BucketId{44}, 4242);
  const auto owner = static_cast<std::size_t>(ToInt(cluster_->Route(customer).shard));
  std::vector<std::int64_t> none(static_cast<std::size_t>(scratch_->ShardCount()), 0);
  std::vector<std::int64_t> expected = none;

  RoutedOutcome outcome;
  const std::size_t books = cluster_->Transact(
      customer,
      [&](SqlTransaction& tx) {
        EXPECT_EQ(tx.At().bucket, BucketId{44});
        EXPECT_EQ(tx.Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, 900101, "
                             "now(), 3.50)",
                             {"4242"})
                      .affected,
                  1U);
        EXPECT_EQ(tx.Execute("INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) "
                             "VALUES ($1, 900101, 1, 7, 2, 1.75) RETURNING bucket",
                             {"4242"})
                      .rows,
                  (Rows{{"44"}}));
        // Another customer of the same bucket: the same shard and fence.
        (void)tx.Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, 900102, now(), 1)",
                         {std::to_string(ToInt(neighbour))});
        // Its own uncommitted rows are visible to it, and to nobody else yet.
        EXPECT_EQ(tx.Execute("SELECT o.total, i.quantity FROM orders o JOIN order_items i USING (customer_id, "
                             "order_id) WHERE o.customer_id = 4242 AND o.order_id = 900101")
                      .rows,
                  (Rows{{"3.50", "2"}}));
        EXPECT_EQ(CountPerShard("orders WHERE order_id IN (900101, 900102)"), none);
        // An upsert, and an INSERT ... SELECT of the customer's own rows.
        EXPECT_EQ(tx.Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, 900101, now(), "
                             "3.50) ON CONFLICT (customer_id, order_id) DO UPDATE SET total = EXCLUDED.total",
                             {"4242"})
                      .affected,
                  1U);
        EXPECT_EQ(tx.Execute("INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) "
                             "SELECT $1, order_id, line_no + 1, book_id, quantity, unit_price FROM order_items WHERE "
                             "customer_id = $1 AND order_id = 900101 RETURNING bucket, line_no",
                             {"4242"})
                      .rows,
                  (Rows{{"44", "2"}}));
        // Reference tables are on every shard.
        const SqlResult sql_books = tx.Execute("SELECT count(*) FROM books");
        EXPECT_EQ(sql_books.rows, OnReference("SELECT count(*) FROM books", {}).rows);
        return sql_books.rows.size();
      },
      {}, &outcome);
  EXPECT_EQ(books, 1U);
  EXPECT_EQ(ToInt(outcome.shard), static_cast<int>(owner));
  expected[owner] = 2;
  EXPECT_EQ(CountPerShard("orders WHERE order_id IN (900101, 900102) AND bucket = 44"), expected);
  EXPECT_EQ(CountPerShard("order_items WHERE order_id = 900101 AND bucket = 44"), expected);
  (void)cluster_->Execute("DELETE FROM order_items WHERE customer_id = 4242 AND order_id = 900101");
  (void)cluster_->Execute("DELETE FROM orders WHERE customer_id = 4242 AND order_id = 900101");
  (void)cluster_->Execute("DELETE FROM orders WHERE customer_id = $1 AND order_id = 900102",
                          {std::to_string(ToInt(neighbour))});
  EXPECT_EQ(CountPerShard("orders WHERE order_id IN (900101, 900102)"), none);
}

TEST_F(SqlExecutePg, TransactionsRefuseWhatLeavesTheirBucketAndCommitNothing) {
  const CustomerId customer{4242};  // bucket 44
  const CustomerId elsewhere = CustomerOfBucket(BucketId{44}, 4242, false);
  const std::vector<std::int64_t> none(static_cast<std::size_t>(scratch_->ShardCount()), 0);
  const auto insert = [](SqlTransaction& tx, int order_id) {
    (void)tx.Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES (4242, $1, now(), 1)",
                     {std::to_string(order_id)});
  };
  const std::vector<std::pair<std::string, SqlParams>> leaving = {
      {"UPDATE orders SET status = 'x' WHERE customer_id = $1", {std::to_string(ToInt(elsewhere))}},
      {"SELECT count(*) FROM orders", {}},
      {"SELECT * FROM orders WHERE customer_id IN (4242, $1)", {std::to_string(ToInt(elsewhere))}},
  };
  for (const auto& [sql, params] : leaving) {
    try {
      cluster_->Transact(customer, [&](SqlTransaction& tx) {
        insert(tx, 900201);
        (void)tx.Execute(sql, params);
      });
      ADD_FAILURE() << "ran in the transaction: " << sql;
    } catch (const SqlError& e) {
      EXPECT_EQ(e.kind(), SqlError::Kind::kRefused) << e.what();
      EXPECT_NE(e.reason().find("bound to customer 4242 (bucket 44"), std::string::npos) << e.what();
    }
    EXPECT_EQ(CountPerShard("orders WHERE order_id = 900201"), none) << sql;
  }
  // Transaction control is the callback's: refused as text.
  for (const char* control : {"COMMIT", "ROLLBACK", "SAVEPOINT s", "BEGIN"}) {
    EXPECT_THROW(cluster_->Transact(customer, [&](SqlTransaction& tx) { (void)tx.Execute(control); }), SqlError)
        << control;
  }
  // A server error rolls back what came before it.
  EXPECT_THROW(cluster_->Transact(customer,
                                  [&](SqlTransaction& tx) {
                                    insert(tx, 900202);
                                    (void)tx.Execute("SELECT no_such_column FROM orders WHERE customer_id = 4242");
                                  }),
               std::exception);
  EXPECT_EQ(CountPerShard("orders WHERE order_id = 900202"), none);
  // A refusal runs nothing on the server: caught, the transaction goes on and commits.
  cluster_->Transact(customer, [&](SqlTransaction& tx) {
    insert(tx, 900203);
    EXPECT_THROW((void)tx.Execute("SELECT count(*) FROM orders"), SqlError);
    insert(tx, 900204);
  });
  std::vector<std::int64_t> two = none;
  two[static_cast<std::size_t>(ToInt(cluster_->Route(customer).shard))] = 2;
  EXPECT_EQ(CountPerShard("orders WHERE order_id IN (900203, 900204)"), two);
  (void)cluster_->Execute("DELETE FROM orders WHERE customer_id = 4242 AND order_id IN (900203, 900204)");
}

TEST_F(SqlExecutePg, RefusalsAndSyntaxErrorsAreSqlErrors) {
  try {
    (void)cluster_->Execute("SELECT * FROM orders o JOIN order_items i ON i.order_id = o.order_id FOR SHARE");
    ADD_FAILURE() << "rows of every shard were locked";
  } catch (const SqlError& e) {
    EXPECT_EQ(e.kind(), SqlError::Kind::kRefused);
    EXPECT_EQ(e.column(), 70);
    EXPECT_NE(e.reason().find("not locked together"), std::string::npos) << e.what();
  }
  try {
    (void)cluster_->Execute("SELECT * FROM orders WHERE customer_id = = 1");
    ADD_FAILURE() << "no syntax error";
  } catch (const SqlError& e) {
    EXPECT_EQ(e.kind(), SqlError::Kind::kSyntax);
    EXPECT_EQ(e.position(), 42);
  }
  EXPECT_THROW((void)cluster_->Execute("SELECT * FROM shardkit_bucket_ownership"), SqlError);
  EXPECT_THROW((void)cluster_->Execute("SELECT * FROM orders WHERE customer_id = $1", {std::nullopt}), SqlError);
  EXPECT_THROW((void)cluster_->Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES "
                                       "(1, 1, now(), 1), (2, 2, now(), 1), (3, 3, now(), 1), (4, 4, now(), 1)"),
               SqlError);
  // A server's error is the shard's, as from Run().
  EXPECT_THROW((void)cluster_->Execute("SELECT no_such_column FROM orders WHERE customer_id = 1"), std::exception);
}

TEST_F(SqlExecutePg, CachedPlansNeedNoParse) {
  using Clock = std::chrono::steady_clock;
  const std::string sql =
      "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";
  EXPECT_FALSE(cluster_->Explain(sql + " /* first */", {"42"}).cached);
  EXPECT_TRUE(cluster_->Explain(sql + " /* first */", {"43"}).cached);

  constexpr int kRuns = 2000;
  auto started = Clock::now();
  for (int i = 0; i < kRuns; ++i) (void)cluster_->Explain(sql, {std::to_string(i)});
  const double cached_us = std::chrono::duration<double, std::micro>(Clock::now() - started).count() / kRuns;
  started = Clock::now();
  for (int i = 0; i < kRuns; ++i) (void)cluster_->Explain(sql + " -- " + std::to_string(i), {"42"});
  const double new_us = std::chrono::duration<double, std::micro>(Clock::now() - started).count() / kRuns;

  constexpr int kQueries = 300;
  started = Clock::now();
  for (int i = 0; i < kQueries; ++i) (void)cluster_->Execute(sql, {std::to_string(1 + i % 300)});
  const double execute_us = std::chrono::duration<double, std::micro>(Clock::now() - started).count() / kQueries;
  started = Clock::now();
  for (int i = 0; i < kQueries; ++i) {
    const Route route = cluster_->Route(CustomerId{1 + i % 300});
    auto lease = route.pool.Acquire();
    pqxx::read_transaction tx{*lease};
    tx.exec("SELECT set_config('shardkit.buckets', 'all', true)");
    (void)tx.exec_params(sql, 1 + i % 300);
    tx.commit();
  }
  const double raw_us = std::chrono::duration<double, std::micro>(Clock::now() - started).count() / kQueries;
  std::printf("plan (Explain): cached %.1f us, new %.1f us; my orders: Execute %.0f us, Resolve + libpqxx %.0f us\n",
              cached_us, new_us, execute_us, raw_us);
  EXPECT_LT(cached_us, new_us);
}

struct ScatterCase {
  std::string sql;
  bool ordered;  // ORDER BY orders the rows completely
  SqlParams params = {};
};

// Statements over every customer: merged aggregates and concatenated rows.
const std::vector<ScatterCase>& ScatterCorpus() {
  static const std::vector<ScatterCase> corpus = {
      {"SELECT count(*) FROM orders", true},
      {"SELECT count(*), sum(total), avg(total), min(total), max(total), min(order_id) FROM orders", true},
      {"SELECT status, count(*) FROM orders GROUP BY status ORDER BY status", true},
      {"SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
       "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 GROUP BY i.book_id ORDER BY sold DESC, i.book_id "
       "LIMIT 10",
       true,
       {"2020-01-01"}},
      {"SELECT b.category, sum(i.quantity), count(DISTINCT i.customer_id) FROM order_items i JOIN books b "
       "USING (book_id) GROUP BY b.category ORDER BY 1",
       true},
      {"SELECT date_trunc('month', ordered_at AT TIME ZONE 'UTC') AS m, count(*), sum(total) FROM orders GROUP BY 1 "
       "ORDER BY 1",
       true},
      {"SELECT date_trunc('month', ordered_at) AS m, count(*) FROM orders GROUP BY 1", false},
      {"SELECT status, count(*) FROM orders GROUP BY status HAVING count(*) > 10 ORDER BY 2 DESC, 1", true},
      {"SELECT customer_id, count(*) FROM orders GROUP BY customer_id ORDER BY 2 DESC, 1 LIMIT 5 OFFSET 2", true},
      {"SELECT o.status, sum(i.quantity * i.unit_price) AS revenue FROM orders o JOIN order_items i "
       "USING (customer_id, order_id) GROUP BY o.status ORDER BY revenue DESC",
       true},
      {"SELECT book_id FROM order_items GROUP BY book_id HAVING sum(quantity) >= 20 ORDER BY book_id", true},
      {"SELECT book_id, count(*) FROM order_items GROUP BY book_id ORDER BY sum(quantity) DESC, book_id LIMIT 3", true},
      {"SELECT count(*) FILTER (WHERE status = 'shipped'), count(*) FROM orders", true},
      {"SELECT max(total), min(status), count(*) FROM orders WHERE total > $1", true, {"15"}},
      {"SELECT count(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id", true},
      {"SELECT sum(total), count(*), avg(total), max(status) FROM orders WHERE status = 'nope'", true},
      {"SELECT status, avg(total) FROM orders GROUP BY status ORDER BY avg(total) DESC, status", true},
      {"SELECT extract(year FROM ordered_at) AS y, count(*) FROM orders GROUP BY extract(year FROM ordered_at) "
       "ORDER BY y",
       true},
      {"SELECT status, count(*) AS n FROM orders GROUP BY status ORDER BY n DESC NULLS LAST, status", true},
      {"SELECT book_id, min(unit_price), max(unit_price) FROM order_items GROUP BY 1 ORDER BY 1 LIMIT 5", true},
      {"SELECT status FROM orders GROUP BY status ORDER BY status LIMIT 0", true},
      {"SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 7", true},
      {"SELECT customer_id, order_id FROM orders ORDER BY customer_id, order_id LIMIT 5 OFFSET 3", true},
      {"SELECT * FROM orders ORDER BY total DESC, customer_id, order_id LIMIT 5", true},
      {"SELECT i.order_id, b.title FROM order_items i JOIN books b USING (book_id) "
       "ORDER BY b.title, i.customer_id, i.order_id, i.line_no LIMIT 10",
       true},
      {"SELECT status, order_id AS id FROM orders ORDER BY 1 DESC NULLS LAST, id LIMIT 4", true},
      {"SELECT order_id, total FROM orders WHERE total > $1 ORDER BY total, order_id OFFSET 10", true, {"15"}},
      {"SELECT * FROM orders WHERE customer_id = 1 OR customer_id = 2", false},
      {"SELECT order_id, total FROM orders WHERE total > 25", false},
      {"SELECT b.title, i.quantity FROM order_items i JOIN books b ON b.book_id = i.book_id WHERE i.quantity > 1",
       false},
      {"SELECT c.name, o.order_id FROM customers c LEFT JOIN orders o USING (customer_id) WHERE c.customer_id < 20",
       false},
  };
  return corpus;
}

TEST_F(SqlExecutePg, ScatterStatementsAnswerAsTheReferenceServer) {
  int nonempty = 0;
  for (const ScatterCase& c : ScatterCorpus()) {
    SCOPED_TRACE(c.sql);
    const SqlResult got = cluster_->Execute(c.sql, c.params);
    const Rows want = OnReference(c.sql, c.params).rows;
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_EQ(got.plan.shard_count, scratch_->ShardCount());
    if (c.ordered) {
      EXPECT_EQ(got.rows, want);
    } else {
      EXPECT_EQ(Sorted(got.rows), Sorted(want));
    }
    if (!want.empty()) ++nonempty;
  }
  EXPECT_GE(nonempty, static_cast<int>(ScatterCorpus().size()) - 3);

  // Exact top-k; on 50 books its cost model picks all partials (TPUT's
  // round trips cost more than 50 rows: after phase 1 on a first run, as
  // one plain scatter once the statement ran before), so the shards sent
  // every book's partial sum; ten rows came out.
  const SqlResult best = cluster_->Execute(ScatterCorpus()[3].sql, ScatterCorpus()[3].params);
  EXPECT_EQ(best.rows.size(), 10U);
  EXPECT_TRUE(best.plan.merge.starts_with("exact top-k (auto)")) << best.plan.merge;
  EXPECT_NE(best.plan.merge.find("all partials (exact)"), std::string::npos) << best.plan.merge;
  EXPECT_GT(best.rows_received, 2 * best.rows.size());

  // LIMIT without ORDER BY: any that many rows, as on one server.
  EXPECT_EQ(cluster_->Execute("SELECT order_id FROM orders LIMIT 5").rows.size(), 5U);

  // Names and types as the server gives them.
  const std::string sql = "SELECT status, count(*), sum(total) AS revenue, avg(total) FROM orders GROUP BY 1";
  const SqlResult got = cluster_->Execute(sql);
  EXPECT_EQ(got.columns, (std::vector<std::string>{"status", "count", "revenue", "avg"}));
  EXPECT_EQ(got.types, (std::vector<unsigned>{25, 20, 1700, 1700}));
  const std::string plan = cluster_->Explain(sql).Describe();
  EXPECT_EQ(plan.rfind(fmt::format("scatter over {} shards, per-shard SQL: SELECT ", scratch_->ShardCount()), 0), 0U)
      << plan;
  EXPECT_NE(plan.find("; merge: "), std::string::npos) << plan;
}

// customer_id IN (...) / = ANY(...): a scatter over the shards of those
// customers' buckets only, merged as over every shard.
TEST_F(SqlExecutePg, KeyListsScatterOnlyToTheirCustomersShards) {
  struct KeyCase {
    std::string sql;
    bool ordered;
    SqlParams params;
    std::vector<int> customers;  // what the lists name (NULLs dropped)
  };
  const std::vector<KeyCase> cases = {
      {"SELECT count(*), sum(total), avg(total) FROM orders WHERE customer_id IN (1, 2, 3)", true, {}, {1, 2, 3}},
      {"SELECT customer_id, count(*), max(total) FROM orders WHERE customer_id IN (5, 60, 149) GROUP BY 1 "
       "ORDER BY 1",
       true,
       {},
       {5, 60, 149}},
      {"SELECT order_id, customer_id, total FROM orders WHERE customer_id = ANY($1) ORDER BY total DESC, order_id "
       "LIMIT 7",
       true,
       {"{42, 77, 150, 299, NULL}"},
       {42, 77, 150, 299}},
      {"SELECT order_id, total FROM orders WHERE customer_id = ANY($1::int[]) AND total > $2",
       false,
       {"{1,2,3,4,5,6,7,8,9,10}", "5"},
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
      {"SELECT o.order_id, i.line_no, i.quantity FROM orders o JOIN order_items i USING (customer_id, order_id) "
       "WHERE o.customer_id = ANY(ARRAY[7, 8, $1]) ORDER BY 1, 2",
       true,
       {"9"},
       {7, 8, 9}},
      {"SELECT i.book_id, sum(i.quantity) FROM order_items i WHERE i.customer_id IN ($1, $2, NULL) "
       "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3 OFFSET 1",
       true,
       {"11", std::nullopt},
       {11}},
      {"SELECT count(*), min(total) FROM orders WHERE customer_id IN (NULL)", true, {}, {}},
      {"SELECT order_id FROM orders WHERE customer_id = ANY($1)", false, {std::nullopt}, {}},
      {"SELECT count(*) FROM customers c LEFT JOIN orders o USING (customer_id) WHERE customer_id = ANY('{13,14}')",
       true,
       {},
       {13, 14}},
  };
  const auto directory = cluster_->Resolver().Directory();
  for (const KeyCase& c : cases) {
    SCOPED_TRACE(c.sql);
    const SqlResult got = cluster_->Execute(c.sql, c.params);
    const Reference want = OnReference(c.sql, c.params);
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(c.ordered ? got.rows : Sorted(got.rows), c.ordered ? want.rows : Sorted(want.rows));
    std::vector<ShardId> shards;
    for (const int customer : c.customers) shards.push_back(directory->ShardOf(BucketOf(CustomerId{customer})));
    if (shards.empty()) shards.push_back(directory->ShardOf(BucketId{0}));  // one shard answers for no customer
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    EXPECT_EQ(got.plan.shards, shards);
    EXPECT_EQ(got.plan.shard_count, static_cast<int>(shards.size()));
    EXPECT_EQ(got.plan.total_shards, scratch_->ShardCount());
    EXPECT_EQ(cluster_->Explain(c.sql, c.params).shards, shards);
  }

  // All on one shard (the common case): only that shard is asked.
  const auto one = [&](int customer) { return directory->ShardOf(BucketOf(CustomerId{customer})); };
  std::vector<int> same;
  for (int c = 1; c <= 300 && same.size() < 3; ++c) {
    if (one(c) == one(1)) same.push_back(c);
  }
  const std::string sql = fmt::format(
      "SELECT order_id, total FROM orders WHERE customer_id IN ({}, {}, {}) "
      "ORDER BY order_id",
      same[0], same[1], same[2]);
  const auto before = cluster_->Stats().scatters;
  const SqlResult got = cluster_->Execute(sql);
  const auto after = cluster_->Stats().scatters;
  EXPECT_EQ(got.rows, OnReference(sql, {}).rows);
  EXPECT_FALSE(got.rows.empty());
  EXPECT_EQ(got.plan.shards, std::vector<ShardId>{one(1)});
  EXPECT_EQ(after.shard_requests - before.shard_requests, 1U);
  EXPECT_EQ(after.single_shard - before.single_shard, 1U);
  const std::string plan = got.plan.Describe();
  EXPECT_EQ(plan.rfind(fmt::format("scatter over 1 of {} shards (shard {}), per-shard SQL: SELECT ",
                                   scratch_->ShardCount(), ToInt(one(1))),
                       0),
            0U)
      << plan;

  // Writes: routed when the customers share a bucket, else refused.
  std::vector<int> bucket_mates;
  for (int c = 1; c <= 300; ++c) {
    if (BucketOf(CustomerId{c}) == BucketOf(CustomerId{5})) bucket_mates.push_back(c);
  }
  ASSERT_GE(bucket_mates.size(), 2U);
  const std::string update =
      fmt::format("UPDATE orders SET status = status WHERE customer_id IN ({}, {}) AND order_id < 0", bucket_mates[0],
                  bucket_mates[1]);
  const SqlResult updated = cluster_->Execute(update);
  EXPECT_EQ(updated.plan.kind, SqlPlanInfo::Kind::kRouted);
  EXPECT_EQ(updated.plan.shard, one(5));
  int other_bucket_same_shard = 0;
  int other_shard = 0;
  for (int c = 1; c <= 300; ++c) {
    if (BucketOf(CustomerId{c}) != BucketOf(CustomerId{5}) && one(c) == one(5) && other_bucket_same_shard == 0)
      other_bucket_same_shard = c;
    if (one(c) != one(5) && other_shard == 0) other_shard = c;
  }
  for (const auto& [customer, reason] : std::vector<std::pair<int, std::string>>{
           {other_bucket_same_shard, "one bucket's rows"}, {other_shard, "atomic on one shard only"}}) {
    ExpectRefused("DELETE FROM orders WHERE customer_id = ANY($1) AND order_id < 0",
                  {fmt::format("{{5,{}}}", customer)}, "DELETE ... IN", reason);
  }
}

// LIMIT $n / OFFSET $n over every shard: bound at each execution (one
// cached plan), NULL as no limit / no offset, after the merge.
TEST_F(SqlExecutePg, LimitAndOffsetParametersAreBoundAtExecution) {
  const std::string rows = "SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT $1 OFFSET $2";
  const std::string groups =
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY 1 ORDER BY sold DESC, 1 OFFSET $2 LIMIT $1";
  const std::string plain =
      "SELECT customer_id, order_id FROM orders WHERE total > $3 ORDER BY 1, 2 LIMIT $1 "
      "OFFSET $2";
  const std::vector<SqlParams> values = {
      {"5", "0"},          {"3", "4"},
      {"0", "2"},          {std::nullopt, "590"},
      {"4", std::nullopt}, {std::nullopt, std::nullopt},
      {"1000000", "3"},    {"+2", "007"},
      {" 3 ", "+1\n"},     {"9223372036854775807", "0"},
  };
  for (const SqlParams& p : values) {
    for (const std::string& sql : {rows, groups, plain}) {
      SqlParams params = p;
      if (sql == plain) params.emplace_back("20");
      SCOPED_TRACE(sql + " with " + p[0].value_or("NULL") + ", " + p[1].value_or("NULL"));
      const SqlResult got = cluster_->Execute(sql, params);
      EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
      EXPECT_EQ(got.rows, OnReference(sql, params).rows);
    }
  }
  EXPECT_TRUE(cluster_->Explain(rows, {"1", "2"}).cached);
  EXPECT_NE(cluster_->Explain(rows, {"1", "2"}).merge.find("LIMIT $1"), std::string::npos);
  // Each shard sends at most OFFSET + LIMIT rows.
  const SqlResult few = cluster_->Execute(rows, {"2", "1"});
  EXPECT_LE(few.rows_received, static_cast<std::size_t>(3 * scratch_->ShardCount()));
  // A scalar aggregate's one row, and a key list with them.
  for (const SqlParams& p : std::vector<SqlParams>{{"1", "0"}, {"0", "0"}, {"1", "1"}, {std::nullopt, "0"}}) {
    const std::string sql = "SELECT count(*), sum(total) FROM orders LIMIT $1 OFFSET $2";
    EXPECT_EQ(cluster_->Execute(sql, p).rows, OnReference(sql, p).rows) << sql;
    const std::string listed =
        "SELECT order_id FROM orders WHERE customer_id IN (1, 2, 3) ORDER BY 1 LIMIT $1 OFFSET $2";
    EXPECT_EQ(cluster_->Execute(listed, p).rows, OnReference(listed, p).rows) << listed;
  }

  const std::vector<std::tuple<std::string, SqlParams, std::string, std::string>> refused = {
      {rows, {"-1", "0"}, "LIMIT $1", "must not be negative"},
      {rows, {"1", "-1"}, "OFFSET $2", "must not be negative"},
      {rows, {"1.5", "0"}, "LIMIT $1", "is not a bigint"},
      {rows, {"1"}, "$2", "go up to $2 and 1 value was given"},
      {rows, {"9223372036854775807", "1"}, "LIMIT + OFFSET", "more than a bigint holds"},
  };
  for (const auto& [sql, params, construct, reason] : refused) ExpectRefused(sql, params, construct, reason);
  // A LIMIT parameter used elsewhere too is not bound by the merge: the statement is gathered.
  const std::string shared = "SELECT order_id FROM orders WHERE order_id > $1 ORDER BY 1 LIMIT $1";
  EXPECT_EQ(cluster_->Execute(shared, {"5"}).rows, OnReference(shared, {"5"}).rows);
}

// DISTINCT over every shard: each shard's distinct rows when the shard key
// is among the columns (equal rows are one customer's, so on one shard);
// without it, deduplicated again by the server over all shards' rows.
TEST_F(SqlExecutePg, DistinctIsExactWithAndWithoutTheShardKey) {
  const std::vector<std::tuple<std::string, bool, bool>> answered = {
      {"SELECT DISTINCT customer_id, status FROM orders", false, false},
      {"SELECT DISTINCT o.customer_id, o.status FROM orders o ORDER BY 1, 2", true, false},
      {"SELECT DISTINCT status, customer_id FROM orders ORDER BY status DESC, customer_id LIMIT 7 OFFSET 3", true,
       false},
      {"SELECT DISTINCT i.customer_id, b.category FROM order_items i JOIN books b USING (book_id) ORDER BY 1, 2", true,
       false},
      {"SELECT DISTINCT * FROM orders ORDER BY customer_id, order_id LIMIT 5", true, false},
      {"SELECT DISTINCT o.* FROM orders o JOIN order_items i USING (customer_id, order_id) WHERE i.quantity >= 1 "
       "ORDER BY o.customer_id, o.order_id",
       true, false},
      {"SELECT DISTINCT ON (customer_id) customer_id, order_id, total FROM orders ORDER BY customer_id, total DESC, "
       "order_id",
       true, false},
      {"SELECT DISTINCT ON (o.customer_id, o.status) o.status, o.total FROM orders o "
       "ORDER BY o.customer_id, o.status, o.total, o.order_id LIMIT 9",
       true, false},
      {"SELECT DISTINCT customer_id FROM orders WHERE customer_id IN (1, 2, 3, 4) ORDER BY 1", true, false},
      // Without the key: finished on one shard.
      {"SELECT DISTINCT status FROM orders", false, true},
      {"SELECT DISTINCT o.customer_id, c.name FROM customers c LEFT JOIN orders o USING (customer_id) ORDER BY 2, 1",
       true, true},
      {"SELECT DISTINCT customer_id + 0 FROM orders ORDER BY 1 DESC LIMIT 4", true, true},
      {"SELECT DISTINCT customer_id, count(*) FROM orders GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5", true, true},
      {"SELECT DISTINCT b.book_id FROM order_items i JOIN books b USING (book_id) ORDER BY 1 OFFSET 3", true, true},
  };
  for (const auto& [sql, ordered, finished] : answered) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql);
    const Reference want = OnReference(sql, {});
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_EQ(got.plan.merge.find("one shard") != std::string::npos, finished) << got.plan.merge;
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(ordered ? got.rows : Sorted(got.rows), ordered ? want.rows : Sorted(want.rows));
    EXPECT_FALSE(want.rows.empty());
  }
}

// What partials cannot finish alone, the server finishes over the merged
// rows: the plan says so, the answer is the reference's, the parameters
// keep their types wherever they are used.
TEST_F(SqlExecutePg, ExpressionsOverAggregatesAreFinishedByTheServer) {
  const std::string sql =
      "SELECT status, round(avg(total), 2) AS avg2, sum(total) - min(total) AS spread, "
      "CASE WHEN count(*) > $2 THEN 'many' ELSE 'few' END AS size FROM orders WHERE total > $1 GROUP BY status "
      "HAVING sum(total) > 2 * max(total) OR count(*) < $2 ORDER BY spread DESC, status LIMIT $3";
  const SqlParams params{"5", "100", "2"};
  const SqlResult got = cluster_->Execute(sql, params);
  const Reference want = OnReference(sql, params);
  EXPECT_EQ(got.columns, want.columns);
  EXPECT_EQ(got.types, want.types);
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_FALSE(got.rows.empty());
  EXPECT_NE(got.plan.merge.find("then on one shard, over the merged rows"), std::string::npos) << got.plan.merge;
  // The shards sent their groups; the finishing step is not counted as rows received.
  EXPECT_GT(got.rows_received, got.rows.size());
  const SqlPlanInfo explained = cluster_->Explain(sql, params);
  EXPECT_NE(explained.Describe().find("round(_m1._a1, 2)"), std::string::npos) << explained.Describe();

  // A server error in the final expression is the server's (division by zero), not a wrong answer.
  try {
    (void)cluster_->Execute("SELECT status, sum(total) / (count(*) - count(*)) FROM orders GROUP BY status");
    ADD_FAILURE() << "divided by zero";
  } catch (const ScatterError& e) {
    EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos) << e.what();
  }
}

// Set operations: each arm as a statement of its own, combined by the server.
TEST_F(SqlExecutePg, SetOperationsCombineTheirArmsExactly) {
  const std::vector<std::tuple<std::string, SqlParams, bool>> cases = {
      {"SELECT status FROM orders UNION SELECT category FROM books ORDER BY 1", {}, true},
      {"SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM orders WHERE total > $1 ORDER BY 1 LIMIT 20",
       {"30"},
       true},
      {"SELECT order_id, total FROM orders WHERE customer_id = $1 UNION ALL SELECT order_id, total FROM orders "
       "WHERE customer_id = $2",
       {"42", "77"},
       false},
      {"SELECT customer_id FROM orders GROUP BY 1 HAVING count(*) > 1 INTERSECT "
       "SELECT customer_id FROM order_items GROUP BY 1 HAVING count(*) > 3 ORDER BY 1",
       {},
       true},
      {"SELECT 1::int AS n UNION ALL SELECT count(*) FROM orders ORDER BY n", {}, true},
  };
  for (const auto& [sql, params, ordered] : cases) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql, params);
    const Reference want = OnReference(sql, params);
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_NE(got.plan.merge.find("set operation over"), std::string::npos) << got.plan.merge;
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(ordered ? got.rows : Sorted(got.rows), ordered ? want.rows : Sorted(want.rows));
    EXPECT_FALSE(want.rows.empty());
  }
  // Routed when every arm is pinned to one customer.
  const SqlResult routed = cluster_->Execute(
      "SELECT order_id FROM orders WHERE customer_id = 42 UNION SELECT order_id FROM order_items WHERE customer_id = "
      "42");
  EXPECT_EQ(routed.plan.kind, SqlPlanInfo::Kind::kRouted);
}

// An outer join that preserves a reference table (or a function's rows)
// over every shard would repeat each unmatched row once per shard, and keep
// a NULL-extended row for one matched on another shard: not merged but
// gathered onto one server. Preserving the sharded side, or pinned to one
// customer's shard, it runs on the shards.
TEST_F(SqlExecutePg, OuterJoinsPreservingReplicatedRowsAreExact) {
  const std::vector<std::pair<std::string, std::string>> gathered = {
      {"SELECT b.book_id, oi.order_id FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id AND "
       "oi.quantity < 0 WHERE b.book_id = 1",
       "the LEFT JOIN that preserves books"},
      {"SELECT count(*) FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id AND oi.quantity > 5 "
       "WHERE b.book_id BETWEEN 1 AND 20",
       "the LEFT JOIN that preserves books"},
      {"SELECT b.book_id, count(oi.order_id) FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id "
       "WHERE b.book_id <= 5 GROUP BY b.book_id",
       "the LEFT JOIN that preserves books"},
      {"SELECT count(*) FROM order_items oi RIGHT JOIN books b ON oi.book_id = b.book_id",
       "the RIGHT JOIN that preserves books"},
      {"SELECT count(*) FROM books b FULL JOIN order_items oi ON oi.book_id = b.book_id",
       "the FULL JOIN that preserves books"},
      {"SELECT count(*) FROM generate_series(1, 5) g LEFT JOIN orders o ON o.order_id = g",
       "the LEFT JOIN that preserves function"},
      {"SELECT count(*) FROM orders o RIGHT JOIN (books b JOIN books b2 USING (book_id)) ON o.total = b.price",
       "the RIGHT JOIN that preserves books"},
  };
  for (const auto& [sql, construct] : gathered) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql);
    EXPECT_NE(got.plan.merge.find("gathered (not merged: " + construct), std::string::npos) << got.plan.merge;
    EXPECT_EQ(Sorted(got.rows), Sorted(OnReference(sql, {}).rows));
  }
  const std::vector<std::tuple<std::string, SqlParams, SqlPlanInfo::Kind>> exact = {
      {"SELECT count(*), count(b.book_id) FROM order_items oi LEFT JOIN books b ON b.book_id = oi.book_id AND "
       "b.price > 20",
       {},
       SqlPlanInfo::Kind::kScatter},
      {"SELECT count(*), count(oi.order_id) FROM books b RIGHT JOIN order_items oi ON oi.book_id = b.book_id AND "
       "b.price > 20",
       {},
       SqlPlanInfo::Kind::kScatter},
      {"SELECT b.book_id, oi.order_id, oi.line_no FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id "
       "AND oi.customer_id = $1 ORDER BY 1, 2, 3",
       {"42"},
       SqlPlanInfo::Kind::kRouted},
  };
  for (const auto& [sql, params, kind] : exact) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql, params);
    EXPECT_EQ(got.plan.kind, kind);
    EXPECT_EQ(Sorted(got.rows), Sorted(OnReference(sql, params).rows));
    EXPECT_FALSE(got.rows.empty());
  }
}

// PostgreSQL resolves a bare ORDER BY name among the output columns first:
// with * in the select list, a name two tables have is still the one column
// the list outputs, and an alias is found beside *.
TEST_F(SqlExecutePg, OrderByNamesResolveAsTheServerResolvesThem) {
  const std::vector<std::string> statements = {
      "SELECT u1.* FROM orders u1 JOIN orders u2 ON u1.customer_id = u2.customer_id AND u1.order_id = u2.order_id "
      "ORDER BY customer_id, order_id",
      "SELECT u1.* FROM orders u1 JOIN orders u2 ON u1.customer_id = u2.customer_id AND u1.order_id = u2.order_id "
      "ORDER BY customer_id DESC, order_id LIMIT 7",
      "SELECT i.*, c.name AS who FROM order_items i JOIN customers c ON c.customer_id = i.customer_id ORDER BY who, "
      "order_id, line_no LIMIT 25",
      "SELECT * FROM order_items i JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
      "ORDER BY line_no, status, total, i.order_id LIMIT 20",
      "SELECT o.*, i.line_no FROM orders o JOIN order_items i ON i.customer_id = o.customer_id AND "
      "i.order_id = o.order_id ORDER BY bucket, order_id, line_no OFFSET 5 LIMIT 10",
      // timestamptz ordered by the instant (the text's offset applied), by ORDER BY, min and max.
      "SELECT order_id, ordered_at FROM orders ORDER BY ordered_at DESC, order_id LIMIT 5",
      "SELECT min(ordered_at), max(ordered_at) FROM orders",
      "SELECT status, min(ordered_at), max(ordered_at) FROM orders GROUP BY status ORDER BY max(ordered_at) DESC, 1",
  };
  for (const std::string& sql : statements) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql);
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_EQ(got.rows, OnReference(sql, {}).rows);
    EXPECT_FALSE(got.rows.empty());
  }
}

// A function the Cluster's copy of the catalog does not list is never taken
// for a plain function (an aggregate's per-shard values would be
// concatenated): the catalog is read again, and what is still unknown is
// refused. A catalog read at another schema version drops the cached plans.
TEST_F(SqlExecutePg, FunctionsUnknownAtStartAreLookedUpAgainAndNeverTakenForScalars) {
  const std::string cached = "SELECT count(*) FROM orders WHERE total > 1";
  (void)cluster_->Execute(cached);
  EXPECT_TRUE(cluster_->Explain(cached).cached);
  const std::string sql = "SELECT sk_test_total(total) FROM orders";
  ExpectRefused(sql, {}, "the function sk_test_total", "no function of that name");
  const auto on_every_shard = [](const std::string& ddl) {
    for (int s = 0; s < scratch_->ShardCount(); ++s) {
      pqxx::connection c{scratch_->ShardDsn(s).Reveal()};
      pqxx::nontransaction{c}.exec(ddl);
    }
  };
  // As a migration would create it, after the Cluster read its catalog.
  on_every_shard("CREATE AGGREGATE sk_test_total(numeric) (sfunc = numeric_add, stype = numeric, initcond = '0')");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the reload-on-miss interval
  ExpectRefused(sql, {}, "the function sk_test_total", "not built in");
  ExpectRefused("SELECT status, sk_test_total(total) FROM orders GROUP BY status", {}, "the function sk_test_total",
                "not built in");
  EXPECT_FALSE(cluster_->Explain(cached).cached);
  on_every_shard("DROP AGGREGATE sk_test_total(numeric)");
}

// A wrong number of parameter values is the caller's mistake, said at once:
// no server is asked, nothing is retried. Through Cluster::Run, the
// server's 08P01 (libpqxx calls it a broken connection) is a statement
// error, not a lost connection: one attempt.
TEST_F(SqlExecutePg, AWrongParameterCountIsRefusedAtOnceAndNeverRetried) {
  ExpectRefused("SELECT count(*) FROM orders WHERE customer_id = $1 AND total > $2", {"42"}, "$2",
                "go up to $2 and 1 value was given");
  ExpectRefused("SELECT count(*) FROM orders WHERE total > $1 AND total < $2", {"1"}, "$2",
                "go up to $2 and 1 value was given");
  ExpectRefused("INSERT INTO customers (customer_id, name, email) VALUES ($1, $2, $3)", {"1", "x"}, "$3",
                "go up to $3 and 2 values were given");
  ExpectRefused("SELECT count(*) FROM orders WHERE customer_id = $1", {"1", "2"}, "$1", "2 values were given");
  ExpectRefused("SELECT count(*) FROM orders", {"1"}, "1 parameter value", "no parameters");
  EXPECT_EQ(
      cluster_->Execute("SELECT count(*) FROM orders WHERE customer_id = $1 AND total > $2", {"42", "0"}).plan.kind,
      SqlPlanInfo::Kind::kRouted);

  RoutedOutcome outcome;
  try {
    cluster_->Run(
        CustomerId{42},
        [](pqxx::transaction_base& tx, const RoutedContext&) { (void)tx.exec_params("SELECT $1::int + $2::int", 1); },
        RoutedOptions{}, &outcome);
    ADD_FAILURE() << "ran";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "08P01") << e.what();
    EXPECT_NE(std::string(e.what()).find("bind message supplies 1 parameters"), std::string::npos) << e.what();
  }
  EXPECT_EQ(outcome.attempts, 1);
}

// A server's error about a statement comes out in shardkit's family, with
// the SQLSTATE, the shard and the server's message: routed (Execute,
// Transact) as ShardQueryError, over every shard as ScatterError whose
// advice is to fix the statement (no partial answer helps).
TEST_F(SqlExecutePg, ServerErrorsComeOutAsShardkitErrorsWithTheirSqlstate) {
  const auto expect_query_error = [](const auto& run, const std::string& sqlstate, const std::string& text) {
    try {
      run();
      ADD_FAILURE() << "ran";
    } catch (const ShardQueryError& e) {
      EXPECT_EQ(e.sqlstate(), sqlstate) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_EQ(e.shard(), cluster_->Route(CustomerId{42}).shard) << e.what();
    }
  };
  expect_query_error([] { (void)cluster_->Execute("SELECT no_such_column FROM orders WHERE customer_id = 42"); },
                     "42703", "no_such_column");
  expect_query_error(
      [] { (void)cluster_->Execute("INSERT INTO customers (customer_id, name, email) VALUES (42, 'again', 'x')"); },
      "23505", "duplicate key");
  expect_query_error(
      [] {
        cluster_->Transact(CustomerId{42}, [](SqlTransaction& tx) {
          (void)tx.Execute(
              "INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES (42, 4299999, now(), -1)");
        });
      },
      "23514", "check constraint");
  try {
    (void)cluster_->Execute("SELECT count(*) FROM orders WHERE 1 / (total - total) > 0");
    ADD_FAILURE() << "ran";
  } catch (const ScatterError& e) {
    ASSERT_FALSE(e.failures().empty());
    EXPECT_EQ(e.failures().front().sqlstate, "22012") << e.what();
    EXPECT_EQ(std::string(e.what()).find("allow_partial"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fix it"), std::string::npos) << e.what();
  }
}

// FOR UPDATE / FOR SHARE pinned to one customer: run on its primary in a
// read-write transaction (alone, or inside Transact where the locks last);
// over several shards, or on reference tables alone, refused with where.
TEST_F(SqlExecutePg, LockingReadsRunPinnedAndAreRefusedOverSeveralShards) {
  const std::string locking = "SELECT order_id, total FROM orders WHERE customer_id = $1 ORDER BY order_id FOR UPDATE";
  const SqlResult alone = cluster_->Execute(locking, {"42"});
  EXPECT_EQ(alone.plan.kind, SqlPlanInfo::Kind::kRouted);
  EXPECT_FALSE(alone.plan.read_only);
  EXPECT_EQ(alone.rows, OnReference(locking, {"42"}).rows);
  const std::size_t locked = cluster_->Transact(CustomerId{42}, [&](SqlTransaction& tx) {
    const SqlResult rows = tx.Execute(
        "SELECT o.order_id FROM orders o JOIN customers c USING (customer_id) WHERE customer_id = 42 "
        "FOR NO KEY UPDATE OF o SKIP LOCKED");
    return rows.rows.size();
  });
  EXPECT_EQ(locked, alone.rows.size());
  for (const std::string& sql : {std::string("SELECT order_id FROM orders WHERE total > 10 FOR UPDATE"),
                                 std::string("SELECT * FROM books WHERE book_id = 1 FOR SHARE")}) {
    SCOPED_TRACE(sql);
    try {
      (void)cluster_->Execute(sql);
      ADD_FAILURE() << "ran";
    } catch (const SqlError& e) {
      EXPECT_EQ(e.construct(), "a locking clause (FOR UPDATE/SHARE) over every shard") << e.what();
      EXPECT_GT(e.column(), 0) << e.what();
    }
  }
}

// A lock on a reference table's rows pinned to one customer would lock the
// copy on that customer's shard only, and another customer's transaction on
// another shard would lock the same book without waiting: refused at the
// locking clause, alone and inside Transact. FOR UPDATE OF the sharded
// alias beside the reference table runs, as the reference server answers.
TEST_F(SqlExecutePg, LockingReferenceRowsIsRefusedEvenPinned) {
  const std::string join =
      "SELECT i.order_id, i.line_no, b.title FROM order_items i JOIN books b ON b.book_id = i.book_id WHERE "
      "i.customer_id = 42 ORDER BY i.order_id, i.line_no";
  for (const auto& [sql, clause] : std::vector<std::pair<std::string, std::string>>{
           {join + " FOR UPDATE OF b", "FOR UPDATE OF b"},
           {join + " FOR SHARE", "FOR SHARE"},
           {join + " FOR UPDATE OF i FOR SHARE OF b", "FOR SHARE OF b"},
           {"SELECT * FROM (" + join + ") s FOR NO KEY UPDATE", "FOR NO KEY UPDATE"},
       }) {
    SCOPED_TRACE(sql);
    EXPECT_NO_THROW((void)OnReference(sql, {}));  // valid SQL: the refusal is shardkit's
    const auto expect_refused = [&](const SqlError& e) {
      EXPECT_EQ(e.kind(), SqlError::Kind::kRefused) << e.what();
      EXPECT_EQ(e.construct(), "the locking clause " + clause + " on the reference table books") << e.what();
      EXPECT_EQ(e.column(), static_cast<int>(sql.rfind(" " + clause)) + 2) << e.what();
      EXPECT_NE(e.reason().find("only the copy on this customer's shard would be locked"), std::string::npos)
          << e.what();
      EXPECT_NE(e.advice().find("FOR UPDATE OF "), std::string::npos) << e.what();
    };
    try {
      (void)cluster_->Execute(sql);
      ADD_FAILURE() << "ran";
    } catch (const SqlError& e) {
      expect_refused(e);
    }
    try {
      cluster_->Transact(CustomerId{42}, [&](SqlTransaction& tx) { (void)tx.Execute(sql); });
      ADD_FAILURE() << "ran in Transact";
    } catch (const SqlError& e) {
      expect_refused(e);
    }
  }
  for (const std::string& sql : {join + " FOR UPDATE OF i", join + " FOR NO KEY UPDATE OF i NOWAIT"}) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql);
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kRouted);
    EXPECT_FALSE(got.plan.read_only);
    EXPECT_EQ(got.rows, OnReference(sql, {}).rows);
    EXPECT_FALSE(got.rows.empty());
    const std::size_t in_transaction =
        cluster_->Transact(CustomerId{42}, [&](SqlTransaction& tx) { return tx.Execute(sql).rows.size(); });
    EXPECT_EQ(in_transaction, got.rows.size());
  }
}

// What neither routes nor merges from each shard's answer is gathered: the
// sharded tables' rows from every shard onto one server, which runs the
// statement as written. Exact, as the reference server answers it.
TEST_F(SqlExecutePg, WhatCannotBeMergedIsGatheredAndExact) {
  const std::vector<std::pair<std::string, SqlParams>> gathered = {
      {"SELECT status, 100.0 * count(*) / (SELECT count(*) FROM books) FROM orders GROUP BY status", {}},
      {"SELECT DISTINCT ON (status) status, total FROM orders ORDER BY status, total DESC", {}},
      {"SELECT status, string_agg(order_id::text, ',' ORDER BY order_id) FROM orders GROUP BY status", {}},
      {"SELECT sum(total), percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders", {}},
      {"SELECT order_id, rank() OVER (ORDER BY total) FROM orders", {}},
      {"SELECT customer_id, order_id, sum(total) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders", {}},
      {"WITH x AS (SELECT * FROM orders) SELECT count(*) FROM x", {}},
      {"SELECT count(*) FROM orders WHERE total > (SELECT avg(total) FROM orders)", {}},
      {"SELECT status, count(*) FROM orders GROUP BY ROLLUP (status)", {}},
      {"SELECT count(*) FROM orders WHERE ordered_at > now() - interval '1 year'", {}},
      {"SELECT status, count(*) FROM orders GROUP BY status ORDER BY status LIMIT $1 + 1", {"3"}},
      {"SELECT bool_and(total > 0), stddev(total), variance(quantity) FROM orders JOIN order_items USING "
       "(customer_id, order_id)",
       {}},
      {"SELECT count(*) FROM order_items WHERE book_id IN (SELECT book_id FROM books WHERE category = 'science')", {}},
      {"SELECT count(*) FROM orders o JOIN order_items i ON i.customer_id = 7 AND i.order_id = o.order_id", {}},
      // A join off the shard key: rows of different customers.
      {"SELECT o.customer_id, i.customer_id, count(*) FROM orders o JOIN order_items i ON i.order_id = o.order_id "
       "AND o.customer_id < 20 AND i.customer_id < 20 GROUP BY 1, 2",
       {}},
      {"SELECT * FROM (SELECT customer_id, total, row_number() OVER (PARTITION BY status ORDER BY total DESC, "
       "order_id) AS n FROM orders WHERE total > $1) ranked WHERE n <= 3",
       {"10"}},
      {"SELECT c.customer_id, o.total FROM customers c, LATERAL (SELECT total FROM orders o WHERE o.total > 1 AND "
       "o.customer_id <> c.customer_id ORDER BY total DESC, order_id LIMIT 1) o ORDER BY 1 LIMIT 3",
       {}},
      {"SELECT b.category, count(oi.order_id) FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id AND "
       "oi.quantity > $1 GROUP BY b.category",
       {"2"}},
      {"SELECT order_id FROM orders WHERE customer_id = 1 UNION SELECT rank() OVER (ORDER BY total) FROM orders", {}},
  };
  for (const auto& [sql, params] : gathered) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql, params);
    const Reference want = OnReference(sql, params);
    EXPECT_EQ(got.plan.kind, SqlPlanInfo::Kind::kScatter);
    EXPECT_TRUE(got.plan.merge.starts_with("gathered (not merged: ")) << got.plan.merge;
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(Sorted(got.rows), Sorted(want.rows));
    EXPECT_FALSE(want.rows.empty());
    EXPECT_GT(got.rows_received, 0U);
  }
  // Explain says what each shard sends and what the one server runs.
  const SqlPlanInfo explained = cluster_->Explain("SELECT order_id, rank() OVER (ORDER BY total) FROM orders");
  EXPECT_NE(explained.shard_sql.find("ARRAY(SELECT _t FROM \"public\".\"orders\" AS _t LIMIT $1)"), std::string::npos)
      << explained.shard_sql;
  EXPECT_NE(explained.merge.find("the window function rank"), std::string::npos) << explained.merge;
  // An invalid statement is the server's error, as on one server.
  try {
    (void)cluster_->Execute("SELECT order_id, count(*) FROM orders GROUP BY status");
    ADD_FAILURE() << "ran";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1U) << e.what();
    EXPECT_EQ(e.failures()[0].sqlstate, "42803") << e.what();
  }
}

// Parameters with types: the server needs no inference where it has none
// to make, and the router still reads typed keys, key lists and LIMITs.
TEST_F(SqlExecutePg, TypedParametersAnswerAsTheReferenceAndStillRoute) {
  using namespace std::chrono;
  const auto instant = time_point_cast<system_clock::duration>(sys_days{year{2026} / 1 / 20});
  struct Typed {
    std::string sql;
    SqlParams params;
    std::string on_reference;  // the same statement with the values written in
    SqlPlanInfo::Kind kind;
  };
  const std::vector<Typed> cases = {
      {"SELECT count(*) FROM orders WHERE status LIKE CONCAT('%', $1, '%')",
       {SqlParam::Typed("lac", "text")},
       "SELECT count(*) FROM orders WHERE status LIKE '%lac%'",
       SqlPlanInfo::Kind::kScatter},
      {"SELECT sum($1), $2 IS NULL FROM orders",
       {std::int64_t{2}, SqlParam::Typed(std::nullopt, "int4")},
       "SELECT sum(2::int8), NULL::int4 IS NULL FROM orders",
       SqlPlanInfo::Kind::kScatter},
      {"SELECT order_id, total FROM orders WHERE customer_id = $1 AND total > $2 ORDER BY order_id",
       {std::int64_t{42}, 15.5},
       "SELECT order_id, total FROM orders WHERE customer_id = 42 AND total > 15.5 ORDER BY order_id",
       SqlPlanInfo::Kind::kRouted},
      {"SELECT customer_id, count(*) FROM orders WHERE customer_id = ANY($1) GROUP BY 1 ORDER BY 1",
       {std::vector<std::int64_t>{3, 7, 42}},
       "SELECT customer_id, count(*) FROM orders WHERE customer_id = ANY('{3,7,42}') GROUP BY 1 ORDER BY 1",
       SqlPlanInfo::Kind::kScatter},
      {"SELECT order_id FROM orders WHERE ordered_at >= $1 ORDER BY order_id LIMIT $2",
       {instant, 3},
       "SELECT order_id FROM orders WHERE ordered_at >= '2026-01-20 00:00:00+00' ORDER BY order_id LIMIT 3",
       SqlPlanInfo::Kind::kScatter},
      {"SELECT count(*) FROM orders WHERE status = ANY($1) AND $2",
       {std::vector<std::string>{"placed", "it's"}, true},
       "SELECT count(*) FROM orders WHERE status = ANY('{placed,it''s}')",
       SqlPlanInfo::Kind::kScatter},
  };
  for (const Typed& c : cases) {
    SCOPED_TRACE(c.sql);
    const SqlResult got = cluster_->Execute(c.sql, c.params);
    const Reference want = OnReference(c.on_reference, {});
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_FALSE(want.rows.empty());
    EXPECT_EQ(got.plan.kind, c.kind) << got.plan.Describe();
  }
  // Untyped, the server cannot tell what $1 is; typed, it is a number.
  try {
    (void)cluster_->Execute("SELECT $1 IS NULL FROM orders WHERE customer_id = 42", {std::nullopt});
    ADD_FAILURE() << "answered";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "42P18") << e.what();
  }
  // The key list reaches only its customers' shards.
  const SqlPlanInfo listed =
      cluster_->Explain("SELECT count(*) FROM orders WHERE customer_id = ANY($1)", {std::vector<std::int64_t>{42}});
  EXPECT_EQ(listed.kind, SqlPlanInfo::Kind::kScatter);
  EXPECT_EQ(listed.shard_count, 1);
}

// A top-level WHERE conjunct over one sharded table runs on the shards as
// well, so that only rows that can pass it are shipped; never one over a
// side an outer join fills with NULLs, one whose value differs between
// servers (now()), or one whose parameter is also used elsewhere.
TEST_F(SqlExecutePg, AGatherShipsOnlyTheRowsItsFiltersCanPass) {
  struct Pushdown {
    std::string sql;
    SqlParams params;
    std::string pushed;   // in the shards' statement, or empty: nothing pushed
    std::string shipped;  // the reference's count of the rows shipped
  };
  const std::vector<Pushdown> cases = {
      {"SELECT order_id, rank() OVER (ORDER BY total, order_id) FROM orders WHERE status = $1 AND total > 15",
       {"placed"},
       "SELECT \"orders\" FROM \"public\".\"orders\" AS \"orders\" WHERE (status = $2) AND (total > 15) LIMIT $1",
       "SELECT count(*) FROM orders WHERE status = 'placed' AND total > 15"},
      {"SELECT o.status, stddev(i.quantity) FROM orders o JOIN order_items i ON i.order_id = o.order_id WHERE "
       "lower(o.status) = 'placed' AND o.total > 25 AND i.quantity BETWEEN 2 AND $1 GROUP BY o.status",
       {"4"},
       "AS \"o\" WHERE (lower(o.status) = 'placed') AND (o.total > 25) LIMIT $1",
       "SELECT (SELECT count(*) FROM orders WHERE total > 25) + (SELECT count(*) FROM order_items "
       "WHERE quantity BETWEEN 2 AND 4)"},
      // The nullable side keeps every row: `IS NULL` is true of the rows the join fills.
      {"SELECT b.book_id, oi.order_id FROM books b LEFT JOIN order_items oi ON oi.book_id = b.book_id AND "
       "oi.quantity > 4 WHERE oi.quantity IS NULL AND b.book_id < 30",
       {},
       "",
       "SELECT count(*) FROM order_items"},
      {"SELECT count(*) FROM orders WHERE ordered_at > now() - interval '1 year' AND status = 'placed' "
       "HAVING count(*) > (SELECT count(*) FROM books WHERE book_id < 0)",
       {},
       "WHERE (status = 'placed') LIMIT",
       "SELECT count(*) FROM orders"},
      {"SELECT $1::text AS s, count(*) FROM orders WHERE status = $1 GROUP BY ROLLUP (status)",
       {"placed"},
       "",
       "SELECT count(*) FROM orders"},
      {"SELECT a.order_id, b.order_id FROM orders a JOIN orders b ON a.total = b.total AND a.order_id < b.order_id "
       "WHERE a.total > 25",
       {},
       "",
       "SELECT count(*) FROM orders"},
  };
  for (const Pushdown& c : cases) {
    SCOPED_TRACE(c.sql);
    const SqlResult got = cluster_->Execute(c.sql, c.params);
    const Reference want = OnReference(c.sql, c.params);
    EXPECT_TRUE(got.plan.merge.starts_with("gathered")) << got.plan.merge;
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(Sorted(got.rows), Sorted(want.rows));
    EXPECT_FALSE(want.rows.empty());
    if (c.pushed.empty()) {
      EXPECT_EQ(got.plan.shard_sql.find(" WHERE "), std::string::npos) << got.plan.shard_sql;
    } else {
      EXPECT_NE(got.plan.shard_sql.find(c.pushed), std::string::npos) << got.plan.shard_sql;
    }
    EXPECT_EQ(std::to_string(got.rows_received), *OnReference(c.shipped, {}).rows.at(0).at(0));
  }
}

// Above max_gather_rows (all tables, all shards) a gathered statement is
// refused with what it would have brought, having shipped at most one row
// more per table and shard; per statement or for the Cluster ([sql]).
TEST_F(SqlExecutePg, AGatherAboveItsBoundIsRefusedWithItsSize) {
  const std::string sql =
      "SELECT o.order_id, rank() OVER (ORDER BY o.total) FROM orders o JOIN customers c USING "
      "(customer_id) WHERE c.name <> ''";
  const std::int64_t orders = std::stoll(*OnReference("SELECT count(*) FROM orders", {}).rows.at(0).at(0));
  const std::int64_t customers = std::stoll(*OnReference("SELECT count(*) FROM customers", {}).rows.at(0).at(0));
  SqlOptions exact;
  exact.max_gather_rows = orders + customers;
  EXPECT_EQ(Sorted(cluster_->Execute(sql, {}, exact).rows), Sorted(OnReference(sql, {}).rows));
  SqlOptions small;
  small.max_gather_rows = orders + customers - 1;
  try {
    (void)cluster_->Execute(sql, {}, small);
    ADD_FAILURE() << "gathered above the bound";
  } catch (const SqlError& e) {
    EXPECT_EQ(e.kind(), SqlError::Kind::kRefused);
    EXPECT_NE(e.reason().find(fmt::format("more than max_gather_rows = {} rows (orders: {}, customers: {})",
                                          orders + customers - 1, orders, customers)),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.advice().find("max_gather_rows"), std::string::npos) << e.what();
  }
  small.max_gather_rows = 5;
  try {
    (void)cluster_->Execute(sql, {}, small);
    ADD_FAILURE() << "gathered above the bound";
  } catch (const SqlError& e) {
    EXPECT_NE(e.reason().find("(orders: more than 5, customers: more than 5)"), std::string::npos) << e.what();
  }
  small.max_gather_rows = 0;
  EXPECT_THROW((void)cluster_->Execute(sql, {}, small), SqlError);
  // Routed and merged statements know no such bound.
  EXPECT_NO_THROW((void)cluster_->Execute("SELECT count(*) FROM orders", {}, small));
}

// Above max_gather_bytes (the shards' arrays as the text they send, all
// tables and shards together) a gathered statement is refused as soon as
// the shards' answers pass it, naming each table's bytes and the bound; 0
// is no bound, and the default answers as before.
TEST_F(SqlExecutePg, AGatherAboveItsBytesBoundIsRefusedWithItsSize) {
  const std::string sql =
      "SELECT i.customer_id, i.order_id, i.line_no, rank() OVER (ORDER BY i.unit_price, i.customer_id, i.order_id, "
      "i.line_no) FROM order_items i";
  // What each shard sends: its rows of order_items as one array, as text.
  std::vector<std::int64_t> sizes;
  for (int s = 0; s < scratch_->ShardCount(); ++s) {
    pqxx::connection c{scratch_->ShardDsn(s).Reveal()};
    pqxx::work tx{c};  // the buckets the shard owns
    sizes.push_back(
        tx.exec("SELECT octet_length(ARRAY(SELECT _t FROM order_items AS _t)::text)")[0][0].as<std::int64_t>());
  }
  std::int64_t total = 0;
  for (const std::int64_t size : sizes) total += size;
  const Rows want = Sorted(OnReference(sql, {}).rows);
  EXPECT_EQ(Sorted(cluster_->Execute(sql).rows), want);  // the default bound
  SqlOptions options;
  options.max_gather_bytes = total;
  EXPECT_EQ(Sorted(cluster_->Execute(sql, {}, options).rows), want);
  options.max_gather_bytes = 0;
  EXPECT_EQ(Sorted(cluster_->Execute(sql, {}, options).rows), want);
  options.max_gather_bytes = total - 1;
  try {
    (void)cluster_->Execute(sql, {}, options);
    ADD_FAILURE() << "gathered above the bound";
  } catch (const SqlError& e) {
    EXPECT_EQ(e.kind(), SqlError::Kind::kRefused);
    EXPECT_EQ(e.construct(), "this statement over every shard");
    EXPECT_NE(e.reason().find(fmt::format("more than max_gather_bytes = {} bytes as text (order_items: {} bytes)",
                                          total - 1, total)),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.reason().find("the window function rank"), std::string::npos) << e.what();
    EXPECT_NE(e.advice().find("max_gather_bytes"), std::string::npos) << e.what();
  }
  // Passed by the first shard's answer: refused without adding the others.
  ASSERT_GE(sizes.size(), 2U);
  options.max_gather_bytes = 1;
  try {
    (void)cluster_->Execute(sql, {}, options);
    ADD_FAILURE() << "gathered above the bound";
  } catch (const SqlError& e) {
    EXPECT_NE(e.reason().find(fmt::format("more than max_gather_bytes = 1 bytes as text (order_items: {} bytes, from 1 "
                                          "of {} shards)",
                                          sizes.front(), sizes.size())),
              std::string::npos)
        << e.what();
  }
  // The rows bound is checked first, as before.
  options.max_gather_rows = 5;
  try {
    (void)cluster_->Execute(sql, {}, options);
    ADD_FAILURE() << "gathered above the bound";
  } catch (const SqlError& e) {
    EXPECT_NE(e.reason().find("max_gather_rows = 5 rows"), std::string::npos) << e.what();
  }
}

#ifdef SHARDCTL_PATH
// Runs shardctl; its stdout and stderr together, and its exit status.
std::pair<std::string, int> RunShardctl(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> text{SHARDCTL_PATH};
  text.insert(text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, SHARDCTL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " SHARDCTL_PATH);
  }
  std::string output;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = ::read(fds[0], buffer.data(), buffer.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

TEST_F(SqlExecutePg, ShardctlSqlExitsOneWithTheSyntaxErrorsPosition) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("sql_execute_pgtest_{}.toml", ::getpid());
  {
    // The scratch cluster's shards, with the reference table declared.
    std::ofstream out(path);
    out << "[directory]\nsource = \"catalog\"\n[catalog]\ndsn = \"" << scratch_->CatalogDsn().Reveal() << "\"\n"
        << "[sql]\nreference_tables = [\"books\"]\n";
    for (int s = 0; s < scratch_->ShardCount(); ++s) {
      out << "[[shard]]\nname = \"shard" << s << "\"\ndsn = \"" << scratch_->ShardDsn(s).Reveal() << "\"\n";
    }
  }
  const auto [syntax, syntax_rc] = RunShardctl({"--config", path.string(), "sql", "SELECT *\nFROM orders WHERE = 1"});
  EXPECT_EQ(syntax_rc, 1) << syntax;
  EXPECT_EQ(syntax,
            "ERROR:  syntax error at or near \"=\"\nLINE 2: FROM orders WHERE = 1\n"
            "                          ^\n");
  const auto [refused, refused_rc] =
      RunShardctl({"--config", path.string(), "sql", "SELECT order_id FROM orders FOR UPDATE"});
  EXPECT_EQ(refused_rc, 1) << refused;
  EXPECT_EQ(refused.rfind("shardkit: a locking clause (FOR UPDATE/SHARE) over every shard at line 1, column 29: ", 0),
            0U)
      << refused;
  // The naive best-sellers statement, as it is: the reference's answer.
  const std::string best_sellers =
      "SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
      "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 GROUP BY i.book_id ORDER BY sold DESC, i.book_id "
      "LIMIT 10";
  const auto [best, best_rc] =
      RunShardctl({"--config", path.string(), "sql", "--json", best_sellers, "-p", "2020-01-01"});
  EXPECT_EQ(best_rc, 0) << best;
  for (const auto& row : OnReference(best_sellers, {"2020-01-01"}).rows) {
    EXPECT_NE(best.find(fmt::format("\"{}\"", *row[0])), std::string::npos) << best;
  }
  EXPECT_NE(best.find("\"merge\": \"exact top-k (auto) by sum("), std::string::npos) << best;
  // --explain says it would run as exact top-k, and what the merge would be instead.
  const auto [best_plan, best_plan_rc] =
      RunShardctl({"--config", path.string(), "sql", "--explain", best_sellers, "-p", "2020-01-01"});
  EXPECT_EQ(best_plan_rc, 0) << best_plan;
  EXPECT_NE(best_plan.find("; merge: exact top-k (auto) by sum(\"i\".\"quantity\") of \"i\".\"book_id\", k = 10: "),
            std::string::npos)
      << best_plan;
  const auto [rows, rows_rc] =
      RunShardctl({"--config", path.string(), "sql", "SELECT name FROM customers WHERE customer_id = $1", "-p", "42"});
  EXPECT_EQ(rows_rc, 0) << rows;
  EXPECT_NE(rows.find("(1 row)"), std::string::npos) << rows;
  const auto [plan, plan_rc] =
      RunShardctl({"--config", path.string(), "sql", "--explain", "SELECT * FROM orders WHERE customer_id = 4242"});
  EXPECT_EQ(plan_rc, 0) << plan;
  EXPECT_EQ(plan, fmt::format("routed: shard {} (bucket 44, customer 4242)\n",
                              ToInt(cluster_->Route(CustomerId{4242}).shard)));
  std::filesystem::remove(path);
}
#endif

}  // namespace
}  // namespace shardkit
