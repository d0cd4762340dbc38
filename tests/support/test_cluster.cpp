#include "support/test_cluster.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "shardkit/routing/ownership.hpp"

namespace shardkit::test {
namespace {

void Exec(const Dsn& dsn, const std::string& sql) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  tx.exec(sql);
}

}  // namespace

void DropDatabase(const Dsn& dsn, const std::string& database) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    try {
      pqxx::connection c{dsn.Reveal()};
      pqxx::nontransaction tx{c};
      tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(database) + " WITH (FORCE)");
      return;
    } catch (const pqxx::insufficient_privilege&) {
      if (std::chrono::steady_clock::now() > give_up) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

ClusterConfig LoadTestConfig() {
  std::filesystem::path path = SHARDKIT_SOURCE_DIR "/.cluster/shardkit.toml";
  if (const char* env = std::getenv("SHARDKIT_CONFIG"); env != nullptr && *env != '\0') path = env;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("no cluster configuration at " + path.string() +
                             ": start the local servers with lab/cluster start (scripts/test does)");
  }
  auto config = LoadConfig(path);
  if (!config.reference_dsn) throw std::runtime_error(path.string() + " has no [reference] server");
  return config;
}

bool HasReplicas() {
  const ClusterConfig config = LoadTestConfig();
  return std::all_of(config.shards.begin(), config.shards.end(),
                     [](const ShardConfig& shard) { return !shard.replicas.empty(); });
}

std::uint64_t WalPosition(const Dsn& dsn) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  // pg_lsn minus '0/0' is its byte position, a numeric.
  return tx
      .exec(
          "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
          "ELSE pg_current_wal_insert_lsn() END - '0/0'::pg_lsn)::text")[0][0]
      .as<std::uint64_t>();
}

Dsn WithDatabase(const Dsn& dsn, const std::string& database) {
  const std::string& text = dsn.Reveal();
  if (text.starts_with("postgres://") || text.starts_with("postgresql://")) {
    static const std::regex kPath(R"(^(postgres(?:ql)?://[^/?]*)(/[^?]*)?)");
    return Dsn(std::regex_replace(text, kPath, "$1/" + database, std::regex_constants::format_first_only));
  }
  static const std::regex kDbname(R"(dbname\s*=\s*('[^']*'|\S+))");
  if (std::regex_search(text, kDbname)) return Dsn(std::regex_replace(text, kDbname, "dbname=" + database));
  return Dsn(text + " dbname=" + database);
}

const MigrationSet& BookstoreMigrations() {
  static const MigrationSet set = MigrationSet::Load(SHARDKIT_SOURCE_DIR "/examples/bookstore-service/sql");
  return set;
}

const std::vector<MigrationSet>& ClusterMigrations() {
  static const std::vector<MigrationSet> sets{MigrationSet::Library(), BookstoreMigrations()};
  return sets;
}

BucketDirectory TwoOfThree() {
  return BucketDirectory::FromAssignments(BucketDirectory::EvenSplit(2).AssignmentTable(), 3, 1);
}

BucketDirectory UnevenSplit(int shard_count, std::int64_t version) {
  BucketDirectory::Assignments table{};
  const int total = shard_count * (shard_count + 1) / 2;
  int bucket = 0;
  int weight = 0;
  for (int shard = 0; shard < shard_count; ++shard) {
    weight += shard + 1;
    // Rounded to the nearest bucket: shard i ends where the shares up to i end.
    const int end = (kBucketCount * weight * 2 + total) / (2 * total);
    for (; bucket < end; ++bucket) table[static_cast<std::size_t>(bucket)] = ShardId{shard};
  }
  return BucketDirectory::FromAssignments(table, shard_count, version);
}

ScratchCluster::ScratchCluster(const std::string& name_prefix, PoolOptions pool)
    : ScratchCluster(name_prefix, ScratchOptions().Pool(pool)) {}

ScratchCluster::ScratchCluster(const std::string& name_prefix, ScratchOptions options) {
  const ClusterConfig base = LoadTestConfig();
  database_ = fmt::format("{}_{}", name_prefix, ::getpid());
  const std::vector<ShardConfig>& shard_servers = options.servers.empty() ? base.shards : options.servers;
  const int servers = static_cast<int>(shard_servers.size());
  const int shards = options.shards > 0 ? options.shards : servers;
  config_ = base;
  config_.pool = options.pool;
  config_.origin = "scratch cluster " + database_;

  // (server dsn, database) of every scratch database: the shards', the
  // reference's, the catalog's.
  std::vector<std::pair<Dsn, std::string>> wanted;
  std::vector<Dsn> admin_servers;  // admin_dsn of each shard's server, if the config has one
  for (int i = 0; i < shards; ++i) {
    const auto& server = shard_servers[static_cast<std::size_t>(i % servers)];
    wanted.emplace_back(server.dsn, ShardDatabaseName(i));
    admin_servers.push_back(server.admin_dsn);
  }
  wanted.emplace_back(*base.reference_dsn, database_);
  wanted.emplace_back(base.catalog_dsn.value_or(*base.reference_dsn), database_ + "_catalog");
  created_ = wanted;
  cleanup_admin_ = admin_servers;
  try {
    // All at once (CREATE DATABASE takes a few hundred ms each); separate
    // statements: each must run outside a transaction block.
    std::vector<std::string> errors(wanted.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      threads.emplace_back([&wanted, &errors, i] {
        try {
          DropDatabase(wanted[i].first, wanted[i].second);
          Exec(wanted[i].first, fmt::format("CREATE DATABASE {}", wanted[i].second));
        } catch (const std::exception& e) {
          errors[i] = fmt::format("creating database {}: {}", wanted[i].second, RedactDsn(e.what()));
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& error : errors) {
      if (!error.empty()) throw std::runtime_error("scratch cluster " + database_ + ": " + error);
    }
    config_.shards.clear();
    for (int i = 0; i < shards; ++i) {
      const auto& [server, database] = wanted[static_cast<std::size_t>(i)];
      ShardConfig shard{fmt::format("shard{}", i), WithDatabase(server, database), {}};
      if (const auto& admin = admin_servers[static_cast<std::size_t>(i)]; !admin.empty()) {
        shard.admin_dsn = WithDatabase(admin, database);
      }
      if (options.replicas) {
        // The server's replicas copy the scratch database too.
        const auto& replicas = shard_servers[static_cast<std::size_t>(i % servers)].replicas;
        for (std::size_t j = 0; j < replicas.size(); ++j) {
          ReplicaConfig replica{fmt::format("shard{}-replica{}", i, j + 1), WithDatabase(replicas[j].dsn, database)};
          if (!replicas[j].admin_dsn.empty()) replica.admin_dsn = WithDatabase(replicas[j].admin_dsn, database);
          shard.replicas.push_back(std::move(replica));
        }
      }
      config_.shards.push_back(std::move(shard));
    }
    config_.reference_dsn = WithDatabase(wanted[wanted.size() - 2].first, wanted[wanted.size() - 2].second);
    config_.catalog_dsn = WithDatabase(wanted.back().first, wanted.back().second);
    config_.directory = options.directory.value_or(BucketDirectory::EvenSplit(shards));
    if (config_.directory.ShardCount() != shards) {
      throw std::runtime_error(fmt::format("scratch cluster {}: the directory is for {} shards, not {}", database_,
                                           config_.directory.ShardCount(), shards));
    }
    config_.directory_source = DirectorySource::kConfig;
    if (options.migrate) {
      for (const MigrationSet& set : options.migrations.empty() ? ClusterMigrations() : options.migrations) {
        Migrator migrator(set, shardkit::MigrationServers(config_));
        const MigrationReport report = migrator.Apply();
        if (report.Ok()) continue;
        std::string why;
        for (const auto& left : report.left_behind) why += "; " + left;
        for (const auto& step : report.applied) {
          if (!step.ok) why += fmt::format("; {} {} version {}: {}", step.server, set.Name(), step.version, step.error);
        }
        throw std::runtime_error("scratch cluster " + database_ + ": migrating failed" + why);
      }
      pqxx::connection catalog{config_.catalog_dsn->Reveal()};
      StoreDirectory(catalog, config_.directory);
      config_.directory_source = DirectorySource::kCatalog;
      if (options.enroll) {
        for (int i = 0; i < shards; ++i) {
          pqxx::connection c{ShardDsn(i).Reveal()};
          EnrollShard(c, ShardId{i}, BucketSet::Of(config_.directory, ShardId{i}), config_.directory.Version());
        }
      }
    }
  } catch (...) {
    DropAll();
    throw;
  }
}

ScratchCluster::~ScratchCluster() {
  DropAll();
}

void ScratchCluster::DropAll() noexcept {
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < created_.size(); ++i) {
    const auto& [server, database] = created_[i];
    const Dsn admin = i < cleanup_admin_.size() && !cleanup_admin_[i].empty() ? cleanup_admin_[i] : server;
    threads.emplace_back([&server = server, &database = database, admin] {
      try {
        // Subscriptions and slots of moves left by a failed test would keep
        // the database busy (and a slot its server's WAL): a superuser's job.
        pqxx::connection c{WithDatabase(admin, database).Reveal()};
        pqxx::nontransaction tx{c};
        for (const auto& row : tx.exec("SELECT quote_ident(subname) FROM pg_subscription WHERE subdbid = "
                                       "(SELECT oid FROM pg_database WHERE datname = current_database())")) {
          const std::string name = row[0].c_str();
          tx.exec("ALTER SUBSCRIPTION " + name + " DISABLE");
          tx.exec("ALTER SUBSCRIPTION " + name + " SET (slot_name = NONE)");
          tx.exec("DROP SUBSCRIPTION " + name);
        }
        for (const auto& row : tx.exec("SELECT slot_name FROM pg_replication_slots WHERE database = "
                                       "current_database() AND NOT active")) {
          tx.exec_params("SELECT pg_drop_replication_slot($1)", row[0].c_str());
        }
        // So would prepared transactions (cross-shard transactions a test left).
        for (const auto& row :
             tx.exec("SELECT quote_literal(gid) FROM pg_prepared_xacts WHERE database = current_database()")) {
          tx.exec(std::string("ROLLBACK PREPARED ") + row[0].c_str());
        }
      } catch (const std::exception&) {
        // Not a superuser, or the server is gone: DROP DATABASE says why.
      }
      try {
        DropDatabase(server, database);
      } catch (const std::exception&) {
        // A server stopped by the test itself; the next run drops it.
      }
    });
  }
  for (auto& t : threads) t.join();
}

std::string ScratchCluster::ShardDatabaseName(int shard) const {
  return fmt::format("{}_s{}", database_, shard);
}

std::unique_ptr<BucketShardResolver> ScratchCluster::MakeResolver(std::optional<PoolOptions> pool) const {
  ClusterConfig config = config_;
  if (pool) config.pool = *pool;
  return BucketShardResolver::FromConfig(config);
}

void ScratchCluster::CatchUpReplicas(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const ShardConfig& shard : config_.shards) {
    if (shard.replicas.empty()) continue;
    const std::uint64_t wanted = WalPosition(shard.dsn);
    for (const ReplicaConfig& replica : shard.replicas) {
      std::string last;
      for (;;) {
        try {
          if (WalPosition(replica.dsn) >= wanted) break;
          last = "behind";
        } catch (const std::exception& e) {
          last = RedactDsn(e.what());  // the database may not be replayed yet
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          throw std::runtime_error(fmt::format("scratch cluster {}: replica {} did not catch up with {} ({})",
                                               database_, replica.name, shard.name, last));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
}

void ScratchCluster::ExecOnShard(int shard, const std::string& sql) const {
  Exec(ShardDsn(shard), sql);
}
void ScratchCluster::ExecOnReference(const std::string& sql) const {
  Exec(ReferenceDsn(), sql);
}
void ScratchCluster::ExecOnCatalog(const std::string& sql) const {
  Exec(CatalogDsn(), sql);
}
void ScratchCluster::ExecEverywhere(const std::string& sql) const {
  for (int s = 0; s < ShardCount(); ++s) ExecOnShard(s, sql);
  ExecOnReference(sql);
}

}  // namespace shardkit::test
