#include "shardkit/routing/resolver.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

BucketShardResolver::BucketShardResolver(BucketDirectory directory, std::vector<std::unique_ptr<ConnectionPool>> pools,
                                         std::vector<std::string> shard_names)
    : directory_(std::move(directory)), pools_(std::move(pools)), names_(std::move(shard_names)) {
  const int shard_count = directory_.Current()->ShardCount();
  if (static_cast<int>(pools_.size()) != shard_count) {
    throw DirectoryError(
        fmt::format("the directory places buckets on {} shards but {} pools were given", shard_count, pools_.size()));
  }
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    if (!pools_[i]) throw UnknownShard(ShardId{static_cast<int>(i)}, shard_count);
    if (pools_[i]->Shard() != ShardId{static_cast<int>(i)}) {
      throw DirectoryError(
          fmt::format("pool {} serves shard {}: pools must be given in shard order", i, pools_[i]->Shard()),
          std::nullopt, pools_[i]->Shard());
    }
  }
  names_.resize(pools_.size());
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i].empty()) names_[i] = fmt::format("shard{}", i);
  }
}

BucketDirectory LoadCatalogDirectory(const ClusterConfig& config) {
  if (!config.catalog_dsn) {
    throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog] dsn to read the directory from", config.origin));
  }
  const Dsn dsn = WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
  try {
    pqxx::connection catalog{dsn.Reveal()};
    return LoadDirectory(catalog, static_cast<int>(config.shards.size()));
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

std::unique_ptr<BucketShardResolver> BucketShardResolver::FromConfig(const ClusterConfig& config) {
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{static_cast<int>(i)}, config.shards[i].dsn, config.pool));
    names.push_back(config.shards[i].name);
  }
  BucketDirectory directory =
      config.directory_source == DirectorySource::kCatalog ? LoadCatalogDirectory(config) : config.directory;
  return std::make_unique<BucketShardResolver>(std::move(directory), std::move(pools), std::move(names));
}

ConnectionPool& BucketShardResolver::Pool(ShardId shard) const {
  if (ToInt(shard) < 0 || ToInt(shard) >= ShardCount()) throw UnknownShard(shard, ShardCount());
  return *pools_[static_cast<std::size_t>(ToInt(shard))];
}

Route BucketShardResolver::Resolve(CustomerId customer_id) const {
  // Shard and version come from one routing word: one publish, one load.
  const auto placement = directory_.PlacementOf(customer_id);
  return Route{customer_id, placement.bucket, placement.shard, placement.version,
               *pools_[static_cast<std::size_t>(ToInt(placement.shard))]};
}

std::vector<std::reference_wrapper<ConnectionPool>> BucketShardResolver::AllShards() const {
  std::vector<std::reference_wrapper<ConnectionPool>> all;
  all.reserve(pools_.size());
  for (const auto& pool : pools_) all.emplace_back(*pool);
  return all;
}

const std::string& BucketShardResolver::ShardName(ShardId shard) const {
  if (ToInt(shard) < 0 || ToInt(shard) >= ShardCount()) throw UnknownShard(shard, ShardCount());
  return names_[static_cast<std::size_t>(ToInt(shard))];
}

}  // namespace shardkit
