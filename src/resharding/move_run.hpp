// What the mover's steps share (move.cpp and the move_*.cpp beside it):
// BucketMover::Impl, one run of one move (MoveRun) and the journal's helpers.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pg/server_message.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::mover {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr int kFlipLockKey = 21325;  // (21325, 0): directory flips, one at a time

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

std::string DefaultRequester();
double Ms(Clock::duration d);
MoveRecord ToRecord(const pqxx::row& row);
BucketDirectory DirectoryIn(pqxx::transaction_base& tx, int shard_count);

// Column lists of the registered tables, for the schema check and the copy.
struct TableColumns {
  std::string table;                    // quoted as regclass::text gives it
  std::vector<std::string> columns;     // quoted names, in attribute order
  std::vector<std::string> definition;  // "name type [not null]"
};

std::vector<TableColumns> RegisteredTables(pqxx::connection_base& c);
std::string Join(const std::vector<std::string>& parts, std::string_view separator);
std::string RandomHex(int digits);

}  // namespace shardkit::detail::mover

namespace shardkit {

struct BucketMover::Impl {
  Impl(ClusterConfig c, Dsn catalog, MoveOptions o)
      : config(std::move(c)), catalog_dsn(std::move(catalog)), options(std::move(o)) {
    if (options.requested_by.empty()) options.requested_by = detail::mover::DefaultRequester();
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
      throw CatalogError(fmt::format("the catalog ({}) is unreachable: {}", dsn, detail::FirstLine(e.what())));
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
      throw ShardUnavailable(
          s, fmt::format("{} is unreachable ({}): {}", ShardLabel(s), dsn, detail::FirstLine(e.what())));
    }
  }

  std::vector<MoveRecord> Query(pqxx::connection_base& catalog, const std::string& where, int limit) const {
    pqxx::read_transaction tx{catalog};
    std::vector<MoveRecord> out;
    for (const auto& row : tx.exec(fmt::format("SELECT {} FROM shardkit_moves {} ORDER BY move_id DESC LIMIT {}",
                                               detail::mover::kRecordColumns, where, limit))) {
      out.push_back(detail::mover::ToRecord(row));
    }
    return out;
  }
  MoveRecord Load(pqxx::connection_base& catalog, std::int64_t move_id) const {
    pqxx::read_transaction tx{catalog};
    const auto rows = tx.exec_params(
        fmt::format("SELECT {} FROM shardkit_moves WHERE move_id = $1", detail::mover::kRecordColumns), move_id);
    if (rows.empty()) throw MoveError(fmt::format("there is no move {} (shardctl moves lists them)", move_id), move_id);
    return detail::mover::ToRecord(rows[0]);
  }

  MoveRecord Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id);
  MoveRecord Run(std::int64_t move_id, bool abort, const std::string& reason);
};

}  // namespace shardkit

namespace shardkit::detail::mover {

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
    return fmt::format("move {} of bucket {} ({} -> {})", record.move_id, record.bucket, impl.ShardLabel(record.source),
                       impl.ShardLabel(record.target));
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
  bool SlotExists() { return ObjectExists(Source(), "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1"); }
  void DropSlot();
  void DropSubscription();
  void DropPublication() {
    pqxx::nontransaction tx{Source()};
    tx.exec("DROP PUBLICATION IF EXISTS " + tx.quote_name(record.token));
  }
  int WriteMarker(pqxx::connection& c) {
    pqxx::nontransaction tx{c};
    return tx
        .exec_params1(
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

}  // namespace shardkit::detail::mover
