// shardkit/resolver.hpp — customer_id -> bucket -> shard -> that shard's pool.
//
// The port of seed 001's BucketShardResolver: a fixed bucket per customer,
// a replaceable directory from bucket to shard, one pool per shard.
//
//   auto resolver = shardkit::BucketShardResolver::FromConfig(shardkit::LoadConfig(path));
//   auto lease = resolver->PoolFor(4242).Acquire();       // shard 1's pool
//   for (shardkit::ConnectionPool& pool : resolver->AllShards()) { ... }
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "shardkit/bucket.hpp"
#include "shardkit/config.hpp"
#include "shardkit/directory.hpp"
#include "shardkit/pool.hpp"

namespace shardkit {

class BucketShardResolver {
 public:
  // pools[i] serves shard i; the directory's shard count must match.
  BucketShardResolver(BucketDirectory directory, std::vector<std::unique_ptr<ConnectionPool>> pools,
                      std::vector<std::string> shard_names = {});
  // Builds the pools from the configuration; with directory source
  // "database" it reads shard_directory from shard 0.
  [[nodiscard]] static std::unique_ptr<BucketShardResolver> FromConfig(const ClusterConfig& config);

  [[nodiscard]] static constexpr BucketId BucketOf(CustomerId customer_id) noexcept {
    return shardkit::BucketOf(customer_id);
  }
  [[nodiscard]] ShardId ShardFor(CustomerId customer_id) const noexcept {
    return directory_.Current()->ShardFor(customer_id);
  }
  [[nodiscard]] ConnectionPool& PoolFor(CustomerId customer_id) const {
    return *pools_[static_cast<std::size_t>(ShardFor(customer_id))];
  }
  // Throws UnknownShard.
  [[nodiscard]] ConnectionPool& Pool(ShardId shard) const;
  [[nodiscard]] std::vector<std::reference_wrapper<ConnectionPool>> AllShards() const;
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(pools_.size()); }
  [[nodiscard]] const std::string& ShardName(ShardId shard) const;

  [[nodiscard]] std::shared_ptr<const BucketDirectory> Directory() const noexcept {
    return directory_.Current();
  }
  // Atomically replaces the directory (higher version, same shard count).
  void PublishDirectory(BucketDirectory next) { directory_.Publish(std::move(next)); }

 private:
  DirectoryHolder directory_;
  std::vector<std::unique_ptr<ConnectionPool>> pools_;
  std::vector<std::string> names_;
};

}  // namespace shardkit
