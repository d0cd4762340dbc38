// shardkit/routing/primaries.hpp — which server is each shard's primary.
//
// The configuration lists every server of a shard (its dsn, its replicas);
// the catalog's shardkit_primaries table (sql/037) says which of them is the
// primary once a failover has promoted a replica (topology/failover.hpp).
// A resolver built from a configuration with a catalog applies it before
// first use, and the directory watcher applies every change it reads
// (a NOTIFY on the directory's channel, or its periodic check), so every
// router switches to the new primary's pool without a restart.
//
//   for (const auto& p : shardkit::LoadPrimaries(catalog)) ...   // {"shard1", "shard1-replica1", 1}
//   shardkit::ApplyPrimaries(resolver, shardkit::LoadPrimaries(catalog));
//   shardkit::MigrationServers(shardkit::AtCurrentPrimaries(config));   // each shard's primary now
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pqxx {
class connection_base;
}

namespace shardkit {

class BucketShardResolver;
struct ClusterConfig;

struct PrimaryRecord {
  std::string shard;       // the shard's name in the configuration
  std::string server;      // its primary: the shard's own name, or one of its replicas'
  std::int64_t epoch = 0;  // failovers of this shard so far
};

// The catalog's rows; none on a catalog without the table (not migrated to
// sql/037) or before the first failover.
[[nodiscard]] std::vector<PrimaryRecord> LoadPrimaries(pqxx::connection_base& catalog);

// Makes each row's server its shard's primary in the resolver; returns how
// many shards changed. A row for a shard the resolver does not have is
// skipped; one naming a server its shard lacks throws ConfigError (the
// configuration is older than the failover: list the promoted replica).
int ApplyPrimaries(BucketShardResolver& resolver, const std::vector<PrimaryRecord>& rows);

// The configuration with each shard's dsn and admin_dsn those of the server
// the catalog names its primary now: what migrations, verify, moves,
// rebalancing and ownership checks connect to, so that they never read or
// write a deposed primary. A shard a failover changed keeps its name and
// its replicas list, so applying it to its own result changes nothing
// (VerifyCluster and BucketMover apply it themselves). A Cluster follows
// the catalog itself: give it the configuration as written.
// Without [catalog], or before any failover, the configuration as is.
// Throws CatalogError when the catalog cannot be read, ConfigError as
// ApplyPrimaries.
[[nodiscard]] ClusterConfig AtCurrentPrimaries(const ClusterConfig& config);

}  // namespace shardkit
