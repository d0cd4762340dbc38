// Test support: the local cluster started by lab/cluster, and scratch
// databases so that every test binary works on data of its own.
//
//   shardkit::test::ScratchCluster cluster{"pool_pgtest"};   // CREATE DATABASE on every server
//   auto resolver = cluster.MakeResolver();
//   cluster.ExecOnReference("INSERT ...");
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/resolver.hpp"

namespace shardkit::test {

// $SHARDKIT_CONFIG, else <source dir>/.cluster/shardkit.toml. Fails the test
// run with a clear message when the cluster is not configured.
[[nodiscard]] ClusterConfig LoadTestConfig();

// The same connection string pointing at another database.
[[nodiscard]] std::string WithDatabase(const std::string& dsn, const std::string& database);

// A database created on every shard and on the reference server, with the
// project's sql/*.sql applied; dropped again by the destructor.
class ScratchCluster {
 public:
  explicit ScratchCluster(const std::string& name_prefix, PoolOptions pool = {});
  ~ScratchCluster();
  ScratchCluster(const ScratchCluster&) = delete;
  ScratchCluster& operator=(const ScratchCluster&) = delete;

  [[nodiscard]] const ClusterConfig& Config() const noexcept { return config_; }
  [[nodiscard]] const std::string& DatabaseName() const noexcept { return database_; }
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(config_.shards.size()); }
  [[nodiscard]] const std::string& ShardDsn(int shard) const { return config_.shards.at(static_cast<std::size_t>(shard)).dsn; }
  [[nodiscard]] const std::string& ReferenceDsn() const { return *config_.reference_dsn; }
  // A resolver over the scratch databases (even split unless given).
  [[nodiscard]] std::unique_ptr<BucketShardResolver> MakeResolver(std::optional<PoolOptions> pool = {}) const;

  void ExecOnShard(int shard, const std::string& sql) const;
  void ExecOnReference(const std::string& sql) const;
  void ExecEverywhere(const std::string& sql) const;  // every shard and the reference

 private:
  ClusterConfig base_;
  ClusterConfig config_;
  std::string database_;
};

}  // namespace shardkit::test
