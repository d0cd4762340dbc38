// shardctl verify: the cluster against its directory (verify.hpp).
#include "shardkit/schema/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "pg/server_message.hpp"
#include "schema/verify_checks.hpp"
#include "schema/verify_scan.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit {

std::string_view FindingName(FindingKind kind) noexcept {
  switch (kind) {
    case FindingKind::kUnreachable:
      return "unreachable";
    case FindingKind::kDirectory:
      return "directory";
    case FindingKind::kSchemaVersion:
      return "schema version";
    case FindingKind::kMissingTable:
      return "missing table";
    case FindingKind::kTableDefinition:
      return "table definition";
    case FindingKind::kWrongBucket:
      return "wrong bucket";
    case FindingKind::kMisplacedRows:
      return "misplaced rows";
    case FindingKind::kOrphanBucket:
      return "orphan bucket";
    case FindingKind::kReferenceDiffers:
      return "reference table differs";
    case FindingKind::kCountDiffers:
      return "count differs";
    case FindingKind::kMoveInProgress:
      return "move in progress";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
using detail::AddFinding;
using detail::CheckCountsAgainstReference;
using detail::CheckMovesInProgress;
using detail::CheckReferenceTables;
using detail::CheckRowPlacement;
using detail::CheckShardedTablesPresent;
using detail::CheckTableDefinitions;
using detail::ErrorText;
using detail::ScannedServer;
using detail::ScanServers;
using detail::VerifyRun;

// The directory the rows are checked against; nullopt, and a finding, if it
// cannot be read.
std::optional<BucketDirectory> LoadDirectory(const ClusterConfig& config, VerifyReport& report) {
  std::optional<BucketDirectory> directory;
  report.directory_source = config.directory_source == DirectorySource::kCatalog ? "catalog" : "config";
  try {
    directory = config.directory_source == DirectorySource::kCatalog ? LoadCatalogDirectory(config) : config.directory;
    report.directory_version = directory->Version();
  } catch (const std::exception& e) {
    AddFinding(report, FindingKind::kDirectory, report.directory_source, "", std::nullopt, 0, "",
               fmt::format("{}: the directory cannot be read: {}; rows cannot be checked against it",
                           report.directory_source, ErrorText(e)));
  }
  return directory;
}

// A finding per server that could not be scanned; their names.
std::set<std::string> CheckReachable(VerifyRun& run) {
  std::set<std::string> unreachable;
  for (const auto& s : run.servers) {
    if (s.connection) continue;
    unreachable.insert(s.name);
    run.Add(FindingKind::kUnreachable, s.name, "", std::nullopt, 0, "",
            fmt::format("{}: cannot be checked: {}", s.name, s.error));
  }
  return unreachable;
}

// Migration versions: a finding per server with problems (one per
// unreachable server not found so already, added to `unreachable`), and
// report.schema_version when all are at one.
void CheckMigrationVersions(VerifyRun& run, const MigrationStatus& migration_status,
                            std::set<std::string>& unreachable) {
  const auto problems = migration_status.Problems();
  for (std::size_t i = 0; i < migration_status.Servers().size(); ++i) {
    const auto& server = migration_status.Servers()[i];
    const std::string& name = server.server.name;
    if (!server.reachable) {
      if (!unreachable.contains(name)) {
        unreachable.insert(name);
        run.Add(FindingKind::kUnreachable, name, "", std::nullopt, 0, "",
                fmt::format("{}: unreachable ({})", name, server.error));
      }
      continue;
    }
    std::string detail;
    for (const auto& p : problems) {
      if (p.starts_with(name + ":")) detail += (detail.empty() ? "" : "; ") + p.substr(name.size() + 2);
    }
    if (detail.empty()) continue;
    const auto version = migration_status.VersionOf(i);
    const MigrationSet& set = migration_status.Set();
    run.Add(
        FindingKind::kSchemaVersion, name, "", std::nullopt, 0, "",
        fmt::format("{}: {} schema version {} of {}: {}", name, set.Name(),
                    version ? fmt::format("{:03}", *version) : "?", fmt::format("{:03}", set.LatestVersion()), detail));
  }
  // The last set's (the application's, after shardkit's own).
  if (migration_status.AtOneVersion()) run.report.schema_version = migration_status.VersionOf(0);
}

ServerCounts CountsOf(const ScannedServer& s) {
  ServerCounts counts;
  counts.server = s.name;
  counts.shard = s.shard;
  counts.reachable = s.connection != nullptr;
  counts.elapsed = s.elapsed;
  for (const auto& scan : s.scans) counts.tables.push_back(scan.counts);
  return counts;
}

// The tables registered with shardkit_reference_table (sql/038), as the
// first shard that answers lists them; none when no shard answers (the
// scan then reports the unreachable servers).
std::vector<std::string> RegisteredReferenceTables(const ClusterConfig& config, std::chrono::milliseconds timeout) {
  for (const ShardConfig& shard : config.shards) {
    try {
      pqxx::connection c{WithConnectTimeout(shard.dsn, timeout).Reveal()};
      pqxx::read_transaction tx{c};
      if (!tx.exec1("SELECT to_regclass('shardkit_reference_tables') IS NOT NULL")[0].as<bool>()) return {};
      std::vector<std::string> tables;
      for (const auto& row : tx.exec("SELECT table_name::text FROM shardkit_reference_tables ORDER BY 1")) {
        tables.emplace_back(row[0].c_str());
      }
      return tables;
    } catch (const std::exception&) {
      continue;  // the next shard
    }
  }
  return {};
}

}  // namespace

VerifyReport VerifyCluster(const ClusterConfig& as_written, const VerifyOptions& given) {
  const auto started = Clock::now();
  const ClusterConfig config = AtCurrentPrimaries(as_written);
  VerifyOptions options = given;
  if (!options.reference_tables) {
    options.reference_tables = config.reference_tables;
    for (std::string& table : RegisteredReferenceTables(config, options.connect_timeout)) {
      auto& tables = *options.reference_tables;
      if (std::find(tables.begin(), tables.end(), table) == tables.end()) tables.push_back(std::move(table));
    }
  }
  VerifyReport report;
  report.shard_count = static_cast<int>(config.shards.size());
  report.reference_tables = *options.reference_tables;

  // Migration versions, while the servers are scanned.
  std::vector<MigrationStatus> migration_statuses;
  std::thread migration_thread;
  if (!options.migrations.empty()) {
    migration_thread = std::thread([&] {
      MigratorOptions migrator_options;
      migrator_options.connect_timeout = options.connect_timeout;
      for (const MigrationSet& set : options.migrations) {
        const Migrator migrator(set, MigrationServers(config), migrator_options);
        migration_statuses.push_back(migrator.Status());
      }
    });
  }

  const std::optional<BucketDirectory> directory = LoadDirectory(config, report);
  std::vector<ScannedServer> servers = ScanServers(config, options);
  const bool count_reference = !options.mirrored_tables.empty() && config.reference_dsn.has_value();
  VerifyRun run{config, options, servers, directory, report, count_reference};
  std::set<std::string> unreachable = CheckReachable(run);
  CheckShardedTablesPresent(run);
  CheckTableDefinitions(run);
  const std::set<int> in_motion = CheckMovesInProgress(run);
  CheckRowPlacement(run, in_motion);
  CheckCountsAgainstReference(run, in_motion);
  CheckReferenceTables(run);
  if (migration_thread.joinable()) migration_thread.join();
  for (const MigrationStatus& status : migration_statuses) CheckMigrationVersions(run, status, unreachable);

  for (const auto& s : servers) report.servers.push_back(CountsOf(s));
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  return report;
}

}  // namespace shardkit
