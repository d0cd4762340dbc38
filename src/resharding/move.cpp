#include "shardkit/resharding/move.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "pg/raw_pg.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/ownership.hpp"

// The mover, step by step (see move.hpp for the order and the states).
//
// Connections of one run: the catalog (holding the session advisory lock
// (21324, move_id) that makes a move run in one process at a time, and
// writing the journal), a second catalog connection for the flip's
// transaction, and admin connections to the source and the target. The copy
// uses raw libpq: a replication connection creates the slot and exports its
// snapshot; a source connection imports it (REPEATABLE READ) and COPYs each
// table's rows of the bucket out in binary; a target connection COPYs them
// in with session_replication_role = replica (no fence, no triggers), in one
// transaction together with the 'incoming' ownership row, so the target
// holds all of the bucket's rows as of the slot's start or none. The
// subscription then starts exactly there (create_slot = false, copy_data =
// false): no gap, no overlap, no table-sync slots, and it works between two
// databases of one server (which hangs with create_slot = true).
//
// The cutover: a first marker row, written on the source and awaited on the
// target, shows the target has caught up (no stall yet). Then the freeze: a
// session advisory lock on the source, under lock_timeout = drain_timeout;
// writers hold the shared form until their transactions end, so getting it
// means they are all gone, and new ones are refused (SK002) from the moment
// the request waits. A second marker, written after the freeze (in the same
// round trip as the lock), arrives after everything the bucket's writers
// committed: the barrier. Then the readers are drained the same way (the
// read hold (21326, bucket) that shardkit_check_buckets() takes, sql/015),
// and, with the catalog's flip lock held (21325, serialising flips of
// parallel moves): the source retires the bucket (its writes and reads are
// refused from then on, naming the target), the target owns it, the
// catalog's directory is compare-and-set to the next version together with
// the journal's 'flipped', and the freeze is released. Retiring before
// owning means that no instant has two shards serving the bucket; a mover
// dying between the two leaves none until `move resume` or `move abort`,
// never two.
//
// The stall (freeze -> flip) is a handful of round trips plus logical
// replication's apply latency for the barrier. Every commit of the mover's
// admin sessions is flushed at once (synchronous_commit = local): a
// walsender sends only flushed WAL, so with synchronous_commit = off (the
// lab's setting) the barrier would wait for the WAL writer, up to
// wal_writer_delay (200 ms by default), which was most of the stall.

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr int kMoveLockKey = 21324;  // (21324, move_id): the process running a move
constexpr int kFlipLockKey = 21325;  // (21325, 0): directory flips, one at a time
// The cutover freezes once a catch-up marker crossed within kQuickMarker,
// or after kMaxCatchupRounds markers whatever they took.
constexpr auto kQuickMarker = milliseconds(50);
constexpr int kMaxCatchupRounds = 20;

struct StateName {
  MoveState state;
  std::string_view name;
};
constexpr StateName kStateNames[] = {
    {MoveState::kPlanned, "planned"},
    {MoveState::kPrepared, "prepared"},
    {MoveState::kCopying, "copying"},
    {MoveState::kCopied, "copied"},
    {MoveState::kStreaming, "streaming"},
    {MoveState::kRetired, "retired"},
    {MoveState::kOwned, "owned"},
    {MoveState::kFlipped, "flipped"},
    {MoveState::kReplicationDropped, "replication_dropped"},
    {MoveState::kCleaning, "cleaning"},
    {MoveState::kDone, "done"},
    {MoveState::kAborting, "aborting"},
    {MoveState::kAborted, "aborted"},
};

std::string FirstLine(std::string text) {
  for (const char* prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.erase(0, std::char_traits<char>::length(prefix));
  }
  if (const auto end = text.find('\n'); end != std::string::npos) text.resize(end);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return RedactDsn(text);
}

// The effective user (as the server's logs would show the process), not
// $USER, which services and containers often leave unset.
std::string DefaultRequester() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string user;
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr) {
    user = found->pw_name;
  } else {
    user = fmt::format("uid {}", ::geteuid());
  }
  return fmt::format("{}@{} pid {}", user, host, ::getpid());
}

double Ms(Clock::duration d) { return static_cast<double>(duration_cast<microseconds>(d).count()) / 1000.0; }

// The after_step hook's exception, carried through the run's error handling
// untouched: a simulated death must not run any cleanup.
struct HookThrew {
  std::exception_ptr error;
};

// An error that must not abort the move (past the point of no return, or
// the catalog itself failing).
struct NoAbort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* kRecordColumns =
    "move_id, bucket, source, target, state, token, plan_id, requested_by, "
    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
    "to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
    "coalesce(to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), ''), "
    "directory_version, rows_copied, copy_ms, stall_ms, rows_deleted, coalesce(error, '')";

MoveRecord ToRecord(const pqxx::row& row) {
  MoveRecord r;
  r.move_id = row[0].as<std::int64_t>();
  r.bucket = BucketId{row[1].as<int>()};
  r.source = ShardId{row[2].as<int>()};
  r.target = ShardId{row[3].as<int>()};
  const auto state = ParseMoveState(row[4].c_str());
  if (!state) throw MoveError(fmt::format("move {} has an unknown state '{}' in the journal", r.move_id, row[4].c_str()));
  r.state = *state;
  r.token = row[5].as<std::string>();
  if (!row[6].is_null()) r.plan_id = row[6].as<std::int64_t>();
  r.requested_by = row[7].as<std::string>();
  r.created_at = row[8].as<std::string>();
  r.updated_at = row[9].as<std::string>();
  r.finished_at = row[10].as<std::string>();
  if (!row[11].is_null()) r.directory_version = row[11].as<std::int64_t>();
  r.rows_copied = row[12].as<std::int64_t>();
  if (!row[13].is_null()) r.copy_ms = row[13].as<double>();
  if (!row[14].is_null()) r.stall_ms = row[14].as<double>();
  r.rows_deleted = row[15].as<std::int64_t>();
  r.error = row[16].as<std::string>();
  return r;
}

BucketDirectory DirectoryIn(pqxx::transaction_base& tx, int shard_count) {
  std::vector<std::pair<BucketId, ShardId>> pairs;
  std::int64_t version = 0;
  for (const auto& row : tx.exec("SELECT bucket, shard, version FROM shard_directory ORDER BY bucket")) {
    pairs.emplace_back(BucketId{row[0].as<int>()}, ShardId{row[1].as<int>()});
    version = std::max(version, row[2].as<std::int64_t>());
  }
  if (pairs.empty()) throw CatalogError("the catalog's shard_directory is empty: store a directory first");
  return BucketDirectory::FromRows(pairs, shard_count, version);
}

// Column lists of the registered tables, for the schema check and the copy.
struct TableColumns {
  std::string table;                 // quoted as regclass::text gives it
  std::vector<std::string> columns;  // quoted names, in attribute order
  std::vector<std::string> definition;  // "name type [not null]"
};

std::vector<TableColumns> RegisteredTables(pqxx::connection_base& c) {
  pqxx::read_transaction tx{c};
  std::vector<TableColumns> tables;
  const auto rows = tx.exec(
      "SELECT s.table_name::text, quote_ident(a.attname), "
      "a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END "
      "FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name "
      "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
      "ORDER BY 1, a.attnum");
  for (const auto& row : rows) {
    const std::string table = row[0].as<std::string>();
    if (tables.empty() || tables.back().table != table) tables.push_back({table, {}, {}});
    tables.back().columns.push_back(row[1].as<std::string>());
    tables.back().definition.push_back(row[2].as<std::string>());
  }
  return tables;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string RandomHex(int digits) {
  std::random_device device;
  std::uniform_int_distribution<unsigned> nibble(0, 15);
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[nibble(device)];
  return out;
}

}  // namespace

std::string_view MoveStateName(MoveState state) noexcept {
  for (const auto& s : kStateNames) {
    if (s.state == state) return s.name;
  }
  return "?";
}

std::optional<MoveState> ParseMoveState(std::string_view name) noexcept {
  for (const auto& s : kStateNames) {
    if (s.name == name) return s.state;
  }
  return std::nullopt;
}

bool IsLive(MoveState state) noexcept { return state != MoveState::kDone && state != MoveState::kAborted; }

bool CanAbort(MoveState state) noexcept {
  switch (state) {
    case MoveState::kPlanned:
    case MoveState::kPrepared:
    case MoveState::kCopying:
    case MoveState::kCopied:
    case MoveState::kStreaming:
    case MoveState::kRetired:
    case MoveState::kAborting:
      return true;
    default:
      return false;
  }
}

// ------------------------------------------------------------------ Impl

struct BucketMover::Impl {
  Impl(ClusterConfig c, Dsn catalog, MoveOptions o)
      : config(std::move(c)), catalog_dsn(std::move(catalog)), options(std::move(o)) {
    if (options.requested_by.empty()) options.requested_by = DefaultRequester();
  }

  ClusterConfig config;
  Dsn catalog_dsn;
  MoveOptions options;

  [[nodiscard]] int ShardCount() const { return static_cast<int>(config.shards.size()); }
  [[nodiscard]] const ShardConfig& Shard(ShardId s) const {
    if (ToInt(s) < 0 || ToInt(s) >= ShardCount()) throw UnknownShard(s, ShardCount());
    return config.shards[static_cast<std::size_t>(ToInt(s))];
  }
  [[nodiscard]] std::string ShardLabel(ShardId s) const { return fmt::format("shard {} ({})", s, Shard(s).name); }

  std::unique_ptr<pqxx::connection> ConnectCatalog() const {
    const Dsn dsn = WithConnectTimeout(catalog_dsn, options.connect_timeout);
    try {
      return std::make_unique<pqxx::connection>(dsn.Reveal());
    } catch (const std::exception& e) {
      throw CatalogError(fmt::format("the catalog ({}) is unreachable: {}", dsn, FirstLine(e.what())));
    }
  }
  std::unique_ptr<pqxx::connection> ConnectAdmin(ShardId s) const {
    const Dsn dsn = WithConnectTimeout(Shard(s).AdminDsn(), options.connect_timeout);
    try {
      auto c = std::make_unique<pqxx::connection>(dsn.Reveal());
      // The mover's commits (the markers above all) are flushed at once:
      // a walsender sends only flushed WAL, so under synchronous_commit =
      // off a marker would wait for the WAL writer (wal_writer_delay, 200 ms
      // by default) before the target could see it, with the bucket frozen.
      pqxx::nontransaction tx{*c};
      tx.exec("SET synchronous_commit = local");
      return c;
    } catch (const std::exception& e) {
      throw ShardUnavailable(s, fmt::format("{} is unreachable ({}): {}", ShardLabel(s), dsn,
                                            FirstLine(e.what())));
    }
  }

  std::vector<MoveRecord> Query(pqxx::connection_base& catalog, const std::string& where, int limit) const {
    pqxx::read_transaction tx{catalog};
    std::vector<MoveRecord> out;
    for (const auto& row : tx.exec(fmt::format("SELECT {} FROM shardkit_moves {} ORDER BY move_id DESC LIMIT {}",
                                               kRecordColumns, where, limit))) {
      out.push_back(ToRecord(row));
    }
    return out;
  }
  MoveRecord Load(pqxx::connection_base& catalog, std::int64_t move_id) const {
    pqxx::read_transaction tx{catalog};
    const auto rows =
        tx.exec_params(fmt::format("SELECT {} FROM shardkit_moves WHERE move_id = $1", kRecordColumns), move_id);
    if (rows.empty()) throw MoveError(fmt::format("there is no move {} (shardctl moves lists them)", move_id), move_id);
    return ToRecord(rows[0]);
  }

  MoveRecord Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id);
  MoveRecord Run(std::int64_t move_id, bool abort, const std::string& reason);
};

// Everything one run of one move holds.
struct MoveRun {
  BucketMover::Impl& impl;
  MoveRecord record;
  std::unique_ptr<pqxx::connection> catalog;  // holds the move lock; journal
  std::unique_ptr<pqxx::connection> source;
  std::unique_ptr<pqxx::connection> target;
  std::unique_ptr<pqxx::connection> freeze;  // source session holding the freeze
  Clock::time_point started = Clock::now();
  std::string step = "starting";
  // The target (source) holds nothing of this move for sure: an abort need
  // not reach it. True before the copy (prepare) began; for the target also
  // after a copy that failed before its COMMIT was sent.
  bool target_known_clean = false;
  bool source_known_clean = false;

  std::string Where() const {
    return fmt::format("move {} of bucket {} ({} -> {})", record.move_id, record.bucket,
                       impl.ShardLabel(record.source), impl.ShardLabel(record.target));
  }

  pqxx::connection& Source() {
    if (!source) source = impl.ConnectAdmin(record.source);
    return *source;
  }
  pqxx::connection& Target() {
    if (!target) target = impl.ConnectAdmin(record.target);
    return *target;
  }

  void Progress(const std::string& what, std::optional<std::int64_t> lag = {}) {
    step = what;
    if (!impl.options.on_progress) return;
    MoveProgress p;
    p.move_id = record.move_id;
    p.bucket = record.bucket;
    p.source = record.source;
    p.target = record.target;
    p.state = record.state;
    p.step = what;
    p.rows_copied = record.rows_copied;
    p.lag_bytes = lag;
    p.stall_ms = record.stall_ms;
    p.elapsed = duration_cast<microseconds>(Clock::now() - started);
    impl.options.on_progress(p);
  }

  // Records `state` (and its detail) in the journal, then the test hook.
  void Journal(MoveState state, const std::string& detail, pqxx::transaction_base* in = nullptr) {
    // The row and its event in one statement: one round trip (some are on
    // the cutover's path, while the bucket is frozen).
    auto write = [&](pqxx::transaction_base& tx) {
      tx.exec_params(
          "WITH m AS (UPDATE shardkit_moves SET state = $2, updated_at = clock_timestamp(), rows_copied = $3, "
          "copy_ms = $4, stall_ms = $5, rows_deleted = $6, directory_version = $7, error = nullif($8, ''), "
          "finished_at = CASE WHEN $2 IN ('done', 'aborted') THEN clock_timestamp() END WHERE move_id = $1 "
          "RETURNING move_id) "
          "INSERT INTO shardkit_move_events (move_id, state, detail) SELECT move_id, $2, $9 FROM m",
          record.move_id, std::string(MoveStateName(state)), record.rows_copied, record.copy_ms, record.stall_ms,
          record.rows_deleted, record.directory_version, record.error, detail);
    };
    if (in != nullptr) {
      write(*in);
    } else {
      pqxx::nontransaction tx{*catalog};
      write(tx);
    }
    record.state = state;
    Progress(std::string(MoveStateName(state)));
  }
  void AfterStep() {
    if (!impl.options.after_step) return;
    try {
      impl.options.after_step(record.move_id, record.state);
    } catch (...) {
      throw HookThrew{std::current_exception()};
    }
  }

  std::optional<BucketOwnership> OwnershipOf(pqxx::connection& c) const {
    const ShardOwnership o = ReadOwnership(c);
    if (const auto* b = o.Find(record.bucket)) return *b;
    return std::nullopt;
  }

  // ------------------------------------------------------------ the steps
  void Prepare();
  void Copy();
  void Subscribe();
  void Cutover();
  void MakeTargetOwner();
  void Flip();
  void DropReplication();
  void Cleanup();
  void Abort(const std::string& reason);

  // helpers
  bool ObjectExists(pqxx::connection& c, const std::string& sql) {
    pqxx::read_transaction tx{c};
    return !tx.exec_params(sql, record.token).empty();
  }
  bool SlotExists() {
    return ObjectExists(Source(), "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1");
  }
  void DropSlot();
  void DropSubscription();
  void DropPublication() {
    pqxx::nontransaction tx{Source()};
    tx.exec("DROP PUBLICATION IF EXISTS " + tx.quote_name(record.token));
  }
  int WriteMarker(pqxx::connection& c) {
    pqxx::nontransaction tx{c};
    return tx.exec_params1(
                 "INSERT INTO shardkit_move_markers (move_id, bucket, marker) "
                 "SELECT $1, $2, coalesce(max(marker), 0) + 1 FROM shardkit_move_markers WHERE move_id = $1 "
                 "RETURNING marker",
                 record.move_id, ToInt(record.bucket))[0]
        .as<int>();
  }
  // Waits for marker `marker` on the target; false at the deadline.
  bool AwaitMarker(int marker, Clock::time_point deadline, bool report_lag);
  // Waits until every transaction of the source's database that began
  // before `since` (a timestamptz as text; empty: now) has ended; at
  // `timeout`, throws MoveError naming one, with `why` (what they might do)
  // and `then` (what to run afterwards).
  void AwaitOlderTransactions(std::chrono::milliseconds timeout, const std::string& why, const std::string& then,
                              std::string since = {});
  std::optional<std::int64_t> Lag();
};

void MoveRun::Prepare() {
  Progress("checking source and target");
  pqxx::connection& source_c = Source();
  pqxx::connection& target_c = Target();
  for (const auto& [shard, c] : {std::pair<ShardId, pqxx::connection*>{record.source, &source_c},
                                 std::pair<ShardId, pqxx::connection*>{record.target, &target_c}}) {
    pqxx::read_transaction tx{*c};
    const auto row = tx.exec1(
        "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), current_setting('wal_level'), "
        "current_user");
    if (!row[0].as<bool>()) {
      throw MoveError(fmt::format("{}: the admin role {} is not a superuser; a move's publication, replication slot "
                                  "and subscription need one in PostgreSQL 15: set [[shard]] admin_dsn for {} to a "
                                  "superuser role",
                                  Where(), row[2].c_str(), impl.ShardLabel(shard)),
                      record.move_id, record.bucket);
    }
    if (shard == record.source && std::string_view(row[1].c_str()) != "logical") {
      throw MoveError(fmt::format("{}: {} runs with wal_level = {}; logical replication needs wal_level = logical "
                                  "(and a restart)",
                                  Where(), impl.ShardLabel(shard), row[1].c_str()),
                      record.move_id, record.bucket);
    }
  }
  const ShardOwnership source_own = ReadOwnership(source_c);
  const ShardOwnership target_own = ReadOwnership(target_c);
  for (const auto& [shard, own] : {std::pair<ShardId, const ShardOwnership*>{record.source, &source_own},
                                   std::pair<ShardId, const ShardOwnership*>{record.target, &target_own}}) {
    if (!own->enrolled_as) {
      throw MoveError(fmt::format("{}: {} is not enrolled (it has no bucket ownership, so no fence): run shardctl "
                                  "shards enroll",
                                  Where(), impl.ShardLabel(shard)),
                      record.move_id, record.bucket);
    }
    if (*own->enrolled_as != shard) {
      throw MoveError(fmt::format("{}: the database of {} is enrolled as shard {}: the configuration's shard order "
                                  "does not match the servers",
                                  Where(), impl.ShardLabel(shard), *own->enrolled_as),
                      record.move_id, record.bucket);
    }
  }
  const auto* at_source = source_own.Find(record.bucket);
  if (at_source == nullptr || at_source->state != OwnershipState::kOwned ||
      (at_source->move_id && *at_source->move_id != record.move_id)) {
    throw MoveError(fmt::format("{}: the source does not own the bucket ({}{})", Where(),
                                at_source ? OwnershipStateName(at_source->state) : "no ownership row",
                                at_source && at_source->move_id ? fmt::format(", move {}", *at_source->move_id) : ""),
                    record.move_id, record.bucket);
  }
  if (const auto* at_target = target_own.Find(record.bucket);
      at_target != nullptr && !(at_target->state == OwnershipState::kIncoming && at_target->move_id == record.move_id)) {
    throw MoveError(fmt::format("{}: the target already has the bucket ({}{}); wait for that move to finish or abort it",
                                Where(), OwnershipStateName(at_target->state),
                                at_target->move_id ? fmt::format(", move {}", *at_target->move_id) : ""),
                    record.move_id, record.bucket);
  }
  // One schema: every table the source fences exists on the target with the
  // same columns, types and NOT NULLs, and is fenced there too.
  const auto source_tables = RegisteredTables(source_c);
  const auto target_tables = RegisteredTables(target_c);
  for (const auto& t : source_tables) {
    const auto it = std::find_if(target_tables.begin(), target_tables.end(),
                                 [&](const TableColumns& x) { return x.table == t.table; });
    if (it == target_tables.end()) {
      throw MoveError(fmt::format("{}: the target's schema differs: table {} is not a sharded table there (migrate "
                                  "the target: shardctl migrate)",
                                  Where(), t.table),
                      record.move_id, record.bucket);
    }
    if (it->definition != t.definition) {
      std::string difference;
      for (std::size_t i = 0; i < std::max(it->definition.size(), t.definition.size()); ++i) {
        const std::string a = i < t.definition.size() ? t.definition[i] : "(none)";
        const std::string b = i < it->definition.size() ? it->definition[i] : "(none)";
        if (a != b) {
          difference = fmt::format("column {}: source has '{}', target has '{}'", i + 1, a, b);
          break;
        }
      }
      throw MoveError(fmt::format("{}: the target's schema differs from the source's for table {}: {}; migrate both "
                                  "to the same version first",
                                  Where(), t.table, difference),
                      record.move_id, record.bucket);
    }
  }
  // One migration history: the same versions applied, with the same files.
  {
    auto history = [](pqxx::connection& c) {
      pqxx::read_transaction tx{c};
      if (tx.exec1("SELECT to_regclass('shardkit_migrations') IS NULL")[0].as<bool>()) return std::string("none");
      return tx.exec1("SELECT coalesce(max(version), 0) || ' ' || coalesce(md5(string_agg(version || checksum, ',' "
                      "ORDER BY version)), '') FROM shardkit_migrations WHERE success")[0]
          .as<std::string>();
    };
    const std::string source_history = history(source_c);
    const std::string target_history = history(target_c);
    if (source_history != target_history) {
      throw MoveError(fmt::format("{}: the target's schema differs from the source's (target at migration version {}, "
                                  "source at {}, or other files applied); migrate every server to the same version "
                                  "first (shardctl migrate)",
                                  Where(), target_history.substr(0, target_history.find(' ')),
                                  source_history.substr(0, source_history.find(' '))),
                      record.move_id, record.bucket);
    }
  }
  // A table with the shard key that is not registered would stay behind.
  {
    pqxx::read_transaction tx{source_c};
    const auto unregistered = tx.exec(
        "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'customer_id' "
        "AND NOT a.attisdropped) AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
        "AND a.attname = 'bucket' AND NOT a.attisdropped) "
        "AND NOT EXISTS (SELECT 1 FROM shardkit_sharded_tables s WHERE s.table_name = c.oid)");
    if (!unregistered.empty() && !unregistered[0][0].is_null()) {
      throw MoveError(fmt::format("{}: tables with customer_id and bucket are not registered as sharded on the source "
                                  "({}): the move would leave their rows behind; enroll the shards again "
                                  "(shardctl shards enroll) or SELECT shardkit_shard_table('<table>') in a migration",
                                  Where(), unregistered[0][0].c_str()),
                      record.move_id, record.bucket);
    }
  }
  if (source_tables.empty()) {
    throw MoveError(fmt::format("{}: the source has no registered sharded tables (shardkit_shard_table)", Where()),
                    record.move_id, record.bucket);
  }
  {
    auto catalog_tx = pqxx::read_transaction{*catalog};
    const BucketDirectory directory = DirectoryIn(catalog_tx, impl.ShardCount());
    if (directory.ShardOf(record.bucket) != record.source) {
      throw MoveError(fmt::format("{}: the catalog's directory (version {}) places the bucket on shard {}, not on the "
                                  "move's source",
                                  Where(), directory.Version(), directory.ShardOf(record.bucket)),
                      record.move_id, record.bucket);
    }
  }
  source_known_clean = false;
  {
    pqxx::work tx{source_c};
    const auto marked = tx.exec_params(
        "UPDATE shardkit_bucket_ownership SET move_id = $2, new_owner = $3, updated_at = clock_timestamp() "
        "WHERE bucket = $1 AND state = 'owned' AND (move_id IS NULL OR move_id = $2)",
        ToInt(record.bucket), record.move_id, ToInt(record.target));
    if (marked.affected_rows() != 1) {
      throw MoveError(fmt::format("{}: the source's ownership changed during the checks", Where()), record.move_id,
                      record.bucket);
    }
    tx.commit();
  }
  {
    // The mark's time, taken after its COMMIT: a transaction that began
    // later sees the mark, so it takes a read hold (sql/015); the cutover
    // waits for those that began earlier.
    pqxx::nontransaction tx{source_c};
    tx.exec_params("UPDATE shardkit_bucket_ownership SET updated_at = clock_timestamp() WHERE bucket = $1 AND "
                   "move_id = $2 AND state = 'owned'",
                   ToInt(record.bucket), record.move_id);
  }
  Journal(MoveState::kPrepared,
          fmt::format("{} sharded tables, schemas equal; source marked with the move", source_tables.size()));
}

void MoveRun::DropSlot() {
  pqxx::connection& c = Source();
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    pqxx::nontransaction tx{c};
    const auto rows =
        tx.exec_params("SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1", record.token);
    if (rows.empty()) return;
    if (!rows[0][0].as<bool>()) {
      try {
        tx.exec_params("SELECT pg_drop_replication_slot($1)", record.token);
        return;
      } catch (const pqxx::sql_error& e) {
        // Became active again between the two statements: look again.
        if (Clock::now() > give_up) throw;
      }
    } else if (Clock::now() > give_up) {
      // A walsender still serving a subscription that is gone or disabled.
      tx.exec_params("SELECT pg_terminate_backend($1)", rows[0][1].as<int>());
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void MoveRun::DropSubscription() {
  pqxx::connection& c = Target();
  if (!ObjectExists(c, "SELECT 1 FROM pg_subscription WHERE subname = $1 AND subdbid = "
                       "(SELECT oid FROM pg_database WHERE datname = current_database())")) {
    return;
  }
  pqxx::nontransaction tx{c};
  const std::string name = tx.quote_name(record.token);
  // Detached from its slot first, so that DROP needs no connection to the
  // source (which may be down); the slot is dropped on the source by name.
  tx.exec("ALTER SUBSCRIPTION " + name + " DISABLE");
  tx.exec("ALTER SUBSCRIPTION " + name + " SET (slot_name = NONE)");
  tx.exec("DROP SUBSCRIPTION " + name);
}

std::optional<std::int64_t> MoveRun::Lag() {
  try {
    pqxx::nontransaction tx{Source()};
    const auto rows = tx.exec_params(
        "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
        record.token);
    if (rows.empty() || rows[0][0].is_null()) return std::nullopt;
    return std::max<std::int64_t>(0, rows[0][0].as<std::int64_t>());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool MoveRun::AwaitMarker(int marker, Clock::time_point deadline, bool report_lag) {
  pqxx::connection& c = Target();
  auto next_report = Clock::now();
  for (;;) {
    {
      pqxx::nontransaction tx{c};
      if (!tx.exec_params("SELECT 1 FROM shardkit_move_markers WHERE move_id = $1 AND bucket = $2 AND marker = $3",
                          record.move_id, ToInt(record.bucket), marker)
               .empty()) {
        return true;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (report_lag && now >= next_report) {
      Progress("catching up", Lag());
      next_report = now + milliseconds(250);
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

void MoveRun::AwaitOlderTransactions(std::chrono::milliseconds timeout, const std::string& why,
                                     const std::string& then, std::string since) {
  pqxx::connection& c = Source();
  if (since.empty()) {
    pqxx::nontransaction tx{c};
    since = tx.exec1("SELECT clock_timestamp()::text")[0].as<std::string>();
  }
  const auto give_up = Clock::now() + timeout;
  auto next_report = Clock::now();
  for (;;) {
    pqxx::read_transaction tx{c};
    const auto older = tx.exec_params(
        "SELECT a.pid, to_char(a.xact_start AT TIME ZONE 'UTC', 'HH24:MI:SS'), coalesce(a.application_name, ''), "
        "left(a.query, 60) FROM pg_stat_activity a WHERE a.datname = current_database() AND "
        "a.backend_type = 'client backend' AND a.pid <> pg_backend_pid() AND a.xact_start < $1::timestamptz "
        "ORDER BY a.xact_start LIMIT 1",
        since);
    if (older.empty()) return;
    if (Clock::now() > give_up) {
      throw MoveError(fmt::format("{}: transaction pid {} on {} (started {} UTC, {}: '{}') {}; it did not end within "
                                  "{} ms: end it, then {}",
                                  Where(), older[0][0].c_str(), impl.ShardLabel(record.source), older[0][1].c_str(),
                                  older[0][2].c_str(), older[0][3].c_str(), why, timeout.count(), then),
                      record.move_id, record.bucket);
    }
    if (Clock::now() >= next_report) {
      Progress(fmt::format("waiting for transaction pid {} (older than this step) to end", older[0][0].c_str()));
      next_report = Clock::now() + std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

void MoveRun::Copy() {
  pqxx::connection& source_c = Source();
  pqxx::connection& target_c = Target();
  if (record.state != MoveState::kCopying) {
    Journal(MoveState::kCopying, fmt::format("publication and slot {} on the source", record.token));
    AfterStep();
  }
  // A copy committed by an earlier run (the 'incoming' row is committed with
  // the rows) whose slot still exists: the stream continues from it.
  const auto mine = OwnershipOf(target_c);
  const bool earlier_copy = mine && mine->state == OwnershipState::kIncoming && mine->move_id == record.move_id;
  if (earlier_copy && SlotExists()) {
    Journal(MoveState::kCopied, "the copy of an earlier run was complete");
    AfterStep();
    return;
  }
  target_known_clean = !earlier_copy;
  Progress("copying");
  const auto tables = RegisteredTables(source_c);
  const int bucket = ToInt(record.bucket);
  // A stale slot of an earlier, interrupted copy: its snapshot is gone.
  DropSlot();
  {
    pqxx::nontransaction tx{source_c};
    if (tx.exec_params("SELECT 1 FROM pg_publication WHERE pubname = $1", record.token).empty()) {
      std::vector<std::string> parts;
      for (const auto& t : tables) parts.push_back(fmt::format("{} WHERE (bucket = {})", t.table, bucket));
      parts.push_back(fmt::format("shardkit_move_markers WHERE (bucket = {})", bucket));
      // TRUNCATE ignores row filters: publish insert, update, delete only.
      tx.exec(fmt::format("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, update, delete')",
                          tx.quote_name(record.token), Join(parts, ", ")));
    }
  }
  const auto copy_start = Clock::now();
  const Dsn source_dsn = WithConnectTimeout(impl.Shard(record.source).AdminDsn(), impl.options.connect_timeout);
  const Dsn target_dsn = WithConnectTimeout(impl.Shard(record.target).AdminDsn(), impl.options.connect_timeout);
  detail::RawConnection replication(detail::WithConnectionOption(source_dsn, "replication", "database"),
                                    impl.ShardLabel(record.source) + " (replication)");
  detail::RawConnection::Rows slot;
  try {
    slot = replication.Exec(fmt::format("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')", record.token),
                            impl.options.slot_timeout);
  } catch (const detail::RawPgError& e) {
    if (!e.timed_out) throw;
    throw MoveError(fmt::format("{}: creating the replication slot waited {} ms for the transactions running on the "
                                "source's server to end (a long transaction there? pg_stat_activity shows it); aborted",
                                Where(), impl.options.slot_timeout.count()),
                    record.move_id, record.bucket);
  }
  if (slot.values.empty() || slot.values[0].size() < 3) {
    throw MoveError(fmt::format("{}: CREATE_REPLICATION_SLOT returned no snapshot", Where()), record.move_id,
                    record.bucket);
  }
  const std::string snapshot = slot.values[0][2];
  detail::RawConnection out(source_dsn, impl.ShardLabel(record.source) + " (copy)");
  detail::RawConnection in(target_dsn, impl.ShardLabel(record.target) + " (copy)");
  out.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  out.Exec(fmt::format("SET TRANSACTION SNAPSHOT '{}'", snapshot));
  in.Exec("BEGIN");
  in.Exec("SET LOCAL session_replication_role = replica");
  // Nothing of this bucket may be on the target yet (checked before); rows
  // of an earlier, aborted copy that could not be cleaned go now.
  for (const auto& t : tables) in.Exec(fmt::format("DELETE FROM {} WHERE bucket = {}", t.table, bucket));
  in.Exec(fmt::format("DELETE FROM shardkit_bucket_ownership WHERE bucket = {} AND state = 'incoming'", bucket));
  in.Exec(fmt::format("INSERT INTO shardkit_bucket_ownership (bucket, state, directory_version, move_id) "
                      "VALUES ({}, 'incoming', 0, {})",
                      bucket, record.move_id));
  std::int64_t copied = 0;
  for (const auto& t : tables) {
    const std::string columns = Join(t.columns, ", ");
    const std::int64_t before = copied;
    copied += out.CopyInto(
        fmt::format("COPY (SELECT {} FROM {} WHERE bucket = {}) TO STDOUT (FORMAT binary)", columns, t.table, bucket),
        in, fmt::format("COPY {} ({}) FROM STDIN (FORMAT binary)", t.table, columns),
        [&](std::int64_t rows) {
          record.rows_copied = before + rows;
          Progress("copying");
        });
    record.rows_copied = copied;
  }
  // Until COMMIT is sent, a failure leaves nothing new on the target; an
  // error reply to COMMIT rolled back too; a lost connection: unknown.
  const bool clean_before = target_known_clean;
  target_known_clean = false;
  try {
    in.Exec("COMMIT");
  } catch (const detail::RawPgError& e) {
    target_known_clean = clean_before && !e.connection_lost;
    throw;
  }
  out.Exec("COMMIT");
  record.rows_copied = copied;
  record.copy_ms = Ms(Clock::now() - copy_start);
  Journal(MoveState::kCopied, fmt::format("{} rows in {:.1f} ms", copied, *record.copy_ms));
  AfterStep();
}

void MoveRun::Subscribe() {
  pqxx::connection& c = Target();
  if (!ObjectExists(c, "SELECT 1 FROM pg_subscription WHERE subname = $1 AND subdbid = "
                       "(SELECT oid FROM pg_database WHERE datname = current_database())")) {
    pqxx::nontransaction tx{c};
    const std::string& source_dsn = impl.Shard(record.source).AdminDsn().Reveal();  // the subscription connects with it
    tx.exec(fmt::format("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (create_slot = false, slot_name = {}, "
                        "copy_data = false, enabled = true)",
                        tx.quote_name(record.token), tx.quote(source_dsn), tx.quote_name(record.token),
                        tx.quote(record.token)));
  }
  Journal(MoveState::kStreaming, "subscription on the target, streaming from the slot");
  AfterStep();
}

void MoveRun::Cutover() {
  // A run that died after retiring: the source refuses writes already.
  if (const auto at_source = OwnershipOf(Source());
      at_source && at_source->state != OwnershipState::kOwned && at_source->move_id == record.move_id) {
    {
      pqxx::read_transaction tx{*catalog};
      const BucketDirectory current = DirectoryIn(tx, impl.ShardCount());
      record.directory_version = current.Version() + (current.ShardOf(record.bucket) == record.source ? 1 : 0);
    }
    Journal(MoveState::kRetired, "the source had retired the bucket in an earlier run");
    AfterStep();
    return;
  }
  // Catch up without stalling anyone, until a marker makes it across
  // quickly: the barrier after the freeze waits about as long as the last
  // one took. Replication lags in bursts (the source's walsender decodes all
  // of its WAL, e.g. another bucket's batched cleanup), and a freeze taken
  // during a burst would stall the bucket's writers for all of it.
  Progress("catching up", Lag());
  const auto catchup_deadline = Clock::now() + impl.options.catchup_timeout;
  int catchup_rounds = 0;
  for (;;) {
    const auto sent = Clock::now();
    const int marker = WriteMarker(Source());
    ++catchup_rounds;
    if (!AwaitMarker(marker, catchup_deadline, true)) {
      throw MoveError(fmt::format("{}: the target did not catch up within {} ms (lag {} bytes); is its subscription "
                                  "running? (pg_stat_subscription on the target)",
                                  Where(), impl.options.catchup_timeout.count(), Lag().value_or(-1)),
                      record.move_id, record.bucket);
    }
    if (Clock::now() - sent <= kQuickMarker || catchup_rounds >= kMaxCatchupRounds) break;
  }
  // Readers that checked the bucket before the source was marked with this
  // move took no read hold (sql/015): wait for them before anything is
  // frozen (no stall yet); later ones hold it, and the handover waits for
  // those.
  Progress("waiting for transactions older than the move");
  std::string marked;
  {
    pqxx::read_transaction tx{Source()};
    const auto rows = tx.exec_params(
        "SELECT updated_at::text FROM shardkit_bucket_ownership WHERE bucket = $1 AND move_id = $2 AND state = 'owned'",
        ToInt(record.bucket), record.move_id);
    if (!rows.empty()) marked = rows[0][0].as<std::string>();
  }
  AwaitOlderTransactions(impl.options.older_transactions_timeout,
                         "began before the move was marked and may read the bucket without a read hold",
                         fmt::format("shardctl move resume {} (or move abort {})", record.move_id, record.move_id),
                         marked);
  // Freeze, draining the writers already in the bucket. Everything that
  // can be is ready before: the connections, the lock timeout, the flip's
  // catalog transaction (BEGIN takes no snapshot), the statements.
  Progress("freezing (draining writers)");
  auto flip_catalog = impl.ConnectCatalog();
  freeze = impl.ConnectAdmin(record.source);
  (void)Target();
  {
    pqxx::nontransaction tx{*freeze};
    tx.exec(fmt::format("SET lock_timeout = {}", std::max<long long>(1, impl.options.drain_timeout.count())));
  }
  auto flip = std::make_unique<pqxx::work>(*flip_catalog);
  // Where the stall goes, step by step (journaled with 'flipped').
  const auto freeze_start = Clock::now();
  std::string laps;
  auto last_lap = freeze_start;
  auto lap = [&](const char* what) {
    const auto now = Clock::now();
    laps += fmt::format("{}{} {:.1f}", laps.empty() ? "" : ", ", what, Ms(now - last_lap));
    last_lap = now;
  };
  int barrier = 0;
  try {
    // One round trip: the exclusive lock (granted once the writers holding
    // the shared one are gone; new ones are refused from the moment it is
    // requested), then the barrier marker, committed after all of them.
    pqxx::nontransaction tx{*freeze};
    barrier = tx.exec(fmt::format("SELECT pg_advisory_lock({0}, {1}); "
                                  "INSERT INTO shardkit_move_markers (move_id, bucket, marker) "
                                  "SELECT {2}, {1}, coalesce(max(marker), 0) + 1 FROM shardkit_move_markers "
                                  "WHERE move_id = {2} RETURNING marker",
                                  kFenceLockKey, ToInt(record.bucket), record.move_id))[0][0]
                  .as<int>();
  } catch (const pqxx::sql_error& e) {
    freeze.reset();
    if (e.sqlstate() == "55P03") {
      throw MoveError(fmt::format("{}: the freeze timed out after {} ms: a transaction kept writing the bucket (a long "
                                  "transaction on the source?); the move was aborted and the data left untouched",
                                  Where(), impl.options.drain_timeout.count()),
                      record.move_id, record.bucket);
    }
    throw;
  }
  lap("freeze+marker");
  bool readers_held = false;
  auto unfreeze = [&] {
    if (!freeze) return;
    try {
      pqxx::nontransaction tx{*freeze};
      if (readers_held) tx.exec_params("SELECT pg_advisory_unlock($1, $2)", kReadHoldLockKey, ToInt(record.bucket));
      tx.exec_params("SELECT pg_advisory_unlock($1, $2)", kFenceLockKey, ToInt(record.bucket));
    } catch (const std::exception&) {
      // Closing the session releases it as well.
    }
    freeze.reset();
  };
  try {
    Progress("frozen: waiting for the barrier");
    if (!AwaitMarker(barrier, Clock::now() + impl.options.barrier_timeout, false)) {
      throw MoveError(fmt::format("{}: the target did not receive the barrier within {} ms of the freeze; unfrozen "
                                  "and aborted",
                                  Where(), impl.options.barrier_timeout.count()),
                      record.move_id, record.bucket);
    }
    lap("barrier");
    // The readers: transactions that checked the bucket hold (21326,
    // bucket) shared until they end; new ones are refused (SK003, frozen)
    // from the moment this waits. Once granted, no transaction can read the
    // bucket here as owned any more after the retirement below.
    try {
      pqxx::nontransaction tx{*freeze};
      tx.exec_params("SELECT pg_advisory_lock($1, $2)", kReadHoldLockKey, ToInt(record.bucket));
      readers_held = true;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() == "55P03") {
        throw MoveError(fmt::format("{}: draining the bucket's readers timed out after {} ms: a transaction kept "
                                    "reading it (a long transaction on the source?); unfrozen and aborted, the data "
                                    "left untouched",
                                    Where(), impl.options.drain_timeout.count()),
                        record.move_id, record.bucket);
      }
      throw;
    }
    lap("readers");
    // The flip lock: one cutover at a time reads and bumps the version.
    flip->exec_params("SELECT pg_advisory_xact_lock($1, 0)", kFlipLockKey);
    const BucketDirectory current = DirectoryIn(*flip, impl.ShardCount());
    lap("flip lock");
    if (current.ShardOf(record.bucket) != record.source) {
      throw MoveError(fmt::format("{}: the catalog's directory (version {}) no longer places the bucket on the source; "
                                  "unfrozen and aborted",
                                  Where(), current.Version()),
                      record.move_id, record.bucket);
    }
    const std::int64_t version = current.Version() + 1;
    {
      // The source keeps the version that gave it the bucket until the
      // flip is in the catalog (DropReplication): a refusal must not name a
      // version routers cannot find yet.
      pqxx::nontransaction tx{*freeze};
      const auto retired = tx.exec_params(
          "UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = $2, "
          "move_id = $3, updated_at = clock_timestamp() WHERE bucket = $1 AND state = 'owned'",
          ToInt(record.bucket), ToInt(record.target), record.move_id);
      if (retired.affected_rows() != 1) {
        throw MoveError(fmt::format("{}: the source no longer owned the bucket at the cutover", Where()),
                        record.move_id, record.bucket);
      }
    }
    record.directory_version = version;
    lap("retire");
    // Journaled now, so that a run resuming from here adds its own wait.
    record.stall_ms = Ms(Clock::now() - freeze_start);
    // From here on the way back is only an explicit abort (while the target
    // does not own the bucket), never an automatic one.
    try {
      Journal(MoveState::kRetired, fmt::format("frozen, readers drained, barrier passed; retired on the source for "
                                               "directory version {}",
                                               version));
      AfterStep();
      MakeTargetOwner();
      lap("owned");
      // The stall ends when the directory says where the bucket is now
      // (routers refused by the source refresh it and go there): counted up
      // to the flip's COMMIT here, to its reply after it.
      record.stall_ms = Ms(Clock::now() - freeze_start);
      if (!CompareAndSetDirectory(*flip, current.Version(), current.WithBucketMoved(record.bucket, record.target))) {
        throw NoAbort("the catalog's directory changed during the flip");
      }
      lap("flip");
      Journal(MoveState::kFlipped,
              fmt::format("directory version {}; writes stalled {:.1f} ms ({}); frozen after {} catch-up marker(s)",
                          version, Ms(Clock::now() - freeze_start), laps, catchup_rounds),
              flip.get());
      flip->commit();
      record.stall_ms = Ms(Clock::now() - freeze_start);  // journaled with the next step
      flip.reset();
      // The source refuses the bucket as retired from now on.
      unfreeze();
    } catch (const HookThrew&) {
      throw;
    } catch (const std::exception& e) {
      throw NoAbort(e.what());
    }
    AfterStep();
  } catch (...) {
    unfreeze();
    throw;
  }
}

void MoveRun::MakeTargetOwner() {
  pqxx::nontransaction tx{Target()};
  const auto owned = tx.exec_params(
      "UPDATE shardkit_bucket_ownership SET state = 'owned', directory_version = $2, new_owner = NULL, "
      "updated_at = clock_timestamp() WHERE bucket = $1 AND move_id = $3 AND state IN ('incoming', 'owned')",
      ToInt(record.bucket), record.directory_version.value_or(0), record.move_id);
  if (owned.affected_rows() != 1) {
    throw MoveError(fmt::format("{}: the target has no 'incoming' row for the bucket to make 'owned'", Where()),
                    record.move_id, record.bucket);
  }
  Journal(MoveState::kOwned, "the target owns the bucket");
  AfterStep();
}

void MoveRun::Flip() {
  auto flip_catalog = impl.ConnectCatalog();
  pqxx::work flip{*flip_catalog};
  flip.exec_params("SELECT pg_advisory_xact_lock($1, 0)", kFlipLockKey);
  const BucketDirectory current = DirectoryIn(flip, impl.ShardCount());
  // The bucket has been refusing writes since the freeze of the run that
  // retired it: that run's stall up to the retirement (journaled with
  // 'retired') plus the time since, by the catalog's clock.
  {
    const auto since = flip.exec_params(
        "SELECT extract(epoch FROM clock_timestamp() - min(at)) * 1000 FROM shardkit_move_events "
        "WHERE move_id = $1 AND state = 'retired'",
        record.move_id);
    if (!since.empty() && !since[0][0].is_null()) {
      record.stall_ms = record.stall_ms.value_or(0) + std::max(0.0, since[0][0].as<double>());
    }
  }
  if (current.ShardOf(record.bucket) == record.target) {
    record.directory_version = current.Version();
    Journal(MoveState::kFlipped, fmt::format("the directory already placed the bucket there (version {})",
                                             current.Version()),
            &flip);
  } else {
    const BucketDirectory next = current.WithBucketMoved(record.bucket, record.target);
    if (!CompareAndSetDirectory(flip, current.Version(), next)) {
      throw MoveError(fmt::format("{}: the catalog's directory changed during the flip; run the resume again", Where()),
                      record.move_id, record.bucket);
    }
    record.directory_version = next.Version();
    Journal(MoveState::kFlipped, fmt::format("directory version {}", next.Version()), &flip);
  }
  flip.commit();
  AfterStep();
}

void MoveRun::DropReplication() {
  Progress("dropping the subscription, slot and publication");
  DropSubscription();
  DropSlot();
  DropPublication();
  for (pqxx::connection* c : {&Source(), &Target()}) {
    pqxx::nontransaction tx{*c};
    tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
  }
  // The catalog has the flip's version now: the source's refusals may
  // name it.
  if (record.directory_version) {
    pqxx::nontransaction tx{Source()};
    tx.exec_params("UPDATE shardkit_bucket_ownership SET directory_version = $3, updated_at = clock_timestamp() "
                   "WHERE bucket = $1 AND move_id = $2 AND state IN ('retired', 'cleaning')",
                   ToInt(record.bucket), record.move_id, *record.directory_version);
  }
  // The target owns the bucket since the flip: its writes take the fence's
  // fast path from now on (sql/014; until this, the slow path admits them).
  SyncFence(Target());
  Journal(MoveState::kReplicationDropped, "no subscription, slot or publication left");
  AfterStep();
}

void MoveRun::Cleanup() {
  if (record.state == MoveState::kReplicationDropped) {
    // The grace period, counted from the flip: routers on the old directory
    // may still read the source's rows (as of the freeze) until then.
    {
      pqxx::read_transaction tx{*catalog};
      const auto rows = tx.exec_params(
          "SELECT greatest(0, extract(epoch FROM (max(at) + make_interval(secs => $2::float8 / 1000)) - "
          "clock_timestamp()) * 1000)::bigint FROM shardkit_move_events WHERE move_id = $1 AND state = 'flipped'",
          record.move_id, static_cast<double>(impl.options.cleanup_grace.count()));
      const auto wait = rows.empty() || rows[0][0].is_null() ? 0 : rows[0][0].as<std::int64_t>();
      if (wait > 0) {
        Progress(fmt::format("grace period: {} ms before the old rows go", wait));
        std::this_thread::sleep_for(milliseconds(wait));
      }
    }
    pqxx::work tx{Source()};
    tx.exec_params("UPDATE shardkit_bucket_ownership SET state = 'cleaning', updated_at = clock_timestamp() "
                   "WHERE bucket = $1 AND state IN ('retired', 'cleaning')",
                   ToInt(record.bucket));
    tx.commit();
    Journal(MoveState::kCleaning, "the source's old rows are not readable any more; deleting them");
    AfterStep();
  }
  pqxx::connection& c = Source();
  // No statement can read the bucket here with a snapshot taken after the
  // retirement (refused); a REPEATABLE READ transaction with an older one
  // still reads it, whole, as of then. The rows are deleted once every
  // transaction older than this point has ended, so that such reads and
  // the deletion never overlap (and a long transaction is named here).
  AwaitOlderTransactions(impl.options.cleanup_wait_timeout, "may still read the old rows",
                         fmt::format("shardctl move resume {}", record.move_id));
  const auto tables = RegisteredTables(c);
  {
    pqxx::nontransaction tx{c};
    tx.exec("SET session_replication_role = replica");
  }
  for (const auto& t : tables) {
    for (;;) {
      pqxx::nontransaction tx{c};
      const auto deleted = tx.exec(
          fmt::format("DELETE FROM {0} WHERE ctid = ANY (ARRAY(SELECT ctid FROM {0} WHERE bucket = {1} LIMIT {2}))",
                      t.table, ToInt(record.bucket), std::max(1, impl.options.delete_batch)));
      record.rows_deleted += deleted.affected_rows();
      Progress(fmt::format("deleting the old rows ({})", record.rows_deleted));
      if (deleted.affected_rows() == 0) break;
    }
  }
  {
    pqxx::nontransaction tx{c};
    tx.exec("SET session_replication_role = origin");
    tx.exec_params("DELETE FROM shardkit_bucket_ownership WHERE bucket = $1 AND state = 'cleaning'",
                   ToInt(record.bucket));
  }
  {
    pqxx::nontransaction tx{Target()};
    tx.exec_params("UPDATE shardkit_bucket_ownership SET move_id = NULL, new_owner = NULL, "
                   "updated_at = clock_timestamp() WHERE bucket = $1 AND move_id = $2",
                   ToInt(record.bucket), record.move_id);
  }
  Journal(MoveState::kDone, fmt::format("{} old rows deleted", record.rows_deleted));
  AfterStep();
}

void MoveRun::Abort(const std::string& reason) {
  // Past the point of no return in fact, whatever the journal says?
  std::optional<BucketOwnership> at_source;
  bool source_up = true;
  if (!source_known_clean) {
    try {
      at_source = OwnershipOf(Source());
    } catch (const ShardUnavailable&) {
      source_up = false;
    }
  }
  // A retired source takes the bucket back only while the target has not
  // owned it (it may have accepted writes since): read on the target, which
  // only this run (holding the move's lock) could change.
  bool take_back = false;
  if (at_source && at_source->move_id == record.move_id && at_source->state != OwnershipState::kOwned) {
    std::optional<BucketOwnership> at_target;
    std::string target_unknown;
    try {
      at_target = OwnershipOf(Target());
    } catch (const std::exception& e) {
      target_unknown = FirstLine(e.what());
    }
    const bool target_took_it = at_target && at_target->state != OwnershipState::kIncoming;
    if (at_source->state != OwnershipState::kRetired || target_took_it || !target_unknown.empty()) {
      throw MoveError(
          fmt::format("{}: cannot abort: the source has retired the bucket ({}) and {}; finish it with shardctl move "
                      "resume {}, then move the bucket back",
                      Where(), OwnershipStateName(at_source->state),
                      !target_unknown.empty()
                          ? fmt::format("whether the target owns it is unknown ({})", target_unknown)
                      : target_took_it ? std::string("the target owns it (it may have accepted writes)")
                                       : std::string("its old rows are being deleted"),
                      record.move_id),
          record.move_id, record.bucket);
    }
    take_back = true;
  }
  record.error = reason;
  if (record.state != MoveState::kAborting) {
    Journal(MoveState::kAborting, reason);
    AfterStep();
  }
  std::vector<std::string> pending;
  // The target: subscription first (it would re-apply what we delete), then
  // the copied rows and the 'incoming' row of this move.
  if (!target_known_clean) try {
    DropSubscription();
    pqxx::connection& c = Target();
    const auto mine = OwnershipOf(c);
    if (!mine || (mine->state == OwnershipState::kIncoming && mine->move_id == record.move_id)) {
      const auto tables = RegisteredTables(c);
      pqxx::work tx{c};
      tx.exec("SET LOCAL session_replication_role = replica");
      for (const auto& t : tables) {
        tx.exec(fmt::format("DELETE FROM {} WHERE bucket = {}", t.table, ToInt(record.bucket)));
      }
      tx.exec_params("DELETE FROM shardkit_bucket_ownership WHERE bucket = $1 AND move_id = $2", ToInt(record.bucket),
                     record.move_id);
      tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
      tx.commit();
    }
  } catch (const std::exception& e) {
    pending.push_back(fmt::format("{} (the subscription, copied rows and 'incoming' row of the bucket): {}",
                                  impl.ShardLabel(record.target), FirstLine(e.what())));
  }
  // The source: slot, publication, markers, and the move's mark; a retired
  // bucket is owned again only once the target's copy is gone (else the
  // next abort does it).
  if (!source_known_clean) try {
    if (!source_up) (void)OwnershipOf(Source());
    DropSlot();
    DropPublication();
    const bool target_clean = pending.empty();
    {
      pqxx::work tx{Source()};
      tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
      tx.exec_params("UPDATE shardkit_bucket_ownership SET state = 'owned', move_id = NULL, new_owner = NULL, "
                     "updated_at = clock_timestamp() WHERE bucket = $1 AND move_id = $2 AND "
                     "(state = 'owned' OR (state = 'retired' AND $3))",
                     ToInt(record.bucket), record.move_id, take_back && target_clean);
      tx.commit();
    }
    if (take_back && target_clean) SyncFence(Source());
  } catch (const std::exception& e) {
    pending.push_back(fmt::format("{} (the replication slot and publication {}): {}", impl.ShardLabel(record.source),
                                  record.token, FirstLine(e.what())));
  }
  if (!pending.empty()) {
    const std::string message =
        fmt::format("{}: the abort could not clean up {}; run shardctl move abort {} again once that is reachable "
                    "(a replication slot left on a source keeps its WAL)",
                    Where(), Join(pending, "; "), record.move_id);
    try {
      record.error = reason + "; " + message;
      Journal(MoveState::kAborting, message);
    } catch (const std::exception&) {
    }
    throw MoveError(message, record.move_id, record.bucket);
  }
  Journal(MoveState::kAborted, reason);
  AfterStep();
}

MoveRecord BucketMover::Impl::Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id) {
  if (ToInt(bucket) < 0 || ToInt(bucket) >= kBucketCount) {
    throw MoveError(fmt::format("bucket {} does not exist (buckets are 0..63)", bucket), std::nullopt, bucket);
  }
  if (ToInt(target) < 0 || ToInt(target) >= ShardCount()) {
    throw MoveError(fmt::format("shard {} does not exist: the configuration ({}) has shards 0..{}", target,
                                config.origin, ShardCount() - 1),
                    std::nullopt, bucket);
  }
  auto catalog = ConnectCatalog();
  const BucketDirectory directory = LoadDirectory(*catalog, ShardCount());
  const ShardId source = directory.ShardOf(bucket);
  if (source == target) {
    throw MoveError(fmt::format("bucket {} is already on shard {} (directory version {})", bucket, target,
                                directory.Version()),
                    std::nullopt, bucket);
  }
  pqxx::work tx{*catalog};
  const auto move_id =
      tx.exec1("SELECT nextval(pg_get_serial_sequence('shardkit_moves', 'move_id'))")[0].as<std::int64_t>();
  const std::string token = fmt::format("shardkit_move_{}_{}", move_id, RandomHex(6));
  try {
    tx.exec_params("INSERT INTO shardkit_moves (move_id, bucket, source, target, state, token, plan_id, requested_by) "
                   "VALUES ($1, $2, $3, $4, 'planned', $5, $6, $7)",
                   move_id, ToInt(bucket), ToInt(source), ToInt(target), token, plan_id, options.requested_by);
    tx.exec_params("INSERT INTO shardkit_move_events (move_id, state, detail) VALUES ($1, 'planned', $2)", move_id,
                   fmt::format("bucket {}: shard {} -> shard {} (directory version {}), by {}", bucket, source, target,
                               directory.Version(), options.requested_by));
    tx.commit();
    if (options.after_step) options.after_step(move_id, MoveState::kPlanned);
  } catch (const pqxx::unique_violation&) {
    tx.abort();
    const auto live = Query(*catalog, fmt::format("WHERE bucket = {} AND state NOT IN ('done', 'aborted')",
                                                  ToInt(bucket)),
                            1);
    throw MoveError(live.empty() ? fmt::format("bucket {} has a live move; see shardctl moves", bucket)
                                 : fmt::format("bucket {} already has a live move: move {} (shard {} -> shard {}, {}); "
                                               "resume or abort it first",
                                               bucket, live[0].move_id, live[0].source, live[0].target,
                                               MoveStateName(live[0].state)),
                    live.empty() ? std::nullopt : std::optional<std::int64_t>(live[0].move_id), bucket);
  }
  return Load(*catalog, move_id);
}

MoveRecord BucketMover::Impl::Run(std::int64_t move_id, bool abort, const std::string& reason) {
  MoveRun run{*this, MoveRecord{}, ConnectCatalog(), nullptr, nullptr, nullptr};
  {
    pqxx::nontransaction tx{*run.catalog};
    if (!tx.exec_params1("SELECT pg_try_advisory_lock($1, $2)", kMoveLockKey, move_id)[0].as<bool>()) {
      const auto holder = tx.exec_params(
          "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local') FROM pg_locks l "
          "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid = $1 AND "
          "l.objid = $2 AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = "
          "current_database())",
          kMoveLockKey, move_id);
      throw MoveError(fmt::format("move {} is being run by another mover{}; wait for it, or stop that process first",
                                  move_id,
                                  holder.empty() ? std::string()
                                                 : fmt::format(" (catalog session pid {}, from {})",
                                                               holder[0][0].c_str(), holder[0][2].c_str())),
                      move_id);
    }
  }
  // Released explicitly on the way out: closing the connection frees it
  // only once the server has noticed, and the next step (a deferred
  // cleanup) may ask for it at once.
  struct Unlock {
    pqxx::connection& catalog;
    std::int64_t move_id;
    ~Unlock() {
      try {
        pqxx::nontransaction tx{catalog};
        tx.exec_params("SELECT pg_advisory_unlock($1, $2)", kMoveLockKey, move_id);
      } catch (const std::exception&) {
        // The connection is gone: so is the lock.
      }
    }
  } unlock{*run.catalog, move_id};
  run.record = Load(*run.catalog, move_id);
  MoveRecord& r = run.record;
  // Nothing was done on either shard before the checks passed, nothing on
  // the target before the copy began.
  run.source_known_clean = r.state == MoveState::kPlanned;
  run.target_known_clean = r.state == MoveState::kPlanned || r.state == MoveState::kPrepared;
  if (r.state == MoveState::kDone) {
    if (abort) {
      throw MoveError(fmt::format("move {} of bucket {} is done: to undo it, move the bucket back (shardctl move {} "
                                  "--to {})",
                                  move_id, r.bucket, r.bucket, r.source),
                      move_id, r.bucket);
    }
    return r;
  }
  if (r.state == MoveState::kAborted) {
    if (abort) return r;
    throw MoveError(fmt::format("move {} of bucket {} was aborted ({}); start a new one", move_id, r.bucket, r.error),
                    move_id, r.bucket);
  }
  if (abort && !CanAbort(r.state)) {
    throw MoveError(fmt::format("move {} of bucket {} cannot be aborted: it is {} (the target owns the bucket and may "
                                "have accepted writes); finish it with shardctl move resume {}, then move the bucket "
                                "back",
                                move_id, r.bucket, MoveStateName(r.state), move_id),
                    move_id, r.bucket);
  }
  try {
    if (abort || r.state == MoveState::kAborting) {
      run.Abort(abort ? reason : (r.error.empty() ? reason : r.error));
      return Load(*run.catalog, move_id);
    }
    for (;;) {
      switch (r.state) {
        case MoveState::kPlanned:
          run.Prepare();
          run.AfterStep();
          break;
        case MoveState::kPrepared:
        case MoveState::kCopying:
          run.Copy();
          break;
        case MoveState::kCopied:
          run.Subscribe();
          break;
        case MoveState::kStreaming:
          run.Cutover();
          break;
        case MoveState::kRetired:
          run.MakeTargetOwner();
          break;
        case MoveState::kOwned:
          run.Flip();
          break;
        case MoveState::kFlipped:
          run.DropReplication();
          break;
        case MoveState::kReplicationDropped:
          if (options.defer_cleanup) return Load(*run.catalog, move_id);
          run.Cleanup();
          break;
        case MoveState::kCleaning:
          run.Cleanup();
          break;
        case MoveState::kDone:
          return Load(*run.catalog, move_id);
        case MoveState::kAborting:
        case MoveState::kAborted:
          return Load(*run.catalog, move_id);
      }
    }
  } catch (const HookThrew& death) {
    std::rethrow_exception(death.error);
  } catch (const std::exception& e) {
    // From 'retired' on only an explicit abort goes back: a step that failed
    // there (making the target the owner) may have taken effect.
    const bool past_return =
        dynamic_cast<const NoAbort*>(&e) != nullptr || !CanAbort(r.state) || r.state == MoveState::kRetired;
    const std::string why = FirstLine(e.what());
    const std::string step = run.step;
    if (past_return || abort) {
      try {
        r.error = why;
        run.Journal(r.state, "stopped: " + why);
      } catch (const std::exception&) {
      }
      if (abort) throw;
      throw MoveError(fmt::format("{} stopped while {} ({}): {}; it is past the point of no return: fix that and run "
                                  "shardctl move resume {}",
                                  run.Where(), step, MoveStateName(r.state), why, move_id),
                      move_id, r.bucket);
    }
    // Before the source retired: roll everything back.
    try {
      run.Abort(why);
    } catch (const HookThrew& death) {
      std::rethrow_exception(death.error);
    } catch (const std::exception& abort_error) {
      throw MoveError(fmt::format("{} failed while {}: {}; rolling it back failed too: {}", run.Where(), step, why,
                                  FirstLine(abort_error.what())),
                      move_id, r.bucket);
    }
    throw MoveError(fmt::format("{} failed while {}: {}; it was aborted: the bucket stays on {}, nothing was left "
                                "behind",
                                run.Where(), step, why, ShardLabel(r.source)),
                    move_id, r.bucket);
  }
}

// --------------------------------------------------------------- public

BucketMover::BucketMover(ClusterConfig config, MoveOptions options) {
  if (!config.catalog_dsn) {
    throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog] dsn: bucket moves keep their journal and the "
                                                 "directory there",
                                                 config.origin));
  }
  Dsn catalog = *config.catalog_dsn;
  impl_ = std::make_unique<Impl>(std::move(config), std::move(catalog), std::move(options));
}

BucketMover::~BucketMover() = default;

const ClusterConfig& BucketMover::Config() const noexcept { return impl_->config; }

MoveRecord BucketMover::Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id) {
  return impl_->Plan(bucket, target, plan_id);
}

MoveRecord BucketMover::Move(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id) {
  const MoveRecord planned = impl_->Plan(bucket, target, plan_id);
  return impl_->Run(planned.move_id, false, {});
}

MoveRecord BucketMover::Resume(std::int64_t move_id) { return impl_->Run(move_id, false, {}); }

MoveRecord BucketMover::Abort(std::int64_t move_id, const std::string& reason) {
  return impl_->Run(move_id, true, reason);
}

std::optional<MoveRecord> BucketMover::Get(std::int64_t move_id) {
  auto catalog = impl_->ConnectCatalog();
  const auto found = impl_->Query(*catalog, fmt::format("WHERE move_id = {}", move_id), 1);
  if (found.empty()) return std::nullopt;
  return found.front();
}

std::vector<MoveRecord> BucketMover::List(bool live_only, int limit) {
  auto catalog = impl_->ConnectCatalog();
  return impl_->Query(*catalog, live_only ? "WHERE state NOT IN ('done', 'aborted')" : "", std::max(1, limit));
}

std::vector<MoveEvent> BucketMover::Events(std::int64_t move_id) {
  auto catalog = impl_->ConnectCatalog();
  pqxx::read_transaction tx{*catalog};
  std::vector<MoveEvent> out;
  for (const auto& row : tx.exec_params(
           "SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), state, detail "
           "FROM shardkit_move_events WHERE move_id = $1 ORDER BY event_no",
           move_id)) {
    MoveEvent e;
    e.at = row[0].as<std::string>();
    e.state = ParseMoveState(row[1].c_str()).value_or(MoveState::kPlanned);
    e.detail = row[2].as<std::string>();
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> LeftoverReplicationObjects(const ClusterConfig& config) {
  std::vector<std::string> found;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    const auto& shard = config.shards[i];
    try {
      pqxx::connection c{WithConnectTimeout(shard.AdminDsn(), std::chrono::milliseconds(5000)).Reveal()};
      pqxx::read_transaction tx{c};
      for (const auto& row : tx.exec(
               "SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE slot_name LIKE 'shardkit\\_move\\_%' "
               "AND database = current_database() "
               "UNION ALL SELECT 'publication ' || pubname FROM pg_publication WHERE pubname LIKE 'shardkit\\_move\\_%' "
               "UNION ALL SELECT 'subscription ' || subname FROM pg_subscription WHERE subname LIKE "
               "'shardkit\\_move\\_%' AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
               "ORDER BY 1")) {
        found.push_back(fmt::format("{} on {}", row[0].c_str(), shard.name));
      }
    } catch (const std::exception& e) {
      found.push_back(fmt::format("{} unreachable: {}", shard.name, FirstLine(e.what())));
    }
  }
  return found;
}

}  // namespace shardkit
