// CliContext (cli_context.hpp).
#include "cli_context.hpp"

#include <fmt/format.h>

#include "shardkit/config.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

shardkit::ClusterConfig CliContext::LoadConfig() const {
  return shardkit::LoadConfig(shardkit::ResolveConfigPath(config_path));
}

std::unique_ptr<shardkit::BucketShardResolver> CliContext::MakeResolver() const {
  return shardkit::BucketShardResolver::FromConfig(LoadConfig());
}

shardkit::MigrationSet CliContext::LoadMigrations(std::string& where) const {
  const shardkit::SqlDirectory dir = shardkit::FindSqlDirectory(sql_dir);
  auto set = shardkit::MigrationSet::Load(dir.path);
  where = fmt::format("{} ({})", set.Directory().string(), dir.why);
  return set;
}
