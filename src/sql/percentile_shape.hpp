// The order-statistics shape of a scatter aggregate: a SELECT over every
// shard whose select list holds percentile_cont(f) / percentile_disc(f)
// WITHIN GROUP (ORDER BY x) or count(DISTINCT x) off the shard key, next to
// GROUP BY keys only, answered exactly by distributed selection
// (shardkit/queries/percentile.hpp) instead of being refused:
//
//   SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) AS median,
//          count(DISTINCT book_id) FROM ... WHERE ... GROUP BY category ORDER BY 1 LIMIT 10
//
// Recognised by FindPercentileShape, called by the scatter planner before
// it plans ordinary aggregates; everything else stays the planner's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/queries/percentile.hpp"
#include "shardkit/sql/sql_result.hpp"
#include "sql/parse.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

// What the planner knows of the statement (its clause texts and a few of
// its helpers, so that names, aliases and LIMIT follow its rules).
struct PercentileCandidate {
  const ParsedStatement& parsed;
  const nlohmann::json& select;  // the SelectStmt
  const SqlCatalog& catalog;
  std::string from;                      // the FROM clause's text
  std::string where;                     // the WHERE clause's text (empty: none)
  std::vector<std::string> item_texts;   // the select list's items, without aliases
  std::vector<std::string> group_texts;  // GROUP BY items
  // PostgreSQL's name of an unaliased output column.
  std::function<std::string(const nlohmann::json&)> default_name;
  // A GROUP BY item with a select-list alias resolved as PostgreSQL does.
  std::function<nlohmann::json(const nlohmann::json&)> resolve_alias;
  // LIMIT / OFFSET n as a number (a refusal for anything else).
  std::function<std::optional<std::int64_t>(const nlohmann::json&, const char*)> limit_value;
};

struct PercentileShape {
  PercentileQuery query;  // its params set at execution
  // The fraction of query.columns[i] that is a parameter ($n): n, else 0.
  std::vector<int> fraction_params;
  // Parameters the WHERE does not use (only fractions do): referenced in
  // the fill so that the shards can type them.
  std::vector<int> unused_params;
  std::vector<std::string> column_names;    // the statement's output names
  std::vector<std::string> result_columns;  // the query's column behind each output
  // "exact percentiles by distributed selection: percentile_cont(0.5) of amount, count(DISTINCT book_id); by category"
  [[nodiscard]] std::string Describe() const;
};

// The statement as a PercentileShape; nullopt when it has no order
// statistic (the planner's own shapes). Throws SqlError (a refusal with
// the construct's position) for an order statistic in a shape it cannot
// answer exactly: other aggregates beside it, DESC or USING in WITHIN
// GROUP, FILTER, an array of fractions, HAVING, DISTINCT, LIMIT $n...
[[nodiscard]] std::optional<PercentileShape> FindPercentileShape(const PercentileCandidate& candidate);

// Runs the shape with the statement's parameters; the result as Execute
// returns it (names, type OIDs, text) with rows_received.
[[nodiscard]] SqlResult RunPercentileShape(ScatterGather& scatter, const PercentileShape& shape,
                                           const SqlParams& params, const ScatterOptions& options);

}  // namespace shardkit::sql
