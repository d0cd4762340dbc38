// shardctl init   set a cluster up from empty databases: migrate every server,
//                 give the catalog's directory the even split (if it has
//                 none), enroll every shard; run again, it changes nothing
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

void AddInitCommand(CLI::App& app, CliContext& context) {
  auto* init = app.add_subcommand(
      "init",
      "set the cluster up: apply the migrations on every server, store the even split of the buckets in the "
      "catalog's directory if it has none, enroll every shard; idempotent");
  init->final_callback([&context] {
    const auto config = shardkit::AtCurrentPrimaries(context.LoadConfig());
    if (!config.catalog_dsn) {
      throw shardkit::ConfigError(
          "catalog.dsn",
          fmt::format("{} has no [catalog] dsn: init stores the directory there; add a [catalog] section",
                      config.origin));
    }
    const bool json = context.json;

    // 1. Every server at the latest version of shardkit's migrations (the
    // catalog gets shard_directory), then of the application's.
    int applied = 0;
    nlohmann::json versions = nlohmann::json::object();
    for (const shardkit::MigrationSet& set : context.LoadMigrations()) {
      shardkit::Migrator migrator{set, shardkit::MigrationServers(config)};
      const shardkit::MigrationReport migrated = migrator.Apply();
      RequireMigrated(migrated, set);
      applied += migrated.AppliedCount();
      versions[std::string(set.Name())] = set.LatestVersion();
      if (!json) {
        fmt::print("migrations {} ({}): {} applied, every server at version {:03}\n", set.Name(), set.Origin(),
                   migrated.AppliedCount(), set.LatestVersion());
      }
    }

    // 2. The directory: the even split, unless the catalog has one (then it
    // must fit the configuration's shards: LoadCatalogDirectory checks).
    const int shard_count = static_cast<int>(config.shards.size());
    bool stored = false;
    {
      pqxx::connection catalog{shardkit::WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout).Reveal()};
      stored = shardkit::CompareAndSetDirectory(catalog, 0, shardkit::BucketDirectory::EvenSplit(shard_count));
    }
    const shardkit::BucketDirectory directory = [&] {
      try {
        return shardkit::LoadCatalogDirectory(config);
      } catch (const shardkit::DirectoryError& e) {
        throw shardkit::Error(fmt::format(
            "the catalog's directory does not fit the {} shard(s) of {} ({}); nothing was enrolled. List every "
            "shard the directory names in the configuration (shardctl init keeps a directory it finds)",
            shard_count, config.origin, e.what()));
      }
    }();
    if (!json) {
      fmt::print("directory: {} version {} over {} shards\n", stored ? "stored the even split," : "kept the catalog's,",
                 directory.Version(), shard_count);
    }

    // 3. Every shard owns and fences its buckets, registered in the catalog.
    const auto enrolled = shardkit::EnrollShards(config);
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& e : enrolled) {
      shards.push_back({{"shard", e.shard}, {"name", e.name}, {"owned", e.owned.Buckets()}});
      if (!json) {
        fmt::print("shard {} ({}): owns {} ({} buckets), fenced\n", e.shard, e.name, e.owned.Ranges(), e.owned.Size());
      }
    }
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"applied", applied},
                                        {"schema_versions", versions},
                                        {"directory_version", directory.Version()},
                                        {"directory_stored", stored},
                                        {"shards", shards}}
                             .dump(2));
    } else {
      fmt::print("init: ready ({} shards, directory version {})\n", shard_count, directory.Version());
    }
  });
}
