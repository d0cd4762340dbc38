// Pieces the merge engine, MergePlan and the scatter-side entry points share.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shardkit/queries/merge.hpp"

namespace shardkit::detail {

[[nodiscard]] std::string RoleName(MergeColumn::Role role);
[[nodiscard]] std::string OpText(CompareOp op);
[[nodiscard]] bool NullsFirst(const SortKey& key);

// Merges results tagged with the shard each came from (for messages), such
// as a scatter's answers, which need not be shards 0..n-1.
[[nodiscard]] MergedResult MergeTagged(const MergePlan& plan,
                                       const std::vector<std::pair<ShardId, const pg::Rows*>>& results);

}  // namespace shardkit::detail
