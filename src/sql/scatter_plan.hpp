// How a SELECT whose sharded tables are not pinned to one customer runs on
// every shard and is combined into the answer one unsharded server gives.
//
// Two shapes are answered exactly:
//   - aggregates: COUNT/SUM/MIN/MAX/AVG (with DISTINCT on the shard key and
//     FILTER as AggregateQuery takes them) over GROUP BY columns, positions
//     or expressions, HAVING `aggregate op constant` terms joined by AND,
//     ORDER BY output names, positions or expressions (hidden columns when
//     they are not in the select list), LIMIT/OFFSET as numbers or
//     parameters (bound at execution): per-shard
//     partials merged by the merge engine (merge.hpp), HAVING, ORDER BY and
//     LIMIT after the merge, never on the shards;
//   - plain rows: concatenated (SQL promises no order without ORDER BY);
//     with ORDER BY (names, positions, expressions; keys not in the select
//     list fetched as hidden columns) and LIMIT/OFFSET, each shard returns
//     at most OFFSET + LIMIT rows in that order and the merge sorts them
//     by the same keys (row_merge.hpp) before OFFSET and LIMIT.
// What the merge engine alone cannot finish is finished by PostgreSQL over
// the merged rows, on one shard (finish.hpp): expressions over aggregates
// and group keys in the select list, HAVING and ORDER BY (`sum(a) - sum(b)`,
// `round(avg(x), 2)`, CASE), HAVING of any shape, DISTINCT over groups, and
// plain-row DISTINCT without the shard key.
// Everything else is refused with the construct, its position, why and what
// to do: window functions, WITH, GROUPING SETS, DISTINCT ON without the
// shard key, subqueries over merged aggregates, and any aggregate other
// than the five.
//
// One aggregate shape also gets a cheaper exact method, the best sellers:
//
//   SELECT book_id, sum(quantity) AS sold FROM order_items WHERE ...
//   GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 10 [OFFSET n]
//
// answered by exact distributed top-k (topk.hpp, TopKMethod::kAuto), which
// ships a few rows per shard instead of every group. It is taken only when
// its answer is provably PostgreSQL's (see TopKShape); the merge plan is
// kept beside it for when top-k cannot answer (a negative or oversized sum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/topk.hpp"
#include "sql/finish.hpp"
#include "sql/parse.hpp"
#include "sql/percentile_shape.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

// One ORDER BY key of plain rows: a column of the shards' rows.
struct SortColumn {
  std::size_t column = 0;  // a select-list item's index, or with `hidden` an appended column's
  bool hidden = false;
  SortDirection direction = SortDirection::kAsc;
  NullsOrder nulls = NullsOrder::kDefault;
  std::size_t collation_column = 0;  // appended: the collation the shard sorted it in
};

// ORDER BY, OFFSET and LIMIT over plain rows, applied after the concatenation.
struct RowOrder {
  std::vector<SortColumn> keys;
  std::optional<std::int64_t> limit;
  std::int64_t offset = 0;
  std::size_t hidden_columns = 0;  // appended after the select list's; not returned
  // SELECT DISTINCT without the shard key: equal rows may come from several
  // shards. Each shard's distinct rows (at most OFFSET + LIMIT of them) are
  // deduplicated, ordered and limited by the finishing step (finish.hpp).
  bool distinct = false;
};

// The best-sellers shape, recognised only when exact top-k's answer is the
// one PostgreSQL gives, column types and text included:
//   - FROM: sharded (co-located, as the router checked) and reference
//     tables joined by inner joins or commas, no column aliases, each
//     table's columns known;
//   - the select list: exactly the GROUP BY key and sum(<column>), either
//     order, any aliases; GROUP BY that one key (name, alias or position);
//     no HAVING, DISTINCT, window, WITH, locking or GROUP BY DISTINCT;
//   - the key a column of type smallint, integer or bigint (top-k ranks a
//     NULL key last, as ORDER BY key ASC does); the summed column smallint,
//     integer or bigint and NOT NULL (so no group's sum is NULL and the
//     NULLS placement of the sum cannot matter; top-k counts an all-NULL
//     group as 0, PostgreSQL as NULL); sum() PostgreSQL's own (no user
//     function named sum);
//   - ORDER BY exactly the sum DESC, then the key ASC (NULLS LAST, the
//     default): a complete order, which top-k's is; by name, alias,
//     position or expression;
//   - a LIMIT of at least 1 written as a number, an optional numeric OFFSET
//     (top-k asks for OFFSET + LIMIT and drops the first OFFSET).
// The result: the key with its column's type OID, the sum as bigint (of
// smallint/integer) or numeric (of bigint, printed as the same digits).
struct TopKShape {
  std::string from;              // the statement's FROM text
  std::string where;             // its WHERE text; empty: none
  std::string key;               // the key column, quoted: "i"."book_id"
  std::string measure;           // the summed column, quoted
  std::size_t key_position = 0;  // 0 or 1: where the key is in the select list
  unsigned key_type = 0;         // the key column's type OID (int2, int4, int8)
  unsigned sum_type = 0;         // sum()'s result type OID: int8 or numeric
  std::int64_t limit = 0;
  std::int64_t offset = 0;
  std::string shard_sql;  // each shard's aggregation (into the top-k session's temporary table)
  [[nodiscard]] std::size_t K() const noexcept { return static_cast<std::size_t>(limit + offset); }
  // The top-k query (bigint key, k = OFFSET + LIMIT) with the statement's parameters.
  [[nodiscard]] TopKQuery Query(const SqlParams& params, const std::string& label) const;
  // "exact top-k (auto) by sum("quantity") of "book_id", k = 10"
  [[nodiscard]] std::string Describe() const;
};

struct ScatterPlan {
  // Set for aggregates; unset: concatenate the shards' rows of shard_sql.
  std::optional<MergePlan> merge;
  // Set for the best-sellers shape: try exact top-k first, `merge` if it
  // cannot answer.
  std::optional<TopKShape> topk;
  // Percentiles and count(DISTINCT) off the shard key: exact distributed
  // selection (percentile_shape.hpp); nothing else of the plan is used.
  std::optional<PercentileShape> percentile;
  // Plain rows with ORDER BY, LIMIT, OFFSET or DISTINCT.
  std::optional<RowOrder> rows;
  // Aggregates that `merge` cannot finish alone: `merge` merges the groups,
  // then this step evaluates the statement's select list, HAVING, DISTINCT,
  // ORDER BY and LIMIT over them on one shard.
  std::optional<FinishStep> finish;
  std::string shard_sql;  // what every shard runs (merge->ShardSql() for aggregates)
  // The merged result's column names, as PostgreSQL names them (merged
  // columns are "_c1".., since SQL lets names repeat).
  std::vector<std::string> column_names;
  // Where each select-list item starts (-1: not known), for the merge's refusals.
  std::vector<int> column_locations;
  // Merged columns that are not returned (HAVING and ORDER BY aggregates,
  // GROUP BY keys not selected), for the merge's messages.
  struct HiddenColumn {
    std::string name;  // the merge's: "_hidden4", "_group2"
    std::string text;  // the statement's
    int location = -1;
  };
  std::vector<HiddenColumn> hidden_columns;
  // Where HAVING starts (-1: none), for refusals of its conditions.
  int having_location = -1;
  // LIMIT $n / OFFSET $n: the parameter, bound at execution (0: none, or a
  // number in rows/merge). The shards' SQL keeps referring to it, so that
  // it keeps its type (bigint).
  int limit_param = 0;
  int offset_param = 0;
  // "concatenation" or the merge plan's one-line description.
  [[nodiscard]] std::string DescribeMerge() const;
};

// The plan of a top-level SELECT that reads sharded tables co-located on
// customer_id (the router checked that). Throws SqlError for what it
// cannot answer exactly.
[[nodiscard]] ScatterPlan PlanScatter(const ParsedStatement& parsed, const SqlCatalog& catalog);

}  // namespace shardkit::sql
