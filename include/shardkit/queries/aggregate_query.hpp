// shardkit/queries/aggregate_query.hpp — build a MergePlan and its per-shard SQL from
// an aggregate query, refusing what per-shard partials cannot answer exactly.
//
//   auto plan = shardkit::AggregateQuery::From("order_items")
//                   .Where("created_at >= $1")
//                   .GroupBy("book_id")
//                   .Select("sum(quantity)", "sold")
//                   .Select("avg(price)", "avg_price")      // SUM and COUNT per shard
//                   .OrderBy("sold", shardkit::SortDirection::kDesc)
//                   .OrderBy("book_id")
//                   .Limit(10)
//                   .Plan();
//   shardkit::MergedResult top = shardkit::ScatterMerge(scatter, plan, {"2026-01-01"});
//
// Medians, percentiles and COUNT(DISTINCT x) off the shard key are not
// merged from partials: they are answered exactly by distributed selection
// (percentile.hpp), from the query that Percentiles() builds:
//
//   auto q = shardkit::AggregateQuery::From("orders").Where("ordered_at >= $1").GroupBy("status")
//                .Median("amount", "median").PercentileDisc(0.95, "amount", "p95")
//                .CountDistinctValues("book_id", "books").Percentiles();
//   q.params = {"2026-01-01"};
//   shardkit::PercentileResult r = cluster->Percentiles(q);
//
// Plan() refuses with UnmergeableQuery, saying why and what to do instead: those,
// mode, COUNT(DISTINCT x) unless x is the shard key,
// string_agg/array_agg, aggregates inside expressions; and anything that is
// not a function of the current row alone, in an aggregate's argument, its
// FILTER, a group key or the WHERE condition: subqueries (each shard sees
// only its own rows), volatile functions (random(), nextval()) and the clock
// (now(), current_date: each shard has its own moment; pass the instant as
// a parameter). A COLLATE other than "C"/"POSIX" in a key or an aggregate's
// argument is refused too, and the plan asks every shard which collation it
// used for each key and MIN/MAX (pg_collation_for), so a column declared
// with another collation is refused when the shards answer rather than
// merged bytewise. Volatile functions of your own cannot be recognised by
// name: keep them out of merged queries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/percentile.hpp"

namespace shardkit {

// Builds a MergePlan and its per-shard SQL from an aggregate query over one
// table (or a co-located join). Output columns come in the order they are
// added. Identifiers given as column/table names are quoted; Where(),
// GroupByExpr() and Select() take SQL text (trusted: values belong in $n
// parameters, passed when the plan runs).
class AggregateQuery {
 public:
  // FROM a table, optionally schema-qualified; both are quoted.
  [[nodiscard]] static AggregateQuery From(std::string table, std::string schema = {});
  // FROM clause text, e.g. "orders o JOIN order_items i USING (customer_id, order_id)".
  [[nodiscard]] static AggregateQuery FromSql(std::string from_clause);

  // A condition on the rows; several calls are ANDed.
  AggregateQuery& Where(std::string condition);
  // The column whose values never span shards (default "customer_id"):
  // COUNT/SUM/AVG(DISTINCT it) merge exactly.
  AggregateQuery& ShardKey(std::string column);

  AggregateQuery& GroupBy(std::string column);  // quoted column
  AggregateQuery& GroupByExpr(std::string sql_expression, std::string name);

  // One aggregate call as SQL text: count(*), count(x), count(DISTINCT
  // <shard key>), sum(x), min(x), max(x), avg(x), optionally followed by
  // FILTER (WHERE ...). Anything else throws UnmergeableQuery saying why and
  // what to do instead.
  AggregateQuery& Select(std::string_view aggregate_call, std::string name);
  AggregateQuery& Count(std::string name);  // count(*)
  AggregateQuery& Count(std::string column, std::string name);
  AggregateQuery& CountDistinct(std::string column, std::string name);  // shard key only
  AggregateQuery& Sum(std::string column, std::string name);
  AggregateQuery& Min(std::string column, std::string name);
  AggregateQuery& Max(std::string column, std::string name);
  AggregateQuery& Avg(std::string column, std::string name);
  AggregateQuery& Hide(std::string_view name);

  // Order statistics of a column (quoted), answered by Percentiles(), never
  // by Plan(): percentile_cont(fraction) / percentile_disc(fraction) WITHIN
  // GROUP (ORDER BY column), the median (percentile_cont(0.5)) and
  // count(DISTINCT column) off the shard key.
  AggregateQuery& PercentileCont(double fraction, const std::string& column, std::string name);
  AggregateQuery& PercentileDisc(double fraction, const std::string& column, std::string name);
  AggregateQuery& Median(const std::string& column, std::string name);
  AggregateQuery& CountDistinctValues(const std::string& column, std::string name);

  AggregateQuery& Having(std::string column, CompareOp op, Value constant = {});
  AggregateQuery& OrderBy(std::string column, SortDirection direction = SortDirection::kAsc,
                          NullsOrder nulls = NullsOrder::kDefault);
  AggregateQuery& Limit(std::int64_t count);
  AggregateQuery& Offset(std::int64_t count);

  // The plan with its per-shard SQL:
  //   SELECT <keys> AS _k0.., <partials> AS _p1.., <collations> FROM .. WHERE .. GROUP BY 1..
  // Throws UnmergeableQuery as MergePlan::Validate does.
  [[nodiscard]] MergePlan Plan() const;
  // The exact order-statistics query (percentile.hpp) of a query whose
  // aggregates are all order statistics (keys, WHERE, ORDER BY, LIMIT and
  // OFFSET carried over); throws UnmergeableQuery for other aggregates,
  // HAVING or hidden columns next to them. Set its params before running.
  [[nodiscard]] PercentileQuery Percentiles() const;

 private:
  struct Item {
    bool is_key = false;
    std::string name;
    std::string expression;  // key expression or aggregate argument
    MergeColumn::Role role = MergeColumn::Role::kGroupKey;
    bool count_star = false;
    bool distinct = false;
    std::string filter;  // " FILTER (WHERE ...)" or empty
    bool hidden = false;
    std::optional<OrderStatisticColumn> order_statistic;  // answered by Percentiles()
  };
  explicit AggregateQuery(std::string from) : from_(std::move(from)) {}
  AggregateQuery& AddAggregate(Item item);

  std::string from_;
  std::vector<std::string> where_;  // ANDed
  std::string shard_key_ = "customer_id";
  std::vector<Item> items_;
  std::vector<HavingTerm> having_;
  std::vector<SortKey> order_by_;
  std::optional<std::int64_t> limit_;
  std::int64_t offset_ = 0;
};

// Double-quotes an identifier the way PostgreSQL's quote_ident always may
// ("a""b" for a"b); throws UnmergeableQuery for an empty name or a NUL byte.
[[nodiscard]] std::string QuoteIdentifier(std::string_view identifier);

}  // namespace shardkit
