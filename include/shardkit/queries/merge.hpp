// shardkit/queries/merge.hpp — merge per-shard partial aggregates into the rows one
// unsharded PostgreSQL server would return.
//
// A MergePlan says how every merged column comes from the shards' partial
// columns: group keys; COUNT (summed; a shard without rows adds 0, never
// NULL); SUM; MIN; MAX; AVG (from merged SUM and COUNT, divided with
// PostgreSQL's result type and scale: numeric stays exact numeric). HAVING,
// ORDER BY and LIMIT/OFFSET run after the merge, never on the shards.
//
// Usually the plan and its per-shard SQL come from an AggregateQuery
// (aggregate_query.hpp), which refuses what cannot be merged exactly, and
// run through ScatterMerge (scatter_merge.hpp). Or the caller writes the
// per-shard SQL and declares its partial columns, partial name first:
//
//   shardkit::MergePlan plan{"SELECT book_id, sum(quantity) AS s, count(quantity) AS n "
//                            "FROM order_items GROUP BY book_id"};
//   plan.Key("book_id").Sum("s", "sold").Avg("s", "n", "avg_quantity").Hide("sold");
//   auto merged = shardkit::Merge(plan, per_shard_results);
//
// Result types are PostgreSQL's: COUNT -> bigint; SUM(smallint|integer) ->
// bigint, SUM(bigint|numeric) -> numeric; AVG(integer types|numeric) ->
// numeric; MIN/MAX keep their type, real and double precision included.
// (These follow from the partials' own types, which the shards report.)
// SUM and AVG of real and double precision are refused: the server adds
// floats rounding after every row, so partial sums added in another order
// differ in the last bits; write sum(x::numeric) or avg(x::numeric) for the
// exact answer.
//
// How values are compared. Group keys are matched, and MIN/MAX, HAVING and
// ORDER BY compare, by each type's own equality and order, checked against
// the column types the shards report with their rows (so hand-written
// per-shard SQL is held to the same rules):
//
//   smallint, integer, bigint, oid   as integers
//   numeric                          by value (1.5 = 1.50; the first shard's text is shown)
//   real, double precision           by value, -0 = 0, NaN equal to NaN and above all others
//   boolean                          false < true
//   text, character varying, name    bytewise: the C collation (see below)
//   character (bpchar)               bytewise without trailing blanks, as bpchar's equality
//   bytea                            by its hex text (bytea_output = hex), which orders as the bytes
//   date, timestamp                  by value, BC and years past 9999 included
//   time                             by its text
//   uuid                             by its text (lower-case hex orders as the bytes)
//   timestamp with time zone         grouped by its text in the one TimeZone of every shard; not ordered
//   "char"                           grouped by its text; not ordered
//
// Every other type is refused as a group key (UnmergeableQuery naming the
// column, its type and what to write instead): interval ('1 mon' = '30
// days'), json and jsonb, arrays, records, ranges and types shardkit does not
// list, whose equal values can print differently. MIN and MAX need an
// ordered type. Where a group's values print differently on different
// shards (numeric 1.5 and 1.50, -0 and 0, 'a' and 'a ' as bpchar), the
// server's choice of text is not determined either; the merge shows the
// first it read.
//
// Text is compared bytewise: the C collation. Every server must run with it
// and with the session settings shardkit's pools pin (session.hpp);
// merges of scatter results check both (scatter_merge.hpp). A partial may
// come with the collation the shard used for it (MergePlan::Collation;
// AggregateQuery declares one for every key and MIN/MAX), and a collation
// other than C is refused. Double precision sums may differ from one
// server's in the last bits: floating-point addition is not associative and
// the shards add in another order. Without ORDER BY the merged rows come in
// group-key order (SQL promises no order there).
//
// This header is the merge itself: it knows nothing of pools or scatters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/result>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/value.hpp"
#include "shardkit/pg/rows.hpp"

namespace shardkit {

enum class SortDirection { kAsc, kDesc };
// kDefault is PostgreSQL's: NULLS LAST for ASC, NULLS FIRST for DESC.
enum class NullsOrder { kDefault, kFirst, kLast };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIsNull, kIsNotNull };

// How one merged column is computed from the shards' partial columns.
struct MergeColumn {
  enum class Role { kGroupKey, kCount, kSum, kMin, kMax, kAvg };
  std::string name;  // the merged column's name
  Role role = Role::kGroupKey;
  std::string partial;        // per-shard column name (kAvg: the partial SUM)
  std::string partial_count;  // kAvg only: the partial COUNT of the same argument
  bool hidden = false;        // merged for HAVING / ORDER BY, not returned
  // Optional per-shard column with the collation the shard compared the
  // partial in (pg_collation_for()); NULL, "default", "C" and "POSIX" pass.
  std::string partial_collation;
};

// One ANDed HAVING condition: `column op constant` on merged values, with
// SQL's NULL rule (a comparison with NULL is not true).
struct HavingTerm {
  std::string column;
  CompareOp op = CompareOp::kEq;
  // Unused for kIsNull / kIsNotNull. A text constant compares with text,
  // character varying, character and name columns only (UnmergeableQuery
  // for others: SQL reads '2026-1-5' as a date, equal to 2026-01-05).
  Value constant;
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
  // `name` the merged column's name (default: the same). Partials come
  // first and the name last in every declaration.
  MergePlan& Key(std::string partial, std::string name = {});
  MergePlan& Count(std::string partial, std::string name = {});
  MergePlan& Sum(std::string partial, std::string name = {});
  MergePlan& Min(std::string partial, std::string name = {});
  MergePlan& Max(std::string partial, std::string name = {});
  // AVG from the partial SUM(x) and COUNT(x) of the same x (default name:
  // the SUM partial's).
  MergePlan& Avg(std::string partial_sum, std::string partial_count, std::string name = {});
  // Merge the column but leave it out of the result (HAVING/ORDER BY only).
  MergePlan& Hide(std::string_view name);
  // The per-shard column `partial_collation` holds the collation the shard
  // used for merged column `name` (e.g. pg_collation_for(max(x))): any other
  // than C or POSIX (or the database default, which must be C) refuses the
  // merge instead of ordering that text bytewise.
  MergePlan& Collation(std::string_view name, std::string partial_collation);

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

struct MergedResult : ResultSet {
  std::size_t shards = 0;              // shard answers merged
  std::size_t rows_in = 0;             // partial rows received from all shards
  std::size_t groups = 0;              // groups after merging, before HAVING / OFFSET / LIMIT
  std::size_t rows_out = 0;            // rows returned
  std::optional<std::string> warning;  // shards missing (scatter merges with allow_missing_shards)
};

// One shard's partial rows in PostgreSQL's text form, for sources other
// than a query's result (tests, tools, rows cached or relayed).
struct PartialRows {
  ShardId shard{};
  std::vector<std::string> column_names;
  std::vector<TypeOid> column_types;                          // type OIDs: 20 bigint, 1700 numeric, 25 text...
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt is NULL
};

// One result per shard (index = shard, for messages): pg::Rows (what
// scatters and routed reads return), or pqxx::result (a caller's own
// statements). A result with no columns at all (default-constructed)
// counts as a shard without rows.
// Throws UnmergeableQuery naming the shard and column when the shards'
// rows do not fit the plan (missing column, differing types, a group
// returned twice by one shard, a type that cannot be summed or ordered).
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const std::vector<pg::Rows>& shard_results);
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const std::vector<pqxx::result>& shard_results);
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const std::vector<PartialRows>& shard_rows);

}  // namespace shardkit
