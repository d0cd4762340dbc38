// CliContext (cli_context.hpp).
#include "cli_context.hpp"

#include "shardkit/config.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

shardkit::ClusterConfig CliContext::LoadConfig() const {
  return shardkit::LoadConfig(shardkit::ResolveConfigPath(config_path));
}

std::unique_ptr<shardkit::BucketShardResolver> CliContext::MakeResolver() const {
  return shardkit::BucketShardResolver::FromConfig(LoadConfig());
}

std::vector<shardkit::MigrationSet> CliContext::LoadMigrations() const {
  std::optional<std::filesystem::path> application;
  if (sql_dir && !sql_dir->empty()) application = *sql_dir;
  return shardkit::ClusterMigrations(application);
}
