// shardctl run by a test, on a configuration of its own (a scratch
// cluster's, replicas included) written to a temporary file: its exit
// status and what it printed; or SIGKILLed as soon as it prints a step, for
// tests that rerun a command stopped mid-way.
//
//   const auto r = test::RunShardctl(SHARDCTL_PATH, config, "--json failover shard0");
//   const auto k = test::RunShardctlKilledAt(SHARDCTL_PATH, config, "failover shard0", "promoted");
#pragma once

#include <filesystem>
#include <string>

#include "shardkit/config.hpp"

namespace shardkit::test {

// The configuration as a shardkit.toml (shards with admin_dsn and replicas,
// reference, catalog; the directory from the catalog).
[[nodiscard]] std::filesystem::path WriteConfigFile(const ClusterConfig& config, const std::string& stem);

struct ShardctlRun {
  int status = -1;  // its exit status (-1: a signal ended it)
  std::string out;  // stdout and stderr
};
[[nodiscard]] ShardctlRun RunShardctl(const std::string& shardctl, const ClusterConfig& config,
                                      const std::string& args);

struct ShardctlKilled {
  bool by_signal = false;  // false: it ended before printing the step
  std::string out;
};
// shardctl SIGKILLed as soon as it prints a line that starts with `step`
// and a space.
[[nodiscard]] ShardctlKilled RunShardctlKilledAt(const std::string& shardctl, const ClusterConfig& config,
                                                 const std::string& args, const std::string& step);

}  // namespace shardkit::test
