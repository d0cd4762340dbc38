// After the cutover: the flip of a run that resumes with the target owning
// the bucket, and the deletion of the source's old rows.
#include "resharding/move_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::mover {

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
    Journal(MoveState::kFlipped,
            fmt::format("the directory already placed the bucket there (version {})", current.Version()), &flip);
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
    tx.exec_params(
        "UPDATE shardkit_bucket_ownership SET state = 'cleaning', updated_at = clock_timestamp() "
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
    tx.exec_params(
        "UPDATE shardkit_bucket_ownership SET move_id = NULL, new_owner = NULL, "
        "updated_at = clock_timestamp() WHERE bucket = $1 AND move_id = $2",
        ToInt(record.bucket), record.move_id);
  }
  Journal(MoveState::kDone, fmt::format("{} old rows deleted", record.rows_deleted));
  AfterStep();
}

}  // namespace shardkit::detail::mover
