// RebuildReplica: the steps of replica_rebuild.hpp, each journaled before
// the next, and each resumable from the journal.
#include "shardkit/topology/replica_rebuild.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pqxx/pqxx>
#include <sstream>
#include <thread>
#include <vector>

#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/read_token.hpp"
#include "topology/conninfo.hpp"
#include "topology/data_directory.hpp"

namespace shardkit {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using detail::ConninfoGet;
using detail::ConninfoSet;
using detail::ConninfoText;
using detail::DataDirectory;
using detail::FirstLine;
using detail::ParseConninfo;
using std::chrono::milliseconds;

// The catalog's advisory lock of a shard's rebuilds (failovers use 21325; 21326 is a
// shard's read hold, sql/044, which a catalog sharing a shard's database would
// meet).
constexpr int kRebuildLockClass = 21327;

constexpr const char* kLogName = "shardkit-rebuild.log";

// `setting` (synchronous_standby_names) with the standby name `from`
// replaced by `to` wherever it stands as a whole name, quoted ("a-b") or
// not: after a failover the promoted standby is the primary and the rebuilt
// server takes its place among the standbys.
std::string SwapStandbyName(const std::string& setting, const std::string& from, const std::string& to) {
  const auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  std::string out;
  std::size_t i = 0;
  while (i < setting.size()) {
    if (setting[i] == '"') {
      const std::size_t end = setting.find('"', i + 1);
      if (end == std::string::npos) return setting;  // not a name list we can read: as it is
      const std::string name = setting.substr(i + 1, end - i - 1);
      out += '"' + (name == from ? to : name) + '"';
      i = end + 1;
    } else if (is_name_char(setting[i])) {
      std::size_t end = i;
      while (end < setting.size() && is_name_char(setting[end])) ++end;
      const std::string word = setting.substr(i, end - i);
      out += word == from ? '"' + to + '"' : word;
      i = end;
    } else {
      out += setting[i++];
    }
  }
  return out;
}

// The order of the journal's states (the last step completed).
const std::vector<std::string> kStates = {"planning", "planned",    "stopped", "rewinding", "copying", "rewound",
                                          "copied",   "configured", "started", "streaming", "done"};

int StateIndex(const std::string& state) {
  const auto it = std::find(kStates.begin(), kStates.end(), state);
  return it == kStates.end() ? -1 : static_cast<int>(it - kStates.begin());
}

struct Server {
  std::string name;
  Dsn admin;  // a superuser: data_directory, slots, the server's state
};

// What a server says about itself through its admin_dsn.
struct ServerState {
  bool reachable = false;
  std::string error;
  bool in_recovery = false;
  std::string data_directory;
  std::string system_identifier;
  std::string receiver_status;  // "" without a WAL receiver
  std::uint32_t received_timeline = 0;
  std::string primary_conninfo;
  std::uint32_t timeline = 0;  // of its WAL insert position (a primary's)
  bool full_page_writes = true;
};

// A physical slot name from a server's name: [a-z0-9_].
std::string SlotName(const std::string& server) {
  std::string slot;
  for (const char c : server) {
    const auto u = static_cast<unsigned char>(c);
    slot += std::isalnum(u) != 0 ? static_cast<char>(std::tolower(u)) : '_';
  }
  return slot;
}

// A postgresql.conf value, quoted as PostgreSQL writes postgresql.auto.conf.
std::string ConfQuote(const std::string& value) {
  std::string quoted = "'";
  for (const char c : value) {
    quoted += c;
    if (c == '\'') quoted += '\'';
  }
  return quoted + "'";
}

// The last lines of a log, for an error message.
std::string Tail(const fs::path& log, std::size_t lines = 3) {
  std::ifstream in{log};
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) all.push_back(line);
  }
  std::string text;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    text += (text.empty() ? "" : " | ") + all[i];
  }
  return text.empty() ? "no output" : text;
}

class Run {
 public:
  Run(const ClusterConfig& config, const std::string& shard_name, const ReplicaRebuildOptions& options)
      : config_(config), options_(options), started_(Clock::now()) {
    if (!config.catalog_dsn) {
      throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog]: it says which server is each shard's "
                                                   "primary, and journals the rebuild",
                                                   config.origin));
    }
    shard_index_ = ShardIndexNamed(config, shard_name);
    shard_ = &config.shards[static_cast<std::size_t>(shard_index_)];
    members_.push_back(Server{shard_->name, shard_->AdminDsn()});
    for (const auto& r : shard_->replicas) members_.push_back(Server{r.name, r.AdminDsn()});
    report_.shard = shard_->name;
  }

  ReplicaRebuildReport Go();

 private:
  [[nodiscard]] std::unique_ptr<pqxx::connection> Connect(const Dsn& dsn) const {
    return std::make_unique<pqxx::connection>(WithConnectTimeout(dsn, options_.connect_timeout).Reveal());
  }
  [[nodiscard]] const Server* Find(const std::string& name) const {
    const auto it = std::find_if(members_.begin(), members_.end(), [&](const Server& s) { return s.name == name; });
    return it == members_.end() ? nullptr : &*it;
  }
  [[nodiscard]] std::string MemberNames() const {
    std::string names;
    for (const Server& s : members_) names += (names.empty() ? "" : ", ") + s.name;
    return names;
  }
  void LockAndReadPrimary();
  void ChooseServer();
  [[nodiscard]] ServerState Probe(const Server& s) const;
  void CheckDataDirectory(const ServerState& target);
  [[nodiscard]] std::string Refusal(const std::string& why) const {
    return fmt::format("{} of shard {} is not rebuilt: {}", target_->name, shard_->name, why);
  }
  void Journal(const std::string& state, const std::string& detail);
  [[noreturn]] void Fail(const std::string& message);
  [[nodiscard]] fs::path Stash() const {
    return dir_->Path().parent_path() / (dir_->Path().filename().string() + ".shardkit-rebuild");
  }
  // What PostgreSQL's programs printed: kept with the saved files, gone
  // with them once the rebuild is done.
  [[nodiscard]] fs::path Log() const { return Stash() / kLogName; }
  [[nodiscard]] std::string FollowConninfo() const;
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> PasswordEnvironment(std::string& conninfo) const;
  void SaveConfiguration();
  std::string EnsureStopped();
  [[nodiscard]] std::string WhyNoRewind() const;
  bool Rewind(std::string& why_not);
  void BaseBackup(const std::string& why);
  void CreateSlot();
  void Configure();
  void Start();
  void WaitUntilStreaming();
  // The synchronous replication the last failover to the primary emptied, set again.
  void RestoreSynchronousStandbys();

  const ClusterConfig& config_;
  const ReplicaRebuildOptions& options_;
  const Clock::time_point started_;
  int shard_index_ = 0;
  const ShardConfig* shard_ = nullptr;
  std::vector<Server> members_;
  std::unique_ptr<pqxx::connection> catalog_;
  const Server* primary_ = nullptr;
  std::int64_t epoch_ = 0;
  ServerState primary_state_;
  std::string deposed_;  // the primary the last failover of the shard replaced ("" if none)
  const Server* target_ = nullptr;
  std::unique_ptr<DataDirectory> dir_;
  std::string state_;
  std::string method_;
  ReplicaRebuildReport report_;
};

void Run::LockAndReadPrimary() {
  std::string primary;
  try {
    catalog_ = Connect(*config_.catalog_dsn);
    pqxx::nontransaction tx{*catalog_};
    if (!tx.exec_params1("SELECT pg_try_advisory_lock($1, $2)", kRebuildLockClass, shard_index_)[0].as<bool>()) {
      throw ReplicaRebuildError(fmt::format(
          "another rebuild of a server of shard {} is under way (it holds the catalog's lock): wait for it, then "
          "check shardctl shards",
          shard_->name));
    }
    for (const char* table : {"shardkit_primaries", "shardkit_failovers", "shardkit_replica_rebuilds"}) {
      if (tx.exec_params1("SELECT to_regclass($1) IS NULL", table)[0].as<bool>()) {
        throw ReplicaRebuildError(fmt::format(
            "the catalog has no {} table (it is older than this shardctl), so it cannot say which server is shard "
            "{}'s primary and journal a rebuild: run shardctl migrate",
            table, shard_->name));
      }
    }
    const auto row = tx.exec_params("SELECT server, epoch FROM shardkit_primaries WHERE shard = $1", shard_->name);
    primary = row.empty() ? shard_->name : row[0][0].c_str();
    epoch_ = row.empty() ? 0 : row[0][1].as<std::int64_t>();
    const auto unfinished = tx.exec_params(
        "SELECT failover_id, state FROM shardkit_failovers WHERE shard = $1 AND state NOT IN ('done', 'failed') "
        "ORDER BY failover_id DESC LIMIT 1",
        shard_->name);
    if (!unfinished.empty()) {
      throw ReplicaRebuildError(fmt::format(
          "failover {} of shard {} stopped after step {}: the shard's primary is not settled. Finish it first "
          "(shardctl failover {}), then rebuild",
          unfinished[0][0].c_str(), shard_->name, unfinished[0][1].c_str(), shard_->name));
    }
    const auto last = tx.exec_params(
        "SELECT from_server FROM shardkit_failovers WHERE shard = $1 AND state = 'done' AND to_server = $2 "
        "ORDER BY failover_id DESC LIMIT 1",
        shard_->name, primary);
    if (!last.empty()) deposed_ = last[0][0].c_str();
  } catch (const ReplicaRebuildError&) {
    throw;
  } catch (const std::exception& e) {
    throw ReplicaRebuildError(
        fmt::format("the catalog ({}) could not say which server is shard {}'s primary ({}): no server of it is "
                    "rebuilt until it can",
                    *config_.catalog_dsn, shard_->name, RedactDsn(FirstLine(e.what()))));
  }
  primary_ = Find(primary);
  if (primary_ == nullptr) {
    throw ConfigError(fmt::format("shard[{}].replicas", shard_index_),
                      fmt::format("the catalog names {} the primary of shard {}, and {} lists no such server for it "
                                  "(its servers: {}): run with the configuration the failover used",
                                  primary, shard_->name, config_.origin, MemberNames()));
  }
  report_.primary = primary_->name;
}

void Run::ChooseServer() {
  if (options_.server && options_.from_old_primary) {
    throw ConfigError("server", "give the server to rebuild (--server) or --from-old-primary, not both");
  }
  std::string name;
  if (options_.server) {
    name = *options_.server;
  } else if (options_.from_old_primary) {
    if (deposed_.empty()) {
      throw ReplicaRebuildError(fmt::format(
          "no failover of shard {} made its primary {} (shardkit_failovers), so it has no old primary to rebuild: "
          "name the server with --server (its servers: {})",
          shard_->name, primary_->name, MemberNames()));
    }
    name = deposed_;
  } else {
    throw ConfigError("server",
                      fmt::format("name the server of shard {} to rebuild: --server NAME (its servers: {}), "
                                  "or --from-old-primary{}",
                                  shard_->name, MemberNames(), deposed_.empty() ? "" : fmt::format(" ({})", deposed_)));
  }
  target_ = Find(name);
  if (target_ == nullptr) {
    throw ConfigError(
        "server", fmt::format("shard {} has no server named {} (its servers: {})", shard_->name, name, MemberNames()));
  }
  report_.server = target_->name;
  report_.slot = SlotName(target_->name);
  if (target_ == primary_) {
    throw ReplicaRebuildError(
        Refusal(fmt::format("it is the shard's primary (the catalog's shardkit_primaries, epoch {}): a primary is "
                            "never rebuilt. To make it a standby, fail over to a replica first (shardctl failover {}), "
                            "then rebuild it",
                            epoch_, shard_->name)));
  }
}

ServerState Run::Probe(const Server& s) const {
  ServerState state;
  try {
    auto c = Connect(s.admin);
    pqxx::nontransaction tx{*c};
    const auto row = tx.exec1(
        "SELECT pg_is_in_recovery(), current_setting('data_directory'), "
        "(SELECT system_identifier::text FROM pg_control_system()), current_setting('primary_conninfo'), "
        "(SELECT status FROM pg_stat_wal_receiver), (SELECT received_tli FROM pg_stat_wal_receiver), "
        "CASE WHEN pg_is_in_recovery() THEN NULL ELSE substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8) "
        "END, current_setting('full_page_writes')");
    state.reachable = true;
    state.in_recovery = row[0].as<bool>();
    state.data_directory = row[1].c_str();
    state.system_identifier = row[2].c_str();
    state.primary_conninfo = row[3].c_str();
    state.receiver_status = row[4].is_null() ? "" : row[4].c_str();
    state.received_timeline = row[5].is_null() ? 0 : row[5].as<std::uint32_t>();
    state.timeline = row[6].is_null() ? 0 : static_cast<std::uint32_t>(std::stoul(row[6].c_str(), nullptr, 16));
    state.full_page_writes = std::string_view(row[7].c_str()) == "on";
  } catch (const std::exception& e) {
    state.error = RedactDsn(FirstLine(e.what()));
  }
  return state;
}

void Run::CheckDataDirectory(const ServerState& target) {
  const std::string dir = dir_->Path().string();
  if (!dir_->HasData()) {
    throw ReplicaRebuildError(Refusal(fmt::format(
        "{} holds no PostgreSQL data directory (no PG_VERSION): give {}'s own (--pgdata)", dir, target_->name)));
  }
  if (target.reachable) {
    std::error_code ignored;
    if (fs::canonical(target.data_directory, ignored) != dir_->Path()) {
      throw ReplicaRebuildError(
          Refusal(fmt::format("it runs from the data directory {}, not {}: give its own (--pgdata {}), on its host",
                              target.data_directory, dir, target.data_directory)));
    }
  } else if (dir_->Running()) {
    throw ReplicaRebuildError(Refusal(fmt::format(
        "a server runs from {}, and {} does not answer at its admin_dsn ({}): {} is another server's, or {} cannot "
        "be reached from here. Check which; stop the server of {} if it is {}'s, then run again",
        dir, target_->name, target.error, dir, target_->name, dir, target_->name)));
  }
  const auto control = dir_->ControlData();
  const auto id = control.find("Database system identifier");
  if (id == control.end() || id->second != primary_state_.system_identifier) {
    throw ReplicaRebuildError(Refusal(fmt::format(
        "{} belongs to another database cluster (system identifier {}; the shard's primary {} has {}): give {}'s "
        "own data directory",
        dir, id == control.end() ? "unknown" : id->second, primary_->name, primary_state_.system_identifier,
        target_->name)));
  }
  // Never another server's data: the primary's least of all.
  for (const Server& s : members_) {
    if (&s == target_) continue;
    const ServerState other = &s == primary_ ? primary_state_ : Probe(s);
    std::error_code ignored;
    if (other.reachable && fs::canonical(other.data_directory, ignored) == dir_->Path()) {
      throw ReplicaRebuildError(Refusal(fmt::format("{} is the data directory of {}{}, not {}'s", dir, s.name,
                                                    &s == primary_ ? " (the shard's primary)" : "", target_->name)));
    }
  }
}

void Run::Journal(const std::string& state, const std::string& detail) {
  if (StateIndex(state) >= 0) state_ = state;
  pqxx::work tx{*catalog_};
  tx.exec_params(
      "UPDATE shardkit_replica_rebuilds SET state = $2, method = $3, finished_at = CASE WHEN $2 = 'done' THEN "
      "clock_timestamp() END, error = CASE WHEN $2 = 'done' THEN NULL ELSE error END WHERE rebuild_id = $1",
      report_.rebuild_id, state_, method_);
  tx.exec_params("INSERT INTO shardkit_replica_rebuild_events (rebuild_id, state, detail) VALUES ($1, $2, $3)",
                 report_.rebuild_id, state, detail);
  tx.commit();
  // Printed once recorded: a line shown is a step a rerun need not redo.
  if (options_.on_step) options_.on_step(state, detail);
}

// The journal keeps the rebuild unfinished (its last step), with the error:
// the same command run again goes on from there.
void Run::Fail(const std::string& message) {
  const std::string text = fmt::format(
      "rebuilding {} of shard {} (rebuild {}) stopped after step {}: {}. Run the same command again to go on "
      "from there",
      target_->name, shard_->name, report_.rebuild_id, state_, message);
  try {
    pqxx::work tx{*catalog_};
    tx.exec_params("UPDATE shardkit_replica_rebuilds SET error = $2 WHERE rebuild_id = $1", report_.rebuild_id, text);
    tx.exec_params("INSERT INTO shardkit_replica_rebuild_events (rebuild_id, state, detail) VALUES ($1, 'error', $2)",
                   report_.rebuild_id, text);
    tx.commit();
  } catch (const std::exception&) {
    // The journal is the record; the error still reaches the caller.
  }
  throw ReplicaRebuildError(text);
}

// The primary_conninfo with which the server streams from the primary: the
// one the primary itself used when it was a standby (what lets replication
// in there: user, password or passfile, TLS settings, a Unix socket of the
// host), pointed at the primary, else the primary's admin_dsn.
std::string Run::FollowConninfo() const {
  std::string base = primary_state_.primary_conninfo;
  if (!base.empty()) {
    detail::Conninfo c = ParseConninfo(base);
    ConninfoSet(c, "application_name", "");
    base = ConninfoText(c);
  }
  const Server* old = deposed_.empty() ? nullptr : Find(deposed_);
  return detail::FollowConninfo(base, old != nullptr ? old->admin : primary_->admin, primary_->admin, target_->name);
}

// The conninfo without its password, which goes to PGPASSWORD instead.
std::vector<std::pair<std::string, std::string>> Run::PasswordEnvironment(std::string& conninfo) const {
  detail::Conninfo c = ParseConninfo(conninfo);
  const std::string password = ConninfoGet(c, "password");
  if (password.empty()) return {};
  ConninfoSet(c, "password", "");
  conninfo = ConninfoText(c);
  return {{"PGPASSWORD", password}};
}

// The data directory's configuration files, kept outside it: pg_rewind and
// pg_basebackup bring the primary's (its port, its settings).
void Run::SaveConfiguration() {
  if (fs::is_directory(Stash())) return;  // saved by a run that stopped later
  const fs::path partial = Stash().string() + ".partial";
  fs::remove_all(partial);
  dir_->MakeDirectory(partial);
  int saved = 0;
  for (const auto& entry : fs::directory_iterator(dir_->Path())) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file()) continue;
    if (name == "postmaster.opts" || (name.size() > 5 && name.ends_with(".conf"))) {
      dir_->CopyFile(entry.path(), partial / name);
      ++saved;
    }
  }
  fs::rename(partial, Stash());  // whole or not at all
  report_.detail += fmt::format("{} configuration files saved in {}; ", saved, Stash().string());
}

// pg_rewind reads the server's WAL back to its last checkpoint before the
// timelines forked; the checkpoint a stop (or a crash recovery) makes would
// recycle that WAL. Kept until the rebuild puts its own configuration back.
constexpr const char* kKeepWal = "1TB";

std::string Run::EnsureStopped() {
  if (!dir_->Running()) return "it was not running";
  try {
    auto c = Connect(target_->admin);
    pqxx::nontransaction tx{*c};
    tx.exec(fmt::format("ALTER SYSTEM SET wal_keep_size = '{}'", kKeepWal));
    tx.exec("SELECT pg_reload_conf()");
  } catch (const std::exception&) {
    // Unreachable: pg_rewind may then find its WAL gone, and a base backup copies it.
  }
  if (dir_->Run("pg_ctl", {"stop", "-D", dir_->Path().string(), "-m", "fast", "-w", "-t", "60"}, Log()) == 0) {
    return "stopped (pg_ctl stop -m fast)";
  }
  if (dir_->Run("pg_ctl", {"stop", "-D", dir_->Path().string(), "-m", "immediate", "-w", "-t", "60"}, Log()) == 0) {
    return "stopped (pg_ctl stop -m immediate, after -m fast did not stop it)";
  }
  Fail(fmt::format("pg_ctl could not stop the server of {} ({}): stop it, then run again", dir_->Path().string(),
                   Tail(Log())));
}

// Why pg_rewind cannot be used, or "".
std::string Run::WhyNoRewind() const {
  // (A rerun keeps the method the rebuild began with.)
  if (options_.basebackup || method_ == "basebackup") return "a full copy was asked for";
  const auto control = dir_->ControlData();
  const auto hints = control.find("wal_log_hints setting");
  const auto checksums = control.find("Data page checksum version");
  const bool has_hints = hints != control.end() && hints->second == "on";
  const bool has_checksums = checksums != control.end() && checksums->second != "0";
  if (!has_hints && !has_checksums) {
    return fmt::format("{} has neither wal_log_hints = on nor data checksums, which pg_rewind needs", target_->name);
  }
  if (!primary_state_.full_page_writes) {
    return fmt::format("the primary {} runs with full_page_writes = off, which pg_rewind cannot work from",
                       primary_->name);
  }
  return "";
}

bool Run::Rewind(std::string& why_not) {
  why_not = WhyNoRewind();
  if (!why_not.empty()) return false;
  method_ = "rewind";
  Journal("rewinding", fmt::format("pg_rewind of {} against {}", dir_->Path().string(), primary_->name));
  // The crash recovery pg_rewind runs first on a server that was not shut
  // down cleanly ends with a checkpoint: it must keep the WAL too.
  {
    const fs::path auto_conf = dir_->Path() / "postgresql.auto.conf";
    std::ifstream in{auto_conf};
    std::stringstream text;
    text << in.rdbuf();
    dir_->WriteFile(auto_conf, text.str() + fmt::format("wal_keep_size = '{}'\n", kKeepWal));
  }
  // A promoted primary's control file names its new timeline only after
  // a checkpoint: before one, pg_rewind reads the old timeline there and
  // finds nothing to rewind.
  try {
    auto c = Connect(primary_->admin);
    pqxx::nontransaction{*c}.exec("CHECKPOINT");
  } catch (const std::exception& e) {
    why_not = fmt::format("CHECKPOINT on {} failed ({})", primary_->name, RedactDsn(FirstLine(e.what())));
    return false;
  }
  std::string source = WithConnectTimeout(primary_->admin, options_.connect_timeout).Reveal();
  const auto environment = PasswordEnvironment(source);
  const int status = dir_->Run("pg_rewind", {"--target-pgdata=" + dir_->Path().string(), "--source-server=" + source},
                               Log(), environment);
  if (status != 0) {
    why_not = fmt::format("pg_rewind failed ({})", Tail(Log(), 2));
    return false;
  }
  return true;
}

void Run::CreateSlot() {
  auto c = Connect(primary_->admin);
  pqxx::nontransaction tx{*c};
  tx.exec_params(
      "SELECT pg_create_physical_replication_slot($1, true) WHERE NOT EXISTS (SELECT FROM pg_replication_slots "
      "WHERE slot_name = $1)",
      report_.slot);
}

void Run::BaseBackup(const std::string& why) {
  method_ = "basebackup";
  Journal("copying", fmt::format("pg_basebackup of {} into {} ({})", primary_->name, dir_->Path().string(), why));
  try {
    CreateSlot();
  } catch (const std::exception& e) {
    Fail(fmt::format("the slot {} could not be made on {}: {}", report_.slot, primary_->name,
                     RedactDsn(FirstLine(e.what()))));
  }
  dir_->Empty();
  std::string source = FollowConninfo();
  const auto environment = PasswordEnvironment(source);
  const int status = dir_->Run("pg_basebackup",
                               {"--pgdata=" + dir_->Path().string(), "--dbname=" + source, "--wal-method=stream",
                                "--checkpoint=fast", "--slot=" + report_.slot},
                               Log(), environment);
  if (status != 0) Fail(fmt::format("pg_basebackup of {} failed ({})", primary_->name, Tail(Log(), 2)));
}

void Run::Configure() {
  if (!fs::is_directory(Stash())) {
    Fail(
        fmt::format("its saved configuration files ({}) are gone: copy them back by hand (the server's own "
                    "postgresql.conf, postgresql.auto.conf, pg_hba.conf...), then run again",
                    Stash().string()));
  }
  for (const auto& entry : fs::directory_iterator(Stash())) {
    if (entry.path().filename() == kLogName) continue;
    dir_->CopyFile(entry.path(), dir_->Path() / entry.path().filename());
  }
  // postgresql.auto.conf wins over every other file: the standby's settings
  // go there, and a fence a failover left there goes (being a standby
  // fences it; promoted later, it must take writes).
  const fs::path auto_conf = dir_->Path() / "postgresql.auto.conf";
  std::string kept;
  {
    std::ifstream in{auto_conf};
    for (std::string line; std::getline(in, line);) {
      const std::size_t start = line.find_first_not_of(" \t");
      const std::string key =
          start == std::string::npos ? "" : line.substr(start, line.find_first_of(" \t=", start) - start);
      if (key == "primary_conninfo" || key == "primary_slot_name" || key == "default_transaction_read_only") continue;
      kept += line + "\n";
    }
  }
  if (kept.empty()) kept = "# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n";
  const std::string conninfo = FollowConninfo();
  kept += fmt::format("primary_conninfo = {}\nprimary_slot_name = {}\n", ConfQuote(conninfo), ConfQuote(report_.slot));
  dir_->WriteFile(auto_conf, kept);
  dir_->WriteFile(dir_->Path() / "standby.signal", "");
  fs::remove(dir_->Path() / "recovery.signal");
  // A Unix socket's lock file copied from the primary's data directory
  // (where its sockets live) names the primary's postmaster: it would keep
  // this one from starting. The server is stopped: none is its own.
  for (const auto& entry : fs::directory_iterator(dir_->Path())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".s.PGSQL.") && name.ends_with(".lock")) fs::remove(entry.path());
  }
  try {
    CreateSlot();
  } catch (const std::exception& e) {
    Fail(fmt::format("the slot {} could not be made on {}: {}", report_.slot, primary_->name,
                     RedactDsn(FirstLine(e.what()))));
  }
  Journal("configured", fmt::format("standby.signal; primary_conninfo {}; primary_slot_name {} (on {})",
                                    RedactDsn(conninfo), report_.slot, primary_->name));
}

void Run::Start() {
  if (dir_->Running()) {
    Journal("started", "it was running already");
    return;
  }
  // restart: with the options it last ran with (postmaster.opts, saved
  // and put back), as its service or lab started it.
  const fs::path server_log = dir_->Path() / "postgresql.log";
  if (dir_->Run("pg_ctl", {"restart", "-D", dir_->Path().string(), "-l", server_log.string(), "-w", "-t", "120"},
                Log()) != 0) {
    Fail(fmt::format("pg_ctl could not start it ({}; its log {}: {})", Tail(Log(), 2), server_log.string(),
                     Tail(server_log, 2)));
  }
  Journal("started", fmt::format("pg_ctl started it as a standby (its log: {})", server_log.string()));
}

void Run::WaitUntilStreaming() {
  const auto until = Clock::now() + options_.stream_timeout;
  std::string seen;
  for (;;) {
    try {
      auto p = Connect(primary_->admin);
      pqxx::nontransaction ptx{*p};
      const auto timeline = static_cast<std::uint32_t>(std::stoul(
          ptx.exec1("SELECT substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)")[0].c_str(), nullptr, 16));
      const auto sender = ptx.exec_params(
          "SELECT state, replay_lsn::text FROM pg_stat_replication WHERE application_name = $1", target_->name);
      auto c = Connect(target_->admin);
      pqxx::nontransaction tx{*c};
      const auto row = tx.exec1(
          "SELECT pg_is_in_recovery(), (SELECT status FROM pg_stat_wal_receiver), (SELECT received_tli FROM "
          "pg_stat_wal_receiver), pg_last_wal_replay_lsn()::text");
      const std::string status = row[1].is_null() ? "none" : row[1].c_str();
      const std::uint32_t received = row[2].is_null() ? 0 : row[2].as<std::uint32_t>();
      const std::string sender_state = sender.empty() ? "none" : sender[0][0].c_str();
      seen = fmt::format("in recovery: {}; WAL receiver {}, timeline {}; the primary's WAL sender for it: {}",
                         row[0].as<bool>() ? "yes" : "no", status, received, sender_state);
      if (row[0].as<bool>() && status == "streaming" && received == timeline && sender_state == "streaming") {
        report_.timeline = timeline;
        Journal("streaming", fmt::format("streams from {} on timeline {} through slot {} (replayed {})", primary_->name,
                                         timeline, report_.slot, row[3].is_null() ? "nothing yet" : row[3].c_str()));
        return;
      }
    } catch (const std::exception& e) {
      seen = RedactDsn(FirstLine(e.what()));
    }
    if (Clock::now() > until) {
      const fs::path server_log = dir_->Path() / "postgresql.log";
      Fail(fmt::format("it does not stream from {} after {} ms ({}); its log {}: {}", primary_->name,
                       options_.stream_timeout.count(), seen, server_log.string(), Tail(server_log, 4)));
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
}

void Run::RestoreSynchronousStandbys() {
  // The failover that made the primary emptied its synchronous_standby_names
  // (it had no standby then) and kept the shard's setting (sql/045).
  // Restored only where the primary has none now: an operator's own choice
  // since is left alone.
  std::string setting;
  {
    pqxx::nontransaction tx{*catalog_};
    const auto row = tx.exec_params(
        "SELECT coalesce(synchronous_standby_names, '') FROM shardkit_failovers WHERE shard = $1 AND to_server = $2 "
        "AND state = 'done' ORDER BY failover_id DESC LIMIT 1",
        shard_->name, primary_->name);
    if (!row.empty()) setting = row[0][0].c_str();
  }
  if (setting.empty()) {
    // A forced failover that read no setting (the old primary unreachable,
    // the replica configured without one): the rebuilt server's own, from
    // its days as the primary (its configuration files are its own).
    auto t = Connect(target_->admin);
    setting = pqxx::nontransaction{*t}.exec1("SELECT current_setting('synchronous_standby_names')")[0].c_str();
  }
  if (setting.empty()) return;
  // It named the primary's standbys as they were: the promoted server is the
  // primary now, and the rebuilt one stands where it stood.
  setting = SwapStandbyName(setting, primary_->name, target_->name);
  auto p = Connect(primary_->admin);
  pqxx::nontransaction ptx{*p};
  if (!std::string_view(ptx.exec1("SELECT current_setting('synchronous_standby_names')")[0].c_str()).empty()) return;
  ptx.exec("ALTER SYSTEM SET synchronous_standby_names = " + ptx.quote(setting));
  ptx.exec("SELECT pg_reload_conf()");
  // A setting no streaming standby matches would make every commit wait
  // forever: kept only once the rebuilt server is a synchronous standby.
  const auto until = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto state = ptx.exec_params(
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND sync_state IN ('sync', 'quorum')",
        target_->name);
    if (!state.empty()) break;
    if (Clock::now() > until) {
      ptx.exec("ALTER SYSTEM RESET synchronous_standby_names");
      ptx.exec("SELECT pg_reload_conf()");
      report_.detail += fmt::format(
          "synchronous replication NOT restored on {}: with synchronous_standby_names = '{}' {} did not become a "
          "synchronous standby within 10 s, so it was reset (set it by hand); ",
          primary_->name, setting, target_->name);
      return;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  report_.synchronous_standby_names = setting;
  report_.detail += fmt::format("synchronous replication restored on {} (synchronous_standby_names = '{}'); ",
                                primary_->name, setting);
}

ReplicaRebuildReport Run::Go() {
  LockAndReadPrimary();
  ChooseServer();
  primary_state_ = Probe(*primary_);
  if (!primary_state_.reachable || primary_state_.in_recovery) {
    throw ReplicaRebuildError(Refusal(fmt::format(
        "the shard's primary {} (the catalog's) {}: a standby is rebuilt from a running primary", primary_->name,
        primary_state_.reachable ? "is in recovery, not a primary" : "is unreachable (" + primary_state_.error + ")")));
  }
  dir_ = std::make_unique<DataDirectory>(options_.pgdata, detail::FindPostgresPrograms(options_.pg_bin));
  report_.pgdata = dir_->Path().string();

  // A rebuild of this server that stopped (we hold the shard's lock, so
  // its process is gone).
  {
    pqxx::work tx{*catalog_};
    const auto earlier = tx.exec_params(
        "SELECT rebuild_id, primary_server, pgdata, state, method FROM shardkit_replica_rebuilds WHERE shard = $1 "
        "AND server = $2 AND state NOT IN ('done', 'failed') ORDER BY rebuild_id DESC LIMIT 1",
        shard_->name, target_->name);
    if (!earlier.empty()) {
      const std::int64_t id = earlier[0][0].as<std::int64_t>();
      if (std::string_view(earlier[0][2].c_str()) != report_.pgdata) {
        throw ReplicaRebuildError(Refusal(
            fmt::format("rebuild {} of it, into {}, stopped after step {}: finish that one (--pgdata {}); two data "
                        "directories cannot both be it (to give that one up: UPDATE shardkit_replica_rebuilds SET "
                        "state = 'failed' WHERE rebuild_id = {}, in the catalog)",
                        id, earlier[0][2].c_str(), earlier[0][3].c_str(), earlier[0][2].c_str(), id)));
      }
      if (std::string_view(earlier[0][1].c_str()) != primary_->name) {
        tx.exec_params(
            "UPDATE shardkit_replica_rebuilds SET state = 'failed', finished_at = clock_timestamp(), error = $2 "
            "WHERE rebuild_id = $1",
            id, fmt::format("the shard's primary became {}; replaced by a new rebuild", primary_->name));
      } else {
        report_.rebuild_id = id;
        report_.resumed_rebuild_id = id;
        state_ = earlier[0][3].c_str();
        method_ = earlier[0][4].c_str();
      }
    }
    tx.commit();
  }
  if (report_.rebuild_id == 0) {
    const ServerState target = Probe(*target_);
    if (target.reachable && target.in_recovery && target.receiver_status == "streaming" &&
        target.received_timeline == primary_state_.timeline) {
      report_.already_following = true;
      report_.timeline = primary_state_.timeline;
      report_.detail = fmt::format("{} streams from {} on its timeline {} already: nothing to do", target_->name,
                                   primary_->name, primary_state_.timeline);
      report_.took = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
      return report_;
    }
    CheckDataDirectory(target);
    method_ = options_.basebackup ? "basebackup" : "rewind";
    pqxx::work tx{*catalog_};
    report_.rebuild_id =
        tx.exec_params1(
              "INSERT INTO shardkit_replica_rebuilds (shard, server, primary_server, pgdata, method, state, "
              "requested_by) VALUES ($1, $2, $3, $4, $5, 'planning', $6) RETURNING rebuild_id",
              shard_->name, target_->name, primary_->name, report_.pgdata, method_, options_.requested_by)[0]
            .as<std::int64_t>();
    tx.commit();
    state_ = "planning";
  } else {
    Journal("resumed", fmt::format("rebuild {} of {} stopped after step {}: going on from there", report_.rebuild_id,
                                   target_->name, state_));
  }

  if (state_ == "planning") {
    SaveConfiguration();
    Journal("planned",
            fmt::format("{} ({}) becomes a standby of {}; {}configuration saved in {}", target_->name, report_.pgdata,
                        primary_->name, method_ == "rewind" ? "pg_rewind when it can; " : "pg_basebackup; ",
                        Stash().string()));
  }
  if (state_ == "planned") Journal("stopped", EnsureStopped());
  if (state_ == "stopped" || state_ == "rewinding" || state_ == "copying") {
    (void)EnsureStopped();  // a rerun: nothing runs from it while it is rewritten
    std::string why_not = state_ == "stopped" ? ""
                                              : fmt::format("a {} was under way when it stopped",
                                                            state_ == "rewinding" ? "pg_rewind" : "pg_basebackup");
    if (why_not.empty() && Rewind(why_not)) {
      Journal("rewound", fmt::format("pg_rewind brought it onto {}'s timeline", primary_->name));
    } else {
      BaseBackup(why_not);
      Journal("copied", fmt::format("pg_basebackup of {} through slot {}", primary_->name, report_.slot));
    }
    report_.detail += why_not.empty() ? "" : fmt::format("base backup: {}; ", why_not);
  }
  if (state_ == "rewound" || state_ == "copied") Configure();
  if (state_ == "configured") Start();
  if (state_ == "started") WaitUntilStreaming();
  if (state_ == "streaming") {
    {
      pqxx::nontransaction tx{*catalog_};
      const auto row = tx.exec_params("SELECT server FROM shardkit_primaries WHERE shard = $1", shard_->name);
      const std::string now = row.empty() ? shard_->name : row[0][0].c_str();
      if (now != primary_->name) {
        Fail(fmt::format("the shard's primary became {} meanwhile (a failover)", now));
      }
    }
    if (report_.timeline == 0) report_.timeline = primary_state_.timeline;
    RestoreSynchronousStandbys();
    std::error_code ignored;
    fs::remove_all(Stash(), ignored);
    report_.took = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
    report_.method = method_;
    Journal("done", fmt::format("{} is a streaming standby of {} (by {}), in {} ms", target_->name, primary_->name,
                                method_ == "rewind" ? "pg_rewind" : "pg_basebackup", report_.took.count()));
  }
  report_.method = method_;
  report_.took = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
  return report_;
}

}  // namespace

ReplicaRebuildReport RebuildReplica(const ClusterConfig& config, const std::string& shard,
                                    const ReplicaRebuildOptions& options) {
  return Run(config, shard, options).Go();
}

}  // namespace shardkit
