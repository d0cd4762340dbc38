// Test support: running the shardctl binary as a user does, against a
// scratch cluster's configuration written to a file.
//
//   const auto config = shardkit::test::WriteShardctlConfig(scratch.Config(), "my_pgtest");
//   const auto run = shardkit::test::RunShardctl(SHARDCTL_PATH, {"--config", config.string(), "--json", "recover"});
//   EXPECT_EQ(run.code, 0) << run.err;
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "shardkit/config.hpp"

namespace shardkit::test {

struct ShardctlRun {
  int code = -1;    // exit code (128 + signal when killed)
  std::string out;  // standard output
  std::string err;  // standard error
};

// Runs `shardctl` (its path) with `args` and waits for it.
[[nodiscard]] ShardctlRun RunShardctl(const std::string& shardctl, const std::vector<std::string>& args);

// The configuration's catalog (directory from the catalog) and shards (dsn,
// admin_dsn) as a shardctl TOML file in the temporary directory, named
// after `name` and this process; the caller removes it.
[[nodiscard]] std::filesystem::path WriteShardctlConfig(const ClusterConfig& config, const std::string& name);

}  // namespace shardkit::test
