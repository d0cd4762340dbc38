// A move's first steps: the checks of source and target, and the copy of
// the bucket's rows as of the replication slot's snapshot.
#include "resharding/move_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <utility>

#include "pg/raw_pg.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::mover {

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
      at_target != nullptr &&
      !(at_target->state == OwnershipState::kIncoming && at_target->move_id == record.move_id)) {
    throw MoveError(
        fmt::format("{}: the target already has the bucket ({}{}); wait for that move to finish or abort it", Where(),
                    OwnershipStateName(at_target->state),
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
      return tx
          .exec1(
              "SELECT coalesce(max(version), 0) || ' ' || coalesce(md5(string_agg(version || checksum, ',' "
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
    tx.exec_params(
        "UPDATE shardkit_bucket_ownership SET updated_at = clock_timestamp() WHERE bucket = $1 AND "
        "move_id = $2 AND state = 'owned'",
        ToInt(record.bucket), record.move_id);
  }
  Journal(MoveState::kPrepared,
          fmt::format("{} sharded tables, schemas equal; source marked with the move", source_tables.size()));
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
    slot =
        replication.Exec(fmt::format("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')", record.token),
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
  in.Exec(
      fmt::format("INSERT INTO shardkit_bucket_ownership (bucket, state, directory_version, move_id) "
                  "VALUES ({}, 'incoming', 0, {})",
                  bucket, record.move_id));
  std::int64_t copied = 0;
  for (const auto& t : tables) {
    const std::string columns = Join(t.columns, ", ");
    const std::int64_t before = copied;
    copied += out.CopyInto(
        fmt::format("COPY (SELECT {} FROM {} WHERE bucket = {}) TO STDOUT (FORMAT binary)", columns, t.table, bucket),
        in, fmt::format("COPY {} ({}) FROM STDIN (FORMAT binary)", t.table, columns), [&](std::int64_t rows) {
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

}  // namespace shardkit::detail::mover
