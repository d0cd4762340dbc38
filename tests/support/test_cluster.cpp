#include "support/test_cluster.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace shardkit::test {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Exec(const std::string& dsn, const std::string& sql) {
  pqxx::connection c{dsn};
  pqxx::nontransaction tx{c};
  tx.exec(sql);
}

std::vector<std::string> SchemaScripts() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(SHARDKIT_SOURCE_DIR "/sql")) {
    if (entry.path().extension() == ".sql") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> scripts;
  for (const auto& f : files) scripts.push_back(ReadFile(f));
  return scripts;
}

}  // namespace

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

std::string WithDatabase(const std::string& dsn, const std::string& database) {
  if (dsn.starts_with("postgres://") || dsn.starts_with("postgresql://")) {
    static const std::regex kPath(R"(^(postgres(?:ql)?://[^/?]*)(/[^?]*)?)");
    return std::regex_replace(dsn, kPath, "$1/" + database, std::regex_constants::format_first_only);
  }
  static const std::regex kDbname(R"(dbname\s*=\s*('[^']*'|\S+))");
  if (std::regex_search(dsn, kDbname)) return std::regex_replace(dsn, kDbname, "dbname=" + database);
  return dsn + " dbname=" + database;
}

ScratchCluster::ScratchCluster(const std::string& name_prefix, PoolOptions pool)
    : base_(LoadTestConfig()), config_(base_) {
  database_ = fmt::format("{}_{}", name_prefix, ::getpid());
  config_.pool = pool;
  std::vector<std::string*> dsns;
  for (auto& shard : config_.shards) dsns.push_back(&shard.dsn);
  dsns.push_back(&*config_.reference_dsn);
  const auto scripts = SchemaScripts();
  for (std::string* dsn : dsns) {
    // Separate statements: each must run outside a transaction block.
    Exec(*dsn, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", database_));
    Exec(*dsn, fmt::format("CREATE DATABASE {}", database_));
    *dsn = WithDatabase(*dsn, database_);
    for (const auto& script : scripts) Exec(*dsn, script);
  }
  config_.directory = BucketDirectory::EvenSplit(static_cast<int>(config_.shards.size()));
  config_.directory_source = DirectorySource::kConfig;
}

ScratchCluster::~ScratchCluster() {
  std::vector<std::string> dsns;
  for (const auto& shard : base_.shards) dsns.push_back(shard.dsn);
  dsns.push_back(*base_.reference_dsn);
  for (const auto& dsn : dsns) {
    try {
      Exec(dsn, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", database_));
    } catch (const std::exception&) {
      // A server stopped by the test itself; the next run drops it.
    }
  }
}

std::unique_ptr<BucketShardResolver> ScratchCluster::MakeResolver(std::optional<PoolOptions> pool) const {
  ClusterConfig config = config_;
  if (pool) config.pool = *pool;
  return BucketShardResolver::FromConfig(config);
}

void ScratchCluster::ExecOnShard(int shard, const std::string& sql) const { Exec(ShardDsn(shard), sql); }
void ScratchCluster::ExecOnReference(const std::string& sql) const { Exec(ReferenceDsn(), sql); }
void ScratchCluster::ExecEverywhere(const std::string& sql) const {
  for (int s = 0; s < ShardCount(); ++s) ExecOnShard(s, sql);
  ExecOnReference(sql);
}

}  // namespace shardkit::test
