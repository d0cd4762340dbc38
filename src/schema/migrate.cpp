// Applying migrations to the servers of a cluster, and their status (migrate.hpp).
#include "shardkit/schema/migrate.hpp"

#include <errno.h>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;

// pg_advisory_lock key of the migrator: "SHKMIGRT". Advisory locks are per
// database, so this is one lock per server.
constexpr std::int64_t kLockKey = 0x53484B4D49475254;

constexpr const char* kHistoryTable = "shardkit_migrations";
constexpr const char* kHistoryDdl = R"(
CREATE TABLE IF NOT EXISTS shardkit_migrations (
  version       integer     PRIMARY KEY CHECK (version >= 1),
  name          text        NOT NULL,
  checksum      text        NOT NULL,
  transactional boolean     NOT NULL,
  success       boolean     NOT NULL,
  steps_done    integer     NOT NULL DEFAULT 0,
  steps_total   integer     NOT NULL DEFAULT 1,
  applied_at    timestamptz NOT NULL DEFAULT now(),
  duration_ms   double precision,
  applied_by    text        NOT NULL,
  db_user       text        NOT NULL DEFAULT current_user,
  error         text
);
COMMENT ON TABLE shardkit_migrations IS
  'shardkit schema migrations applied to this database (shardctl migrate): one row per version; success = false: the last attempt failed, steps_done says how far a non-transactional one got';
)";

constexpr const char* kUpsertHistory = R"(
INSERT INTO shardkit_migrations AS h (version, name, checksum, transactional, success, steps_done, steps_total,
                                      applied_at, duration_ms, applied_by, db_user, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8, $9, current_user, NULLIF($10, ''))
ON CONFLICT (version) DO UPDATE SET
  name = EXCLUDED.name, checksum = EXCLUDED.checksum, transactional = EXCLUDED.transactional,
  success = EXCLUDED.success, steps_done = EXCLUDED.steps_done, steps_total = EXCLUDED.steps_total,
  applied_at = EXCLUDED.applied_at, duration_ms = EXCLUDED.duration_ms, applied_by = EXCLUDED.applied_by,
  db_user = EXCLUDED.db_user, error = EXCLUDED.error
)";

constexpr const char* kReadHistory = R"(
SELECT version, name, checksum, success, transactional, steps_done, steps_total,
       to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       coalesce(duration_ms, 0), applied_by, coalesce(error, '')
FROM shardkit_migrations ORDER BY version
)";

// Invalid indexes of this database; one that a CREATE INDEX is building
// right now is invalid too until it finishes.
constexpr const char* kInvalidIndexes = R"(
SELECT n.nspname, ic.relname, t.relname,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = ic.relnamespace
WHERE NOT i.indisvalid
ORDER BY 1, 2
)";

std::string OneLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string ErrorText(const std::exception& e) { return OneLine(RedactDsn(e.what())); }

std::string VersionText(int version) { return fmt::format("{:03}", version); }

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

void ReadServer(pqxx::connection_base& connection, ServerMigrationStatus& out) {
  pqxx::read_transaction tx{connection};
  out.history.clear();
  out.invalid_indexes.clear();
  out.has_history = tx.exec1("SELECT to_regclass('shardkit_migrations') IS NOT NULL")[0].as<bool>();
  if (out.has_history) {
    for (const auto& row : tx.exec(kReadHistory)) {
      AppliedMigration a;
      a.version = row[0].as<int>();
      a.name = row[1].as<std::string>();
      a.checksum = row[2].as<std::string>();
      a.success = row[3].as<bool>();
      a.transactional = row[4].as<bool>();
      a.steps_done = row[5].as<int>();
      a.steps_total = row[6].as<int>();
      a.applied_at = row[7].as<std::string>();
      a.duration_ms = row[8].as<double>();
      a.applied_by = row[9].as<std::string>();
      a.error = row[10].as<std::string>();
      out.history.push_back(std::move(a));
    }
  }
  for (const auto& row : tx.exec(kInvalidIndexes)) {
    out.invalid_indexes.push_back(
        {row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<std::string>(), row[3].as<bool>()});
  }
  tx.commit();
}

// For messages that show SQL to run: plain lower-case names as they are,
// anything else in double quotes.
std::string QuoteIdent(const std::string& name) {
  const bool plain = !name.empty() && (std::islower(static_cast<unsigned char>(name[0])) != 0 || name[0] == '_') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::islower(static_cast<unsigned char>(c)) != 0 ||
                              std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_';
                     });
  if (plain) return name;
  std::string out = "\"";
  for (const char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string DescribeIndex(const InvalidIndex& index) {
  return fmt::format("{}.{} on {}", index.schema, index.index, index.table);
}

// Who holds the migration lock on this database, for the message.
struct Holder {
  int pid = 0;
  std::string text;
};

Holder LockHolder(pqxx::connection_base& connection) {
  try {
    pqxx::nontransaction tx{connection};
    const auto rows = tx.exec_params(
        "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''), "
        "coalesce(host(a.client_addr), 'local socket'), "
        "to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = $1::oid AND l.objid = $2::oid",
        std::to_string(static_cast<std::uint64_t>(kLockKey) >> 32),
        std::to_string(static_cast<std::uint64_t>(kLockKey) & 0xFFFFFFFFU));
    if (rows.empty()) return {0, "the holder has just let go"};
    const auto& r = rows[0];
    return {r[0].as<int>(),
            fmt::format("held by pid {}, application '{}', user {}, from {}, connected since {} UTC", r[0].as<int>(),
                        r[1].as<std::string>(), r[2].as<std::string>(), r[3].as<std::string>(),
                        r[4].as<std::string>())};
  } catch (const std::exception& e) {
    return {0, "holder unknown: " + ErrorText(e)};
  }
}

// `mine`: backend pid -> server name of the sessions this run has locked
// already. If one of them holds this lock, two configured servers are one
// database: waiting would only time out.
void TakeLock(pqxx::connection_base& connection, const MigrationServer& server, std::chrono::milliseconds timeout,
              const std::map<int, std::string>& mine) {
  bool locked = false;
  {
    pqxx::nontransaction tx{connection};
    locked = tx.exec_params1("SELECT pg_try_advisory_lock($1)", kLockKey)[0].as<bool>();
  }
  if (!locked) {
    const Holder holder = LockHolder(connection);
    if (const auto it = mine.find(holder.pid); it != mine.end()) {
      throw MigrationError(fmt::format("{} and {} are the same database (this run holds its migration lock through "
                                       "{}): give one database one connection string in the configuration, so it "
                                       "is one server with both roles",
                                       server.name, it->second, it->second),
                           server.name);
    }
  }
  try {
    if (!locked && timeout.count() > 0) {
      pqxx::nontransaction tx{connection};
      tx.exec0(fmt::format("SET lock_timeout = {}", timeout.count()));
      tx.exec_params("SELECT pg_advisory_lock($1)", kLockKey);
      tx.exec0("RESET lock_timeout");
      locked = true;
    }
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() != "55P03") throw;  // lock_not_available: the timeout
  }
  if (!locked) {
    throw MigrationError(fmt::format("{}: another migrator holds the migration lock ({}); waited {} ms. Let it "
                                     "finish and run again, or wait longer (--lock-timeout)",
                                     server.name, LockHolder(connection).text, timeout.count()),
                         server.name);
  }
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

// ---------------------------------------------------------------- status

std::string_view StateName(MigrationState state) noexcept {
  switch (state) {
    case MigrationState::kNotTargeted:
      return "-";
    case MigrationState::kApplied:
      return "applied";
    case MigrationState::kPending:
      return "pending";
    case MigrationState::kFailed:
      return "failed";
    case MigrationState::kChecksumMismatch:
      return "checksum mismatch";
    case MigrationState::kUnreachable:
      return "unreachable";
  }
  return "?";
}

const AppliedMigration* ServerMigrationStatus::Find(int version) const noexcept {
  for (const auto& a : history) {
    if (a.version == version) return &a;
  }
  return nullptr;
}

MigrationStatus::MigrationStatus(MigrationSet set, std::vector<ServerMigrationStatus> servers)
    : set_(std::move(set)), servers_(std::move(servers)) {}

MigrationState MigrationStatus::State(std::size_t server, int version) const {
  const ServerMigrationStatus& s = servers_.at(server);
  const Migration* m = set_.Find(version);
  if (m == nullptr || !s.server.Takes(*m)) return MigrationState::kNotTargeted;
  if (!s.reachable) return MigrationState::kUnreachable;
  const AppliedMigration* a = s.Find(version);
  if (a == nullptr) return MigrationState::kPending;
  const bool same = a->checksum == m->checksum;
  if (a->success) return same ? MigrationState::kApplied : MigrationState::kChecksumMismatch;
  // A failed transactional attempt left nothing behind; a failed step by step
  // one did, up to steps_done: then the file must not have changed.
  if (!a->transactional && a->steps_done > 0 && !same) return MigrationState::kChecksumMismatch;
  return MigrationState::kFailed;
}

std::optional<int> MigrationStatus::VersionOf(std::size_t server) const {
  if (!servers_.at(server).reachable) return std::nullopt;
  int version = 0;
  bool complete = true;
  for (const Migration& m : set_.All()) {
    const MigrationState state = State(server, m.version);
    if (complete) {
      if (state == MigrationState::kNotTargeted || state == MigrationState::kApplied) {
        version = m.version;
      } else {
        complete = false;
      }
    } else if (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) {
      return std::nullopt;  // a gap: something later is applied
    }
  }
  return version;
}

std::vector<int> MigrationStatus::UnknownVersions(std::size_t server) const {
  std::vector<int> unknown;
  for (const auto& a : servers_.at(server).history) {
    if (set_.Find(a.version) == nullptr && (a.success || a.steps_done > 0)) unknown.push_back(a.version);
  }
  return unknown;
}

bool MigrationStatus::Partial(int version) const {
  bool some = false, missing = false;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const MigrationState state = State(s, version);
    if (state == MigrationState::kNotTargeted) continue;
    if (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) {
      some = true;
    } else {
      missing = true;
    }
  }
  return some && missing;
}

bool MigrationStatus::AtOneVersion() const {
  std::optional<int> common;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const auto version = VersionOf(s);
    if (!version || (common && *common != *version)) return false;
    common = version;
    if (!UnknownVersions(s).empty()) return false;
    for (const auto& index : servers_[s].invalid_indexes) {
      if (!index.being_built) return false;
    }
    for (const Migration& m : set_.All()) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kFailed || state == MigrationState::kChecksumMismatch) return false;
    }
  }
  return true;
}

bool MigrationStatus::UpToDate() const {
  if (!AtOneVersion()) return false;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    if (VersionOf(s) != set_.LatestVersion()) return false;
  }
  return true;
}

std::vector<std::string> MigrationStatus::Blockers() const {
  std::vector<std::string> out;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const ServerMigrationStatus& server = servers_[s];
    if (!server.reachable) continue;
    for (const Migration& m : set_.All()) {
      if (State(s, m.version) != MigrationState::kChecksumMismatch) continue;
      const AppliedMigration* a = server.Find(m.version);
      out.push_back(fmt::format(
          "{}: {} changed after it was applied (applied checksum {}, the file's is now {}): restore the file as "
          "it was applied and put the change into a new migration file; applied files are never re-run",
          server.server.name, m.file_name, a->checksum.substr(0, 12), m.checksum.substr(0, 12)));
    }
    for (const int version : UnknownVersions(s)) {
      const AppliedMigration* a = server.Find(version);
      out.push_back(fmt::format("{}: version {} ({}) is applied there but no file in {} describes it: migrate with "
                                "the migration files of the release that applied it",
                                server.server.name, VersionText(version), a->name, set_.Directory().string()));
    }
    for (const auto& index : server.invalid_indexes) {
      if (index.being_built) continue;
      out.push_back(fmt::format("{}: INVALID index {} (left by a failed CREATE INDEX CONCURRENTLY): drop it with "
                                "DROP INDEX CONCURRENTLY {}.{}, remove the cause, then run the migration again",
                                server.server.name, DescribeIndex(index), QuoteIdent(index.schema),
                                QuoteIdent(index.index)));
    }
  }
  return out;
}


std::vector<std::string> MigrationStatus::Problems() const {
  std::vector<std::string> out;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const ServerMigrationStatus& server = servers_[s];
    const std::string& name = server.server.name;
    if (!server.reachable) {
      out.push_back(fmt::format("{}: unreachable ({})", name, server.error));
      continue;
    }
    std::vector<std::string> pending;
    for (const Migration& m : set_.All()) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kPending) pending.push_back(VersionText(m.version));
      if (state == MigrationState::kFailed) {
        const AppliedMigration* a = server.Find(m.version);
        out.push_back(
            a->transactional
                ? fmt::format("{}: {} failed at {} (nothing of it applied): {}", name, m.file_name, a->applied_at,
                              a->error)
                : fmt::format("{}: {} failed at step {} of {} at {} (steps 1-{} applied): {}", name, m.file_name,
                              a->steps_done + 1, a->steps_total, a->applied_at, a->steps_done, a->error));
      }
    }
    if (!pending.empty()) {
      std::string list;
      for (const auto& v : pending) list += (list.empty() ? "" : ", ") + v;
      const auto version = VersionOf(s);
      out.push_back(fmt::format("{}: {} pending: {}{}", name, pending.size() == 1 ? "1 migration" : fmt::format("{} migrations", pending.size()), list,
                                version ? fmt::format(" (at version {})", VersionText(*version)) : std::string(" (with gaps)")));
    }
  }
  for (const Migration& m : set_.All()) {
    if (!Partial(m.version)) continue;
    std::string have, lack;
    for (std::size_t s = 0; s < servers_.size(); ++s) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kNotTargeted) continue;
      std::string& list = (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) ? have : lack;
      list += (list.empty() ? "" : ", ") + servers_[s].server.name;
    }
    out.push_back(fmt::format("{} is applied on some servers only: on {}, not on {}", m.file_name, have, lack));
  }
  for (auto& blocker : Blockers()) out.push_back(std::move(blocker));
  return out;
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
        ReadServer(*connection, status);
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
  const auto it = std::find_if(servers_.begin(), servers_.end(),
                               [&](const MigrationServer& s) { return s.name == server_name; });
  if (it == servers_.end()) throw MigrationError(fmt::format("no server named {}", server_name), server_name);
  Migrator one(set_, {*it}, options_);
  const MigrationStatus status = one.Status();
  const ServerMigrationStatus& s = status.Servers().front();
  if (!s.reachable) {
    throw MigrationError(fmt::format("{} is unreachable ({}): its schema version cannot be checked", s.server.name,
                                     s.error),
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
  throw MigrationError(fmt::format("{} does not have the current schema (version {}): {}. Run shardctl migrate "
                                   "first",
                                   s.server.name, VersionText(set_.LatestVersion()), list),
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

struct StepOutcome {
  bool ok = false;
  bool lost = false;  // the connection is gone: leave the server behind
  std::string error;
};

// A server shutting down ends sessions with an error (57P01...) before the
// connection drops; either way this server is gone for this run.
bool ConnectionGone(pqxx::connection_base& c, const std::exception& e) {
  if (!c.is_open()) return true;
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string& state = sql->sqlstate();
    return state.starts_with("57P") || state.starts_with("08");
  }
  return false;
}

void RecordFailure(pqxx::connection_base& c, const Migration& m, bool transactional, int steps_done,
                   double duration_ms, const std::string& applied_by, const std::string& error) {
  pqxx::work tx{c, "record failed migration"};
  tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, transactional, false, steps_done,
                  static_cast<int>(m.steps.size()), duration_ms, applied_by, error);
  tx.commit();
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

StepOutcome ApplyInTransaction(pqxx::connection_base& c, const Migration& m, const std::string& applied_by) {
  const auto start = Clock::now();
  StepOutcome out;
  try {
    pqxx::work tx{c, "migration"};
    tx.exec(m.sql);
    tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, true, true, 1, 1, MsSince(start), applied_by,
                    std::string());
    tx.commit();
    out.ok = true;
    return out;
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error = "connection lost: " + ErrorText(e);
    return out;
  } catch (const pqxx::in_doubt_error& e) {
    // The history row commits with the file: the next run's status tells.
    out.lost = true;
    out.error = "connection lost during COMMIT (the next run sees whether it committed): " + ErrorText(e);
    return out;
  } catch (const std::exception& e) {
    out.error = ErrorText(e);
    if (ConnectionGone(c, e)) {
      out.lost = true;
      return out;
    }
  }
  try {
    RecordFailure(c, m, true, 0, MsSince(start), applied_by, out.error);
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error += "; then the connection was lost: " + ErrorText(e);
  } catch (const std::exception& e) {
    out.error += "; recording the failure failed too: " + ErrorText(e);
  }
  return out;
}

StepOutcome ApplyStepByStep(pqxx::connection_base& c, const Migration& m, const AppliedMigration* previous,
                            const std::string& applied_by) {
  const auto start = Clock::now();
  StepOutcome out;
  const int total = static_cast<int>(m.steps.size());
  // Resume after the steps a failed attempt of this very file completed.
  int done = previous != nullptr && !previous->success && previous->checksum == m.checksum
                 ? std::clamp(previous->steps_done, 0, total)
                 : 0;
  try {
    {
      pqxx::nontransaction tx{c, "migration start"};
      tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, false, false, done, total, 0.0, applied_by,
                      std::string("running"));
    }
    for (; done < total; ++done) {
      try {
        pqxx::nontransaction tx{c, "migration step"};
        tx.exec(m.steps[static_cast<std::size_t>(done)]);
      } catch (const pqxx::broken_connection&) {
        throw;
      } catch (const std::exception& e) {
        out.error = fmt::format("step {} of {}: {}", done + 1, total, ErrorText(e));
        if (ConnectionGone(c, e)) {
          out.lost = true;
          return out;
        }
        ServerMigrationStatus state;
        ReadServer(c, state);
        for (const auto& index : state.invalid_indexes) {
          if (!index.being_built) out.error += fmt::format("; INVALID index {} left behind", DescribeIndex(index));
        }
        RecordFailure(c, m, false, done, MsSince(start), applied_by, out.error);
        return out;
      }
      pqxx::nontransaction tx{c, "migration progress"};
      tx.exec_params0("UPDATE shardkit_migrations SET steps_done = $2 WHERE version = $1", m.version, done + 1);
    }
    pqxx::nontransaction tx{c, "migration done"};
    tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, false, true, total, total, MsSince(start),
                    applied_by, std::string());
    out.ok = true;
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error = fmt::format("connection lost at step {} of {}: {}", done + 1, total, ErrorText(e));
  } catch (const std::exception& e) {
    out.error = fmt::format("step {} of {}: {}", done + 1, total, ErrorText(e));
  }
  return out;
}

}  // namespace

MigrationReport Migrator::Apply(std::optional<int> to_version, bool dry_run) {
  const auto started = Clock::now();
  MigrationReport report;
  report.dry_run = dry_run;
  const int target = to_version.value_or(set_.LatestVersion());
  if (to_version && (*to_version < 0 || *to_version > set_.LatestVersion())) {
    throw MigrationError(fmt::format("--to {}: the migrations in {} go from {} to {}", *to_version,
                                     set_.Directory().string(),
                                     set_.All().empty() ? 0 : set_.All().front().version, set_.LatestVersion()));
  }
  std::mutex event_mutex;
  auto emit = [&](MigrationEvent::Kind kind, const std::string& server, int version, std::chrono::microseconds elapsed,
                  std::string message) {
    if (!options_.on_event) return;
    std::lock_guard lock(event_mutex);
    options_.on_event(MigrationEvent{kind, server, version, elapsed, std::move(message)});
  };

  // Connect everywhere at once.
  std::vector<Session> sessions(servers_.size());
  {
    std::vector<std::string> errors(servers_.size());
    std::vector<std::thread> threads;
    const std::string application = "shardkit migrate " + options_.applied_by;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      sessions[i].server = &servers_[i];
      sessions[i].status.server = servers_[i];
      threads.emplace_back([&, i] {
        try {
          sessions[i].connection = Connect(servers_[i], options_.connect_timeout, application);
        } catch (const std::exception& e) {
          errors[i] = ErrorText(e);
        }
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (sessions[i].connection) continue;
      sessions[i].status.error = errors[i];
      report.left_behind.push_back(fmt::format("{}: unreachable ({})", servers_[i].name, errors[i]));
      emit(MigrationEvent::Kind::kServerLeft, servers_[i].name, 0, {}, errors[i]);
    }
  }

  // Lock in one fixed order (the servers' order), so two migrators queue up
  // instead of deadlocking; then read each history under its lock.
  std::map<int, std::string> locked_by_pid;
  for (Session& s : sessions) {
    if (!s.connection) continue;
    try {
      if (!dry_run) {
        TakeLock(*s.connection, *s.server, options_.lock_timeout, locked_by_pid);
        locked_by_pid[s.connection->backendpid()] = s.server->name;
        emit(MigrationEvent::Kind::kLocked, s.server->name, 0, {}, "");
      }
      ReadServer(*s.connection, s.status);
      s.status.reachable = true;
      s.active = true;
    } catch (const pqxx::broken_connection& e) {
      s.connection.reset();
      s.status.error = ErrorText(e);
      report.left_behind.push_back(fmt::format("{}: connection lost ({})", s.server->name, s.status.error));
      emit(MigrationEvent::Kind::kServerLeft, s.server->name, 0, {}, s.status.error);
    }
  }

  std::vector<ServerMigrationStatus> statuses;
  for (const Session& s : sessions) statuses.push_back(s.status);
  const MigrationStatus status(set_, std::move(statuses));
  if (auto blockers = status.Blockers(); !blockers.empty()) {
    std::string list;
    for (const auto& b : blockers) list += "\n  " + b;
    throw MigrationRefused(fmt::format("nothing applied: resolve first:{}", list), std::move(blockers));
  }

  // The plan: per server, what is missing up to the target.
  std::map<int, std::vector<std::size_t>> by_version;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i].active) continue;
    std::vector<int> versions;
    for (const Migration& m : set_.All()) {
      if (m.version > target) break;
      const MigrationState state = status.State(i, m.version);
      if (state == MigrationState::kPending || state == MigrationState::kFailed) {
        versions.push_back(m.version);
        by_version[m.version].push_back(i);
      }
    }
    report.plan.emplace_back(sessions[i].server->name, std::move(versions));
  }
  if (dry_run) {
    report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
    return report;
  }

  // The history table, where work is to be done.
  for (const auto& [server, versions] : report.plan) {
    if (versions.empty()) continue;
    for (Session& s : sessions) {
      if (s.server->name != server || s.status.has_history) continue;
      try {
        pqxx::work tx{*s.connection, "create history"};
        tx.exec0(kHistoryDdl);
        tx.commit();
      } catch (const pqxx::broken_connection& e) {
        s.active = false;
        s.connection.reset();
        report.left_behind.push_back(fmt::format("{}: connection lost ({})", server, ErrorText(e)));
      }
    }
  }

  // Version by version; within a version every server at once.
  std::mutex report_mutex;
  for (const auto& [version, servers] : by_version) {
    const Migration& m = *set_.Find(version);
    std::vector<std::thread> threads;
    for (const std::size_t i : servers) {
      Session& s = sessions[i];
      if (!s.active) continue;
      threads.emplace_back([&, i] {
        Session& session = sessions[i];
        const auto step_start = Clock::now();
        emit(MigrationEvent::Kind::kStarted, session.server->name, m.version, {}, m.file_name);
        const StepOutcome outcome = m.transactional
                                        ? ApplyInTransaction(*session.connection, m, options_.applied_by)
                                        : ApplyStepByStep(*session.connection, m, session.status.Find(m.version),
                                                          options_.applied_by);
        const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - step_start);
        {
          std::lock_guard lock(report_mutex);
          report.applied.push_back({session.server->name, m.version, outcome.ok, elapsed, outcome.error});
          if (outcome.lost) {
            session.active = false;
            report.left_behind.push_back(fmt::format("{}: lost at {} ({})", session.server->name, m.file_name,
                                                     outcome.error));
          } else if (!outcome.ok) {
            report.stopped = true;
          }
        }
        if (outcome.ok) {
          emit(MigrationEvent::Kind::kApplied, session.server->name, m.version, elapsed, m.file_name);
        } else {
          emit(outcome.lost ? MigrationEvent::Kind::kServerLeft : MigrationEvent::Kind::kFailed,
               session.server->name, m.version, elapsed, outcome.error);
        }
        if (outcome.lost) session.connection.reset();
      });
    }
    for (auto& t : threads) t.join();
    if (report.stopped) break;
  }
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  return report;
}

}  // namespace shardkit
