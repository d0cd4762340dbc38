// The subcommands of shardctl, one file each; main.cpp wires them up.
#pragma once

#include "cli_context.hpp"

namespace CLI {
class App;
}

namespace shardkit {
struct SqlResult;
struct MigrationReport;
class MigrationSet;
}  // namespace shardkit

void AddRouteCommands(CLI::App& app, CliContext& context);           // route, my-orders
void AddShardsCommand(CLI::App& app, CliContext& context);           // shards
void AddIdCommands(CLI::App& app);                                   // id uuidv7|snowflake|decode
void AddInitCommand(CLI::App& app, CliContext& context);             // init
void AddMigrateCommands(CLI::App& app, CliContext& context);         // migrate, migrate status
void AddVerifyCommand(CLI::App& app, CliContext& context);           // verify
void AddMoveCommands(CLI::App& app, CliContext& context);            // move, move resume|abort|show, moves, rebalance
void AddShardsEnrollCommand(CLI::App& shards, CliContext& context);  // shards enroll
void AddOwnershipCommand(CLI::App& app, CliContext& context);        // ownership
void AddPlacementCommand(CLI::App& app, CliContext& context);        // placement-sim
void AddWorkersCommand(CLI::App& app, CliContext& context);          // workers
void AddSqlCommand(CLI::App& app, CliContext& context);              // sql
void AddPercentileCommand(CLI::App& app, CliContext& context);       // percentile
void AddFailoverCommand(CLI::App& app, CliContext& context);         // failover
void AddRecoverCommand(CLI::App& app, CliContext& context);          // recover
void AddReplicaCommands(CLI::App& app, CliContext& context);         // replica rebuild
void AddLeasesCommand(CLI::App& app, CliContext& context);           // leases

// Rows as psql aligns them (numbers right-aligned), with the row count.
void PrintAligned(const shardkit::SqlResult& result);
// Throws MigrationError naming every server left behind and failed step.
void RequireMigrated(const shardkit::MigrationReport& report, const shardkit::MigrationSet& set);
