// shardctl migrate [--to V] [--dry-run]   apply what is missing on every server: shardkit's own
//                                          migrations, then the application's (--sql-dir)
// shardctl migrate status [--json]         the server x version matrix of each set; exit 1 unless
//                                          every server is at one version of each
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/schema/migrate.hpp"

namespace {

using shardkit::MigrationState;

std::string Version(int v) {
  return fmt::format("{:03}", v);
}

std::string Cell(const shardkit::MigrationStatus& status, std::size_t server, const shardkit::Migration& m) {
  const MigrationState state = status.State(server, m.version);
  switch (state) {
    case MigrationState::kApplied:
      return "applied";
    case MigrationState::kPending:
      return "pending";
    case MigrationState::kFailed: {
      const auto* a = status.Servers()[server].Find(m.version);
      return a != nullptr && !a->transactional ? fmt::format("FAILED {}/{}", a->steps_done, a->steps_total)
                                               : std::string("FAILED");
    }
    case MigrationState::kChecksumMismatch:
      return "CHANGED";
    case MigrationState::kUnreachable:
      return "down";
    case MigrationState::kNotTargeted:
      return "-";
  }
  return "?";
}

nlohmann::json RolesJson(const shardkit::MigrationServer& server) {
  nlohmann::json roles = nlohmann::json::array();
  for (const auto role : server.roles) roles.push_back(std::string(shardkit::RoleName(role)));
  return roles;
}

nlohmann::json StatusJson(const shardkit::MigrationStatus& status) {
  const auto& set = status.Set();
  nlohmann::json migrations = nlohmann::json::array();
  for (const auto& m : set.All()) {
    nlohmann::json targets = nlohmann::json::array();
    for (const auto role : m.targets) targets.push_back(std::string(shardkit::RoleName(role)));
    migrations.push_back({{"version", m.version},
                          {"name", m.name},
                          {"file", m.file_name},
                          {"targets", targets},
                          {"transactional", m.transactional},
                          {"steps", m.steps.size()},
                          {"checksum", m.checksum},
                          {"partial", status.Partial(m.version)}});
  }
  nlohmann::json servers = nlohmann::json::array();
  for (std::size_t s = 0; s < status.Servers().size(); ++s) {
    const auto& server = status.Servers()[s];
    nlohmann::json cells = nlohmann::json::object();
    for (const auto& m : set.All()) {
      nlohmann::json cell = {{"state", std::string(shardkit::StateName(status.State(s, m.version)))}};
      if (const auto* a = server.Find(m.version)) {
        cell["applied_at"] = a->applied_at;
        cell["duration_ms"] = a->duration_ms;
        cell["applied_by"] = a->applied_by;
        cell["checksum"] = a->checksum;
        cell["success"] = a->success;
        cell["steps_done"] = a->steps_done;
        cell["steps_total"] = a->steps_total;
        if (!a->error.empty()) cell["error"] = a->error;
      }
      cells[Version(m.version)] = cell;
    }
    nlohmann::json invalid = nlohmann::json::array();
    for (const auto& index : server.invalid_indexes) {
      invalid.push_back({{"schema", index.schema},
                         {"index", index.index},
                         {"table", index.table},
                         {"being_built", index.being_built}});
    }
    const auto version = status.VersionOf(s);
    servers.push_back({{"name", server.server.name},
                       {"roles", RolesJson(server.server)},
                       {"dsn", server.server.dsn.Redacted()},
                       {"reachable", server.reachable},
                       {"error", server.error},
                       {"version", version ? nlohmann::json(*version) : nlohmann::json(nullptr)},
                       {"migrations", cells},
                       {"unknown_versions", status.UnknownVersions(s)},
                       {"invalid_indexes", invalid}});
  }
  return {{"set", std::string(set.Name())},
          {"origin", set.Origin()},
          {"latest_version", set.LatestVersion()},
          {"at_one_version", status.AtOneVersion()},
          {"up_to_date", status.UpToDate()},
          {"migrations", migrations},
          {"servers", servers},
          {"problems", status.Problems()}};
}

void PrintStatus(const shardkit::MigrationStatus& status) {
  const auto& set = status.Set();
  const auto& servers = status.Servers();
  fmt::print("migrations {} ({}): {} files, latest version {}\n", set.Name(), set.Origin(), set.All().size(),
             Version(set.LatestVersion()));
  std::string roles;
  for (const auto& s : servers)
    roles += fmt::format("{}{} ({})", roles.empty() ? "" : ", ", s.server.name, s.server.RoleList());
  fmt::print("servers    {}\n\n", roles);

  std::size_t file_width = 4, target_width = 7;
  for (const auto& m : set.All()) {
    file_width = std::max(file_width, m.file_name.size());
    target_width = std::max(target_width, m.TargetList().size() + (m.transactional ? 0 : 17));
  }
  std::vector<std::size_t> width;
  for (std::size_t s = 0; s < servers.size(); ++s) {
    std::size_t w = std::max<std::size_t>(servers[s].server.name.size(), 7);
    for (const auto& m : set.All()) w = std::max(w, Cell(status, s, m).size());
    width.push_back(w);
  }
  std::string header = fmt::format("{:<{}}  {:<{}}", "file", file_width, "targets", target_width);
  for (std::size_t s = 0; s < servers.size(); ++s) header += fmt::format("  {:<{}}", servers[s].server.name, width[s]);
  fmt::print("{}\n", header);
  for (const auto& m : set.All()) {
    const std::string targets = m.TargetList() + (m.transactional ? "" : " (no transaction)");
    std::string line = fmt::format("{:<{}}  {:<{}}", m.file_name, file_width, targets, target_width);
    for (std::size_t s = 0; s < servers.size(); ++s) line += fmt::format("  {:<{}}", Cell(status, s, m), width[s]);
    if (status.Partial(m.version)) line += "  <- on some servers only";
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
  std::string versions = fmt::format("{:<{}}  {:<{}}", "schema version", file_width, "", target_width);
  for (std::size_t s = 0; s < servers.size(); ++s) {
    const auto v = status.VersionOf(s);
    versions += fmt::format("  {:<{}}",
                            !servers[s].reachable ? std::string("?")
                            : v                   ? Version(*v)
                                                  : std::string("gaps"),
                            width[s]);
  }
  while (!versions.empty() && versions.back() == ' ') versions.pop_back();
  fmt::print("{}\n", versions);

  for (std::size_t s = 0; s < servers.size(); ++s) {
    for (const auto& index : servers[s].invalid_indexes) {
      fmt::print("{}: INVALID index {}.{} on {}{}\n", servers[s].server.name, index.schema, index.index, index.table,
                 index.being_built ? " (being built right now)" : "");
    }
  }
  const auto problems = status.Problems();
  if (!problems.empty()) {
    fmt::print("\nproblems:\n");
    for (const auto& p : problems) fmt::print("  {}\n", p);
  }
  fmt::print("\n");
  if (status.UpToDate()) {
    fmt::print("{}: every server ({}) is at version {}, the latest\n", set.Name(), servers.size(),
               Version(set.LatestVersion()));
  } else if (status.AtOneVersion()) {
    fmt::print("{}: every server ({}) is at version {}; newer migrations wait (shardctl migrate)\n", set.Name(),
               servers.size(), Version(*status.VersionOf(0)));
  } else {
    fmt::print("{}: the servers are NOT at one version\n", set.Name());
  }
}

nlohmann::json ReportJson(const shardkit::MigrationReport& report, const shardkit::MigrationSet& set) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : report.applied) {
    steps.push_back({{"server", s.server},
                     {"version", s.version},
                     {"ok", s.ok},
                     {"elapsed_ms", static_cast<double>(s.elapsed.count()) / 1000.0},
                     {"error", s.error}});
  }
  nlohmann::json plan = nlohmann::json::object();
  for (const auto& [server, versions] : report.plan) plan[server] = versions;
  return {{"set", std::string(set.Name())},
          {"origin", set.Origin()},
          {"dry_run", report.dry_run},
          {"ok", report.Ok()},
          {"plan", plan},
          {"applied", steps},
          {"left_behind", report.left_behind},
          {"stopped", report.stopped},
          {"elapsed_ms", static_cast<double>(report.elapsed.count()) / 1000.0}};
}

// Servers of the configuration; says on stderr which files no server takes
// (a configuration without [catalog] leaves the catalog's files unapplied).
std::vector<shardkit::MigrationServer> Servers(const CliContext& context, const shardkit::MigrationSet& set) {
  const auto config = shardkit::AtCurrentPrimaries(context.LoadConfig());
  auto servers = shardkit::MigrationServers(config);
  std::string orphans;
  for (const auto& m : set.All()) {
    const bool taken = std::any_of(servers.begin(), servers.end(), [&m](const auto& s) { return s.Takes(m); });
    if (!taken) orphans += (orphans.empty() ? "" : ", ") + m.file_name + " (targets " + m.TargetList() + ")";
  }
  if (!orphans.empty()) {
    const std::string missing = !config.catalog_dsn && !config.reference_dsn ? "[catalog] and [reference]"
                                : !config.catalog_dsn                        ? "[catalog]"
                                                                             : "[reference]";
    fmt::print(stderr, "shardctl: warning: no server of {} takes {}: it has no {} dsn\n", config.origin, orphans,
               missing);
  }
  return servers;
}

}  // namespace

void AddMigrateCommands(CLI::App& app, CliContext& context) {
  auto* migrate = app.add_subcommand(
      "migrate",
      "apply the missing schema migrations to every shard, the reference server and the catalog: shardkit's "
      "own, then your application's (--sql-dir DIR); `migrate status` shows the server x version matrices");
  migrate->require_subcommand(0, 1);
  auto to = std::make_shared<std::optional<int>>();
  auto dry_run = std::make_shared<bool>(false);
  auto lock_timeout_s = std::make_shared<double>(30.0);
  migrate->add_option("--to", *to, "apply up to this version only");
  migrate->add_flag("--dry-run", *dry_run, "say what would be applied where; change nothing");
  migrate
      ->add_option("--lock-timeout", *lock_timeout_s,
                   "seconds to wait for another migrator's lock on a server (default 30)")
      ->check(CLI::Range(0.0, 86400.0));
  auto* status_cmd = migrate->add_subcommand(
      "status",
      "the server x version matrix: applied, pending, failed, changed files, INVALID indexes; exit 1 "
      "unless every server is at one version");

  status_cmd->final_callback([&context] {
    bool at_one_version = true;
    nlohmann::json sets = nlohmann::json::array();
    for (const auto& set : context.LoadMigrations()) {
      const shardkit::Migrator migrator(set, Servers(context, set));
      const auto status = migrator.Status();
      at_one_version = at_one_version && status.AtOneVersion();
      if (context.json) {
        sets.push_back(StatusJson(status));
      } else {
        PrintStatus(status);
      }
    }
    if (context.json) fmt::print("{}\n", nlohmann::json{{"sets", sets}, {"at_one_version", at_one_version}}.dump(2));
    if (!at_one_version) throw shardkit::Error("the servers are not at one version (see above)");
  });

  migrate->final_callback([&context, migrate, status_cmd, to, dry_run, lock_timeout_s] {
    if (status_cmd->parsed()) return;
    (void)migrate;
    const auto sets = context.LoadMigrations();
    shardkit::MigratorOptions options;
    options.lock_timeout = std::chrono::milliseconds(static_cast<long long>(*lock_timeout_s * 1000.0));
    const bool json = context.json;
    if (!json) {
      options.on_event = [](const shardkit::MigrationEvent& e) {
        using Kind = shardkit::MigrationEvent::Kind;
        const double ms = static_cast<double>(e.elapsed.count()) / 1000.0;
        switch (e.kind) {
          case Kind::kApplied:
            fmt::print("  {:<10} applied {} ({:.1f} ms)\n", e.server, e.message, ms);
            break;
          case Kind::kFailed:
            fmt::print("  {:<10} FAILED {}: {}\n", e.server, Version(e.version), e.message);
            break;
          case Kind::kServerLeft:
            fmt::print("  {:<10} left behind: {}\n", e.server, e.message);
            break;
          case Kind::kLocked:
          case Kind::kStarted:
            break;
        }
        std::fflush(stdout);
      };
    }
    // shardkit's own set first: the application's files build on it. --to
    // limits the last set (the application's when there is one).
    nlohmann::json reports = nlohmann::json::array();
    for (std::size_t i = 0; i < sets.size(); ++i) {
      const auto& set = sets[i];
      if (!json) {
        fmt::print("migrations {} ({}): {} files, latest version {}\n", set.Name(), set.Origin(), set.All().size(),
                   Version(set.LatestVersion()));
      }
      shardkit::Migrator migrator(set, Servers(context, set), options);
      const auto report = migrator.Apply(i + 1 == sets.size() ? *to : std::nullopt, *dry_run);
      if (json) {
        reports.push_back(ReportJson(report, set));
      } else if (report.dry_run) {
        for (const auto& [server, versions] : report.plan) {
          std::string list;
          for (const int v : versions) list += (list.empty() ? "" : ", ") + set.Find(v)->file_name;
          fmt::print("  {:<10} {}\n", server,
                     versions.empty() ? std::string("nothing to apply") : "would apply " + list);
        }
        for (const auto& left : report.left_behind) fmt::print("  {}\n", left);
      } else {
        std::size_t servers = 0;
        for (const auto& [server, versions] : report.plan) servers += versions.empty() ? 0 : 1;
        fmt::print("migrate {}: {} applied on {} server{} in {:.2f} s{}\n", set.Name(), report.AppliedCount(), servers,
                   servers == 1 ? "" : "s", static_cast<double>(report.elapsed.count()) / 1e6,
                   report.AppliedCount() == 0 && report.Ok() ? " (every server was up to date)" : "");
      }
      if (!report.Ok() && json) fmt::print("{}\n", nlohmann::json{{"sets", reports}, {"ok", false}}.dump(2));
      RequireMigrated(report, set);
    }
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"sets", reports}, {"ok", true}}.dump(2));
    } else if (*dry_run) {
      fmt::print("dry run: nothing was changed\n");
    }
  });
}

void RequireMigrated(const shardkit::MigrationReport& report, const shardkit::MigrationSet& set) {
  if (report.Ok()) return;
  std::string why;
  for (const auto& left : report.left_behind) why += "\n  " + left;
  for (const auto& step : report.applied) {
    if (!step.ok)
      why += fmt::format("\n  {}: {} ({}) failed: {}", step.server, set.Find(step.version)->file_name, set.Name(),
                         step.error);
  }
  throw shardkit::MigrationError(fmt::format(
      "not every server was migrated ({} migrations){}{}\nrun shardctl migrate again once resolved; "
      "shardctl migrate status shows where each server is",
      set.Name(), why, report.stopped ? "\n  (stopped after the failed version: no server started a later one)" : ""));
}
