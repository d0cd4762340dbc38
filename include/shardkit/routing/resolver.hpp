// shardkit/routing/resolver.hpp — customer_id -> bucket -> shard -> that shard's pool.
//
// The port of the Bookstore case's BucketShardResolver: a fixed bucket per customer,
// a replaceable directory from bucket to shard, one pool per shard.
//
//   auto resolver = shardkit::BucketShardResolver::FromConfig(shardkit::LoadConfig(path));
//   shardkit::Route route = resolver->Resolve(shardkit::CustomerId{4242});
//   log("customer {}: bucket {}, shard {}", route.key, route.bucket, route.shard);
//   auto lease = route.pool.Acquire();                    // shard 1's pool
//   for (shardkit::ConnectionPool& pool : resolver->AllShards()) { ... }
//
// A shard may have streaming replicas (config.hpp): each has a pool of its
// own, and Servers(shard) names them beside the shard's primary, whose pool
// Pool(shard) is (writes and primary reads). After a failover
// (topology/failover.hpp) SetPrimary makes one of them the primary: routes
// resolved from then on use its pool.
//
// Thread-safe: any number of threads may route, acquire, publish and set a
// primary at once (AddReplica excepted: before the resolver is shared).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/core/bucket.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {

// Where one customer lives, all from one directory snapshot: print or use
// these together, never a shard looked up separately.
struct Route {
  ShardKey key;
  BucketId bucket;
  ShardId shard;
  std::int64_t directory_version;
  ConnectionPool& pool;  // the shard's pool, owned by the resolver
};

// One server of a shard: its primary or one of its replicas.
struct ShardServer {
  std::string name;                // the shard's name for its primary, else the replica's
  ConnectionPool* pool = nullptr;  // owned by the resolver
  int member = 0;                  // 0: the primary (dsn); j: replicas[j - 1]
};

// The servers of a shard, as one snapshot: immutable (SetPrimary publishes
// a new one; every snapshot lives as long as the resolver).
struct ShardServers {
  ShardServer primary;                // writes and primary reads
  std::vector<ShardServer> replicas;  // the hot standbys that may serve reads
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
  [[nodiscard]] ShardId ShardFor(const ShardKey& key) const noexcept { return directory_.ShardFor(key); }
  [[nodiscard]] ConnectionPool& PoolFor(const ShardKey& key) const {
    return *shards_[static_cast<std::size_t>(ToInt(ShardFor(key)))]->servers.load()->primary.pool;
  }
  // Bucket, shard, directory version and pool of one key, consistently
  // (one atomic load, see DirectoryHolder::PlacementOf).
  [[nodiscard]] Route Resolve(const ShardKey& key) const;
  // The shard's primary's pool. Throws UnknownShard.
  [[nodiscard]] ConnectionPool& Pool(ShardId shard) const;
  [[nodiscard]] std::vector<std::reference_wrapper<ConnectionPool>> AllShards() const;  // the primaries
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(shards_.size()); }
  [[nodiscard]] const std::string& ShardName(ShardId shard) const;

  // The shard's primary and replicas now. Throws UnknownShard.
  [[nodiscard]] const ShardServers& Servers(ShardId shard) const;
  [[nodiscard]] bool HasReplicas() const noexcept;
  // Every server of the shard by member (0: the configured primary, j: its
  // replica j), whichever is the primary now. Throws UnknownShard.
  [[nodiscard]] const std::vector<ShardServer>& Members(ShardId shard) const { return At(shard).members; }
  // Makes `server` (the shard's own name for the configured primary, or one
  // of its replicas' names) the shard's primary; every other server is
  // listed among its replicas, the deposed primary too: the ReplicaMonitor
  // sends reads only to a standby that streams from the current primary,
  // so a deposed primary is read once rebuilt as one
  // (topology/replica_rebuild.hpp). False if it already was.
  // Throws UnknownShard, or Error for a name that is none of the shard's.
  bool SetPrimary(ShardId shard, const std::string& server);

  [[nodiscard]] std::shared_ptr<const BucketDirectory> Directory() const { return directory_.Current(); }
  // Atomically replaces the directory (higher version, same shard count).
  void PublishDirectory(BucketDirectory next) { directory_.Publish(std::move(next)); }

 private:
  struct Shard {
    std::string name;
    std::vector<std::unique_ptr<ConnectionPool>> pools;          // by member
    std::vector<ShardServer> members;                            // by member: 0 the configured primary
    std::atomic<const ShardServers*> servers{nullptr};           // the newest of `snapshots`
    std::vector<std::unique_ptr<const ShardServers>> snapshots;  // kept: callers hold references
  };
  [[nodiscard]] Shard& At(ShardId shard) const;
  // Publishes the shard's servers with `primary` (a member) as its primary.
  static void Publish(Shard& shard, int primary);

  DirectoryHolder directory_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::mutex primaries_mutex_;  // SetPrimary's, one at a time
};

}  // namespace shardkit
