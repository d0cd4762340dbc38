// Plain rows from every shard, each shard's already in the statement's
// order: sorted together by the same keys with the merge engine's rules
// (each type's own order, text bytewise; a type shardkit cannot order as
// the server does, or text sorted in another collation, is refused), then
// OFFSET and LIMIT. Ties keep the shards' order, which SQL leaves open.
#pragma once

#include "shardkit/queries/scatter.hpp"
#include "shardkit/sql/sql_result.hpp"
#include "sql/scatter_plan.hpp"

namespace shardkit::sql {

// The rows without the plan's hidden columns. Throws UnmergeableQuery
// naming the column that cannot be ordered.
[[nodiscard]] SqlResult MergeSortedRows(const ScatterResult& scattered, const RowOrder& order);

}  // namespace shardkit::sql
