// Cluster::Execute answers percentile_cont / percentile_disc WITHIN GROUP
// and count(DISTINCT x) off the shard key exactly, by distributed selection:
// every statement's columns, types and rows equal the unsharded reference
// server's; the shapes it cannot merge are gathered onto one server.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/sql_bookstore.hpp"

namespace shardkit {
namespace {

class SqlPercentilePg : public test::SqlBookstorePg {
 protected:
  static void SetUpTestSuite() { SetUpBookstore("sql_percentile_pgtest"); }

  static void ExpectSame(const std::string& sql, const SqlParams& params = {}) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql, params);
    const Reference want = OnReference(sql, params);
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_TRUE(got.plan.merge.starts_with("exact order statistics")) << got.plan.merge;
  }
};

TEST_F(SqlPercentilePg, MediansAndPercentilesEqualTheReference) {
  ExpectSame("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders");
  ExpectSame(
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) AS median, "
      "percentile_cont(0.95) WITHIN GROUP (ORDER BY total) AS p95 FROM orders WHERE status <> $1",
      {"cancelled"});
  ExpectSame(
      "SELECT status, percentile_disc(0.9) WITHIN GROUP (ORDER BY total) FROM orders GROUP BY status "
      "ORDER BY status");
  ExpectSame(
      "SELECT percentile_disc(0) WITHIN GROUP (ORDER BY ordered_at), percentile_disc(1) WITHIN GROUP "
      "(ORDER BY ordered_at) FROM orders");
  ExpectSame(
      "SELECT b.category, percentile_cont(0.5) WITHIN GROUP (ORDER BY i.quantity * i.unit_price) AS m, "
      "count(DISTINCT i.book_id) AS books FROM order_items i JOIN books b ON b.book_id = i.book_id "
      "GROUP BY b.category ORDER BY m DESC, 1 LIMIT 3");
  ExpectSame("SELECT percentile_cont($1) WITHIN GROUP (ORDER BY quantity) FROM order_items", {"0.25"});
  ExpectSame("SELECT percentile_cont($1) WITHIN GROUP (ORDER BY quantity ASC) FROM order_items", {std::nullopt});
  ExpectSame(
      "SELECT line_no, percentile_cont(0.75) WITHIN GROUP (ORDER BY unit_price) FROM order_items "
      "WHERE book_id < 10 GROUP BY 1 ORDER BY 1 OFFSET 1");
  // No row at all: one row of NULLs and zero.
  ExpectSame(
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total), count(DISTINCT status) FROM orders "
      "WHERE total < 0");
}

TEST_F(SqlPercentilePg, CountDistinctOffTheShardKeyEqualsTheReference) {
  ExpectSame("SELECT count(DISTINCT book_id) FROM order_items");
  ExpectSame("SELECT count(DISTINCT book_id) AS books, count(DISTINCT quantity) FROM order_items WHERE line_no = $1",
             {"1"});
  ExpectSame("SELECT quantity, count(DISTINCT book_id) FROM order_items GROUP BY quantity ORDER BY quantity");
  ExpectSame("SELECT count(DISTINCT status) FROM orders");
}

// What the selection cannot answer is gathered onto one server and equals
// the reference; with gathering turned off it is refused naming the
// construct the selection could not merge.
TEST_F(SqlPercentilePg, ShapesTheSelectionCannotMergeAreGatheredOrRefusedWithTheConstruct) {
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"SELECT sum(total), percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders", "sum(total)"},
      {"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total DESC) FROM orders", "DESC"},
      {"SELECT percentile_cont(ARRAY[0.5, 0.9]) WITHIN GROUP (ORDER BY total) FROM orders", "percentile_cont"},
      {"SELECT status, count(DISTINCT book_id) FROM orders o JOIN order_items i USING (customer_id, order_id) "
       "GROUP BY status HAVING count(*) > 1 ORDER BY status",
       "HAVING"},
  };
  for (const auto& [sql, construct] : shapes) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql);
    const Reference want = OnReference(sql, {});
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_TRUE(got.plan.merge.starts_with("gathered")) << got.plan.merge;
    SqlOptions no_gathering;
    no_gathering.max_gather_rows = 0;
    try {
      (void)cluster_->Execute(sql, {}, no_gathering);
      ADD_FAILURE() << "answered without gathering";
    } catch (const SqlError& e) {
      EXPECT_NE(std::string(e.what()).find(construct), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace shardkit
