// shardctl replica rebuild SHARD (--server NAME | --from-old-primary) --pgdata DIR:
// make a server of the shard a streaming standby of its current primary
// again (shardkit/topology/replica_rebuild.hpp).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/topology/replica_rebuild.hpp"

void AddReplicaCommands(CLI::App& app, CliContext& context) {
  auto* replica = app.add_subcommand("replica", "a shard's replicas: replica rebuild");
  replica->require_subcommand(1);
  auto* cmd = replica->add_subcommand(
      "rebuild",
      "make a server of the shard (its deposed primary, or a replica that no longer follows) a streaming standby of "
      "the current primary: pg_rewind, else pg_basebackup; resumable");
  auto shard = std::make_shared<std::string>();
  auto options = std::make_shared<shardkit::ReplicaRebuildOptions>();
  auto timeout_ms = std::make_shared<long long>(options->stream_timeout.count());
  cmd->add_option("shard", *shard, "the shard's name (shardctl shards)")->required();
  cmd->add_option("--server", options->server, "the server to rebuild (its name in the configuration)");
  cmd->add_flag("--from-old-primary", options->from_old_primary,
                "rebuild the primary the shard's last failover deposed");
  cmd->add_option("--pgdata", options->pgdata, "the server's data directory, on this host")->required();
  cmd->add_option("--pg-bin", options->pg_bin,
                  "PostgreSQL's programs (default: pg_rewind's folder in PATH, else /usr/lib/postgresql/15/bin)");
  cmd->add_flag("--basebackup", options->basebackup, "a full copy (pg_basebackup), not pg_rewind");
  cmd->add_option("--stream-timeout-ms", *timeout_ms, "how long the started standby may take to stream")
      ->capture_default_str();
  cmd->final_callback([shard, options, timeout_ms, &context] {
    const shardkit::ClusterConfig config = context.LoadConfig();
    options->stream_timeout = std::chrono::milliseconds(*timeout_ms);
    options->requested_by = "shardctl";
    if (!context.json) {
      options->on_step = [](const std::string& step, const std::string& detail) {
        fmt::print("{:<10} {}\n", step, detail);
        std::fflush(stdout);  // each step as it happens, also into a pipe
      };
    }
    const shardkit::ReplicaRebuildReport r = shardkit::RebuildReplica(config, *shard, *options);
    if (context.json) {
      const auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
      nlohmann::json out = {{"rebuild_id", r.rebuild_id == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.rebuild_id)},
                            {"shard", r.shard},
                            {"server", r.server},
                            {"primary", r.primary},
                            {"pgdata", r.pgdata},
                            {"method", or_null(r.method)},
                            {"slot", r.slot},
                            {"timeline", r.timeline},
                            {"already_following", r.already_following},
                            {"detail", r.detail},
                            {"synchronous_standby_names", or_null(r.synchronous_standby_names)},
                            {"took_ms", r.took.count()},
                            {"resumed_rebuild_id",
                             r.resumed_rebuild_id ? nlohmann::json(*r.resumed_rebuild_id) : nlohmann::json(nullptr)}};
      fmt::print("{}\n", out.dump(2));
      return;
    }
    if (r.already_following) {
      fmt::print("{}\n", r.detail);
      return;
    }
    fmt::print(
        "\nshard {}: {} streams from the primary {} on timeline {} (by {}), in {} ms{}\n", r.shard, r.server, r.primary,
        r.timeline, r.method == "rewind" ? "pg_rewind" : "pg_basebackup", r.took.count(),
        r.resumed_rebuild_id ? fmt::format("; finished rebuild {}, which had stopped", *r.resumed_rebuild_id) : "");
    if (!r.synchronous_standby_names.empty()) {
      fmt::print("synchronous replication restored on {}: synchronous_standby_names = '{}'\n", r.primary,
                 r.synchronous_standby_names);
    }
  });
}
