// Test support: the local cluster started by lab/cluster, and scratch
// databases so that every test binary works on data of its own.
//
//   shardkit::test::ScratchCluster cluster{"pool_pgtest"};   // a database per shard, reference, catalog
//   auto resolver = cluster.MakeResolver();
//   cluster.ExecOnReference("INSERT ...");
//
//   // three shards on the cluster's two shard servers, buckets placed unevenly
//   shardkit::test::ScratchCluster three{"verify_pgtest",
//                                        ScratchOptions().Shards(3).Directory(UnevenSplit(3))};
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit::test {

// $SHARDKIT_CONFIG, else <source dir>/.cluster/shardkit.toml. Fails the test
// run with a clear message when the cluster is not configured.
[[nodiscard]] ClusterConfig LoadTestConfig();

// Whether the local cluster has streaming replicas; a test that needs them
// skips with this message when it has none:
//   if (!shardkit::test::HasReplicas()) GTEST_SKIP() << shardkit::test::kNoReplicas;
[[nodiscard]] bool HasReplicas();
inline constexpr const char* kNoReplicas =
    "the local cluster has no replicas: start it with SHARDKIT_REPLICAS=1 lab/cluster start (scripts/test does)";

// The server's current WAL insert position, or (on a replica) the position
// it has replayed, as a number (pg_lsn's bytes).
[[nodiscard]] std::uint64_t WalPosition(const Dsn& dsn);

// The same connection string pointing at another database.
[[nodiscard]] Dsn WithDatabase(const Dsn& dsn, const std::string& database);

// DROP DATABASE IF EXISTS ... WITH (FORCE) on dsn's server. Retried for up
// to 10 s while it is refused for lack of privilege (42501): an autovacuum
// worker in that database has no role, and only a superuser may terminate
// it; it leaves by itself within moments.
void DropDatabase(const Dsn& dsn, const std::string& database);

// The Bookstore's migrations (examples/bookstore-service/sql), the
// application set of the lab and the tests.
[[nodiscard]] const MigrationSet& BookstoreMigrations();

// What a test cluster is migrated with: shardkit's own set, then the
// Bookstore's.
[[nodiscard]] const std::vector<MigrationSet>& ClusterMigrations();

// A directory whose shards own different numbers of buckets: shard i gets
// a share proportional to i + 1 (3 shards: 11, 21, 32 buckets), in
// contiguous ranges.
[[nodiscard]] BucketDirectory UnevenSplit(int shard_count, std::int64_t version = 1);

// Buckets 0-31 on shard 0, 32-63 on shard 1, shard 2 empty (version 1):
// two loaded shards and a new one, for bucket moves.
[[nodiscard]] BucketDirectory TwoOfThree();

struct ScratchOptions {
  // Shards of the scratch cluster (0: one per shard server of the local
  // cluster). Shard i lives in database <name>_s<i> on shard server
  // i % (number of shard servers), so any number fits on two servers.
  int shards = 0;
  // Where the buckets are (default: the even split over `shards`); stored in
  // the scratch catalog's shard_directory, and the config reads it there.
  std::optional<BucketDirectory> directory;
  PoolOptions pool;
  // Apply the project's sql/ through the migrator (shardkit/schema/migrate.hpp).
  // Without it the databases are empty and the directory is not stored:
  // tests of the migrator bring their own migration files.
  bool migrate = true;
  // The sets it is migrated with (none: ClusterMigrations(), shardkit's and
  // the Bookstore's).
  std::vector<MigrationSet> migrations;
  // Enroll every shard (migrated clusters only) with the buckets the
  // directory gives it, as lab/cluster does: the fence and the visibility
  // rule of ownership.hpp are on.
  bool enroll = true;
  // List the local cluster's replicas (SHARDKIT_REPLICAS) as each scratch
  // shard's replicas, on the same scratch database (a replica copies every
  // database of its server). Off: the config has none.
  bool replicas = false;
  // Shard servers other than the local cluster's (each with its dsn,
  // admin_dsn and replicas, any database: the scratch one replaces it):
  // shard i on servers[i % size], with its replicas. Empty: the local
  // cluster's shard servers.
  std::vector<ShardConfig> servers;

  // Chainable: ScratchOptions().Shards(3).Unmigrated()
  ScratchOptions& Shards(int n) {
    shards = n;
    return *this;
  }
  ScratchOptions& Directory(BucketDirectory d) {
    directory = std::move(d);
    return *this;
  }
  ScratchOptions& Pool(PoolOptions p) {
    pool = p;
    return *this;
  }
  ScratchOptions& Migrations(std::vector<MigrationSet> sets) {
    migrations = std::move(sets);
    return *this;
  }
  ScratchOptions& Unmigrated() {
    migrate = false;
    return *this;
  }
  ScratchOptions& Unenrolled() {
    enroll = false;
    return *this;
  }
  ScratchOptions& WithReplicas() {
    replicas = true;
    return *this;
  }
  ScratchOptions& On(std::vector<ShardConfig> shard_servers) {
    servers = std::move(shard_servers);
    replicas = true;
    return *this;
  }
};

// Scratch databases: one per shard, one on the reference server, one catalog
// (on the catalog's instance, or the reference server's); dropped again by
// the destructor.
class ScratchCluster {
 public:
  explicit ScratchCluster(const std::string& name_prefix, PoolOptions pool = {});
  ScratchCluster(const std::string& name_prefix, ScratchOptions options);
  ~ScratchCluster();
  ScratchCluster(const ScratchCluster&) = delete;
  ScratchCluster& operator=(const ScratchCluster&) = delete;

  [[nodiscard]] const ClusterConfig& Config() const noexcept { return config_; }
  // The reference server's scratch database; shard i's is ShardDatabaseName(i).
  [[nodiscard]] const std::string& DatabaseName() const noexcept { return database_; }
  [[nodiscard]] std::string ShardDatabaseName(int shard) const;
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(config_.shards.size()); }
  [[nodiscard]] const Dsn& ShardDsn(int shard) const { return config_.shards.at(static_cast<std::size_t>(shard)).dsn; }
  // A superuser's connection to shard i's database (admin_dsn: for bucket
  // moves), or its dsn when the cluster's config has no admin_dsn.
  [[nodiscard]] const Dsn& AdminDsn(int shard) const {
    return config_.shards.at(static_cast<std::size_t>(shard)).AdminDsn();
  }
  [[nodiscard]] const Dsn& ReferenceDsn() const { return *config_.reference_dsn; }
  [[nodiscard]] const Dsn& CatalogDsn() const { return *config_.catalog_dsn; }
  [[nodiscard]] const BucketDirectory& Directory() const noexcept { return config_.directory; }
  // The servers a migrator works on: the shards, the reference, the catalog.
  [[nodiscard]] std::vector<MigrationServer> MigrationServers() const { return shardkit::MigrationServers(config_); }
  // A resolver over the scratch databases (the scratch directory).
  [[nodiscard]] std::unique_ptr<BucketShardResolver> MakeResolver(std::optional<PoolOptions> pool = {}) const;

  // Waits until every replica of every scratch shard has replayed what its
  // shard had written when called (the scratch databases and their
  // migrations included); throws std::runtime_error after `timeout`.
  void CatchUpReplicas(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

  void ExecOnShard(int shard, const std::string& sql) const;
  void ExecOnReference(const std::string& sql) const;
  void ExecOnCatalog(const std::string& sql) const;
  void ExecEverywhere(const std::string& sql) const;  // every shard and the reference

 private:
  void DropAll() noexcept;
  std::vector<std::pair<Dsn, std::string>> created_;  // (server dsn, database) to drop
  std::vector<Dsn> cleanup_admin_;                    // admin server dsn per created_ entry, if any
  ClusterConfig config_;
  std::string database_;
};

}  // namespace shardkit::test
