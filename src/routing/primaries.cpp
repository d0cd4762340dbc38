#include "shardkit/routing/primaries.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "pg/server_message.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/dsn_format.hpp"
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

namespace {

[[noreturn]] void ThrowUnknownServer(int shard_index, const PrimaryRecord& row) {
  throw ConfigError(fmt::format("shard[{}].replicas", shard_index),
                    fmt::format("the catalog names {} the primary of shard {} (failover {}), and the "
                                "configuration has no server of that name for it: add it to the shard's "
                                "replicas (its dsn), or run with the configuration the failover used",
                                row.server, row.shard, row.epoch));
}

}  // namespace

int ApplyPrimaries(BucketShardResolver& resolver, const std::vector<PrimaryRecord>& rows) {
  int changed = 0;
  for (const PrimaryRecord& row : rows) {
    for (int i = 0; i < resolver.ShardCount(); ++i) {
      const ShardId shard{i};
      if (resolver.ShardName(shard) != row.shard) continue;
      const auto& members = resolver.Members(shard);
      if (std::none_of(members.begin(), members.end(), [&](const ShardServer& m) { return m.name == row.server; })) {
        ThrowUnknownServer(i, row);
      }
      if (resolver.SetPrimary(shard, row.server)) ++changed;
    }
  }
  return changed;
}

ClusterConfig AtCurrentPrimaries(const ClusterConfig& config) {
  if (!config.catalog_dsn) return config;
  std::vector<PrimaryRecord> rows;
  const Dsn dsn = WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
  try {
    pqxx::connection catalog{dsn.Reveal()};
    rows = LoadPrimaries(catalog);
  } catch (const pqxx::failure& e) {
    throw CatalogError(
        fmt::format("the catalog ({}) could not say which server is each shard's primary: {}; a "
                    "failover may have replaced one, so nothing is read or written until it can",
                    dsn, RedactDsn(detail::FirstLine(e.what()))));
  }
  ClusterConfig now = config;
  for (const PrimaryRecord& row : rows) {
    for (std::size_t i = 0; i < now.shards.size(); ++i) {
      ShardConfig& shard = now.shards[i];
      if (shard.name != row.shard || row.server == shard.name) continue;
      const auto it = std::find_if(shard.replicas.begin(), shard.replicas.end(),
                                   [&](const ReplicaConfig& r) { return r.name == row.server; });
      if (it == shard.replicas.end()) ThrowUnknownServer(static_cast<int>(i), row);
      shard.dsn = it->dsn;
      shard.admin_dsn = it->AdminDsn();  // its replicas stay listed: applied again, the same copy
    }
  }
  return now;
}

}  // namespace shardkit
