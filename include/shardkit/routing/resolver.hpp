// shardkit/routing/resolver.hpp — customer_id -> bucket -> shard -> that shard's pool.
//
// The port of the Bookstore case's BucketShardResolver: a fixed bucket per customer,
// a replaceable directory from bucket to shard, one pool per shard.
//
//   auto resolver = shardkit::BucketShardResolver::FromConfig(shardkit::LoadConfig(path));
//   shardkit::Route route = resolver->Resolve(shardkit::CustomerId{4242});
//   log("customer {}: bucket {}, shard {}", route.customer, route.bucket, route.shard);
//   auto lease = route.pool.Acquire();                    // shard 1's pool
//   for (shardkit::ConnectionPool& pool : resolver->AllShards()) { ... }
//
// A shard may have streaming replicas (config.hpp): each has a pool of its
// own, and Servers(shard) says who serves the shard now — its primary, the
// replicas that serve reads, and the topology epoch, which a failover raises
// when it publishes a new primary (PublishServers; the directory watcher
// does it from the catalog). Pool(shard) is always the current primary's.
//
// Thread-safe: any number of threads may route, acquire and publish at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/core/bucket.hpp"
#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {

// Where one customer lives, all from one directory snapshot: print or use
// these together, never a shard looked up separately.
struct Route {
  CustomerId customer;
  BucketId bucket;
  ShardId shard;
  std::int64_t directory_version;
  ConnectionPool& pool;  // the shard's pool, owned by the resolver
};

// One server of a shard: its configured primary or one of its replicas.
struct ShardServer {
  std::string name;                // the shard's name for its configured primary, else the replica's
  ConnectionPool* pool = nullptr;  // owned by the resolver
  int member = 0;                  // 0: the configured primary (dsn); j: replicas[j - 1]
};

// Who serves a shard now. Immutable; replaced whole when a failover
// publishes a new topology.
struct ShardServers {
  std::int64_t epoch = 1;             // raised by every failover
  ShardServer primary;                // writes and primary reads
  std::vector<ShardServer> replicas;  // the hot standbys that serve reads
  std::vector<ShardServer> deposed;   // former primaries a failover replaced (never used)
};

// The catalog's shard_directory table ([catalog] dsn) as a directory over
// config's shards. Throws CatalogError if the catalog is unreachable or not
// migrated, DirectoryError if the rows are not a valid directory.
[[nodiscard]] BucketDirectory LoadCatalogDirectory(const ClusterConfig& config);

class BucketShardResolver {
 public:
  // pools[i] serves shard i; the directory's shard count must match.
  BucketShardResolver(BucketDirectory directory, std::vector<std::unique_ptr<ConnectionPool>> pools,
                      std::vector<std::string> shard_names = {});
  ~BucketShardResolver();
  BucketShardResolver(const BucketShardResolver&) = delete;
  BucketShardResolver& operator=(const BucketShardResolver&) = delete;
  // Builds the pools from the configuration (the replicas' too); with
  // directory source "catalog" it reads shard_directory from the catalog
  // database.
  [[nodiscard]] static std::unique_ptr<BucketShardResolver> FromConfig(const ClusterConfig& config);
  // Adds a replica to a shard (its pool's shard must be `shard`); before
  // the resolver is shared with other threads. Throws UnknownShard, or
  // Error for a name a server of the resolver already has.
  void AddReplica(ShardId shard, std::string name, std::unique_ptr<ConnectionPool> pool);

  [[nodiscard]] static constexpr BucketId BucketOf(CustomerId customer_id) noexcept {
    return shardkit::BucketOf(customer_id);
  }
  // One atomic load (see DirectoryHolder).
  [[nodiscard]] ShardId ShardFor(CustomerId customer_id) const noexcept { return directory_.ShardFor(customer_id); }
  [[nodiscard]] ConnectionPool& PoolFor(CustomerId customer_id) const {
    return *shards_[static_cast<std::size_t>(ToInt(ShardFor(customer_id)))]->primary.load(std::memory_order_acquire);
  }
  // Bucket, shard, directory version and pool of one customer, consistently
  // (one atomic load, see DirectoryHolder::PlacementOf).
  [[nodiscard]] Route Resolve(CustomerId customer_id) const;
  // The shard's current primary's pool. Throws UnknownShard.
  [[nodiscard]] ConnectionPool& Pool(ShardId shard) const;
  [[nodiscard]] std::vector<std::reference_wrapper<ConnectionPool>> AllShards() const;  // the primaries
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(shards_.size()); }
  [[nodiscard]] const std::string& ShardName(ShardId shard) const;

  // Who serves the shard now (one consistent snapshot). Throws UnknownShard.
  [[nodiscard]] std::shared_ptr<const ShardServers> Servers(ShardId shard) const;
  // Every configured server of the shard, whatever its role now (member
  // order: the configured primary, then the replicas).
  [[nodiscard]] std::vector<ShardServer> Members(ShardId shard) const;
  [[nodiscard]] bool HasReplicas() const noexcept;
  // Makes the member named `primary` the shard's primary under `epoch`,
  // the members named in `deposed` unused, and the others its replicas.
  // Only a higher epoch than the current one is published (false
  // otherwise). Throws UnknownShard, or Error naming an unknown member.
  bool PublishServers(ShardId shard, std::int64_t epoch, std::string_view primary,
                      const std::vector<std::string>& deposed = {});

  [[nodiscard]] std::shared_ptr<const BucketDirectory> Directory() const { return directory_.Current(); }
  // Atomically replaces the directory (higher version, same shard count).
  void PublishDirectory(BucketDirectory next) { directory_.Publish(std::move(next)); }

 private:
  struct Shard {
    std::vector<std::unique_ptr<ConnectionPool>> pools;  // by member
    std::vector<std::string> names;                      // by member
    std::atomic<ConnectionPool*> primary{nullptr};       // the hot path's one load
    mutable std::mutex mutex;
    std::shared_ptr<const ShardServers> servers SHARDKIT_GUARDED_BY(mutex);
  };
  [[nodiscard]] Shard& At(ShardId shard) const;

  DirectoryHolder directory_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace shardkit
