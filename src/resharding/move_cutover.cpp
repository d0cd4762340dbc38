// The cutover: catching up, the freeze, the barrier, the readers' drain,
// the retirement on the source, the target's ownership and the flip.
#include "resharding/move_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::mover {
namespace {

// The cutover freezes once a catch-up marker crossed within kQuickMarker,
// or after kMaxCatchupRounds markers whatever they took.
constexpr auto kQuickMarker = milliseconds(50);
constexpr int kMaxCatchupRounds = 20;

}  // namespace

void MoveRun::AwaitOlderTransactions(std::chrono::milliseconds timeout, const std::string& why, const std::string& then,
                                     std::string since) {
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
    barrier =
        tx.exec(fmt::format("SELECT pg_advisory_lock({0}, {1}); "
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

}  // namespace shardkit::detail::mover
