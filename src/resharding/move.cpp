#include "shardkit/resharding/move.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "pg/raw_pg.hpp"
#include "resharding/move_run.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/primaries.hpp"

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
// wal_writer_delay (200 ms by default), most of a cutover's stall.
//
// Here: planning a move, the run's state machine and the public API. The
// steps are beside it (move_copy.cpp, move_replication.cpp, move_cutover.cpp,
// move_cleanup.cpp, move_abort.cpp), the journal in move_journal.cpp, and
// what they share in move_run.hpp.

namespace shardkit {
namespace {

constexpr int kMoveLockKey = 21324;  // (21324, move_id): the process running a move

}  // namespace

using detail::FirstLine;
using detail::mover::HookThrew;
using detail::mover::MoveRun;
using detail::mover::NoAbort;
using detail::mover::RandomHex;

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
    throw MoveError(
        fmt::format("bucket {} is already on shard {} (directory version {})", bucket, target, directory.Version()),
        std::nullopt, bucket);
  }
  pqxx::work tx{*catalog};
  const auto move_id =
      tx.exec1("SELECT nextval(pg_get_serial_sequence('shardkit_moves', 'move_id'))")[0].as<std::int64_t>();
  const std::string token = fmt::format("shardkit_move_{}_{}", move_id, RandomHex(6));
  try {
    tx.exec_params(
        "INSERT INTO shardkit_moves (move_id, bucket, source, target, state, token, plan_id, requested_by) "
        "VALUES ($1, $2, $3, $4, 'planned', $5, $6, $7)",
        move_id, ToInt(bucket), ToInt(source), ToInt(target), token, plan_id, options.requested_by);
    tx.exec_params("INSERT INTO shardkit_move_events (move_id, state, detail) VALUES ($1, 'planned', $2)", move_id,
                   fmt::format("bucket {}: shard {} -> shard {} (directory version {}), by {}", bucket, source, target,
                               directory.Version(), options.requested_by));
    tx.commit();
    if (options.after_step) options.after_step(move_id, MoveState::kPlanned);
  } catch (const pqxx::unique_violation&) {
    tx.abort();
    const auto live =
        Query(*catalog, fmt::format("WHERE bucket = {} AND state NOT IN ('done', 'aborted')", ToInt(bucket)), 1);
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
      throw MoveError(
          fmt::format("move {} is being run by another mover{}; wait for it, or stop that process first", move_id,
                      holder.empty() ? std::string()
                                     : fmt::format(" (catalog session pid {}, from {})", holder[0][0].c_str(),
                                                   holder[0][2].c_str())),
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
  impl_ = std::make_unique<Impl>(AtCurrentPrimaries(config), std::move(catalog), std::move(options));
}

BucketMover::~BucketMover() = default;

const ClusterConfig& BucketMover::Config() const noexcept {
  return impl_->config;
}

MoveRecord BucketMover::Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id) {
  return impl_->Plan(bucket, target, plan_id);
}

MoveRecord BucketMover::Move(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id) {
  const MoveRecord planned = impl_->Plan(bucket, target, plan_id);
  return impl_->Run(planned.move_id, false, {});
}

MoveRecord BucketMover::Resume(std::int64_t move_id) {
  return impl_->Run(move_id, false, {});
}

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
  for (const auto& row :
       tx.exec_params("SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), state, detail "
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

}  // namespace shardkit
