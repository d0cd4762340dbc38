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
// Everything else is refused with the construct, its position, why and what
// to do: expressions over aggregates, DISTINCT, set operations, window
// functions, WITH, GROUPING SETS, and any aggregate other than the five.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/queries/merge.hpp"
#include "sql/parse.hpp"
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
};

struct ScatterPlan {
  // Set for aggregates; unset: concatenate the shards' rows of shard_sql.
  std::optional<MergePlan> merge;
  // Plain rows with ORDER BY, LIMIT or OFFSET.
  std::optional<RowOrder> rows;
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
