// shardctl failover SHARD [--to REPLICA] [--force]: promote a replica of the
// shard and publish it as the primary (shardkit/topology/failover.hpp).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/routing/read_token.hpp"
#include "shardkit/topology/failover.hpp"

void AddFailoverCommand(CLI::App& app, CliContext& context) {
  auto* cmd = app.add_subcommand(
      "failover", "make a replica the shard's primary: fence the old primary, promote, publish in the catalog");
  auto shard = std::make_shared<std::string>();
  auto options = std::make_shared<shardkit::FailoverOptions>();
  auto timeout_ms = std::make_shared<long long>(options->catch_up_timeout.count());
  cmd->add_option("shard", *shard, "the shard's name (shardctl shards)")->required();
  cmd->add_option("--to", options->to, "the replica to promote (default: the one that has received the most WAL)");
  cmd->add_flag("--force", options->force,
                "go on when the old primary is unreachable (make sure it cannot come back as a primary first)");
  cmd->add_option("--catch-up-timeout-ms", *timeout_ms,
                  "how long the replica may take to replay the fenced primary's last position")
      ->capture_default_str();
  cmd->final_callback([shard, options, timeout_ms, &context] {
    const shardkit::ClusterConfig config = context.LoadConfig();
    options->catch_up_timeout = std::chrono::milliseconds(*timeout_ms);
    options->requested_by = "shardctl";
    if (!context.json) {
      options->on_step = [](const std::string& step, const std::string& detail) {
        fmt::print("{:<10} {}\n", step, detail);
        std::fflush(stdout);  // each step as it happens, also into a pipe
      };
    }
    const shardkit::FailoverReport r = shardkit::Failover(config, *shard, *options);
    if (context.json) {
      nlohmann::json replicas = nlohmann::json::array();
      for (const auto& replica : r.replicas) {
        replicas.push_back({{"name", replica.name}, {"follows", replica.follows}, {"detail", replica.detail}});
      }
      nlohmann::json out = {
          {"failover_id", r.failover_id},
          {"shard", r.shard},
          {"from", r.from_server},
          {"to", r.to_server},
          {"epoch", r.epoch},
          {"old_primary_fenced", r.old_primary_fenced},
          {"old_primary_lsn",
           r.old_primary_lsn ? nlohmann::json(shardkit::FormatLsn(*r.old_primary_lsn)) : nlohmann::json(nullptr)},
          {"promoted_at_lsn", shardkit::FormatLsn(r.promoted_at_lsn)},
          {"loss", r.loss},
          {"writes_paused_ms", r.writes_paused.count()},
          {"took_ms", r.took.count()},
          {"replicas", replicas},
          {"resumed_failover_id",
           r.resumed_failover_id ? nlohmann::json(*r.resumed_failover_id) : nlohmann::json(nullptr)}};
      fmt::print("{}\n", out.dump(2));
      return;
    }
    fmt::print(
        "\nshard {}: primary {} -> {} (epoch {}), in {} ms; writes paused {} ms{}\nloss: {}\n", r.shard, r.from_server,
        r.to_server, r.epoch, r.took.count(), r.writes_paused.count(),
        r.resumed_failover_id ? fmt::format("; finished failover {}, which had stopped", *r.resumed_failover_id) : "",
        r.loss);
  });
}
