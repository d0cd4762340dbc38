// Which scatter aggregates the SQL layer answers by exact top-k instead of
// the merge (scatter_plan.hpp, TopKShape): the best-sellers shape only when
// top-k's answer is provably PostgreSQL's, and what it sends the shards.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/errors.hpp"
#include "sql/router.hpp"
#include "sql/scatter_plan.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {
namespace {

// A table from "column type[!], ..." ("!": NOT NULL), as the shards' catalog reads it.
SqlTable Table(const char* name, const std::string& columns) {
  static const std::map<std::string, unsigned> kTypes = {{"int2", kInt2Oid}, {"int4", kInt4Oid},
                                                         {"int8", kInt8Oid}, {"numeric", kNumericOid},
                                                         {"text", 25},       {"timestamptz", 1184}};
  SqlTable table{"public", name, true, {}};
  std::istringstream in(columns);
  for (std::string column, type; in >> column >> type;) {
    if (type.back() == ',') type.pop_back();
    const bool not_null = type.back() == '!';
    if (not_null) type.pop_back();
    table.columns.push_back(column);
    table.facts.push_back(SqlColumnFacts{kTypes.at(type), not_null});
  }
  return table;
}

// The Bookstore, with two nullable integer columns added to order_items.
SqlCatalog BookstoreCatalog(bool user_sum = false) {
  SqlCatalog catalog;
  catalog.AddSharded(
      Table("customers", "customer_id int4!, bucket int2!, name text!, email text!, created_at timestamptz!"));
  catalog.AddSharded(
      Table("orders",
            "customer_id int4!, bucket int2!, order_id int8!, ordered_at timestamptz!, status text!, total numeric!"));
  catalog.AddSharded(Table("order_items",
                           "customer_id int4!, bucket int2!, order_id int8!, line_no int4!, book_id int8!, "
                           "quantity int4!, unit_price numeric!, gift int4, shelf int4"));
  catalog.AddReference(Table("books", "book_id int8!, title text!, category text!, price numeric!"));
  for (const char* aggregate : {"count", "sum", "avg", "min", "max"}) catalog.AddAggregate(aggregate);
  if (user_sum) catalog.AddUserFunction("sum");
  return catalog;
}

std::optional<TopKShape> ShapeOf(const std::string& sql, const SqlCatalog& catalog) {
  std::shared_ptr<const SqlPlan> plan;
  try {
    plan = PlanStatement(sql, catalog);
  } catch (const SqlError& e) {
    ADD_FAILURE() << "refused: " << e.what();
    return std::nullopt;
  }
  EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter) << sql;
  if (!plan->scatter) return std::nullopt;
  EXPECT_TRUE(plan->scatter->merge.has_value()) << "the merge plan is the fallback: " << sql;
  return plan->scatter->topk;
}

std::optional<TopKShape> ShapeOf(const std::string& sql) {
  static const SqlCatalog catalog = BookstoreCatalog();
  return ShapeOf(sql, catalog);
}

constexpr const char* kBestSellers =
    "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 10";

TEST(SqlTopKShape, TheBestSellersStatementIsTopK) {
  const auto shape = ShapeOf(kBestSellers);
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->from, "order_items");
  EXPECT_EQ(shape->where, "");
  EXPECT_EQ(shape->key, "\"book_id\"");
  EXPECT_EQ(shape->measure, "\"quantity\"");
  EXPECT_EQ(shape->key_position, 0U);
  EXPECT_EQ(shape->key_type, kInt8Oid);
  EXPECT_EQ(shape->sum_type, kInt8Oid);  // sum(integer) is bigint
  EXPECT_EQ(shape->K(), 10U);
  EXPECT_EQ(shape->offset, 0);
  EXPECT_EQ(shape->Describe(), "exact top-k (auto) by sum(\"quantity\") of \"book_id\", k = 10");
  // What each shard aggregates (into the top-k session's temporary table).
  EXPECT_EQ(shape->shard_sql,
            "SELECT (\"book_id\")::bigint AS k, coalesce(sum(\"quantity\"), 0) AS s FROM order_items GROUP BY 1");

  // The FROM and WHERE text as written, parameters and all.
  const auto joined = ShapeOf(
      "SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
      "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 AND o.status <> 'x' GROUP BY i.book_id "
      "ORDER BY sold DESC, i.book_id LIMIT 10");
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->from, "order_items i JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id");
  EXPECT_EQ(joined->where, "o.ordered_at >= $1 AND o.status <> 'x'");
  EXPECT_EQ(joined->key, "\"i\".\"book_id\"");
  EXPECT_EQ(joined->measure, "\"i\".\"quantity\"");
  EXPECT_NE(joined->shard_sql.find(" WHERE (o.ordered_at >= $1 AND o.status <> 'x') GROUP BY 1"), std::string::npos)
      << joined->shard_sql;
}

// "key 1 int8, sum int8, k 5, offset 0": where the key is, the result's types, k and OFFSET.
std::string Summary(const TopKShape& shape) {
  const auto type = [](unsigned oid) {
    return oid == kInt2Oid ? "int2" : oid == kInt4Oid ? "int4" : oid == kInt8Oid ? "int8" : "numeric";
  };
  return fmt::format("key {} {}, sum {}, k {}, offset {}", shape.key_position, type(shape.key_type),
                     type(shape.sum_type), shape.K(), shape.offset);
}

TEST(SqlTopKShape, AliasesPositionsAndOffsetsAreTheSameShape) {
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5 OFFSET 3",
       "key 0 int8, sum int8, k 8, offset 3"},
      {"SELECT sum(quantity) AS n, book_id AS b FROM order_items GROUP BY b ORDER BY sum(quantity) DESC, b ASC NULLS "
       "LAST LIMIT 5",
       "key 1 int8, sum int8, k 5, offset 0"},
      {"SELECT book_id AS b, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id "
       "LIMIT 4",
       "key 0 int8, sum int8, k 4, offset 0"},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id "
       "ORDER BY 2 DESC NULLS LAST, book_id FETCH FIRST 10 ROWS ONLY",
       "key 0 int8, sum int8, k 10, offset 0"},
      // sum(bigint) is numeric; an integer key keeps its type.
      {"SELECT customer_id, sum(book_id) FROM order_items GROUP BY customer_id ORDER BY 2 DESC, customer_id LIMIT 3",
       "key 0 int4, sum numeric, k 3, offset 0"},
      {"SELECT bucket, sum(bucket) FROM order_items GROUP BY bucket ORDER BY 2 DESC, 1 LIMIT 3 OFFSET 0",
       "key 0 int2, sum int8, k 3, offset 0"},
      // A nullable key: top-k ranks NULL last among equal sums, as ORDER BY ... ASC does.
      {"SELECT shelf, sum(quantity) FROM order_items GROUP BY shelf ORDER BY 2 DESC, shelf LIMIT 10",
       "key 0 int4, sum int8, k 10, offset 0"},
      {"SELECT i.book_id, sum(i.quantity) FROM order_items i JOIN books b ON b.book_id = i.book_id "
       "WHERE b.price > $1 GROUP BY i.book_id ORDER BY 2 DESC, 1 LIMIT 10",
       "key 0 int8, sum int8, k 10, offset 0"},
      {"SELECT o.customer_id, sum(i.quantity) FROM orders o, order_items i WHERE o.customer_id = i.customer_id "
       "AND o.order_id = i.order_id GROUP BY o.customer_id ORDER BY 2 DESC, 1 LIMIT 10",
       "key 0 int4, sum int8, k 10, offset 0"},
      {"SELECT order_items.book_id, sum(order_items.quantity) FROM public.order_items GROUP BY order_items.book_id "
       "ORDER BY sum(order_items.quantity) DESC, order_items.book_id LIMIT 1",
       "key 0 int8, sum int8, k 1, offset 0"},
  };
  for (const auto& [sql, summary] : accepted) {
    SCOPED_TRACE(sql);
    const auto shape = ShapeOf(sql);
    ASSERT_TRUE(shape);
    EXPECT_EQ(Summary(*shape), summary);
  }
}

TEST(SqlTopKShape, EverythingElseIsLeftToTheMerge) {
  const std::vector<std::string> merged = {
      // The order: not complete, not top-k's, or more than it.
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC LIMIT 10",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold, book_id LIMIT 10",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id DESC "
      "LIMIT 10",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id NULLS "
      "FIRST LIMIT 10",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY book_id, sold DESC LIMIT 10",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id, sold "
      "LIMIT 10",
      // Swapped aliases: ORDER BY sold is the key.
      "SELECT book_id AS sold, sum(quantity) AS book_id FROM order_items GROUP BY 1 ORDER BY sold DESC, book_id "
      "LIMIT 10",
      // LIMIT: none, ALL, 0.
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT ALL",
      "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 0",
      // The measure: nullable, numeric, an expression, DISTINCT, FILTER, another aggregate.
      "SELECT book_id, sum(gift) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(unit_price) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(quantity * 2) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(DISTINCT customer_id) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(quantity) FILTER (WHERE quantity > 1) FROM order_items GROUP BY book_id "
      "ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, count(quantity) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, max(quantity) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
      // The key: text, an expression; two keys; more outputs; hidden ones.
      "SELECT status, sum(customer_id) FROM orders GROUP BY status ORDER BY 2 DESC, 1 LIMIT 2",
      "SELECT book_id % 10, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 3",
      "SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id, line_no ORDER BY 2 DESC, 1 LIMIT 3",
      "SELECT book_id, sum(quantity), count(*) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 3",
      "SELECT sum(quantity) FROM order_items GROUP BY book_id ORDER BY 1 DESC, book_id LIMIT 3",
      // HAVING, GROUP BY DISTINCT.
      "SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id HAVING sum(quantity) > 3 "
      "ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(quantity) FROM order_items GROUP BY DISTINCT book_id ORDER BY 2 DESC, 1 LIMIT 10",
      // FROM: an outer join's nullable side, a USING column (in two tables).
      "SELECT o.customer_id, sum(i.quantity) FROM orders o LEFT JOIN order_items i ON i.customer_id = o.customer_id "
      "AND i.order_id = o.order_id GROUP BY o.customer_id ORDER BY 2 DESC, 1 LIMIT 10",
      "SELECT book_id, sum(i.quantity) FROM order_items i JOIN books b USING (book_id) GROUP BY book_id "
      "ORDER BY 2 DESC, 1 LIMIT 10",
  };
  for (const std::string& sql : merged) {
    SCOPED_TRACE(sql);
    EXPECT_FALSE(ShapeOf(sql).has_value());
  }

  // A user-defined function named sum may be the one the statement calls
  // (the router refuses such a call over every shard before the planner sees it).
  const SqlCatalog with_user_sum = BookstoreCatalog(true);
  EXPECT_THROW((void)PlanStatement(kBestSellers, with_user_sum), SqlError);
  // Columns whose types are not known (a catalog without them).
  SqlCatalog without_types;
  without_types.AddSharded(
      {"public", "order_items", true, {"customer_id", "bucket", "order_id", "line_no", "book_id", "quantity"}});
  without_types.AddAggregate("sum");
  EXPECT_FALSE(ShapeOf(kBestSellers, without_types).has_value());
}

}  // namespace
}  // namespace shardkit::sql
