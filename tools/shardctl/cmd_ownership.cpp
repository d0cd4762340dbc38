// shardctl shards enroll [--replace]   make every shard fence the buckets the catalog's directory gives it
// shardctl ownership                   what each shard says it owns, against the catalog's directory
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

void AddShardsEnrollCommand(CLI::App& shards, CliContext& context) {
  auto* enroll = shards.add_subcommand(
      "enroll",
      "make every shard own (and fence) the buckets the catalog's directory gives it, and register it in "
      "the catalog; idempotent");
  auto replace = std::make_shared<bool>(false);
  auto skip_migrations = std::make_shared<bool>(false);
  enroll->add_flag("--replace", *replace,
                   "replace ownership that differs from the directory (an empty cluster only; refused during moves)");
  enroll->add_flag("--skip-migrations", *skip_migrations,
                   "do not require every shard at the latest version of the migrations");
  enroll->final_callback([&context, replace, skip_migrations] {
    const auto config = shardkit::AtCurrentPrimaries(context.LoadConfig());
    if (!config.catalog_dsn) {
      throw shardkit::ConfigError(
          "catalog.dsn", fmt::format("{} has no [catalog] dsn: the directory to enroll by lives there", config.origin));
    }
    if (!*skip_migrations) {
      // A shard receives buckets only at the current schema version.
      for (const shardkit::MigrationSet& set : context.LoadMigrations()) {
        const shardkit::Migrator migrator{set, shardkit::MigrationServers(config)};
        for (const auto& shard : config.shards) migrator.RequireUpToDate(shard.name);
      }
    }
    const auto enrolled = shardkit::EnrollShards(config, *replace);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : enrolled) {
      if (context.json) {
        out.push_back({{"shard", e.shard}, {"name", e.name}, {"owned", e.owned.Buckets()}});
      } else {
        fmt::print("shard {} ({}): owns {} ({} buckets), fenced\n", e.shard, e.name, e.owned.Ranges(), e.owned.Size());
      }
    }
    if (context.json) fmt::print("{}\n", nlohmann::json{{"shards", out}}.dump(2));
  });
}

void AddOwnershipCommand(CLI::App& app, CliContext& context) {
  auto* ownership =
      app.add_subcommand("ownership",
                         "what each shard owns, receives or gave away, against the catalog's directory; exit 1 on a "
                         "mismatch that no live move explains");
  ownership->final_callback([&context] {
    const auto config = shardkit::AtCurrentPrimaries(context.LoadConfig());
    const shardkit::BucketDirectory directory = shardkit::LoadCatalogDirectory(config);
    nlohmann::json out = {{"directory_version", directory.Version()}, {"shards", nlohmann::json::array()}};
    std::vector<std::string> problems;
    if (!context.json) fmt::print("catalog directory version {}\n", directory.Version());
    for (std::size_t i = 0; i < config.shards.size(); ++i) {
      const shardkit::ShardId s{static_cast<int>(i)};
      const auto& shard = config.shards[i];
      shardkit::ShardOwnership own;
      try {
        pqxx::connection c{shardkit::WithConnectTimeout(shard.dsn, config.pool.connect_timeout).Reveal()};
        own = shardkit::ReadOwnership(c);
      } catch (const std::exception& e) {
        problems.push_back(
            fmt::format("shard {} ({}) is unreachable: {}", s, shard.name, shardkit::RedactDsn(e.what())));
        continue;
      }
      const shardkit::BucketSet wanted = shardkit::BucketSet::Of(directory, s);
      const shardkit::BucketSet owned = own.InState(shardkit::OwnershipState::kOwned);
      bool moving = false;
      for (const auto& b : own.buckets) moving = moving || b.move_id.has_value();
      if (!own.enrolled_as) {
        problems.push_back(fmt::format("shard {} ({}) is not enrolled: run shardctl shards enroll", s, shard.name));
      } else if (*own.enrolled_as != s) {
        problems.push_back(fmt::format("shard {} ({}) is enrolled as shard {}", s, shard.name, *own.enrolled_as));
      } else if (owned != wanted && !moving) {
        problems.push_back(fmt::format("shard {} ({}) owns {} but the directory gives it {}", s, shard.name,
                                       owned.Ranges(), wanted.Ranges()));
      }
      if (const shardkit::BucketSet stray(own.fast_path.Bits() & ~owned.Bits()); !stray.Empty()) {
        problems.push_back(
            fmt::format("shard {} ({}): the fence's fast path admits buckets {} it does not own; run "
                        "SELECT shardkit_fence_sync() on it",
                        s, shard.name, stray.Ranges()));
      }
      nlohmann::json buckets = nlohmann::json::array();
      for (const auto& b : own.buckets) {
        if (b.state == shardkit::OwnershipState::kOwned && !b.move_id) continue;
        buckets.push_back({{"bucket", b.bucket},
                           {"state", std::string(shardkit::OwnershipStateName(b.state))},
                           {"new_owner", b.new_owner ? nlohmann::json(*b.new_owner) : nlohmann::json()},
                           {"move_id", b.move_id ? nlohmann::json(*b.move_id) : nlohmann::json()}});
      }
      out["shards"].push_back({{"shard", s},
                               {"name", shard.name},
                               {"enrolled", own.enrolled_as.has_value()},
                               {"owned", owned.Buckets()},
                               {"directory", wanted.Buckets()},
                               {"fast_path", own.fast_path.Buckets()},
                               {"moving", buckets}});
      if (!context.json) {
        fmt::print("shard {} ({}): owns {} ({} buckets){}{}\n", s, shard.name, owned.Ranges(), owned.Size(),
                   own.enrolled_as ? "" : "  NOT ENROLLED",
                   own.fast_path == owned ? ""
                                          : fmt::format("; fence fast path for {} (shardkit_fence_sync() marks the "
                                                        "rest)",
                                                        own.fast_path.Empty() ? "none" : own.fast_path.Ranges()));
        for (const auto& b : own.buckets) {
          if (b.state == shardkit::OwnershipState::kOwned && !b.move_id) continue;
          fmt::print("  bucket {:>2}: {}{}{}\n", b.bucket, shardkit::OwnershipStateName(b.state),
                     b.new_owner ? fmt::format(", new owner shard {}", *b.new_owner) : "",
                     b.move_id ? fmt::format(", move {}", *b.move_id) : "");
        }
      }
    }
    out["problems"] = problems;
    if (context.json) {
      fmt::print("{}\n", out.dump(2));
    } else {
      for (const auto& p : problems) fmt::print("PROBLEM {}\n", p);
    }
    if (!problems.empty()) throw shardkit::Error(fmt::format("{} ownership problem(s) (see above)", problems.size()));
  });
}
