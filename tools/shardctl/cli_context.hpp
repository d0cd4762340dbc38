// CliContext: the options every shardctl subcommand shares, and what they
// load from them (the configuration, a resolver, the migration files).
#pragma once

#include <exception>
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

// Thrown by a subcommand that has printed its error itself (shardctl sql
// --json prints it as JSON on stdout): main exits with code() and prints
// nothing more.
class ErrorPrinted : public std::exception {
 public:
  explicit ErrorPrinted(int code) : code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const char* what() const noexcept override { return "error printed"; }

 private:
  int code_;
};
