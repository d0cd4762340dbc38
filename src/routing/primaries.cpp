#include "shardkit/routing/primaries.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

std::vector<PrimaryRecord> LoadPrimaries(pqxx::connection_base& catalog) {
  pqxx::read_transaction tx{catalog};
  std::vector<PrimaryRecord> rows;
  if (tx.exec1("SELECT to_regclass('shardkit_primaries') IS NOT NULL")[0].as<bool>()) {
    for (const auto& row : tx.exec("SELECT shard, server, epoch FROM shardkit_primaries ORDER BY shard")) {
      rows.push_back(PrimaryRecord{row[0].c_str(), row[1].c_str(), row[2].as<std::int64_t>()});
    }
  }
  return rows;
}

int ApplyPrimaries(BucketShardResolver& resolver, const std::vector<PrimaryRecord>& rows) {
  int changed = 0;
  for (const PrimaryRecord& row : rows) {
    for (int i = 0; i < resolver.ShardCount(); ++i) {
      const ShardId shard{i};
      if (resolver.ShardName(shard) != row.shard) continue;
      const auto& members = resolver.Members(shard);
      if (std::none_of(members.begin(), members.end(), [&](const ShardServer& m) { return m.name == row.server; })) {
        throw ConfigError(fmt::format("shard[{}].replicas", i),
                          fmt::format("the catalog names {} the primary of shard {} (failover {}), and the "
                                      "configuration has no server of that name for it: add it to the shard's "
                                      "replicas (its dsn), or run with the configuration the failover used",
                                      row.server, row.shard, row.epoch));
      }
      if (resolver.SetPrimary(shard, row.server)) ++changed;
    }
  }
  return changed;
}

}  // namespace shardkit
