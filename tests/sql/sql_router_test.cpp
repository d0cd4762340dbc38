// The SQL router without a server: libpg_query's parse, which statements
// route to one customer and which are refused (with the place and reason),
// and the bucket spliced into an INSERT's text.
#include "sql/gather_plan.hpp"
#include "sql/router.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "shardkit/errors.hpp"
#include "sql/parse.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {
namespace {

SqlCatalog BookstoreCatalog() {
  SqlCatalog catalog;
  catalog.AddSharded({"public", "customers", true, {"customer_id", "bucket", "name", "email", "created_at"}});
  catalog.AddSharded(
      {"public", "orders", true, {"customer_id", "bucket", "order_id", "ordered_at", "status", "total"}});
  catalog.AddSharded({"public",
                      "order_items",
                      true,
                      {"customer_id", "bucket", "order_id", "line_no", "book_id", "quantity", "unit_price"}});
  catalog.AddReference({"public", "books", true, {"book_id", "title", "category", "price"}});
  catalog.AddUserFunction("discount_for");
  for (const char* aggregate : {"count", "sum", "avg", "min", "max", "string_agg", "bool_and", "percentile_cont"}) {
    catalog.AddAggregate(aggregate);
  }
  return catalog;
}

const SqlCatalog& Catalog() {
  static const SqlCatalog catalog = BookstoreCatalog();
  return catalog;
}

// The customer a statement routes to (nullopt: any shard).
std::optional<std::int32_t> RoutesTo(const std::string& sql, const SqlParams& params = {}) {
  const auto plan = PlanStatement(sql, Catalog());
  const BoundRoute route = BindRoute(*plan, params);
  if (plan->kind == SqlPlanInfo::Kind::kAnyShard) return std::nullopt;
  EXPECT_TRUE(route.key.has_value()) << sql;
  return route.key ? std::optional<std::int32_t>(ToInt(*route.key->Customer())) : std::nullopt;
}

SqlError RefusalOf(const std::string& sql, const SqlParams& params = {}) {
  try {
    const auto plan = PlanStatement(sql, Catalog(), Gathering::kNever);
    const BoundRoute route = BindRoute(*plan, params);
    RequireOneShard(*plan, route, BucketDirectory::EvenSplit(2));
  } catch (const SqlError& e) {
    return e;
  }
  ADD_FAILURE() << "not refused: " << sql;
  return SqlError("", {});
}

TEST(SqlParse, OneStatementAsJsonWithTokens) {
  const ParsedStatement parsed = ParseStatement("SELECT a FROM t WHERE x = -5");
  EXPECT_EQ(parsed.tree.begin().key(), "SelectStmt");
  ASSERT_EQ(parsed.tokens.size(), 9U);
  EXPECT_EQ(parsed.TokenText(parsed.tokens[7]), "-");
  EXPECT_EQ(parsed.TokenText(parsed.tokens[8]), "5");
  EXPECT_EQ(parsed.tokens[8].kind, kTokenIconst);
}

TEST(SqlParse, SyntaxErrorsReadAsPsqlPrintsThem) {
  const SqlError e = RefusalOf("SELEC 1");
  EXPECT_EQ(e.kind(), SqlError::Kind::kSyntax);
  EXPECT_EQ(e.message(), "syntax error at or near \"SELEC\"");
  EXPECT_EQ(e.position(), 1);
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 1);
  EXPECT_STREQ(e.what(), "ERROR:  syntax error at or near \"SELEC\"\nLINE 1: SELEC 1\n        ^");

  const SqlError deep = RefusalOf("SELECT *\nFROM orders\nWHERE customer_id = = 5");
  EXPECT_EQ(deep.kind(), SqlError::Kind::kSyntax);
  EXPECT_EQ(deep.position(), 42);
  EXPECT_EQ(deep.line(), 3);
  EXPECT_EQ(deep.column(), 21);
  EXPECT_STREQ(deep.what(),
               "ERROR:  syntax error at or near \"=\"\nLINE 3: WHERE customer_id = = 5\n"
               "                            ^");
}

TEST(SqlParse, SeveralStatementsAreRefusedAtTheSecond) {
  const SqlError e = RefusalOf("SELECT 1;\n  SELECT 2");
  EXPECT_EQ(e.kind(), SqlError::Kind::kRefused);
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 3);
  EXPECT_EQ(RefusalOf("").construct(), "an empty statement");
}

TEST(SqlRouter, PinnedSelectsRouteToTheirCustomer) {
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = 4242"), 4242);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = $1", {"4242"}), 4242);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE 4242 = customer_id AND total > 5"), 4242);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = -5"), -5);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = 0"), 0);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = '77'::int"), 77);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = 77::bigint"), 77);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = CAST($2 AS integer) AND status = $1", {"x", "9"}), 9);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE (customer_id = 3 AND total > 1) AND status <> 'x'"), 3);
  EXPECT_EQ(RoutesTo("SELECT * FROM public.orders o WHERE o.customer_id = 3"), 3);
  // The same parameter twice, or a literal and a parameter of one value.
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o JOIN customers c ON c.customer_id = $1 WHERE o.customer_id = $1", {"8"}),
            8);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o, customers c WHERE c.customer_id = 8 AND o.customer_id = $1", {"8"}), 8);
}

TEST(SqlRouter, JoinsPinThroughEqualities) {
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = "
                     "o.order_id WHERE o.customer_id = 7"),
            7);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders JOIN order_items USING (customer_id, order_id) WHERE customer_id = 7"), 7);
  EXPECT_EQ(
      RoutesTo("SELECT * FROM orders o JOIN order_items i ON i.customer_id = 7 AND o.customer_id = i.customer_id"), 7);
  EXPECT_EQ(RoutesTo("SELECT b.title FROM order_items i JOIN books b ON b.book_id = i.book_id WHERE i.customer_id = 7"),
            7);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o, order_items i WHERE o.customer_id = 7 AND i.customer_id = o.customer_id"),
            7);
  // Unqualified: the only table at its level with customer_id.
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o JOIN books b ON true WHERE customer_id = 7"), 7);
}

TEST(SqlRouter, OuterJoinsPinOnlyTheirNullableSide) {
  // LEFT: the preserved side pins the nullable one...
  EXPECT_EQ(RoutesTo("SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
                     "WHERE c.customer_id = 7"),
            7);
  EXPECT_EQ(RoutesTo("SELECT * FROM customers c LEFT JOIN orders o USING (customer_id) WHERE customer_id = 7"), 7);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders o RIGHT JOIN customers c USING (customer_id) WHERE customer_id = 7"), 7);
  EXPECT_EQ(RoutesTo("SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = 7 WHERE c.customer_id = 7"), 7);
  // ...never the other way round.
  const SqlError reverse = RefusalOf(
      "SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
      "WHERE o.customer_id = 7");
  EXPECT_EQ(reverse.construct(), "the table customers");
  EXPECT_EQ(reverse.column(), 15);
  // The preserved side unpinned: every shard, the join co-located on customer_id.
  EXPECT_EQ(PlanStatement("SELECT * FROM orders o LEFT JOIN customers c ON c.customer_id = o.customer_id "
                          "AND o.customer_id = 7",
                          Catalog())
                ->kind,
            SqlPlanInfo::Kind::kScatter);
  const SqlError right = RefusalOf(
      "SELECT * FROM orders o RIGHT JOIN customers c ON o.customer_id = c.customer_id "
      "WHERE o.customer_id = 7");
  EXPECT_EQ(right.construct(), "the table customers");
  // FULL JOIN pins nothing.
  const SqlError full = RefusalOf(
      "SELECT * FROM orders a FULL JOIN orders b ON a.customer_id = b.customer_id "
      "WHERE a.customer_id = 7");
  EXPECT_EQ(full.construct(), "the table orders");
  EXPECT_EQ(full.column(), 34);
  EXPECT_TRUE(RefusalOf("SELECT * FROM customers c FULL JOIN orders o USING (customer_id) WHERE customer_id = 7")
                  .reason()
                  .find("repartitioning") != std::string::npos);
}

// Statements over every shard (their answers: sql_execute_pgtest).
TEST(SqlRouter, OrInAndNotPinNothingAndScatter) {
  for (const char* sql : {
           "SELECT * FROM orders WHERE customer_id = 1 OR customer_id = 2",
           "SELECT * FROM orders WHERE NOT (customer_id = 1)",
           "SELECT * FROM orders WHERE (customer_id = 1 OR false) AND total > 0",
           "SELECT * FROM orders WHERE customer_id = 1.0",
           "SELECT * FROM orders WHERE customer_id = 1 + 1",
           "SELECT * FROM orders WHERE customer_id IN (1, x)",
           "SELECT * FROM orders WHERE customer_id::int = 1",
           "SELECT * FROM orders WHERE customer_id = -(5)",
           "SELECT * FROM orders",
           "SELECT count(*) FROM orders o JOIN order_items i USING (customer_id, order_id)",
       }) {
    const auto plan = PlanStatement(sql, Catalog());
    EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter) << sql;
    ASSERT_TRUE(plan->scatter) << sql;
    EXPECT_TRUE(BindRoute(*plan, {}).key == std::nullopt) << sql;
  }
  const auto concatenated = PlanStatement("SELECT * FROM orders WHERE total > 5", Catalog());
  EXPECT_FALSE(concatenated->scatter->merge);
  EXPECT_EQ(concatenated->scatter->shard_sql, "SELECT * FROM orders WHERE total > 5");

  const auto merged = PlanStatement(
      "SELECT status, count(*) AS n, avg(total) FROM orders WHERE total > $1 GROUP BY status "
      "HAVING sum(total) > 10 ORDER BY n DESC, 1 LIMIT 3",
      Catalog());
  ASSERT_TRUE(merged->scatter->merge);
  const MergePlan& plan = *merged->scatter->merge;
  EXPECT_EQ(plan.LimitCount(), 3);
  ASSERT_EQ(plan.SortKeys().size(), 2U);
  EXPECT_EQ(plan.SortKeys()[0].column, "_c2");  // merged columns are numbered; the names are the result's
  EXPECT_EQ(plan.SortKeys()[0].direction, SortDirection::kDesc);
  EXPECT_EQ(plan.SortKeys()[1].column, "_c1");
  EXPECT_EQ(merged->scatter->column_names, (std::vector<std::string>{"status", "n", "avg"}));
  ASSERT_EQ(plan.HavingTerms().size(), 1U);
  EXPECT_EQ(plan.HavingTerms()[0].op, CompareOp::kGt);
  // The HAVING aggregate is merged too, but not returned.
  ASSERT_EQ(plan.Columns().size(), 4U);
  EXPECT_TRUE(plan.Columns()[3].hidden);
  // The limit is applied after the merge, never on the shards.
  EXPECT_EQ(plan.ShardSql().find("LIMIT"), std::string::npos) << plan.ShardSql();
  EXPECT_NE(plan.ShardSql().find("WHERE (total > $1)"), std::string::npos) << plan.ShardSql();
}

// The customers and buckets a plan's key sets bound it to (nullopt: none, every shard).
std::optional<std::vector<std::int32_t>> KeyCustomers(const std::string& sql, const SqlParams& params = {}) {
  const auto plan = PlanStatement(sql, Catalog());
  const BoundRoute route = BindRoute(*plan, params);
  if (!route.key_values) return std::nullopt;
  std::vector<std::int32_t> out;
  for (const ShardKey& c : *route.key_values) out.push_back(ToInt(*c.Customer()));
  return out;
}

TEST(SqlRouter, KeyListsRestrictAScatterToTheirCustomers) {
  using V = std::vector<std::int32_t>;
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id IN (3, 1, 2, 1)"), (V{1, 2, 3}));
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id IN (1, NULL, $1, NULL::int, $2::bigint)", {"7", {}}),
            (V{1, 7}));
  EXPECT_EQ(KeyCustomers("SELECT count(*) FROM orders WHERE customer_id = ANY($1)", {"{4, 5,NULL, 6}"}), (V{4, 5, 6}));
  EXPECT_EQ(KeyCustomers("SELECT count(*) FROM orders WHERE customer_id = ANY($1::int[])", {"{{1,2},{3,-4}}"}),
            (V{-4, 1, 2, 3}));
  EXPECT_EQ(KeyCustomers("SELECT count(*) FROM orders WHERE customer_id = ANY($1)", SqlParams{std::nullopt}), V{});
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id = ANY(ARRAY[8, 9]) AND total > 0"), (V{8, 9}));
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id = ANY('{8,9}'::integer[])"), (V{8, 9}));
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id = SOME('{8,9}')"), (V{8, 9}));
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id IN (NULL)"), V{});
  // Two sets: the customers of both; on any joined table, qualified or not.
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders o JOIN order_items i USING (customer_id, order_id) "
                         "WHERE o.customer_id IN (1, 2, 3) AND i.customer_id = ANY(ARRAY[2, 3, 4])"),
            (V{2, 3}));
  EXPECT_EQ(KeyCustomers("SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o USING (customer_id) "
                         "WHERE o.customer_id IN (5, 6)"),
            (V{5, 6}));
  const BoundRoute none = BindRoute(*PlanStatement("SELECT * FROM orders WHERE customer_id IN (NULL)", Catalog()), {});
  EXPECT_EQ(none.Buckets(), std::vector<BucketId>{BucketId{0}});  // one shard answers: no row matches
  const BoundRoute three =
      BindRoute(*PlanStatement("SELECT * FROM orders WHERE customer_id IN (5, 60, 1)", Catalog()), {});
  EXPECT_EQ(three.Buckets(), (std::vector<BucketId>{BucketId{5}, BucketId{39}}));  // 5 and 60 share bucket 5

  // What bounds nothing: every shard.
  for (const char* sql : {
           "SELECT * FROM orders WHERE customer_id IN (1, total::int)",
           "SELECT * FROM orders WHERE customer_id NOT IN (1, 2)",
           "SELECT * FROM orders WHERE customer_id IN (1, 2) OR total > 5",
           "SELECT * FROM orders WHERE NOT (customer_id IN (1, 2))",
           "SELECT * FROM orders WHERE customer_id <> ALL(ARRAY[1, 2])",
           "SELECT * FROM orders WHERE customer_id = ALL(ARRAY[1, 2])",
           "SELECT * FROM orders WHERE customer_id = ANY(ARRAY[ARRAY[1, 2]])",
           "SELECT * FROM orders WHERE customer_id = ANY($1::text[]::int[])",
           "SELECT * FROM orders WHERE customer_id IN (SELECT 1)",
           "SELECT c.customer_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id "
           "AND o.customer_id IN (1, 2)",
       }) {
    const auto plan = PlanStatement(sql, Catalog());
    EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter) << sql;
    EXPECT_TRUE(plan->key_sets.empty()) << sql;
  }
  // Quoted values are read as the key's type, as the server reads them.
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id IN ('1', ' +2')"), (std::vector<std::int32_t>{1, 2}));
  // A pin still routes; the list only filters then.
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = 5 AND customer_id IN (5, 6)"), 5);
}

TEST(SqlRouter, KeyListsThatCannotBeReadAreRefused) {
  const std::string any = "SELECT count(*) FROM orders WHERE customer_id = ANY($1)";
  for (const char* text : {"1,2", "{1,2", "{1,,2}", "{\"1\"}", "[1:2]={1,2}", "{1.5}", "{1 2}", "{1}x", "{a}"}) {
    const SqlError e = RefusalOf(any, {text});
    EXPECT_EQ(e.construct(), "the parameter $1") << text;
    EXPECT_NE(e.reason().find("is not a list of integers"), std::string::npos) << e.what();
  }
  EXPECT_NE(RefusalOf(any, {"{4294967296}"}).reason().find("out of range"), std::string::npos);
  EXPECT_NE(RefusalOf(any, {}).reason().find("it has no value"), std::string::npos);
  EXPECT_EQ(RefusalOf("SELECT * FROM orders WHERE customer_id IN (1, $1)", {"x"}).construct(), "the parameter $1");
  // A literal beyond int is no integer constant to the router (it matches no customer): every shard.
  EXPECT_TRUE(PlanStatement("SELECT * FROM orders WHERE customer_id IN (1, 4294967338)", Catalog())->key_sets.empty());

  using A = std::vector<std::optional<ShardKey>>;
  const auto integers = [](std::string_view text) { return ParseKeyArray(text, ShardKeyType::kInt4); };
  EXPECT_EQ(integers(" { 1 ,+2, -3,null , NULL }  "),
            (A{ShardKey::Int4(1), ShardKey::Int4(2), ShardKey::Int4(-3), std::nullopt, std::nullopt}));
  EXPECT_EQ(integers("{}"), A{});
  EXPECT_EQ(integers("{{},{}}"), A{});
  EXPECT_EQ(integers("{007}"), A{ShardKey::Int4(7)});
  EXPECT_FALSE(integers("{NULLX}"));
  EXPECT_FALSE(integers("{1}}"));
  EXPECT_FALSE(integers("{1\\,2}"));
  EXPECT_FALSE(integers("{4294967296}"));  // beyond integer
  EXPECT_EQ(ParseKeyArray("{4294967296}", ShardKeyType::kInt8), A{ShardKey::Int8(4294967296)});
  EXPECT_EQ(ParseKeyArray("{a, b c}", ShardKeyType::kText), std::nullopt);  // unquoted white space: not read
  EXPECT_EQ(ParseKeyArray("{a,NULL,bc}", ShardKeyType::kText),
            (A{ShardKey::Text("a"), std::nullopt, ShardKey::Text("bc")}));
}

TEST(SqlRouter, WritesWithKeyListsRouteOnlyWithinOneBucket) {
  // 5 and 60 are both in bucket 5; 2 is in bucket 15 (shard 0 of two), 1 in bucket 39 (shard 1).
  EXPECT_EQ(RoutesTo("DELETE FROM orders WHERE customer_id IN (5, 60) AND order_id = 3"), 5);
  EXPECT_EQ(RoutesTo("UPDATE orders SET status = 'x' WHERE customer_id = ANY($1)", {"{60,5,NULL}"}), 5);
  const SqlError shards = RefusalOf("DELETE FROM orders WHERE customer_id IN (5, 1)");
  EXPECT_EQ(shards.construct(), "DELETE ... IN");
  EXPECT_NE(shards.reason().find("atomic on one shard only"), std::string::npos) << shards.what();
  const SqlError buckets = RefusalOf("UPDATE orders SET status = 'x' WHERE customer_id IN (5, 2)");
  EXPECT_NE(buckets.reason().find("sees one bucket's rows"), std::string::npos) << buckets.what();
  EXPECT_NE(RefusalOf("DELETE FROM orders WHERE customer_id IN (NULL)").reason().find("names no customer"),
            std::string::npos);
  // Another sharded table unpinned: refused as before.
  EXPECT_EQ(RefusalOf("DELETE FROM orders o USING order_items i WHERE o.customer_id IN (5, 60) AND "
                      "i.customer_id = o.customer_id")
                .construct(),
            "DELETE orders");
}

TEST(SqlRouter, DistinctIsPerShardWithTheShardKeyAndFinishedWithout) {
  for (const char* sql : {"SELECT DISTINCT customer_id, status FROM orders",
                          "SELECT DISTINCT o.status, o.customer_id FROM orders o ORDER BY 1, 2 LIMIT 3",
                          "SELECT DISTINCT * FROM orders", "SELECT DISTINCT o.* FROM orders o JOIN books b ON true",
                          "SELECT DISTINCT ON (customer_id) order_id FROM orders ORDER BY customer_id, total"}) {
    const auto plan = PlanStatement(sql, Catalog());
    EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter) << sql;
    ASSERT_TRUE(plan->scatter) << sql;
    EXPECT_FALSE(plan->scatter->merge) << sql;
    EXPECT_FALSE(plan->scatter->rows && plan->scatter->rows->distinct) << sql;
  }
  // Without the key, equal rows may come from several shards: each shard's
  // distinct rows, deduplicated again by the finishing step.
  for (const char* sql : {"SELECT DISTINCT status FROM orders", "SELECT DISTINCT b.customer_id FROM orders o, books b",
                          "SELECT DISTINCT o.customer_id FROM customers c LEFT JOIN orders o USING (customer_id)",
                          "SELECT DISTINCT status, total FROM orders ORDER BY 2 DESC, status LIMIT 4"}) {
    const auto plan = PlanStatement(sql, Catalog());
    ASSERT_TRUE(plan->scatter && plan->scatter->rows) << sql;
    EXPECT_TRUE(plan->scatter->rows->distinct) << sql;
  }
  const auto limited = PlanStatement("SELECT DISTINCT status FROM orders ORDER BY 1 LIMIT 2 OFFSET 1", Catalog());
  EXPECT_NE(limited->scatter->shard_sql.find("LIMIT 3"), std::string::npos) << limited->scatter->shard_sql;
  EXPECT_EQ(RefusalOf("SELECT DISTINCT ON (status) status FROM orders ORDER BY status").construct(),
            "DISTINCT ON over every shard");
  EXPECT_EQ(RefusalOf("SELECT DISTINCT status FROM orders ORDER BY total").construct(),
            "this ORDER BY item of a SELECT DISTINCT over every shard");
  // DISTINCT over merged groups: the finishing step.
  const auto groups = PlanStatement("SELECT DISTINCT count(*) FROM orders GROUP BY status", Catalog());
  ASSERT_TRUE(groups->scatter->finish);
  EXPECT_EQ(groups->scatter->finish->select, "SELECT DISTINCT _m1._a1 AS \"count\" FROM _m1");
}

TEST(SqlRouter, ExpressionsOverAggregatesAreFinishedOverTheMergedGroups) {
  const auto plan = PlanStatement(
      "SELECT status, sum(total) - sum(total / 2) AS half, round(avg(total), 2), coalesce(max(total), 0), "
      "CASE WHEN count(*) > 10 THEN 'many' ELSE 'few' END AS size, upper(status) || '!' "
      "FROM orders WHERE total > $1 GROUP BY status HAVING sum(total) > 2 * min(total) OR count(*) < $2 "
      "ORDER BY sum(total) DESC, size, 1 LIMIT $3",
      Catalog());
  ASSERT_TRUE(plan->scatter);
  ASSERT_TRUE(plan->scatter->merge);
  ASSERT_TRUE(plan->scatter->finish);
  const FinishStep& finish = *plan->scatter->finish;
  // Each group key and aggregate merged once, whatever expressions use them.
  EXPECT_EQ(finish.inputs.front(), (std::vector<std::string>{"_g1", "_a1", "_a2", "_a3", "_a4", "_a5", "_a6"}));
  EXPECT_EQ(finish.select,
            "SELECT _m1._g1 AS \"status\", _m1._a1 - _m1._a2 AS \"half\", round(_m1._a3, 2) AS \"round\", "
            "coalesce(_m1._a4, 0) AS \"coalesce\", CASE WHEN _m1._a5 > 10 THEN 'many' ELSE 'few' END AS \"size\", "
            "upper(_m1._g1) || '!' AS \"?column?\" FROM _m1 WHERE _m1._a1 > 2 * _m1._a6 OR _m1._a5 < $2 "
            "ORDER BY _m1._a1 DESC, size, 1 LIMIT $3");
  EXPECT_EQ(finish.params_used, (std::vector<int>{2, 3}));
  // The shards see $1 in WHERE, and $2 and $3 typed so that they still parse.
  EXPECT_NE(plan->scatter->shard_sql.find("OFFSET 0 * length(concat($2::text, $3::text))"), std::string::npos)
      << plan->scatter->shard_sql;
  EXPECT_EQ(plan->scatter->column_names,
            (std::vector<std::string>{"status", "half", "round", "coalesce", "size", "?column?"}));

  // What PostgreSQL refuses too, and what cannot be evaluated over merged groups.
  EXPECT_EQ(RefusalOf("SELECT total, count(*) FROM orders GROUP BY status").construct(), "the column total");
  EXPECT_EQ(RefusalOf("SELECT count(*) + (SELECT count(*) FROM books) FROM orders").construct(),
            "a subquery over merged aggregates");
  EXPECT_NE(RefusalOf("SELECT sum(total) / percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders")
                .construct()
                .find("percentile_cont"),
            std::string::npos);
}

TEST(SqlRouter, OutputNamesAreThoseThePostgreSQLParserGives) {
  const auto plan = PlanStatement(
      "SELECT count(*)::int, CASE WHEN true THEN 1 ELSE max(total) END, CASE WHEN true THEN 1 END, "
      "sum(total)::numeric(10, 2), nullif(count(*), 0), greatest(min(total), 1), (sum(total)), now(), "
      "current_date - 1 FROM orders",
      Catalog());
  EXPECT_EQ(plan->scatter->column_names,
            (std::vector<std::string>{"count", "max", "case", "sum", "nullif", "greatest", "sum", "now", "?column?"}));
}

TEST(SqlRouter, SetOperationsRunArmByArm) {
  const auto plan = PlanStatement(
      "SELECT customer_id, status FROM orders WHERE total > $2 UNION SELECT customer_id, 'x' FROM customers "
      "WHERE customer_id = $1 EXCEPT (SELECT customer_id, status FROM orders WHERE customer_id IN (1, $3)) "
      "ORDER BY 1 DESC LIMIT $4",
      Catalog());
  EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter);
  ASSERT_TRUE(plan->set_operation);
  const SetOperationPlan& set = *plan->set_operation;
  ASSERT_EQ(set.arms.size(), 3U);
  // Each arm's parameters numbered from $1, in the order it uses them.
  EXPECT_EQ(set.arms[0].text, "SELECT customer_id, status FROM orders WHERE total > $1");
  EXPECT_EQ(set.arms[0].params, (std::vector<int>{2}));
  EXPECT_EQ(set.arms[0].plan->kind, SqlPlanInfo::Kind::kScatter);
  EXPECT_EQ(set.arms[1].plan->kind, SqlPlanInfo::Kind::kRouted);
  EXPECT_EQ(set.arms[2].text, "SELECT customer_id, status FROM orders WHERE customer_id IN (1, $1)");
  EXPECT_EQ(set.arms[2].params, (std::vector<int>{3}));
  EXPECT_EQ(set.combination, "((<first arm>) UNION (SELECT * FROM _m2)) EXCEPT (SELECT * FROM _m3)");
  EXPECT_EQ(set.tail, "ORDER BY 1 DESC LIMIT $4");
  EXPECT_FALSE(set.union_all_only);
  EXPECT_TRUE(PlanStatement("SELECT order_id FROM orders UNION ALL SELECT order_id FROM order_items", Catalog())
                  ->set_operation->union_all_only);
  // Every arm pinned to one customer: the whole statement on that shard.
  EXPECT_EQ(RoutesTo("SELECT order_id FROM orders WHERE customer_id = 5 UNION SELECT order_id FROM order_items "
                     "WHERE customer_id = 5"),
            5);
  // An arm's refusal points into the whole statement.
  const SqlError e = RefusalOf(
      "SELECT 1 UNION ALL SELECT rank() OVER (ORDER BY total) FROM orders WHERE total > $2 "
      "AND order_id > $1");
  EXPECT_EQ(e.column(), 27) << e.what();
  EXPECT_NE(e.reason().find("arm 2"), std::string::npos) << e.what();
  EXPECT_EQ(RefusalOf("WITH x AS (SELECT 1) SELECT order_id FROM orders UNION SELECT 1 FROM x").construct(),
            "WITH over a set operation across shards");
}

TEST(SqlRouter, LimitAndOffsetParametersAreBoundAtExecution) {
  const auto rows = PlanStatement("SELECT order_id FROM orders ORDER BY total, order_id LIMIT $1 OFFSET $2", Catalog());
  EXPECT_EQ(rows->scatter->limit_param, 1);
  EXPECT_EQ(rows->scatter->offset_param, 2);
  EXPECT_NE(rows->scatter->shard_sql.find("LIMIT $1::bigint + $2::bigint"), std::string::npos)
      << rows->scatter->shard_sql;
  const auto only_offset = PlanStatement("SELECT order_id FROM orders ORDER BY 1 LIMIT 5 OFFSET $1", Catalog());
  EXPECT_NE(only_offset->scatter->shard_sql.find("LIMIT 5 + $1::bigint"), std::string::npos);
  const auto groups =
      PlanStatement("SELECT status, count(*) FROM orders GROUP BY 1 ORDER BY 1 LIMIT $1 OFFSET $2", Catalog());
  ASSERT_TRUE(groups->scatter->merge);
  EXPECT_FALSE(groups->scatter->merge->LimitCount());
  EXPECT_NE(groups->scatter->shard_sql.find("OFFSET 0 * $1::bigint * $2::bigint"), std::string::npos)
      << groups->scatter->shard_sql;
  EXPECT_EQ(RefusalOf("SELECT order_id FROM orders WHERE total > $1 LIMIT $1").construct(), "LIMIT $1");
  EXPECT_EQ(RefusalOf("SELECT order_id FROM orders LIMIT $1 + 1").kind(), SqlError::Kind::kRefused);
}

TEST(SqlRouter, ScatterRefusalsSayWhereAndWhy) {
  const SqlError e = RefusalOf("SELECT * FROM orders o JOIN order_items i ON i.order_id = o.order_id");
  EXPECT_EQ(e.kind(), SqlError::Kind::kRefused);
  EXPECT_EQ(e.construct(), "the table order_items");
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 29);
  EXPECT_NE(e.reason().find("would need repartitioning"), std::string::npos);
  EXPECT_EQ(std::string(e.what()).substr(0, 56), "shardkit: the table order_items at line 1, column 29: it");
  EXPECT_NE(std::string(e.what()).find("\nLINE 1: SELECT * FROM orders o JOIN order_items i ON i.order_id = "
                                       "o.order_id\n                                    ^"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(RefusalOf("SELECT order_id FROM orders\nORDER BY total USING < LIMIT 5").line(), 2);
  EXPECT_EQ(RefusalOf("SELECT status, count(*) FROM orders GROUP BY CUBE (status)").column(), 46);
  EXPECT_NE(RefusalOf("SELECT bool_and(total > 0) FROM orders").construct().find("bool_and"), std::string::npos);
}

TEST(SqlRouter, SubqueriesAndCtesArePinnedLevelByLevel) {
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = 7 AND total > (SELECT avg(total) FROM orders o2 "
                     "WHERE o2.customer_id = 7)"),
            7);
  EXPECT_EQ(RoutesTo("SELECT c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) "
                     "FROM customers c WHERE c.customer_id = 7"),
            7);
  EXPECT_EQ(RoutesTo("SELECT * FROM customers c WHERE c.customer_id = 7 AND NOT EXISTS (SELECT 1 FROM orders o "
                     "WHERE o.customer_id = c.customer_id AND o.status = 'placed')"),
            7);
  EXPECT_EQ(RoutesTo("WITH mine AS (SELECT * FROM orders WHERE customer_id = $1) SELECT * FROM mine ORDER BY order_id",
                     {"7"}),
            7);
  // A CTE's name is not a table, even where it shadows one.
  EXPECT_EQ(RoutesTo("WITH orders AS (SELECT * FROM order_items WHERE customer_id = 7) SELECT * FROM orders"), 7);
  EXPECT_EQ(RoutesTo("SELECT * FROM customers c, LATERAL (SELECT * FROM orders o WHERE o.customer_id = "
                     "c.customer_id ORDER BY ordered_at DESC LIMIT 3) last3 WHERE c.customer_id = 7"),
            7);
  EXPECT_EQ(RoutesTo("SELECT order_id FROM orders WHERE customer_id = 3 UNION SELECT order_id FROM order_items "
                     "WHERE customer_id = 3"),
            3);
  EXPECT_EQ(RoutesTo("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) "
                     "SELECT * FROM n, orders o WHERE o.customer_id = 3"),
            3);
  EXPECT_EQ(RoutesTo("SELECT * FROM (SELECT * FROM orders WHERE customer_id = 5) s WHERE s.total > 1"), 5);

  const SqlError sub = RefusalOf(
      "SELECT * FROM orders WHERE customer_id = 7 AND total >\n"
      "  (SELECT avg(total) FROM orders)");
  EXPECT_EQ(sub.construct(), "the table orders");
  EXPECT_EQ(sub.line(), 2);
  EXPECT_EQ(sub.column(), 27);
  const SqlError cte = RefusalOf(
      "WITH all_orders AS (SELECT * FROM orders) SELECT * FROM all_orders "
      "WHERE customer_id = 7");
  EXPECT_EQ(cte.column(), 35);
  // A pin outside a subquery in FROM does not reach into it.
  RefusalOf("SELECT * FROM (SELECT * FROM orders) s WHERE s.customer_id = 5");
  // An outer query's unpinned customer does not pin the subquery.
  RefusalOf("SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)");
  // A subquery's equality does not pin the outer query.
  RefusalOf(
      "SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id "
      "AND c.customer_id = 7 AND o.customer_id = 7)");
  // Arms of a set operation on different shards: arm by arm.
  EXPECT_TRUE(PlanStatement("SELECT order_id FROM orders WHERE customer_id = 3 UNION SELECT order_id FROM order_items",
                            Catalog())
                  ->set_operation);
  RefusalOf("WITH x AS (DELETE FROM orders WHERE customer_id = 1 RETURNING *) SELECT * FROM x");
}

TEST(SqlRouter, AmbiguousOrConflictingKeysAreRefused) {
  const SqlError ambiguous = RefusalOf(
      "SELECT * FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
      "WHERE customer_id = 7");
  EXPECT_EQ(ambiguous.construct(), "the unqualified column customer_id");
  EXPECT_EQ(ambiguous.column(), 80);
  EXPECT_NE(ambiguous.reason().find("ambiguous"), std::string::npos);

  const SqlError two = RefusalOf("SELECT * FROM orders WHERE customer_id = 1 AND customer_id = 2");
  EXPECT_NE(two.reason().find("customers 1 and 2"), std::string::npos);
  RefusalOf("SELECT * FROM orders a, orders b WHERE a.customer_id = 1 AND b.customer_id = 2");
  // Arms pinned to different customers: each arm on its own shard.
  const auto arms = PlanStatement(
      "SELECT * FROM orders WHERE customer_id = 1 UNION ALL SELECT * FROM orders WHERE customer_id = 2", Catalog());
  ASSERT_TRUE(arms->set_operation);
  EXPECT_EQ(arms->set_operation->arms.size(), 2U);
  // Parameters that differ are refused when bound.
  const SqlError params =
      RefusalOf("SELECT * FROM orders a, orders b WHERE a.customer_id = $1 AND b.customer_id = $2", {"1", "2"});
  EXPECT_EQ(params.column(), 79);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders a, orders b WHERE a.customer_id = $1 AND b.customer_id = $2", {"1", "1"}),
            1);
}

TEST(SqlRouter, KeyParametersMustBeIntegers) {
  const std::string sql = "SELECT * FROM orders WHERE customer_id = $1";
  EXPECT_EQ(RefusalOf(sql, {std::nullopt}).construct(), "the parameter $1");
  EXPECT_EQ(RefusalOf(sql, {"abc"}).column(), 42);
  RefusalOf(sql, {"1.5"});
  RefusalOf(sql, {"99999999999"});
  RefusalOf(sql, {});
  EXPECT_EQ(RoutesTo(sql, {"-12"}), -12);
  // Read as the server's int4in reads them: spaces around, one sign.
  EXPECT_EQ(RoutesTo(sql, {" 1259"}), 1259);
  EXPECT_EQ(RoutesTo(sql, {"+1259"}), 1259);
  EXPECT_EQ(RoutesTo(sql, {"\t-7 \n"}), -7);
  EXPECT_EQ(RoutesTo("SELECT * FROM orders WHERE customer_id = ' +12 '::int"), 12);
  EXPECT_EQ(KeyCustomers("SELECT * FROM orders WHERE customer_id = ANY($1)", {"{ +3 , -4 }"}),
            (std::vector<std::int32_t>{-4, 3}));
  for (const char* bad : {"", " ", "+", "-", "+-1", "- 1", "1 2", "0x10", "1_000", "١٢"}) {
    EXPECT_EQ(RefusalOf(sql, {bad}).construct(), "the parameter $1") << bad;
  }
}

TEST(SqlRouter, ReferenceTablesAloneRunOnAnyShard) {
  EXPECT_EQ(RoutesTo("SELECT * FROM books ORDER BY book_id"), std::nullopt);
  EXPECT_EQ(RoutesTo("SELECT 1"), std::nullopt);
  EXPECT_EQ(RoutesTo("SELECT category, count(*) FROM books GROUP BY 1"), std::nullopt);
  const auto plan = PlanStatement("SELECT * FROM books b JOIN orders o ON o.customer_id = 1", Catalog());
  EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kRouted);
  EXPECT_EQ(plan->reference_tables, std::vector<std::string>{"books"});
  EXPECT_EQ(plan->sharded_tables, std::vector<std::string>{"orders"});
}

TEST(SqlRouter, WritesRouteWithTheirKey) {
  const auto update =
      PlanStatement("UPDATE orders SET status = 'shipped' WHERE customer_id = 5 AND order_id = 1", Catalog());
  EXPECT_FALSE(update->read_only);
  EXPECT_EQ(update->statement, "UPDATE");
  EXPECT_EQ(RoutesTo("UPDATE orders SET status = 'shipped' WHERE customer_id = 5 AND order_id = 1"), 5);
  EXPECT_EQ(RoutesTo("DELETE FROM order_items WHERE customer_id = $1 AND order_id = $2", {"6", "1"}), 6);
  EXPECT_EQ(RoutesTo("UPDATE orders o SET total = i.s FROM (SELECT order_id, sum(unit_price) s FROM order_items "
                     "WHERE customer_id = 5 GROUP BY 1) i WHERE o.customer_id = 5 AND o.order_id = i.order_id"),
            5);
  EXPECT_EQ(
      RoutesTo("DELETE FROM orders o USING customers c WHERE o.customer_id = c.customer_id AND c.customer_id = 4"), 4);

  const SqlError unpinned = RefusalOf("UPDATE orders SET status = 'x' WHERE order_id = 5");
  EXPECT_EQ(unpinned.construct(), "UPDATE orders");
  EXPECT_EQ(unpinned.column(), 8);
  EXPECT_EQ(RefusalOf("DELETE FROM orders").construct(), "DELETE orders");
  EXPECT_EQ(RefusalOf("UPDATE orders SET customer_id = 6 WHERE customer_id = 5").construct(), "SET customer_id");
  EXPECT_EQ(RefusalOf("UPDATE orders SET bucket = 6 WHERE customer_id = 5").construct(), "SET bucket");
  EXPECT_EQ(RefusalOf("UPDATE books SET price = 1").construct(), "a write to the reference table books");
  RefusalOf("DELETE FROM orders WHERE customer_id = 5 AND order_id IN (SELECT order_id FROM order_items)");
}

TEST(SqlRouter, InsertsRouteByTheirRowsAndGetTheirBucket) {
  const std::string sql =
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES (4242, 1, now(), 5), (4242, 2, now(), 6)";
  const auto plan = PlanStatement(sql, Catalog());
  EXPECT_TRUE(plan->AddsBucket());
  const BoundRoute route = BindRoute(*plan, {});
  ASSERT_TRUE(route.key);
  EXPECT_EQ(*route.key, CustomerId{4242});
  EXPECT_EQ(StatementText(*plan, route),
            "INSERT INTO orders (customer_id, order_id, ordered_at, total, bucket) VALUES (4242, 1, now(), 5, 44), "
            "(4242, 2, now(), 6, 44)");

  // Parameters, nested parentheses, comments and line breaks stay as written.
  const std::string with_params =
      "INSERT INTO order_items AS i (order_id, customer_id, line_no, book_id, quantity, unit_price)\n"
      "VALUES ($1, $2, 1, 7, (1 + (2)), 9.5) /* ) */ RETURNING i.bucket, (i.quantity)";
  const auto params_plan = PlanStatement(with_params, Catalog());
  const BoundRoute params_route = BindRoute(*params_plan, {"10", "4243"});
  EXPECT_EQ(StatementText(*params_plan, params_route),
            "INSERT INTO order_items AS i (order_id, customer_id, line_no, book_id, quantity, unit_price, bucket)\n"
            "VALUES ($1, $2, 1, 7, (1 + (2)), 9.5, 20) /* ) */ RETURNING i.bucket, (i.quantity)");

  // bucket given: the text is the statement's own.
  const std::string given = "INSERT INTO customers (customer_id, bucket, name, email) VALUES (4242, 44, 'a', 'b')";
  const auto given_plan = PlanStatement(given, Catalog());
  EXPECT_FALSE(given_plan->AddsBucket());
  EXPECT_EQ(StatementText(*given_plan, BindRoute(*given_plan, {})), given);
  EXPECT_EQ(RoutesTo("INSERT INTO customers VALUES (4242, 44, 'a', 'b', now())"), 4242);

  // Several customers on one shard: one statement.
  const auto same_shard = PlanStatement(
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES "
      "(4242, 1, now(), 5), (77777, 2, now(), 6)",
      Catalog());
  const BoundRoute both = BindRoute(*same_shard, {});
  ASSERT_EQ(BucketDirectory::EvenSplit(2).ShardFor(CustomerId{4242}),
            BucketDirectory::EvenSplit(2).ShardFor(CustomerId{77777}));
  RequireOneShard(*same_shard, both, BucketDirectory::EvenSplit(2));
  EXPECT_EQ(StatementText(*same_shard, both),
            "INSERT INTO orders (customer_id, order_id, ordered_at, total, bucket) VALUES (4242, 1, now(), 5, 44), "
            "(77777, 2, now(), 6, 53)");
}

// INSERT ... SELECT of one customer's rows, its customer_id a literal or
// parameter: routed, the bucket added after the SELECT's last column.
TEST(SqlRouter, InsertSelectOfOneCustomersRowsRoutesAndGetsItsBucket) {
  const std::string sql =
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) SELECT $1, o.order_id + 1000, now(), "
      "sum(i.quantity * i.unit_price) AS t FROM orders o JOIN order_items i USING (customer_id, order_id) "
      "WHERE o.customer_id = $1 GROUP BY o.order_id RETURNING bucket";
  const auto plan = PlanStatement(sql, Catalog());
  EXPECT_TRUE(plan->AddsBucket());
  EXPECT_FALSE(plan->read_only);
  const BoundRoute route = BindRoute(*plan, {"4242"});
  ASSERT_TRUE(route.key);
  EXPECT_EQ(*route.key, CustomerId{4242});
  EXPECT_EQ(StatementText(*plan, route),
            "INSERT INTO orders (customer_id, order_id, ordered_at, total, bucket) SELECT $1, o.order_id + 1000, "
            "now(), sum(i.quantity * i.unit_price) AS t, 44 FROM orders o JOIN order_items i USING (customer_id, "
            "order_id) WHERE o.customer_id = $1 GROUP BY o.order_id RETURNING bucket");
  // From reference tables alone, and without FROM: the key decides.
  EXPECT_EQ(RoutesTo("INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) "
                     "SELECT 7, 1, book_id, book_id, 1, price FROM books WHERE category = 'science'"),
            7);
  const auto no_from = PlanStatement("INSERT INTO customers (customer_id, name, email) SELECT 7, 'a', 'b'", Catalog());
  EXPECT_EQ(StatementText(*no_from, BindRoute(*no_from, {})),
            "INSERT INTO customers (customer_id, name, email, bucket) SELECT 7, 'a', 'b', 20");

  const auto refused = [](const std::string& statement, const SqlParams& params = {}) {
    return RefusalOf(statement, params).reason();
  };
  // Another customer's rows, every customer's rows, a key from a column.
  EXPECT_NE(refused("INSERT INTO orders (customer_id, order_id) SELECT 2, order_id FROM orders WHERE customer_id = 1")
                .find("reads customer 1's rows and writes customer 2's"),
            std::string::npos);
  RefusalOf("INSERT INTO orders (customer_id, order_id) SELECT $1, order_id FROM orders WHERE customer_id = $2",
            {"1", "2"});
  EXPECT_NE(refused("INSERT INTO orders (customer_id, order_id) SELECT 1, order_id FROM orders").find("not pinned"),
            std::string::npos);
  EXPECT_NE(
      refused(
          "INSERT INTO orders (customer_id, order_id) SELECT customer_id, order_id FROM orders WHERE customer_id = 1")
          .find("neither a literal nor a parameter"),
      std::string::npos);
  EXPECT_NE(refused("INSERT INTO orders SELECT * FROM orders WHERE customer_id = 1").find("not named"),
            std::string::npos);
  EXPECT_NE(refused("INSERT INTO orders (customer_id, order_id) SELECT 1, 2 UNION SELECT 1, 3").find("set operation"),
            std::string::npos);
}

TEST(SqlRouter, InsertsOnTwoShardsOrWithoutAKnownKeyAreRefused) {
  // 4242: bucket 44, shard 1; 4243: bucket 20, shard 0 (two shards).
  const SqlError two = RefusalOf(
      "INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES\n"
      "  (4242, 1, now(), 5),\n  (4243, 2, now(), 6)");
  EXPECT_EQ(two.construct(), "row 2 of the VALUES");
  EXPECT_EQ(two.line(), 3);
  EXPECT_EQ(two.column(), 4);
  EXPECT_NE(two.reason().find("atomic"), std::string::npos);
  EXPECT_NE(two.advice().find("statement of its own"), std::string::npos);
  RefusalOf("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, 1, now(), 5), ($2, 2, now(), 6)",
            {"4242", "4243"});

  EXPECT_EQ(RefusalOf("INSERT INTO orders (customer_id, order_id) VALUES (1 + 1, 2)").construct(),
            "the customer_id of row 1");
  EXPECT_EQ(RefusalOf("INSERT INTO orders (order_id) VALUES (2)").construct(), "INSERT INTO orders");
  RefusalOf("INSERT INTO orders DEFAULT VALUES");
  // ON CONFLICT on a key with customer_id: the conflict is on the row's shard.
  EXPECT_EQ(RefusalOf("INSERT INTO orders (customer_id, order_id) VALUES (1, 2) ON CONFLICT DO NOTHING").construct(),
            "ON CONFLICT");
  EXPECT_EQ(
      RefusalOf("INSERT INTO orders (customer_id, order_id) VALUES (1, 2) ON CONFLICT (order_id) DO NOTHING").advice(),
      "name the unique key's columns, customer_id among them: ON CONFLICT (customer_id, ...)");
  EXPECT_EQ(RefusalOf("INSERT INTO orders (customer_id, order_id) VALUES (1, 2) ON CONFLICT ON CONSTRAINT orders_pkey "
                      "DO NOTHING")
                .construct(),
            "ON CONFLICT ON CONSTRAINT");
  EXPECT_EQ(RefusalOf("INSERT INTO orders (customer_id, order_id, total) VALUES (1, 2, 3) ON CONFLICT (customer_id, "
                      "order_id) DO UPDATE SET customer_id = 5")
                .construct(),
            "DO UPDATE SET customer_id");
  EXPECT_EQ(RoutesTo("INSERT INTO orders (customer_id, order_id) VALUES (1, 2) ON CONFLICT (customer_id, order_id) DO "
                     "NOTHING"),
            1);
  EXPECT_EQ(RoutesTo("INSERT INTO orders (customer_id, order_id, total) VALUES ($1, 2, 3) ON CONFLICT (order_id, "
                     "customer_id) DO UPDATE SET total = orders.total + EXCLUDED.total WHERE orders.status <> 'x'",
                     {"1"}),
            1);
  RefusalOf(
      "INSERT INTO orders (customer_id, order_id, total) VALUES (1, 2, 3) ON CONFLICT (customer_id, order_id) DO "
      "UPDATE SET total = (SELECT max(total) FROM orders)");
  RefusalOf("INSERT INTO orders VALUES (1)");
  RefusalOf("INSERT INTO books (book_id, title, category, price) VALUES (1, 'a', 'b', 1)");
  RefusalOf(
      "INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) VALUES "
      "(1, (SELECT max(order_id) FROM orders), 1, 1, 1, 1)");
  EXPECT_EQ(RoutesTo("INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) VALUES "
                     "(1, (SELECT max(order_id) FROM orders WHERE customer_id = 1), 1, 1, 1, 1)"),
            1);
  RefusalOf(
      "INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) VALUES "
      "(2, (SELECT max(order_id) FROM orders WHERE customer_id = 1), 1, 1, 1, 1)");
}

// A locking clause that reaches a reference table's rows (named in OF, or
// in the FROM of a clause without OF, subqueries in FROM included) is
// refused even pinned: it would lock the copy on one shard only. Refused at
// that clause, naming it and the table.
TEST(SqlRouter, LockingReferenceRowsIsRefusedEvenPinned) {
  const std::string join =
      "SELECT i.order_id, b.title FROM order_items i JOIN books b ON b.book_id = i.book_id WHERE i.customer_id = 7";
  struct Locked {
    std::string sql;
    std::string clause;  // as the construct names it
    std::string at;      // the text the refusal points at (its first occurrence)
  };
  const std::vector<Locked> locked = {
      {join + " FOR UPDATE OF b", "FOR UPDATE OF b", "FOR UPDATE OF b"},
      {join + " FOR SHARE", "FOR SHARE", "FOR SHARE"},
      {join + " FOR NO KEY UPDATE OF i, b NOWAIT", "FOR NO KEY UPDATE OF i, b NOWAIT", "FOR NO"},
      {join + " FOR UPDATE OF i FOR KEY SHARE OF b SKIP LOCKED", "FOR KEY SHARE OF b SKIP LOCKED", "FOR KEY"},
      {join + " FOR SHARE OF i FOR UPDATE", "FOR UPDATE", "FOR UPDATE"},
      {"SELECT * FROM (SELECT i.order_id, b.title FROM order_items i JOIN books b USING (book_id) WHERE "
       "i.customer_id = 7) s FOR SHARE",
       "FOR SHARE", "FOR SHARE"},
      {"SELECT * FROM (SELECT i.order_id, s.title FROM order_items i JOIN (SELECT * FROM books FOR UPDATE) s USING "
       "(book_id) WHERE i.customer_id = 7 FOR SHARE OF i) t",
       "FOR UPDATE", "FOR UPDATE"},
      {"WITH mine AS (" + join + " FOR UPDATE) SELECT * FROM mine", "FOR UPDATE", "FOR UPDATE"},
      {"SELECT order_id FROM order_items WHERE customer_id = 7 AND book_id IN (SELECT book_id FROM books FOR SHARE)",
       "FOR SHARE", "FOR SHARE"},
      {"(" + join + ") FOR UPDATE", "FOR UPDATE", "FOR UPDATE"},
  };
  for (const Locked& l : locked) {
    const SqlError e = RefusalOf(l.sql);
    EXPECT_EQ(e.construct(), "the locking clause " + l.clause + " on the reference table books") << l.sql;
    EXPECT_EQ(e.column(), static_cast<int>(l.sql.find(l.at)) + 1) << l.sql;
    EXPECT_NE(e.reason().find("only the copy on this customer's shard would be locked"), std::string::npos) << l.sql;
    EXPECT_NE(e.advice().find("FOR UPDATE OF "), std::string::npos) << l.sql;
    EXPECT_NE(e.advice().find("advisory lock"), std::string::npos) << l.sql;
  }
  EXPECT_NE(RefusalOf(join + " FOR UPDATE OF b").advice().find("FOR UPDATE OF i "), std::string::npos);

  // Locks on sharded rows only, beside a reference table, stay routed.
  for (const std::string& sql : std::vector<std::string>{
           join + " FOR UPDATE OF i",
           join + " FOR SHARE OF i NOWAIT",
           "SELECT i.order_id FROM order_items i LEFT JOIN books b ON b.book_id = i.book_id WHERE i.customer_id = 7 "
           "FOR UPDATE OF i",
           "SELECT * FROM (SELECT * FROM order_items WHERE customer_id = 7 FOR UPDATE) i JOIN books b USING (book_id)",
           "WITH x AS (SELECT * FROM books) SELECT * FROM order_items i JOIN x USING (book_id) WHERE i.customer_id = 7 "
           "FOR UPDATE",
           "WITH x AS (SELECT * FROM books) SELECT * FROM order_items i JOIN x USING (book_id) WHERE i.customer_id = 7 "
           "FOR UPDATE OF i",
           "SELECT * FROM order_items i WHERE customer_id = 7 AND book_id IN (SELECT book_id FROM books) FOR UPDATE",
       }) {
    const auto plan = PlanStatement(sql, Catalog());
    EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kRouted) << sql;
    EXPECT_FALSE(plan->read_only) << sql;
    EXPECT_EQ(RoutesTo(sql), 7) << sql;
  }
  // Reference tables alone, or several shards: refused as before.
  EXPECT_EQ(RefusalOf("SELECT * FROM books FOR UPDATE").construct(),
            "a locking clause (FOR UPDATE/SHARE) over every shard");
  EXPECT_EQ(RefusalOf("SELECT * FROM order_items i JOIN books b USING (book_id) FOR UPDATE OF b").construct(),
            "a locking clause (FOR UPDATE/SHARE) over every shard");
}

TEST(SqlRouter, OtherStatementsAndUnknownTablesAreRefused) {
  for (const char* sql : {"CREATE TABLE x (a int)", "SET search_path = x", "BEGIN", "COPY orders FROM STDIN",
                          "EXPLAIN SELECT 1", "VACUUM orders", "TRUNCATE orders"}) {
    const SqlError e = RefusalOf(sql);
    EXPECT_EQ(e.kind(), SqlError::Kind::kRefused) << sql;
    EXPECT_NE(e.reason().find("only SELECT, INSERT, UPDATE and DELETE"), std::string::npos) << sql;
  }
  EXPECT_EQ(RefusalOf("BEGIN").construct(), "a BEGIN statement");

  const SqlError unknown = RefusalOf("SELECT 'é' FROM widgets");
  EXPECT_EQ(unknown.construct(), "the table widgets");
  EXPECT_EQ(unknown.column(), 17);  // characters, not bytes
  EXPECT_NE(unknown.advice().find("shardkit_shard_table('widgets')"), std::string::npos);
  EXPECT_NE(unknown.advice().find("reference_tables"), std::string::npos);
  RefusalOf("SELECT * FROM pg_class");
  RefusalOf("SELECT * FROM other.orders WHERE customer_id = 1");
  RefusalOf("SELECT * FROM orders TABLESAMPLE SYSTEM (10) WHERE customer_id = 1");
  RefusalOf("SELECT * INTO copy FROM orders WHERE customer_id = 1");
  EXPECT_EQ(RefusalOf("SELECT * FROM orders WHERE total > 1 FOR UPDATE").construct(),
            "a locking clause (FOR UPDATE/SHARE) over every shard");
  EXPECT_EQ(RefusalOf("SELECT discount_for(total) FROM orders WHERE customer_id = 1").construct(),
            "the function discount_for");
  EXPECT_EQ(RefusalOf("SELECT nextval('s')").construct(), "the function nextval");
}

}  // namespace
}  // namespace shardkit::sql

namespace shardkit::sql {
namespace {

// An invoicing service sharded by tenant_id of some type; shardkit's own
// jobs table is still keyed by customer_id.
SqlCatalog TenantCatalog(ShardKeyType type) {
  SqlCatalog catalog;
  SqlTable tenants{"public", "tenants", true, {"tenant_id", "bucket", "name"}};
  SqlTable invoices{"public", "invoices", true, {"tenant_id", "bucket", "invoice_id", "amount"}};
  SqlTable jobs{"public", "shardkit_jobs", true, {"customer_id", "bucket", "job_id"}};
  for (SqlTable* t : {&tenants, &invoices}) {
    t->key_column = "tenant_id";
    t->key_type = type;
    catalog.AddSharded(*t);
  }
  catalog.AddSharded(jobs);
  catalog.AddAggregate("count");
  catalog.ChooseKey();
  return catalog;
}

ShardKey RoutedKey(const SqlCatalog& catalog, const std::string& sql, const SqlParams& params = {}) {
  const auto plan = PlanStatement(sql, catalog);
  EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kRouted) << sql;
  const BoundRoute route = BindRoute(*plan, params);
  EXPECT_TRUE(route.key) << sql;
  return route.key.value_or(CustomerId{0});
}

TEST(SqlRouterKeys, TheApplicationsKeyColumnIsTheClustersKey) {
  const SqlCatalog catalog = TenantCatalog(ShardKeyType::kInt8);
  EXPECT_EQ(catalog.KeyColumn(), "tenant_id");
  EXPECT_EQ(catalog.KeyType(), ShardKeyType::kInt8);
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = 9000000000"), ShardKey::Int8(9'000'000'000));
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = -9000000000"), ShardKey::Int8(-9'000'000'000));
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = $1", {" +9000000000"}),
            ShardKey::Int8(9'000'000'000));
  // bigint's extremes, as literals and as parameters.
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = -9223372036854775808"),
            ShardKey::Int8(INT64_MIN));
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = 9223372036854775807"),
            ShardKey::Int8(INT64_MAX));
  EXPECT_EQ(RoutedKey(catalog, "SELECT * FROM invoices WHERE tenant_id = $1", {"-9223372036854775808"}),
            ShardKey::Int8(INT64_MIN));
  EXPECT_EQ(RoutedKey(catalog,
                      "SELECT i.* FROM invoices i JOIN tenants t ON t.tenant_id = i.tenant_id WHERE t.tenant_id = 7"),
            ShardKey::Int8(7));
  // customer_id is not this cluster's key: a filter on it pins nothing.
  const auto scatter = PlanStatement("SELECT count(*) FROM invoices", catalog);
  EXPECT_EQ(scatter->kind, SqlPlanInfo::Kind::kScatter);
  // The INSERT gets each row's bucket by its bigint rule.
  const auto insert = PlanStatement("INSERT INTO invoices (tenant_id, invoice_id, amount) VALUES ($1, 1, 5)", catalog);
  const BoundRoute route = BindRoute(*insert, {"9000000000"});
  EXPECT_EQ(StatementText(*insert, route),
            fmt::format("INSERT INTO invoices (tenant_id, invoice_id, amount, bucket) VALUES ($1, 1, 5, {})",
                        ToInt(BucketOfInt8(9'000'000'000))));
  // Refusals speak of the cluster's key.
  try {
    (void)PlanStatement("UPDATE invoices SET amount = 1", catalog);
    ADD_FAILURE() << "an unpinned UPDATE was planned";
  } catch (const SqlError& e) {
    EXPECT_NE(e.message().find("tenant_id"), std::string::npos) << e.what();
    EXPECT_EQ(e.message().find("customer_id"), std::string::npos) << e.what();
  }
  // Differently keyed tables are refused, naming both keys.
  try {
    (void)PlanStatement("SELECT * FROM shardkit_jobs WHERE customer_id = 1", catalog);
    ADD_FAILURE() << "a table keyed by customer_id was planned in a tenant_id cluster";
  } catch (const SqlError& e) {
    EXPECT_NE(e.reason().find("sharded by customer_id (integer)"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find("tenant_id (bigint)"), std::string::npos) << e.what();
  }
}

TEST(SqlRouterKeys, UuidAndTextKeysPinOnTheirLiteralsAndParameters) {
  const SqlCatalog uuids = TenantCatalog(ShardKeyType::kUuid);
  const std::string id = "0189a0c2-7d5e-7abc-8def-0123456789ab";
  const ShardKey expected = *ShardKey::Parse(ShardKeyType::kUuid, id);
  EXPECT_EQ(RoutedKey(uuids, "SELECT * FROM invoices WHERE tenant_id = '" + id + "'"), expected);
  EXPECT_EQ(RoutedKey(uuids, "SELECT * FROM invoices WHERE tenant_id = '" + id + "'::uuid"), expected);
  EXPECT_EQ(RoutedKey(uuids, "SELECT * FROM invoices WHERE tenant_id = $1::uuid", {"{" + id + "}"}), expected);
  try {
    (void)BindRoute(*PlanStatement("SELECT * FROM invoices WHERE tenant_id = $1", uuids), {"not-a-uuid"});
    ADD_FAILURE() << "a malformed uuid routed";
  } catch (const SqlError& e) {
    EXPECT_NE(e.reason().find("is not a valid tenant_id (uuid)"), std::string::npos) << e.what();
  }
  const SqlCatalog texts = TenantCatalog(ShardKeyType::kText);
  EXPECT_EQ(RoutedKey(texts, "SELECT * FROM invoices WHERE tenant_id = 'acme'"), ShardKey::Text("acme"));
  EXPECT_EQ(RoutedKey(texts, "DELETE FROM invoices WHERE tenant_id = $1", {" acme "}), ShardKey::Text(" acme "));
  // A key list restricts the scatter to those keys' buckets.
  const auto listed = PlanStatement("SELECT count(*) FROM invoices WHERE tenant_id IN ('a', $1)", texts);
  const BoundRoute route = BindRoute(*listed, {"b"});
  ASSERT_TRUE(route.key_values);
  EXPECT_EQ(*route.key_values, (std::vector<ShardKey>{ShardKey::Text("a"), ShardKey::Text("b")}));
  // Two different literals: refused.
  EXPECT_THROW(
      (void)PlanStatement("SELECT * FROM invoices WHERE tenant_id = 'a' AND tenant_id = 'b'", texts, Gathering::kNever),
      SqlError);
}

// What neither routes nor merges is gathered: each sharded table's rows from
// every shard (one statement per shard), then the statement itself on one
// server with every reference to a sharded table replaced by those rows.
TEST(SqlGather, WhatNeitherRoutesNorMergesIsGatheredWithEveryShardedReferenceReplaced) {
  const auto plan = PlanStatement(
      "WITH big AS (SELECT * FROM public.orders WHERE total > $1) SELECT b.customer_id, c.name, rank() OVER "
      "(ORDER BY b.total DESC) FROM big b JOIN customers AS c ON c.name = b.status JOIN books ON book_id = 1 "
      "WHERE EXISTS (SELECT 1 FROM orders WHERE orders.total < b.total)",
      Catalog());
  ASSERT_NE(plan->gather, nullptr);
  EXPECT_EQ(plan->kind, SqlPlanInfo::Kind::kScatter);
  EXPECT_EQ(plan->parameter_count, 1);
  EXPECT_EQ(plan->sharded_tables, (std::vector<std::string>{"public.orders", "customers"}));
  EXPECT_EQ(plan->reference_tables, (std::vector<std::string>{"books"}));
  const GatherPlan& gather = *plan->gather;
  EXPECT_EQ(gather.tables, (std::vector<std::string>{"\"public\".\"orders\"", "\"public\".\"customers\""}));
  EXPECT_EQ(gather.first_table_param, 2);
  EXPECT_EQ(gather.shard_sql,
            "SELECT _g1, pg_catalog.cardinality(_g1), _g2, pg_catalog.cardinality(_g2) FROM (SELECT ARRAY(SELECT _t "
            "FROM \"public\".\"orders\" AS _t LIMIT $1) AS _g1, ARRAY(SELECT _t FROM \"public\".\"customers\" AS "
            "_t LIMIT $1) AS _g2 OFFSET 0) AS _g");
  EXPECT_EQ(gather.finish_sql,
            "WITH big AS (SELECT * FROM (SELECT * FROM pg_catalog.unnest($2::\"public\".\"orders\"[])) AS \"orders\" "
            "WHERE total > $1) SELECT b.customer_id, c.name, rank() OVER (ORDER BY b.total DESC) FROM big b JOIN "
            "(SELECT * FROM pg_catalog.unnest($3::\"public\".\"customers\"[])) AS c ON c.name = b.status JOIN books "
            "ON book_id = 1 WHERE EXISTS (SELECT 1 FROM (SELECT * FROM "
            "pg_catalog.unnest($2::\"public\".\"orders\"[])) AS \"orders\" WHERE orders.total < b.total)");
  EXPECT_FALSE(gather.why.empty());

  // Refused as before: what one server cannot do for all shards' rows.
  for (const std::string sql : {
           "SELECT * FROM orders o JOIN order_items i ON i.order_id = o.order_id FOR UPDATE",
           "SELECT nextval('s'), rank() OVER (ORDER BY total) FROM orders",
           "SELECT discount_for(total), rank() OVER (ORDER BY total) FROM orders",
           "SELECT rank() OVER (ORDER BY total) FROM ONLY orders",
           "SELECT rank() OVER (ORDER BY total) FROM orders TABLESAMPLE SYSTEM (10)",
           "WITH orders AS (SELECT * FROM orders WHERE total > 5) SELECT rank() OVER (ORDER BY total) FROM orders",
           "WITH x AS (DELETE FROM orders WHERE total < 0 RETURNING *) SELECT rank() OVER (ORDER BY total) FROM x",
           "SELECT rank() OVER (ORDER BY total) INTO copy FROM orders",
       }) {
    EXPECT_THROW((void)PlanStatement(sql, Catalog()), SqlError) << sql;
  }
  // Still routed, merged or finished as before.
  EXPECT_EQ(PlanStatement("SELECT rank() OVER (ORDER BY total) FROM orders WHERE customer_id = 7", Catalog())->gather,
            nullptr);
  EXPECT_EQ(PlanStatement("SELECT status, sum(total) - min(total) FROM orders GROUP BY 1", Catalog())->gather, nullptr);
}

}  // namespace
}  // namespace shardkit::sql
