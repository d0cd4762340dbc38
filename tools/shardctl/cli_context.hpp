// CliContext: the options every shardctl subcommand shares, and what they
// load from them (the configuration, a resolver, the migration files).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardkit {
class BucketShardResolver;
class MigrationSet;
struct ClusterConfig;
}  // namespace shardkit

struct CliContext {
  std::optional<std::string> config_path;  // --config, else $SHARDKIT_CONFIG, else ./shardkit.toml
  bool json = false;                       // --json: machine-readable output
  std::optional<std::string> sql_dir;      // --sql-dir: the application's migration files

  [[nodiscard]] shardkit::ClusterConfig LoadConfig() const;
  [[nodiscard]] std::unique_ptr<shardkit::BucketShardResolver> MakeResolver() const;
  // The library's own migrations, then the application's of --sql-dir when
  // given (shardkit::ClusterMigrations).
  [[nodiscard]] std::vector<shardkit::MigrationSet> LoadMigrations() const;
};
