// shardctl — look at and operate a shardkit cluster from the shell.
//
//   shardctl route 4242 4243 77777
//   shardctl my-orders 4242
//   shardctl shards --json
//
// Exit codes: 0 success, 1 a shardkit error (message on stderr), 2 bad usage.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resolver.hpp"

shardkit::ClusterConfig CliContext::LoadConfig() const {
  return shardkit::LoadConfig(shardkit::ResolveConfigPath(config_path));
}

std::unique_ptr<shardkit::BucketShardResolver> CliContext::MakeResolver() const {
  return shardkit::BucketShardResolver::FromConfig(LoadConfig());
}

int main(int argc, char** argv) {
  CLI::App app{"shardctl: route customers, inspect shards and generate global IDs for a shardkit cluster"};
  app.require_subcommand(1);
  CliContext context;
  app.add_option("--config", context.config_path,
                 "cluster configuration file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_flag("--json", context.json, "print data as JSON");

  AddRouteCommands(app, context);
  AddShardsCommand(app, context);
  AddIdCommands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const shardkit::Error& e) {
    std::cerr << "shardctl: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "shardctl: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
