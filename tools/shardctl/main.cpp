// shardctl — look at and operate a shardkit cluster from the shell.
//
//   shardctl route 4242 4243 77777
//   shardctl my-orders 4242
//   shardctl shards --json
//   shardctl migrate [--to V] [--dry-run]      shardctl migrate status [--json]
//   shardctl verify [--json]
//   shardctl shards enroll                      shardctl ownership
//   shardctl move 7 --to 2                      shardctl move resume|abort|show 12
//   shardctl moves [--live]                     shardctl rebalance --plan|--apply [--shards 0,1] [--parallel 2]
//   shardctl placement-sim --nodes 4 --add 1
//   shardctl workers
//   shardctl failover shard1                   shardctl replica rebuild shard1 --from-old-primary --pgdata DIR
//
// Exit codes: 0 success, 1 a shardkit error (message on stderr), 2 bad usage.
// This file only wires the subcommands (commands.hpp) to their options
// (cli_context.hpp) and maps errors to exit codes.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli_context.hpp"
#include "commands.hpp"
#include "shardkit/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "shardctl: route customers, inspect shards, migrate and verify them, move buckets and rebalance, and "
      "generate global IDs for a shardkit cluster"};
  app.require_subcommand(1);
  app.fallthrough();  // global options after the subcommand too: shardctl verify --json
  CliContext context;
  app.add_option("--config", context.config_path,
                 "cluster configuration file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_flag("--json", context.json, "print data as JSON");
  app.add_option("--sql-dir", context.sql_dir,
                 "your application's migration files (NNN_name.sql), applied after shardkit's own (compiled in)");

  AddRouteCommands(app, context);
  AddShardsCommand(app, context);
  AddIdCommands(app);
  AddInitCommand(app, context);
  AddMigrateCommands(app, context);
  AddVerifyCommand(app, context);
  AddMoveCommands(app, context);
  AddOwnershipCommand(app, context);
  AddPlacementCommand(app, context);
  AddWorkersCommand(app, context);
  AddSqlCommand(app, context);
  AddPercentileCommand(app, context);
  AddFailoverCommand(app, context);
  AddRecoverCommand(app, context);
  AddReplicaCommands(app, context);
  AddLeasesCommand(app, context);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const ErrorPrinted& e) {  // reported already (shardctl sql --json)
    return e.code();
  } catch (const shardkit::ConfigError& e) {  // a bad configuration file is bad usage
    std::cerr << "shardctl: error: " << e.what() << "\n";
    return 2;
  } catch (const shardkit::SqlError& e) {  // psql's form: ERROR:  ... / LINE n: ... / caret
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const shardkit::Error& e) {
    std::cerr << "shardctl: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "shardctl: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
