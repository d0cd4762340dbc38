// The best-sellers shape of a scatter aggregate (`SELECT key, sum(col) ...
// GROUP BY key ORDER BY sum DESC, key LIMIT n`): recognised only when every
// condition that makes exact top-k's answer PostgreSQL's own holds (see
// TopKShape in scatter_plan.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/queries/merge.hpp"
#include "sql/scatter_plan.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

// What the scatter planner knows of a SELECT once it has planned its aggregates.
struct TopKCandidate {
  const nlohmann::json& select;  // the SelectStmt
  const SqlCatalog& catalog;
  struct Output {
    std::string name;  // the merged column: "_c1"..
    bool key = false;  // a GROUP BY key
  };
  std::vector<Output> outputs;  // the select list's, then hidden ones
  struct Order {
    std::string column;  // a merged column
    SortDirection direction = SortDirection::kAsc;
    NullsOrder nulls = NullsOrder::kDefault;
  };
  std::vector<Order> order;  // ORDER BY as the merge sorts
  std::optional<std::int64_t> limit;
  std::int64_t offset = 0;
  std::string from;                  // the FROM clause's text
  std::optional<std::string> where;  // the WHERE clause's text
};

// The statement as TopKShape, or nullopt when any condition fails.
[[nodiscard]] std::optional<TopKShape> FindTopKShape(const TopKCandidate& candidate);

}  // namespace shardkit::sql
