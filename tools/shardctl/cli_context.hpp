// CliContext: the options every shardctl subcommand shares, and what they
// load from them (the configuration, a resolver, the migration files).
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace shardkit {
class BucketShardResolver;
class MigrationSet;
struct ClusterConfig;
}  // namespace shardkit

struct CliContext {
  std::optional<std::string> config_path;  // --config, else $SHARDKIT_CONFIG, else ./shardkit.toml
  bool json = false;                       // --json: machine-readable output
  std::optional<std::string> sql_dir;      // --sql-dir: the migration files

  [[nodiscard]] shardkit::ClusterConfig LoadConfig() const;
  [[nodiscard]] std::unique_ptr<shardkit::BucketShardResolver> MakeResolver() const;
  // The migration files of --sql-dir, else the installed ones, else ./sql;
  // `where` says which directory and why.
  [[nodiscard]] shardkit::MigrationSet LoadMigrations(std::string& where) const;
};
