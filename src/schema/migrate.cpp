// Applying migrations to the servers of a cluster (migrate.hpp: Migrator, MigrationServers).
#include "shardkit/schema/migrate.hpp"

#include <errno.h>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "pg/server_message.hpp"
#include "schema/migrate_internal.hpp"
#include "schema/migration_apply.hpp"
#include "schema/migration_history.hpp"
#include "schema/migration_lock.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace detail {

std::string VersionText(int version) {
  return fmt::format("{:03}", version);
}

std::string DescribeIndex(const InvalidIndex& index) {
  return fmt::format("{}.{} on {}", index.schema, index.index, index.table);
}

}  // namespace detail

using detail::ApplyInTransaction;
using detail::ApplyStepByStep;
using detail::CreateHistoryTable;
using detail::DescribeIndex;
using detail::ErrorText;
using detail::ReadServer;
using detail::StepOutcome;
using detail::TakeLock;
using detail::VersionText;

namespace {

using Clock = std::chrono::steady_clock;

std::string DefaultAppliedBy() {
  std::string user;
  if (const char* env = std::getenv("USER"); env != nullptr && *env != '\0') {
    user = env;
  } else if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr) {
    user = pw->pw_name;
  } else {
    user = std::to_string(::geteuid());
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return fmt::format("{}@{} {} (pid {})", user, host, program_invocation_short_name, ::getpid());
}

std::unique_ptr<pqxx::connection> Connect(const MigrationServer& server, std::chrono::milliseconds timeout,
                                          const std::string& application_name) {
  auto connection = std::make_unique<pqxx::connection>(WithConnectTimeout(server.dsn, timeout).Reveal());
  pqxx::nontransaction tx{*connection};
  tx.exec0("SET client_min_messages = warning");
  tx.exec_params("SELECT set_config('application_name', $1, false)", application_name.substr(0, 63));
  return connection;
}

}  // namespace

// --------------------------------------------------------------- servers

bool MigrationServer::Takes(const Migration& migration) const noexcept {
  return std::any_of(roles.begin(), roles.end(), [&](ServerRole r) { return migration.Targets(r); });
}

std::string MigrationServer::RoleList() const {
  std::string out;
  for (const ServerRole role : roles) out += (out.empty() ? "" : ", ") + std::string(RoleName(role));
  return out;
}

std::vector<MigrationServer> MigrationServers(const ClusterConfig& config) {
  std::vector<MigrationServer> servers;
  auto add = [&servers](const std::string& name, const Dsn& dsn, ServerRole role) {
    for (auto& s : servers) {
      if (s.dsn == dsn) {  // one database with two roles: one history, one lock
        if (std::find(s.roles.begin(), s.roles.end(), role) == s.roles.end()) s.roles.push_back(role);
        return;
      }
    }
    servers.push_back({name, dsn, {role}});
  };
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    add(config.shards[i].name.empty() ? fmt::format("shard{}", i) : config.shards[i].name, config.shards[i].dsn,
        ServerRole::kShard);
  }
  if (config.reference_dsn) add("reference", *config.reference_dsn, ServerRole::kReference);
  if (config.catalog_dsn) add("catalog", *config.catalog_dsn, ServerRole::kCatalog);
  return servers;
}

// --------------------------------------------------------------- report

bool MigrationReport::Ok() const noexcept {
  return left_behind.empty() && !stopped &&
         std::all_of(applied.begin(), applied.end(), [](const Step& s) { return s.ok; });
}

int MigrationReport::AppliedCount() const noexcept {
  return static_cast<int>(std::count_if(applied.begin(), applied.end(), [](const Step& s) { return s.ok; }));
}

// -------------------------------------------------------------- migrator

Migrator::Migrator(MigrationSet set, std::vector<MigrationServer> servers, MigratorOptions options)
    : set_(std::move(set)), servers_(std::move(servers)), options_(std::move(options)) {
  if (options_.applied_by.empty()) options_.applied_by = DefaultAppliedBy();
  std::set<std::string> names;
  for (const auto& s : servers_) {
    if (!names.insert(s.name).second) {
      throw MigrationError(fmt::format("two servers are named {}: give each shard its own name", s.name), s.name);
    }
  }
}

MigrationStatus Migrator::Status() const {
  std::vector<ServerMigrationStatus> statuses(servers_.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    statuses[i].server = servers_[i];
    threads.emplace_back([this, i, &statuses] {
      ServerMigrationStatus& status = statuses[i];
      try {
        auto connection = Connect(servers_[i], options_.connect_timeout, "shardkit migrate status");
        ReadServer(*connection, set_.Name(), status);
        status.reachable = true;
      } catch (const std::exception& e) {
        status.reachable = false;
        status.error = ErrorText(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  return MigrationStatus(set_, std::move(statuses));
}

void Migrator::RequireUpToDate(const std::string& server_name) const {
  const auto it =
      std::find_if(servers_.begin(), servers_.end(), [&](const MigrationServer& s) { return s.name == server_name; });
  if (it == servers_.end()) throw MigrationError(fmt::format("no server named {}", server_name), server_name);
  Migrator one(set_, {*it}, options_);
  const MigrationStatus status = one.Status();
  const ServerMigrationStatus& s = status.Servers().front();
  if (!s.reachable) {
    throw MigrationError(
        fmt::format("{} is unreachable ({}): its schema version cannot be checked", s.server.name, s.error),
        s.server.name);
  }
  std::vector<std::string> problems;
  for (const Migration& m : set_.All()) {
    const MigrationState state = status.State(0, m.version);
    if (state != MigrationState::kApplied && state != MigrationState::kNotTargeted) {
      problems.push_back(fmt::format("{} {}", m.file_name, StateName(state)));
    }
  }
  for (const int v : status.UnknownVersions(0)) problems.push_back(fmt::format("unknown version {}", VersionText(v)));
  for (const auto& index : s.invalid_indexes) {
    if (!index.being_built) problems.push_back("INVALID index " + DescribeIndex(index));
  }
  if (problems.empty()) return;
  std::string list;
  for (const auto& p : problems) list += (list.empty() ? "" : "; ") + p;
  throw MigrationError(fmt::format("{} does not have the current schema (version {} of {}): {}. Run shardctl "
                                   "migrate first",
                                   s.server.name, VersionText(set_.LatestVersion()), set_.Origin(), list),
                       s.server.name);
}

namespace {

// One server during a run: its connection (holding the lock) and history.
struct Session {
  const MigrationServer* server = nullptr;
  std::unique_ptr<pqxx::connection> connection;
  ServerMigrationStatus status;
  bool active = false;
};

// MigratorOptions::on_event, called from the migrating threads one at a time.
class EventSink {
 public:
  explicit EventSink(const std::function<void(const MigrationEvent&)>& on_event) : on_event_(on_event) {}

  void operator()(MigrationEvent::Kind kind, const std::string& server, int version, std::chrono::microseconds elapsed,
                  std::string message) {
    if (!on_event_) return;
    std::lock_guard lock(mutex_);
    on_event_(MigrationEvent{kind, server, version, elapsed, std::move(message)});
  }

 private:
  const std::function<void(const MigrationEvent&)>& on_event_;
  std::mutex mutex_;
};

// A session per server, connected everywhere at once; a server that does
// not answer is left behind.
std::vector<Session> ConnectAll(const std::vector<MigrationServer>& servers, const MigratorOptions& options,
                                MigrationReport& report, EventSink& emit) {
  std::vector<Session> sessions(servers.size());
  std::vector<std::string> errors(servers.size());
  std::vector<std::thread> threads;
  const std::string application = "shardkit migrate " + options.applied_by;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    sessions[i].server = &servers[i];
    sessions[i].status.server = servers[i];
    threads.emplace_back([&, i] {
      try {
        sessions[i].connection = Connect(servers[i], options.connect_timeout, application);
      } catch (const std::exception& e) {
        errors[i] = ErrorText(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (sessions[i].connection) continue;
    sessions[i].status.error = errors[i];
    report.left_behind.push_back(fmt::format("{}: unreachable ({})", servers[i].name, errors[i]));
    emit(MigrationEvent::Kind::kServerLeft, servers[i].name, 0, {}, errors[i]);
  }
  return sessions;
}

// Locks in one fixed order (the servers' order), so two migrators queue up
// instead of deadlocking; then reads each history under its lock. A dry run
// takes no lock.
void LockAndRead(std::vector<Session>& sessions, std::string_view set, std::chrono::milliseconds lock_timeout,
                 bool dry_run, MigrationReport& report, EventSink& emit) {
  std::map<int, std::string> locked_by_pid;
  for (Session& s : sessions) {
    if (!s.connection) continue;
    try {
      if (!dry_run) {
        TakeLock(*s.connection, *s.server, lock_timeout, locked_by_pid);
        locked_by_pid[s.connection->backendpid()] = s.server->name;
        emit(MigrationEvent::Kind::kLocked, s.server->name, 0, {}, "");
      }
      ReadServer(*s.connection, set, s.status);
      s.status.reachable = true;
      s.active = true;
    } catch (const pqxx::broken_connection& e) {
      s.connection.reset();
      s.status.error = ErrorText(e);
      report.left_behind.push_back(fmt::format("{}: connection lost ({})", s.server->name, s.status.error));
      emit(MigrationEvent::Kind::kServerLeft, s.server->name, 0, {}, s.status.error);
    }
  }
}

// The status as read under the locks; throws MigrationRefused on any blocker.
MigrationStatus StatusOrRefuse(const MigrationSet& set, const std::vector<Session>& sessions) {
  std::vector<ServerMigrationStatus> statuses;
  for (const Session& s : sessions) statuses.push_back(s.status);
  MigrationStatus status(set, std::move(statuses));
  if (auto blockers = status.Blockers(); !blockers.empty()) {
    std::string list;
    for (const auto& b : blockers) list += "\n  " + b;
    throw MigrationRefused(fmt::format("nothing applied: resolve first:{}", list), std::move(blockers));
  }
  return status;
}

// The plan: per server, what is missing up to the target (report.plan);
// returned per version, the sessions that need it.
std::map<int, std::vector<std::size_t>> Plan(const MigrationSet& set, const MigrationStatus& status,
                                             const std::vector<Session>& sessions, int target,
                                             MigrationReport& report) {
  std::map<int, std::vector<std::size_t>> by_version;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i].active) continue;
    std::vector<int> versions;
    for (const Migration& m : set.All()) {
      if (m.version > target) break;
      const MigrationState state = status.State(i, m.version);
      if (state == MigrationState::kPending || state == MigrationState::kFailed) {
        versions.push_back(m.version);
        by_version[m.version].push_back(i);
      }
    }
    report.plan.emplace_back(sessions[i].server->name, std::move(versions));
  }
  return by_version;
}

// The history table on every server of the run: created, or given its set
// column (a history from before the sets).
void CreateHistoryTables(std::vector<Session>& sessions, MigrationReport& report) {
  for (Session& s : sessions) {
    if (!s.active) continue;
    try {
      CreateHistoryTable(*s.connection);
    } catch (const pqxx::broken_connection& e) {
      s.active = false;
      s.connection.reset();
      report.left_behind.push_back(fmt::format("{}: connection lost ({})", s.server->name, ErrorText(e)));
    }
  }
}

// One version on one server (a thread of its own); the outcome goes into
// the report under `report_mutex`.
void ApplyOn(Session& session, std::string_view set, const Migration& m, const std::string& applied_by,
             std::mutex& report_mutex, MigrationReport& report, EventSink& emit) {
  const auto step_start = Clock::now();
  emit(MigrationEvent::Kind::kStarted, session.server->name, m.version, {}, m.file_name);
  const StepOutcome outcome =
      m.transactional ? ApplyInTransaction(*session.connection, set, m, applied_by)
                      : ApplyStepByStep(*session.connection, set, m, session.status.Find(m.version), applied_by);
  const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - step_start);
  {
    std::lock_guard lock(report_mutex);
    report.applied.push_back({session.server->name, m.version, outcome.ok, elapsed, outcome.error});
    if (outcome.lost) {
      session.active = false;
      report.left_behind.push_back(
          fmt::format("{}: lost at {} ({})", session.server->name, m.file_name, outcome.error));
    } else if (!outcome.ok) {
      report.stopped = true;
    }
  }
  if (outcome.ok) {
    emit(MigrationEvent::Kind::kApplied, session.server->name, m.version, elapsed, m.file_name);
  } else {
    emit(outcome.lost ? MigrationEvent::Kind::kServerLeft : MigrationEvent::Kind::kFailed, session.server->name,
         m.version, elapsed, outcome.error);
  }
  if (outcome.lost) session.connection.reset();
}

// Version by version; within a version every server at once. A statement
// that fails stops the run after its version.
void ApplyVersions(const MigrationSet& set, const std::map<int, std::vector<std::size_t>>& by_version,
                   std::vector<Session>& sessions, const std::string& applied_by, MigrationReport& report,
                   EventSink& emit) {
  std::mutex report_mutex;
  for (const auto& [version, servers] : by_version) {
    const Migration& m = *set.Find(version);
    std::vector<std::thread> threads;
    for (const std::size_t i : servers) {
      Session& s = sessions[i];
      if (!s.active) continue;
      threads.emplace_back([&, i] { ApplyOn(sessions[i], set.Name(), m, applied_by, report_mutex, report, emit); });
    }
    for (auto& t : threads) t.join();
    if (report.stopped) break;
  }
}

}  // namespace

MigrationReport Migrator::Apply(std::optional<int> to_version, bool dry_run) {
  const auto started = Clock::now();
  MigrationReport report;
  report.dry_run = dry_run;
  const int target = to_version.value_or(set_.LatestVersion());
  if (to_version && (*to_version < 0 || *to_version > set_.LatestVersion())) {
    throw MigrationError(fmt::format("--to {}: the migrations of {} go from {} to {}", *to_version, set_.Origin(),
                                     set_.All().empty() ? 0 : set_.All().front().version, set_.LatestVersion()));
  }
  EventSink emit{options_.on_event};
  std::vector<Session> sessions = ConnectAll(servers_, options_, report, emit);
  LockAndRead(sessions, set_.Name(), options_.lock_timeout, dry_run, report, emit);
  const MigrationStatus status = StatusOrRefuse(set_, sessions);
  const auto by_version = Plan(set_, status, sessions, target, report);
  if (dry_run) {
    report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
    return report;
  }
  CreateHistoryTables(sessions, report);
  ApplyVersions(set_, by_version, sessions, options_.applied_by, report, emit);
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  return report;
}

}  // namespace shardkit
