#include "shardkit/sql/sql_plan_info.hpp"

#include <fmt/format.h>

namespace shardkit {

std::string SqlPlanInfo::Describe() const {
  if (kind == Kind::kRouted && key && bucket) {
    return fmt::format("routed: shard {} (bucket {}, {})", ToInt(shard), ToInt(*bucket),
                       shardkit::Describe(*key, key_column));
  }
  if (kind == Kind::kScatter) {
    std::string over = fmt::format("{} shards", shard_count);
    if (!shards.empty() || shard_count < total_shards) {
      std::string which;
      for (const ShardId s : shards) which += fmt::format("{}{}", which.empty() ? "" : ", ", ToInt(s));
      over = fmt::format("{} of {} shards ({} {})", shard_count, total_shards, shards.size() == 1 ? "shard" : "shards",
                         which);
    }
    // A set operation has no one per-shard statement: its arms have their own.
    if (shard_sql.empty()) return fmt::format("scatter over {}: {}", over, merge);
    return fmt::format("scatter over {}, per-shard SQL: {}; merge: {}", over, shard_sql, merge);
  }
  std::string tables;
  for (const std::string& t : reference_tables) tables += (tables.empty() ? "" : ", ") + t;
  return fmt::format("any shard: shard {} ({})", ToInt(shard),
                     tables.empty() ? std::string("no tables") : "reference tables only: " + tables);
}

}  // namespace shardkit
