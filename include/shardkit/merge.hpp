// shardkit/merge.hpp — merge per-shard partial aggregates into the rows one
// unsharded PostgreSQL server would return.
//
// A MergePlan says how every merged column comes from the shards' partial
// columns: group keys; COUNT (summed; a shard without rows adds 0, never
// NULL); SUM; MIN; MAX; AVG (from merged SUM and COUNT, divided with
// PostgreSQL's result type and scale: numeric stays exact numeric). HAVING,
// ORDER BY and LIMIT/OFFSET run after the merge, never on the shards.
//
// Usually the per-shard SQL is built from an AggregateQuery, which also
// refuses what cannot be merged exactly (median, percentiles, mode,
// COUNT(DISTINCT x) unless x is the shard key, string_agg/array_agg,
// aggregates inside expressions):
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
// Or the caller writes the per-shard SQL and declares its partial columns:
//
//   shardkit::MergePlan plan{"SELECT book_id, sum(quantity) AS s, count(quantity) AS n "
//                            "FROM order_items GROUP BY book_id"};
//   plan.Key("book_id").Sum("s", "sold").Avg("avg_quantity", "s", "n").Hide("sold");
//   auto merged = shardkit::Merge(plan, per_shard_results);
//
// Result types are PostgreSQL's: COUNT -> bigint; SUM(smallint|integer) ->
// bigint, SUM(bigint|numeric) -> numeric, SUM(double precision) -> double
// precision; AVG(integer types|numeric) -> numeric, AVG(double precision) ->
// double precision; MIN/MAX keep their type. (These follow from the partials'
// own types, which the shards report.) AVG(real) is refused: a per-shard
// SUM(real) is rounded to real; write avg(x::double precision), which is
// what PostgreSQL's avg(real) computes anyway.
//
// Text is compared bytewise: the C collation. Every server must run with it
// (CheckMergeAssumptions verifies that and DateStyle ISO, under which dates
// and timestamps order as their text). Double precision sums may differ from
// one server's in the last bits: floating-point addition is not associative
// and the shards add in another order. Without ORDER BY the merged rows come
// in group-key order (SQL promises no order there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/result>

#include "shardkit/scatter.hpp"
#include "shardkit/value.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

class BucketShardResolver;

enum class SortDirection { kAsc, kDesc };
// kDefault is PostgreSQL's: NULLS LAST for ASC, NULLS FIRST for DESC.
enum class NullsOrder { kDefault, kFirst, kLast };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIsNull, kIsNotNull };

// How one merged column is computed from the shards' partial columns.
struct MergeColumn {
  enum class Role { kGroupKey, kCount, kSum, kMin, kMax, kAvg };
  std::string name;           // the merged column's name
  Role role = Role::kGroupKey;
  std::string partial;        // per-shard column name (kAvg: the partial SUM)
  std::string partial_count;  // kAvg only: the partial COUNT of the same argument
  bool hidden = false;        // merged for HAVING / ORDER BY, not returned
};

// One ANDed HAVING condition: `column op constant` on merged values, with
// SQL's NULL rule (a comparison with NULL is not true).
struct HavingTerm {
  std::string column;
  CompareOp op = CompareOp::kEq;
  Value constant;  // unused for kIsNull / kIsNotNull
};

struct SortKey {
  std::string column;
  SortDirection direction = SortDirection::kAsc;
  NullsOrder nulls = NullsOrder::kDefault;
};

class MergePlan {
 public:
  MergePlan() = default;
  // A plan over caller-written per-shard SQL; declare its columns below.
  explicit MergePlan(std::string shard_sql) : shard_sql_(std::move(shard_sql)) {}

  // Declare a per-shard column: `partial` is its name in the shards' rows,
  // `name` the merged column's name (default: the same).
  MergePlan& Key(std::string partial, std::string name = {});
  MergePlan& Count(std::string partial, std::string name = {});
  MergePlan& Sum(std::string partial, std::string name = {});
  MergePlan& Min(std::string partial, std::string name = {});
  MergePlan& Max(std::string partial, std::string name = {});
  // AVG from the partial SUM(x) and COUNT(x) of the same x.
  MergePlan& Avg(std::string name, std::string partial_sum, std::string partial_count);
  // Merge the column but leave it out of the result (HAVING/ORDER BY only).
  MergePlan& Hide(std::string_view name);

  MergePlan& Having(std::string column, CompareOp op, Value constant = {});
  MergePlan& OrderBy(std::string column, SortDirection direction = SortDirection::kAsc,
                     NullsOrder nulls = NullsOrder::kDefault);
  MergePlan& Limit(std::int64_t count);
  MergePlan& Offset(std::int64_t count);

  // Throws UnmergeableQuery (naming the column) for a plan that cannot be
  // merged: no columns, duplicate names, HAVING/ORDER BY on an unknown
  // column, negative LIMIT/OFFSET. Merge() calls it.
  void Validate() const;

  [[nodiscard]] const std::string& ShardSql() const noexcept { return shard_sql_; }
  [[nodiscard]] const std::vector<MergeColumn>& Columns() const noexcept { return columns_; }
  [[nodiscard]] const std::vector<HavingTerm>& HavingTerms() const noexcept { return having_; }
  [[nodiscard]] const std::vector<SortKey>& SortKeys() const noexcept { return order_by_; }
  [[nodiscard]] std::optional<std::int64_t> LimitCount() const noexcept { return limit_; }
  [[nodiscard]] std::int64_t OffsetCount() const noexcept { return offset_; }
  // No group keys: the merged answer has exactly one row before HAVING,
  // like SELECT count(*) FROM t on an empty table.
  [[nodiscard]] bool IsScalar() const noexcept;
  // One line per column, for logs: "sold = SUM(_p1)", "avg_price = SUM(_p2)/COUNT(_p2_n)".
  [[nodiscard]] std::string Describe() const;

 private:
  MergePlan& Add(MergeColumn column);
  std::string shard_sql_;
  std::vector<MergeColumn> columns_;
  std::vector<HavingTerm> having_;
  std::vector<SortKey> order_by_;
  std::optional<std::int64_t> limit_;
  std::int64_t offset_ = 0;
};

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

  AggregateQuery& Where(std::string condition);
  // The column whose values never span shards (default "customer_id"):
  // COUNT/SUM/AVG(DISTINCT it) merge exactly.
  AggregateQuery& ShardKey(std::string column);

  AggregateQuery& GroupBy(std::string column);                          // quoted column
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

  AggregateQuery& Having(std::string column, CompareOp op, Value constant = {});
  AggregateQuery& OrderBy(std::string column, SortDirection direction = SortDirection::kAsc,
                          NullsOrder nulls = NullsOrder::kDefault);
  AggregateQuery& Limit(std::int64_t count);
  AggregateQuery& Offset(std::int64_t count);

  // The plan with its per-shard SQL:
  //   SELECT <keys> AS _k0.., <partials> AS _p1.. FROM .. WHERE .. GROUP BY 1..
  // Throws UnmergeableQuery as MergePlan::Validate does.
  [[nodiscard]] MergePlan Plan() const;

 private:
  struct Item {
    bool is_key = false;
    std::string name;
    std::string expression;                  // key expression or aggregate argument
    MergeColumn::Role role = MergeColumn::Role::kGroupKey;
    bool count_star = false;
    bool distinct = false;
    std::string filter;                      // " FILTER (WHERE ...)" or empty
    bool hidden = false;
  };
  explicit AggregateQuery(std::string from) : from_(std::move(from)) {}
  AggregateQuery& AddAggregate(Item item);

  std::string from_;
  std::string where_;
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

struct MergedResult : ResultSet {
  std::size_t shards = 0;    // shard answers merged
  std::size_t rows_in = 0;   // partial rows received from all shards
  std::size_t groups = 0;    // groups after merging, before HAVING / OFFSET / LIMIT
  std::size_t rows_out = 0;  // rows returned
  std::optional<std::string> warning;  // shards missing (only with allow_missing_shards)
};

// One shard's partial rows in PostgreSQL's text form, for sources other
// than a pqxx::result (tests, tools, rows cached or relayed).
struct PartialRows {
  ShardId shard{};
  std::vector<std::string> column_names;
  std::vector<TypeOid> column_types;  // type OIDs: 20 bigint, 1700 numeric, 25 text...
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt is NULL
};

struct MergeOptions {
  // Merge what the shards that answered returned when a partial scatter
  // lost some (the answer is then NOT the unsharded one; the warning says so).
  bool allow_missing_shards = false;
};

// One pqxx::result per shard (index = shard, for messages). A result with no
// columns at all (default-constructed) counts as a shard without rows.
// Throws UnmergeableQuery naming the shard and column when the shards'
// rows do not fit the plan (missing column, differing types, a group
// returned twice by one shard, a type that cannot be summed or ordered).
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const std::vector<pqxx::result>& shard_results);
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const std::vector<PartialRows>& shard_rows);
// From a scatter; a scatter with failed shards throws ScatterError unless
// options.allow_missing_shards.
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const ScatterResult& scatter,
                                 const MergeOptions& options = {});

// Runs plan.ShardSql() on the shards (options.shards, default all) and merges.
[[nodiscard]] MergedResult ScatterMerge(ScatterGather& scatter, const MergePlan& plan,
                                        const SqlParams& params = {}, const ScatterOptions& options = {},
                                        const MergeOptions& merge_options = {});

// Verifies what merging relies on for one shard's connection: the database's
// collation is C (or POSIX), so text orders bytewise as shardkit orders it,
// and DateStyle is ISO, so dates order as their text. Throws ShardError
// naming the shard and the fix otherwise.
void CheckMergeAssumptions(pqxx::connection_base& connection, ShardId shard);
// The same on one connection from every shard's pool.
void CheckMergeAssumptions(BucketShardResolver& resolver);

}  // namespace shardkit
