#include "shardkit/sql/sql_plan_info.hpp"

#include <fmt/format.h>

namespace shardkit {

std::string SqlPlanInfo::Describe() const {
  if (kind == Kind::kRouted && customer && bucket) {
    return fmt::format("routed: shard {} (bucket {}, customer {})", ToInt(shard), ToInt(*bucket), ToInt(*customer));
  }
  if (kind == Kind::kScatter) {
    return fmt::format("scatter over {} shards, per-shard SQL: {}; merge: {}", shard_count, shard_sql, merge);
  }
  std::string tables;
  for (const std::string& t : reference_tables) tables += (tables.empty() ? "" : ", ") + t;
  return fmt::format("any shard: shard {} ({})", ToInt(shard),
                     tables.empty() ? std::string("no tables") : "reference tables only: " + tables);
}

}  // namespace shardkit
