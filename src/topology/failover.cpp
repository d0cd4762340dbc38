// Failover: the steps of failover.hpp, each journaled before the next.
#include "shardkit/topology/failover.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <pqxx/pqxx>
#include <thread>
#include <vector>

#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/read_token.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "topology/conninfo.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using detail::FirstLine;
using detail::FollowConninfo;
using detail::ParseConninfo;
using std::chrono::milliseconds;

// The catalog's advisory lock of a shard's failovers (the fence uses 21323).
constexpr int kFailoverLockClass = 21325;

struct Server {
  std::string name;
  Dsn admin;  // a superuser: ALTER SYSTEM, pg_terminate_backend, pg_promote
  int member = 0;
};

// What a standby says about itself.
struct StandbyState {
  bool reachable = false;
  bool in_recovery = false;
  std::uint64_t receive = 0;
  std::uint64_t replay = 0;
  std::string error;
};

std::uint64_t LsnOr0(const pqxx::field& f) {
  return f.is_null() ? 0 : ParseLsn(f.c_str());
}

class Run {
 public:
  Run(const ClusterConfig& config, const std::string& shard_name, const FailoverOptions& options)
      : config_(config), options_(options), started_(Clock::now()) {
    if (!config.catalog_dsn) {
      throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog]: a failover publishes the new primary "
                                                   "there, for every router to follow",
                                                   config.origin));
    }
    shard_index_ = ShardIndexNamed(config, shard_name);
    shard_ = &config.shards[static_cast<std::size_t>(shard_index_)];
    members_.push_back(Server{shard_->name, shard_->AdminDsn(), 0});
    for (std::size_t j = 0; j < shard_->replicas.size(); ++j) {
      members_.push_back(Server{shard_->replicas[j].name, shard_->replicas[j].AdminDsn(), static_cast<int>(j + 1)});
    }
    report_.shard = shard_->name;
  }

  FailoverReport Go();

 private:
  [[nodiscard]] std::unique_ptr<pqxx::connection> Connect(const Dsn& dsn) const {
    return std::make_unique<pqxx::connection>(WithConnectTimeout(dsn, options_.connect_timeout).Reveal());
  }
  void LockAndReadPrimary();
  [[nodiscard]] const Server& Member(const std::string& name) const;
  std::optional<FailoverReport> TakeOverInterrupted();
  void CloseInterrupted(const std::string& state, const std::string& why);
  const Server& ChooseReplica();
  void Journal(const std::string& state, const std::string& detail);
  [[noreturn]] void Fail(const std::string& message, bool promoted);
  // Keeps the shard's synchronous_standby_names in the journal for the
  // rebuild that restores it (sql/045).
  void RememberSynchronousStandbys(const std::string& setting);
  int MakeReadOnly(pqxx::nontransaction& tx, const std::string& what);
  bool FenceOldPrimary();
  // The old primary could not be fenced: wait until every lease it was
  // granted has run out (routing/primary_leases.hpp). False: leases are off.
  bool WaitOutLeases();
  void Unfence();
  void WaitForCatchUp(const Server& to);
  void Promote(const Server& to);
  void Publish(const Server& to);
  // The promoted server takes writes: the catalog names it now.
  void OpenForWrites(const Server& primary);
  // Step 6: every other standby of the shard follows `primary`; `deposed`
  // (the old primary) is left alone.
  void Repoint(const Server& primary, const std::string& deposed);
  ReplicaRepointed RepointOne(const Server& replica, const Server& primary, const Server* old_primary,
                              std::uint32_t timeline, std::optional<std::uint64_t> fork);
  StandbyState Standby(const Server& s) const;

  const ClusterConfig& config_;
  const FailoverOptions& options_;
  const Clock::time_point started_;
  int shard_index_ = 0;
  const ShardConfig* shard_ = nullptr;
  std::vector<Server> members_;
  std::unique_ptr<pqxx::connection> catalog_;
  const Server* from_ = nullptr;
  std::int64_t epoch_ = 0;  // the shard's epoch before this failover
  std::optional<Clock::time_point> fenced_at_;
  bool unreachable_ = false;  // the old primary, when FenceOldPrimary tried
  // An earlier failover of this shard that stopped before its last step
  // (its process killed): its id, target and last step.
  struct Interrupted {
    std::int64_t id = 0;
    std::string to;
    std::string state;
  };
  std::optional<Interrupted> interrupted_;
  std::optional<std::string> to_;  // the replica named, or the interrupted failover's
  FailoverReport report_;
};

void Run::LockAndReadPrimary() {
  try {
    catalog_ = Connect(*config_.catalog_dsn);
    pqxx::nontransaction tx{*catalog_};
    if (!tx.exec_params1("SELECT pg_try_advisory_lock($1, $2)", kFailoverLockClass, shard_index_)[0].as<bool>()) {
      throw FailoverError(
          fmt::format("another failover of shard {} is under way (it holds the catalog's lock): "
                      "wait for it, then check shardctl shards",
                      shard_->name));
    }
    if (tx.exec1("SELECT to_regclass('shardkit_primaries') IS NULL")[0].as<bool>()) {
      throw FailoverError(
          fmt::format("the catalog ({}) has no shardkit_primaries table: run shardctl migrate", *config_.catalog_dsn));
    }
    const auto row = tx.exec_params("SELECT server, epoch FROM shardkit_primaries WHERE shard = $1", shard_->name);
    const std::string current = row.empty() ? shard_->name : row[0][0].c_str();
    epoch_ = row.empty() ? 0 : row[0][1].as<std::int64_t>();
    from_ = &Member(current);
    report_.from_server = from_->name;
    const auto earlier = tx.exec_params(
        "SELECT failover_id, to_server, state FROM shardkit_failovers WHERE shard = $1 AND state NOT IN ('done', "
        "'failed') ORDER BY failover_id DESC LIMIT 1",
        shard_->name);
    if (!earlier.empty()) {
      interrupted_ = Interrupted{earlier[0][0].as<std::int64_t>(), earlier[0][1].c_str(), earlier[0][2].c_str()};
    }
  } catch (const pqxx::broken_connection& e) {
    throw FailoverError(
        fmt::format("the catalog ({}) is unreachable: {}; a failover must publish the new primary "
                    "there, so it cannot start",
                    *config_.catalog_dsn, RedactDsn(FirstLine(e.what()))));
  }
}

const Server& Run::Member(const std::string& name) const {
  const auto it = std::find_if(members_.begin(), members_.end(), [&](const Server& s) { return s.name == name; });
  if (it == members_.end()) {
    throw ConfigError(fmt::format("shard[{}].replicas", shard_index_),
                      fmt::format("the catalog names {} a server of shard {}, and {} lists no such server for it: "
                                  "run with the configuration the failover used",
                                  name, shard_->name, config_.origin));
  }
  return *it;
}

// We hold the shard's failover lock, so a failover the journal shows
// unfinished is one whose process died (SIGKILL, a lost machine). Published
// (the catalog names its replica), only its record was left: it is finished
// now. Not published, this run takes over its target, and whatever step it
// reached is done again (each step is idempotent: fencing a fenced server,
// waiting for a position already replayed, and a replica already promoted
// is only published). Another replica named by `to` while the interrupted
// one's is promoted is refused: that would make two primaries.
std::optional<FailoverReport> Run::TakeOverInterrupted() {
  to_ = options_.to;
  if (!interrupted_) return std::nullopt;
  const Interrupted& earlier = *interrupted_;
  if (earlier.to == from_->name) {
    if (to_ && *to_ != earlier.to) {
      CloseInterrupted("done", "found published by a later failover, which goes on from it");
      interrupted_.reset();
      return std::nullopt;
    }
    // Published: what is left is re-pointing the other replicas.
    std::string deposed;
    {
      pqxx::nontransaction tx{*catalog_};
      const auto from = tx.exec_params("SELECT from_server FROM shardkit_failovers WHERE failover_id = $1", earlier.id);
      if (!from.empty()) deposed = from[0][0].c_str();
    }
    report_.failover_id = earlier.id;
    report_.epoch = epoch_;
    OpenForWrites(*from_);  // it may have stopped before
    Repoint(*from_, deposed);
    CloseInterrupted(
        "done", fmt::format("stopped after step {}, found published (epoch {}) by a later run", earlier.state, epoch_));
    FailoverReport done;
    done.replicas = std::move(report_.replicas);
    done.failover_id = earlier.id;
    done.shard = shard_->name;
    done.to_server = earlier.to;
    done.epoch = epoch_;
    done.resumed_failover_id = earlier.id;
    done.loss =
        fmt::format("as reported by failover {} when it ran (its journal in shardkit_failover_events)", earlier.id);
    done.took = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
    done.from_server = deposed;
    if (options_.on_step) {
      options_.on_step("done", fmt::format("failover {} had published {} (epoch {}) before it stopped after step "
                                           "{}; its journal is finished now",
                                           earlier.id, earlier.to, epoch_, earlier.state));
    }
    return done;
  }
  if (to_ && *to_ != earlier.to) {
    const StandbyState state = Standby(Member(earlier.to));
    if (state.reachable && !state.in_recovery) {
      throw FailoverError(
          fmt::format("failover {} of shard {} promoted {} and stopped before publishing it: "
                      "finish it (shardctl failover {} --to {}); promoting {} as well would make "
                      "two primaries",
                      earlier.id, shard_->name, earlier.to, shard_->name, earlier.to, *to_));
    }
    return std::nullopt;  // closed once this failover has its id
  }
  to_ = earlier.to;
  return std::nullopt;
}

void Run::CloseInterrupted(const std::string& state, const std::string& why) {
  pqxx::work tx{*catalog_};
  tx.exec_params(
      "UPDATE shardkit_failovers SET state = $2, finished_at = clock_timestamp(), error = CASE WHEN $2 = 'failed' "
      "THEN $3 ELSE error END, epoch = CASE WHEN $2 = 'done' THEN $4::bigint ELSE epoch END WHERE failover_id = $1",
      interrupted_->id, state, why, epoch_);
  tx.exec_params("INSERT INTO shardkit_failover_events (failover_id, state, detail) VALUES ($1, $2, $3)",
                 interrupted_->id, state, why);
  tx.commit();
}

StandbyState Run::Standby(const Server& s) const {
  StandbyState state;
  try {
    auto c = Connect(s.admin);
    pqxx::nontransaction tx{*c};
    const auto row =
        tx.exec1("SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text");
    state.reachable = true;
    state.in_recovery = row[0].as<bool>();
    state.receive = LsnOr0(row[1]);
    state.replay = LsnOr0(row[2]);
  } catch (const std::exception& e) {
    state.error = RedactDsn(FirstLine(e.what()));
  }
  return state;
}

const Server& Run::ChooseReplica() {
  std::vector<const Server*> candidates;
  for (const Server& s : members_) {
    // Not the primary, nor the configured primary once it lost its place,
    // unless it was rebuilt as a standby since (replica_rebuild.hpp): out
    // of recovery it is a deposed primary, not a promoted replica.
    if (&s == from_) continue;
    if (s.member == 0 && from_->member != 0) {
      const StandbyState deposed = Standby(s);
      if (!deposed.reachable || !deposed.in_recovery) continue;
    }
    candidates.push_back(&s);
  }
  std::string names;
  for (const Server* s : candidates) names += (names.empty() ? "" : ", ") + s->name;
  if (to_) {
    const auto it =
        std::find_if(candidates.begin(), candidates.end(), [&](const Server* s) { return s->name == *to_; });
    if (it == candidates.end()) {
      if (*to_ == from_->name) {
        throw ConfigError("to", fmt::format("{} is shard {}'s primary already (epoch {} in the catalog)", *to_,
                                            shard_->name, epoch_));
      }
      throw ConfigError("to", fmt::format("{} is not a replica of shard {} that can be promoted (its primary is "
                                          "{}; its replicas: {})",
                                          *to_, shard_->name, from_->name, names.empty() ? "none" : names));
    }
    return **it;
  }
  if (candidates.empty()) {
    throw FailoverError(fmt::format("shard {} has no replica to promote: list one under its replicas", shard_->name));
  }
  const Server* best = nullptr;
  StandbyState best_state;
  std::string skipped;
  std::vector<const Server*> promoted;  // out of recovery: promoted, not published
  for (const Server* s : candidates) {
    const StandbyState state = Standby(*s);
    if (state.reachable && !state.in_recovery) promoted.push_back(s);
    if (!state.reachable || !state.in_recovery) {
      skipped += fmt::format("; {}: {}", s->name, state.reachable ? "not a standby (in recovery: no)" : state.error);
      continue;
    }
    if (best == nullptr || state.receive > best_state.receive) {
      best = s;
      best_state = state;
    }
  }
  // A replica promoted by a failover that stopped before publishing it is
  // the only safe choice: promoting another would make two primaries.
  if (promoted.size() == 1) return *promoted.front();
  if (promoted.size() > 1) {
    throw FailoverError(
        fmt::format("shard {} has {} replicas out of recovery (promoted, none published){}: they "
                    "may have diverged; name the one to publish with --to",
                    shard_->name, promoted.size(), skipped));
  }
  if (best == nullptr) {
    throw FailoverError(fmt::format("no replica of shard {} can be promoted{}", shard_->name, skipped));
  }
  return *best;
}

void Run::Journal(const std::string& state, const std::string& detail) {
  if (options_.on_step) options_.on_step(state, detail);
  try {
    pqxx::work tx{*catalog_};
    tx.exec_params(
        "UPDATE shardkit_failovers SET state = $2, finished_at = CASE WHEN $2 IN ('done', 'failed') THEN "
        "clock_timestamp() END, epoch = CASE WHEN $2 = 'done' THEN $3::bigint ELSE epoch END, "
        "error = CASE WHEN $2 = 'failed' THEN $4 ELSE error END WHERE failover_id = $1",
        report_.failover_id, state, report_.epoch, detail);
    tx.exec_params("INSERT INTO shardkit_failover_events (failover_id, state, detail) VALUES ($1, $2, $3)",
                   report_.failover_id, state, detail);
    tx.commit();
  } catch (const std::exception& e) {
    // The journal is the record, not the mechanism: a failover that lost
    // the catalog now fails at its publish step, which says so.
    if (options_.on_step) options_.on_step("journal", "could not record: " + FirstLine(e.what()));
  }
}

void Run::RememberSynchronousStandbys(const std::string& setting) {
  if (setting.empty()) return;
  try {
    pqxx::nontransaction tx{*catalog_};
    // The first value read wins: the old primary's, or a promotion's before
    // a rerun found the setting emptied already.
    tx.exec_params(
        "UPDATE shardkit_failovers SET synchronous_standby_names = $2 WHERE failover_id = $1 AND "
        "coalesce(synchronous_standby_names, '') = ''",
        report_.failover_id, setting);
  } catch (const std::exception& e) {
    if (options_.on_step)
      options_.on_step("journal", "could not record synchronous_standby_names: " + FirstLine(e.what()));
  }
}

void Run::Fail(const std::string& message, bool promoted) {
  Journal("failed", message);
  throw FailoverError(fmt::format("failover of shard {} from {}: {}", shard_->name, from_->name, message), promoted);
}

// ALTER SYSTEM SET default_transaction_read_only = on, in force for every
// session: sessions opened before the reload took effect could write until
// they read the new setting, so they are terminated. Returns how many.
int Run::MakeReadOnly(pqxx::nontransaction& tx, const std::string& what) {
  tx.exec("ALTER SYSTEM SET default_transaction_read_only = on");
  tx.exec("SELECT pg_reload_conf()");
  // The setting reaches this session at its next statement.
  const auto until = Clock::now() + std::chrono::seconds(5);
  const auto terminate = [&] {
    return tx
        .exec1(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")[0]
        .as<int>();
  };
  int terminated = 0;
  for (;;) {
    terminated += terminate();
    if (std::string_view(tx.exec1("SELECT current_setting('default_transaction_read_only')")[0].c_str()) == "on") {
      break;
    }
    if (Clock::now() > until) Fail(what + " did not apply default_transaction_read_only within 5 s", false);
    std::this_thread::sleep_for(milliseconds(20));
  }
  return terminated + terminate();
}

bool Run::FenceOldPrimary() {
  try {
    auto c = Connect(from_->admin);
    pqxx::nontransaction tx{*c};
    if (tx.exec1("SELECT pg_is_in_recovery()")[0].as<bool>()) return false;  // not a primary: nothing to fence
    RememberSynchronousStandbys(tx.exec1("SELECT current_setting('synchronous_standby_names')")[0].c_str());
    fenced_at_ = Clock::now();
    const int terminated = MakeReadOnly(tx, "the old primary");
    report_.old_primary_lsn = ParseLsn(tx.exec1("SELECT pg_current_wal_insert_lsn()::text")[0].c_str());
    report_.old_primary_fenced = true;
    Journal("fenced", fmt::format("{} is read-only (default_transaction_read_only, ALTER SYSTEM), {} sessions "
                                  "terminated; its last position {}",
                                  from_->name, terminated, FormatLsn(*report_.old_primary_lsn)));
    return true;
  } catch (const pqxx::broken_connection& e) {
    const std::string why = RedactDsn(FirstLine(e.what()));
    if (!options_.force) {
      Fail(fmt::format("the primary {} is unreachable ({}), so it cannot be fenced: if it came back it would take "
                       "writes. Make sure it cannot (stop it for good, or rebuild it as a standby of the new "
                       "primary), then run again with --force",
                       from_->name, why),
           false);
    }
    Journal("unfenced", fmt::format("{} is unreachable ({}); going on (forced)", from_->name, why));
    unreachable_ = true;
    return false;
  }
}

bool Run::WaitOutLeases() {
  // This failover's row, committed before the old primary was tried, stops
  // its renewals (sql/043's shardkit_lease_grant skips a shard with a
  // failover under way): a renewal that did not see the row began before
  // now, so its grant ends before now plus the time to live, by the
  // catalog's clock. Also a time to live changed less than the old one ago.
  // A second more for the difference between the catalog's and the old
  // primary's clocks.
  constexpr milliseconds kClockMargin{1000};
  milliseconds ttl{0};
  try {
    pqxx::work tx{*catalog_};
    const auto rows = tx.exec(
        "SELECT greatest(ttl_ms, CASE WHEN changed_at + make_interval(secs => coalesce(previous_ttl_ms, 0) / 1000.0) "
        "> clock_timestamp() THEN previous_ttl_ms ELSE 0 END) FROM shardkit_lease_settings");
    if (rows.empty()) return false;
    ttl = milliseconds(rows[0][0].as<std::int64_t>());
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "42P01") return false;  // a catalog older than sql/043: no leases
    Fail(fmt::format("reading the catalog's lease settings failed: {}", FirstLine(e.what())), false);
  }
  const milliseconds wait = ttl + kClockMargin;
  Journal("leases", fmt::format("waiting {} ms for every lease granted to {} to run out (time to live {} ms, and {} "
                                "ms for the clocks): then it commits no shardkit write, whatever router sends it",
                                wait.count(), from_->name, ttl.count(), kClockMargin.count()));
  std::this_thread::sleep_for(wait);
  return true;
}

void Run::Unfence() {
  try {
    auto c = Connect(from_->admin);
    pqxx::nontransaction tx{*c};
    tx.exec("ALTER SYSTEM RESET default_transaction_read_only");
    tx.exec("SELECT pg_reload_conf()");
    Journal("unfenced", fmt::format("{} takes writes again", from_->name));
  } catch (const std::exception& e) {
    Journal("unfenced", fmt::format("{} could not be unfenced ({}): run ALTER SYSTEM RESET "
                                    "default_transaction_read_only; SELECT pg_reload_conf(); there",
                                    from_->name, RedactDsn(FirstLine(e.what()))));
  }
}

void Run::WaitForCatchUp(const Server& to) {
  const std::uint64_t target = InsertPositionFloor(*report_.old_primary_lsn);
  const auto until = Clock::now() + options_.catch_up_timeout;
  StandbyState state;
  for (;;) {
    state = Standby(to);
    if (state.reachable && state.in_recovery && state.replay >= target) break;
    if (Clock::now() > until || (state.reachable && !state.in_recovery)) {
      Unfence();
      Fail(fmt::format("{} {} (it must replay the fenced primary's last position {}); nothing was changed: run "
                       "again, or name another replica",
                       to.name,
                       !state.reachable    ? "is unreachable: " + state.error
                       : state.in_recovery ? fmt::format("replayed only up to {} within {} ms", FormatLsn(state.replay),
                                                         options_.catch_up_timeout.count())
                                           : std::string("is not a standby any more"),
                       FormatLsn(target)),
           false);
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  report_.promoted_at_lsn = state.replay;
  Journal("caught_up", fmt::format("{} replayed {} (the fenced primary's last position {})", to.name,
                                   FormatLsn(state.replay), FormatLsn(target)));
}

void Run::Promote(const Server& to) {
  try {
    auto c = Connect(to.admin);
    pqxx::nontransaction tx{*c};
    if (report_.promoted_at_lsn == 0) {
      report_.promoted_at_lsn = LsnOr0(tx.exec1("SELECT pg_last_wal_replay_lsn()::text")[0]);
    }
    // Promoted read-only: it takes writes once the catalog names it
    // (Publish), never while the catalog's routers still read the old
    // primary, whatever a router without the catalog sends it.
    (void)MakeReadOnly(tx, to.name);
    if (!tx.exec1("SELECT pg_promote(true, 60)")[0].as<bool>()) {
      Fail(fmt::format("pg_promote() on {} did not finish within 60 s: check its log", to.name), false);
    }
    // No standby follows it yet: a synchronous commit would wait forever.
    // The setting is remembered for the rebuild that gives it a standby
    // (its own, a copy of its primary's, if the old primary's was not read).
    RememberSynchronousStandbys(tx.exec1("SELECT current_setting('synchronous_standby_names')")[0].c_str());
    tx.exec("ALTER SYSTEM SET synchronous_standby_names = ''");
    tx.exec("SELECT pg_reload_conf()");
    Journal("promoted", fmt::format("{} is a primary (at {}), read-only until published; its "
                                    "synchronous_standby_names is empty until a replica follows it",
                                    to.name, FormatLsn(report_.promoted_at_lsn)));
  } catch (const FailoverError&) {
    throw;
  } catch (const std::exception& e) {
    if (report_.old_primary_fenced) Unfence();
    Fail(fmt::format("promoting {} failed: {}", to.name, RedactDsn(FirstLine(e.what()))), false);
  }
}

void Run::Publish(const Server& to) {
  report_.epoch = epoch_ + 1;
  try {
    pqxx::work tx{*catalog_};
    const auto changed = tx.exec_params(
        "INSERT INTO shardkit_primaries (shard, server, epoch) VALUES ($1, $2, $3) "
        "ON CONFLICT (shard) DO UPDATE SET server = excluded.server, epoch = excluded.epoch, "
        "changed_at = clock_timestamp() WHERE shardkit_primaries.epoch = $3 - 1",
        shard_->name, to.name, report_.epoch);
    if (changed.affected_rows() != 1) {
      Fail(fmt::format("the catalog's epoch of shard {} moved past {} meanwhile (another failover?); {} is "
                       "promoted: check shardctl shards",
                       shard_->name, epoch_, to.name),
           true);
    }
    tx.commit();
  } catch (const FailoverError&) {
    throw;
  } catch (const std::exception& e) {
    Fail(fmt::format("{} is promoted, but the catalog could not be updated ({}): run the failover again with "
                     "--to {} once the catalog is reachable",
                     to.name, RedactDsn(FirstLine(e.what())), to.name),
         true);
  }
  OpenForWrites(to);
  if (fenced_at_) report_.writes_paused = std::chrono::duration_cast<milliseconds>(Clock::now() - *fenced_at_);
  Journal("published", fmt::format("shard {}'s primary is {} (epoch {}), open for writes; routers switch on the "
                                   "NOTIFY",
                                   shard_->name, to.name, report_.epoch));
}

void Run::OpenForWrites(const Server& primary) {
  try {
    auto c = Connect(primary.admin);
    pqxx::nontransaction tx{*c};
    tx.exec("ALTER SYSTEM RESET default_transaction_read_only");
    tx.exec("SELECT pg_reload_conf()");
  } catch (const std::exception& e) {
    Fail(fmt::format("{} is the published primary but stays read-only: ALTER SYSTEM RESET "
                     "default_transaction_read_only failed ({}); run the failover again (it finishes this one)",
                     primary.name, RedactDsn(FirstLine(e.what()))),
         true);
  }
}

// The new primary's timeline (its WAL file names start with it) and where
// it forked from its parent (the last line of its history file), which a
// standby of the old timeline must not have replayed past.
struct Timeline {
  std::uint32_t id = 0;
  std::optional<std::uint64_t> fork;
};

void Run::Repoint(const Server& primary, const std::string& deposed) {
  Timeline timeline;
  std::string unknown_fork;
  try {
    auto c = Connect(primary.admin);
    pqxx::nontransaction tx{*c};
    timeline.id = static_cast<std::uint32_t>(std::stoul(
        tx.exec1("SELECT substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)")[0].c_str(), nullptr, 16));
    if (timeline.id > 1) {
      const std::string history =
          tx.exec_params1("SELECT pg_read_file($1)", fmt::format("pg_wal/{:08X}.history", timeline.id))[0].c_str();
      // "<parent timeline>\t<fork LSN>\t<reason>" per line; the last is the parent's.
      std::string last;
      for (std::size_t at = 0; at < history.size();) {
        const std::size_t end = std::min(history.find('\n', at), history.size());
        if (end > at && history[at] != '#') last = history.substr(at, end - at);
        at = end + 1;
      }
      const std::size_t tab = last.find('\t');
      if (tab != std::string::npos) {
        const std::size_t tab2 = last.find('\t', tab + 1);
        timeline.fork = ParseLsn(last.substr(tab + 1, tab2 == std::string::npos ? tab2 : tab2 - tab - 1));
      }
    }
  } catch (const std::exception& e) {
    unknown_fork = RedactDsn(FirstLine(e.what()));
  }
  if (timeline.id == 0) {
    Journal("repointed", fmt::format("the new primary {} could not be asked for its timeline ({}): no replica was "
                                     "re-pointed; point each at it by hand (primary_conninfo), or run the failover "
                                     "again",
                                     primary.name, unknown_fork));
    return;
  }
  const Server* old_primary = nullptr;
  for (const Server& s : members_) {
    if (s.name == deposed) old_primary = &s;
  }
  bool any = false;
  for (const Server& s : members_) {
    if (&s == &primary || s.name == deposed) continue;
    any = true;
    ReplicaRepointed outcome = RepointOne(s, primary, old_primary, timeline.id, timeline.fork);
    Journal("repointed", fmt::format("{}: {}", outcome.name, outcome.detail));
    report_.replicas.push_back(std::move(outcome));
  }
  if (!any) {
    Journal("repointed", fmt::format("shard {} has no other replica to follow {}", shard_->name, primary.name));
  }
}

ReplicaRepointed Run::RepointOne(const Server& replica, const Server& primary, const Server* old_primary,
                                 std::uint32_t timeline, std::optional<std::uint64_t> fork) {
  ReplicaRepointed out;
  out.name = replica.name;
  const std::string by_hand =
      fmt::format("set its primary_conninfo to {}'s address (ALTER SYSTEM, pg_reload_conf()) once it is", primary.name);
  try {
    auto c = Connect(replica.admin);
    pqxx::nontransaction tx{*c};
    const auto state = tx.exec1(
        "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, current_setting('primary_conninfo'), "
        "current_setting('primary_slot_name'), (SELECT status FROM pg_stat_wal_receiver), "
        "(SELECT received_tli FROM pg_stat_wal_receiver)");
    if (!state[0].as<bool>()) {
      out.detail = "not a standby (not in recovery): left alone; rebuild it as a standby of " + primary.name +
                   " (pg_rewind, or a new base backup) for it to serve reads again";
      return out;
    }
    const std::uint64_t replay = LsnOr0(state[1]);
    const std::string current = state[2].c_str();
    const std::string slot = state[3].c_str();
    const bool on_timeline = !state[5].is_null() && state[5].as<std::uint32_t>() == timeline;
    const std::string wanted = FollowConninfo(current, old_primary != nullptr ? old_primary->admin : primary.admin,
                                              primary.admin, replica.name);
    // Past the promotion point on the old timeline: it cannot switch to the
    // new one, whatever it is pointed at.
    if (!on_timeline && fork && replay > *fork) {
      out.detail = fmt::format(
          "replayed {} of the old timeline, past the point {} where {} left it (timeline {}): it cannot follow "
          "{} until rebuilt (pg_rewind, or a new base backup); left as it is, and no read goes there",
          FormatLsn(replay), FormatLsn(*fork), primary.name, timeline, primary.name);
      return out;
    }
    std::vector<std::string> done;
    if (!slot.empty()) {
      auto p = Connect(primary.admin);
      pqxx::nontransaction ptx{*p};
      const auto created = ptx.exec_params(
          "SELECT pg_create_physical_replication_slot($1, true) WHERE NOT EXISTS (SELECT FROM pg_replication_slots "
          "WHERE slot_name = $1)",
          slot);
      if (!created.empty()) done.push_back(fmt::format("slot {} created on {}", slot, primary.name));
    }
    if (ParseConninfo(current) != ParseConninfo(wanted)) {
      tx.exec("ALTER SYSTEM SET primary_conninfo = " + tx.quote(wanted));
      tx.exec("SELECT pg_reload_conf()");
      done.push_back(fmt::format("primary_conninfo {}", RedactDsn(wanted)));
    }
    // Its WAL receiver restarts on the reload; confirm it streams on the
    // new timeline (a standby at the fork streams the old timeline's end
    // first, then switches).
    std::string seen = "no WAL receiver";
    const auto until = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto r = tx.exec("SELECT status, received_tli FROM pg_stat_wal_receiver");
      if (!r.empty()) {
        seen = fmt::format("WAL receiver {}, timeline {}", r[0][0].c_str(), r[0][1].is_null() ? "?" : r[0][1].c_str());
        if (std::string_view(r[0][0].c_str()) == "streaming" && !r[0][1].is_null() &&
            r[0][1].as<std::uint32_t>() == timeline) {
          out.follows = true;
          break;
        }
      }
      if (Clock::now() > until) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    const std::string what =
        done.empty() ? "already pointed at " + primary.name : fmt::format("{}", fmt::join(done, "; "));
    out.detail = out.follows ? fmt::format("follows {} ({}; streaming on timeline {})", primary.name, what, timeline)
                             : fmt::format(
                                   "{}, but not streaming from it on timeline {} after 10 s ({}): check its "
                                   "log; no read goes there until it does",
                                   what, timeline, seen);
  } catch (const Error& e) {  // a connection string libpq cannot parse
    out.detail = fmt::format("could not be re-pointed ({}): {}", e.what(), by_hand);
  } catch (const pqxx::broken_connection& e) {
    out.detail = fmt::format(
        "unreachable ({}): it still follows the old primary, and no read goes there; {} "
        "reachable",
        RedactDsn(FirstLine(e.what())), by_hand);
  } catch (const std::exception& e) {
    out.detail = fmt::format("could not be re-pointed ({}): {} possible", RedactDsn(FirstLine(e.what())), by_hand);
  }
  return out;
}

FailoverReport Run::Go() {
  LockAndReadPrimary();
  if (auto finished = TakeOverInterrupted()) return *finished;
  const Server& to = ChooseReplica();
  report_.to_server = to.name;
  {
    pqxx::work tx{*catalog_};
    report_.failover_id =
        tx.exec_params1(
              "INSERT INTO shardkit_failovers (shard, from_server, to_server, state, forced, requested_by) "
              "VALUES ($1, $2, $3, 'planning', $4, $5) RETURNING failover_id",
              shard_->name, from_->name, to.name, options_.force, options_.requested_by)[0]
            .as<std::int64_t>();
    tx.commit();
  }
  if (interrupted_) {
    const bool taken_over = interrupted_->to == to.name;
    CloseInterrupted("failed", fmt::format("stopped after step {}; {} by failover {}", interrupted_->state,
                                           taken_over ? "finished" : "replaced", report_.failover_id));
    if (taken_over) {
      report_.resumed_failover_id = interrupted_->id;
      Journal("resumed", fmt::format("failover {} to {} stopped after step {}: its steps are done again from the "
                                     "first (each is idempotent)",
                                     interrupted_->id, to.name, interrupted_->state));
    }
  }
  const StandbyState target = Standby(to);
  if (!target.reachable) Fail(fmt::format("{} is unreachable: {}", to.name, target.error), false);
  // A replica already promoted (a failover that stopped before its publish
  // step) is only published.
  const bool resume = !target.in_recovery;
  Journal("planned", fmt::format("promote {} (received {}, replayed {}){}", to.name, FormatLsn(target.receive),
                                 FormatLsn(target.replay), resume ? ": already promoted, publishing it" : ""));
  const bool fenced = FenceOldPrimary();
  bool leased = false;
  if (!resume) {
    if (fenced) WaitForCatchUp(to);
    if (unreachable_) leased = WaitOutLeases();
    Promote(to);
  }
  Publish(to);
  Repoint(to, from_->name);
  if (fenced) {
    report_.loss = fmt::format("none: {} was fenced and {} had replayed its last position before the promotion",
                               from_->name, to.name);
  } else {
    report_.loss = fmt::format(
        "unknown: {} was unreachable; {} had received WAL up to {}. With synchronous replication to it "
        "(synchronous_standby_names) no acknowledged write is lost; with asynchronous replication, what it had "
        "not received is",
        from_->name, to.name, FormatLsn(target.receive));
    if (unreachable_ && !resume) {
      report_.loss += leased ? std::string(
                                   ". Its leases ran out before the promotion: if it comes back it commits no "
                                   "shardkit write")
                             : fmt::format(
                                   ". Leases are off (shardctl leases): if {} comes back as a primary it commits "
                                   "the writes of routers that do not follow the catalog; keep it down, or "
                                   "rebuild it as a replica (shardctl replica rebuild {} --from-old-primary)",
                                   from_->name, shard_->name);
    }
  }
  report_.took = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
  Journal("done", report_.loss);
  return report_;
}

}  // namespace

FailoverReport Failover(const ClusterConfig& config, const std::string& shard, const FailoverOptions& options) {
  return Run(config, shard, options).Go();
}

}  // namespace shardkit
