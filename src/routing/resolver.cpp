#include "shardkit/routing/resolver.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <pqxx/pqxx>

#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primaries.hpp"

namespace shardkit {

BucketShardResolver::BucketShardResolver(BucketDirectory directory, std::vector<std::unique_ptr<ConnectionPool>> pools,
                                         std::vector<std::string> shard_names)
    : directory_(std::move(directory)) {
  const int shard_count = directory_.Current()->ShardCount();
  if (static_cast<int>(pools.size()) != shard_count) {
    throw DirectoryError(
        fmt::format("the directory places buckets on {} shards but {} pools were given", shard_count, pools.size()));
  }
  shard_names.resize(pools.size());
  for (std::size_t i = 0; i < pools.size(); ++i) {
    if (!pools[i]) throw UnknownShard(ShardId{static_cast<int>(i)}, shard_count);
    if (pools[i]->Shard() != ShardId{static_cast<int>(i)}) {
      throw DirectoryError(
          fmt::format("pool {} serves shard {}: pools must be given in shard order", i, pools[i]->Shard()),
          std::nullopt, pools[i]->Shard());
    }
    auto shard = std::make_unique<Shard>();
    shard->name = shard_names[i].empty() ? fmt::format("shard{}", i) : std::move(shard_names[i]);
    shard->members.push_back(ShardServer{shard->name, pools[i].get(), 0});
    shard->pools.push_back(std::move(pools[i]));
    Publish(*shard, 0);
    shards_.push_back(std::move(shard));
  }
}

BucketShardResolver::~BucketShardResolver() = default;

void BucketShardResolver::Publish(Shard& shard, int primary) {
  auto servers = std::make_unique<ShardServers>();
  servers->primary = shard.members[static_cast<std::size_t>(primary)];
  for (const ShardServer& member : shard.members) {
    // A deposed primary stays listed: the ReplicaMonitor reads it only
    // once it streams from the current primary (rebuilt as its standby).
    if (member.member != primary) servers->replicas.push_back(member);
  }
  shard.snapshots.push_back(std::move(servers));
  shard.servers.store(shard.snapshots.back().get());
}

bool BucketShardResolver::SetPrimary(ShardId shard, const std::string& server) {
  Shard& s = At(shard);
  const auto member = std::find_if(s.members.begin(), s.members.end(), [&](const auto& m) { return m.name == server; });
  if (member == s.members.end()) {
    throw Error(fmt::format("shard {} ({}) has no server named {}: its primary is {}{}", shard, s.name, server, s.name,
                            s.members.size() > 1 ? " and its replicas are named in the configuration" : ""));
  }
  std::lock_guard lock(primaries_mutex_);
  if (s.servers.load()->primary.member == member->member) return false;
  Publish(s, member->member);
  return true;
}

BucketShardResolver::Shard& BucketShardResolver::At(ShardId shard) const {
  if (ToInt(shard) < 0 || ToInt(shard) >= ShardCount()) throw UnknownShard(shard, ShardCount());
  return *shards_[static_cast<std::size_t>(ToInt(shard))];
}

void BucketShardResolver::AddReplica(ShardId shard, std::string name, std::unique_ptr<ConnectionPool> pool) {
  Shard& s = At(shard);
  if (!pool || pool->Shard() != shard) {
    throw Error(fmt::format("replica {} of shard {}: its pool must serve shard {}", name, shard, shard));
  }
  for (const auto& other : shards_) {
    if (std::any_of(other->members.begin(), other->members.end(), [&](const auto& m) { return m.name == name; })) {
      throw Error(fmt::format("replica {} of shard {}: a server of this cluster already has that name", name, shard));
    }
  }
  const int member = static_cast<int>(s.pools.size());
  s.pools.push_back(std::move(pool));
  s.members.push_back(ShardServer{std::move(name), s.pools.back().get(), member});
  Publish(s, s.servers.load()->primary.member);
}

const ShardServers& BucketShardResolver::Servers(ShardId shard) const {
  return *At(shard).servers.load();
}

bool BucketShardResolver::HasReplicas() const noexcept {
  return std::any_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->members.size() > 1; });
}

namespace {

// fn(connection) on a connection to the configuration's catalog, its
// failures as CatalogError naming the catalog and what to check.
template <class Fn>
auto WithCatalog(const ClusterConfig& config, const Fn& fn) {
  if (!config.catalog_dsn) {
    throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog] dsn to read the directory from", config.origin));
  }
  const Dsn dsn = WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
  try {
    pqxx::connection catalog{dsn.Reveal()};
    return fn(catalog);
  } catch (const pqxx::broken_connection& e) {
    throw CatalogError(
        fmt::format("catalog ({}) is unreachable: {}; check [catalog] dsn in {} and that its "
                    "server is running",
                    dsn, RedactDsn(e.what()), config.origin));
  } catch (const pqxx::undefined_table&) {
    throw CatalogError(
        fmt::format("catalog ({}) has no shard_directory table: run shardctl migrate, then store a "
                    "directory there (one row per bucket)",
                    dsn));
  } catch (const pqxx::failure& e) {
    throw CatalogError(
        fmt::format("reading shard_directory from the catalog ({}) failed: {}", dsn, RedactDsn(e.what())));
  }
}

}  // namespace

BucketDirectory LoadCatalogDirectory(const ClusterConfig& config) {
  return WithCatalog(config, [&](pqxx::connection& catalog) {
    return LoadDirectory(catalog, static_cast<int>(config.shards.size()));
  });
}

std::unique_ptr<BucketShardResolver> BucketShardResolver::FromConfig(const ClusterConfig& config) {
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{static_cast<int>(i)}, config.shards[i].dsn, config.pool));
    names.push_back(config.shards[i].name);
  }
  BucketDirectory directory =
      config.directory_source == DirectorySource::kCatalog ? LoadCatalogDirectory(config) : config.directory;
  auto resolver = std::make_unique<BucketShardResolver>(std::move(directory), std::move(pools), std::move(names));
  PoolOptions replica_pool = config.pool;
  if (config.replica_settings.max_size) replica_pool.max_size = *config.replica_settings.max_size;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    const ShardId shard{static_cast<int>(i)};
    for (const ReplicaConfig& replica : config.shards[i].replicas) {
      resolver->AddReplica(shard, replica.name, std::make_unique<ConnectionPool>(shard, replica.dsn, replica_pool));
    }
  }
  // After a failover the catalog names another server the shard's primary.
  if (config.directory_source == DirectorySource::kCatalog) {
    ApplyPrimaries(*resolver, WithCatalog(config, [](pqxx::connection& catalog) { return LoadPrimaries(catalog); }));
  }
  return resolver;
}

ConnectionPool& BucketShardResolver::Pool(ShardId shard) const {
  return *At(shard).servers.load()->primary.pool;
}

Route BucketShardResolver::Resolve(const ShardKey& key) const {
  // Shard and version come from one routing word: one publish, one load.
  const auto placement = directory_.PlacementOf(key);
  return Route{key, placement.bucket, placement.shard, placement.version,
               *shards_[static_cast<std::size_t>(ToInt(placement.shard))]->servers.load()->primary.pool};
}

std::vector<std::reference_wrapper<ConnectionPool>> BucketShardResolver::AllShards() const {
  std::vector<std::reference_wrapper<ConnectionPool>> all;
  all.reserve(shards_.size());
  for (const auto& shard : shards_) all.emplace_back(*shard->servers.load()->primary.pool);
  return all;
}

const std::string& BucketShardResolver::ShardName(ShardId shard) const {
  return At(shard).name;
}

}  // namespace shardkit
