// The history table of a server (migration_history.hpp).
#include "schema/migration_history.hpp"

#include <pqxx/pqxx>
#include <utility>

namespace shardkit::detail {
namespace {

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

}  // namespace

void CreateHistoryTable(pqxx::connection_base& connection) {
  pqxx::work tx{connection, "create history"};
  tx.exec0(kHistoryDdl);
  tx.commit();
}

void WriteHistory(pqxx::transaction_base& tx, const Migration& m, bool transactional, bool success, int steps_done,
                  int steps_total, double duration_ms, const std::string& applied_by, const std::string& error) {
  tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, transactional, success, steps_done, steps_total,
                  duration_ms, applied_by, error);
}

void WriteStepsDone(pqxx::transaction_base& tx, int version, int steps_done) {
  tx.exec_params0("UPDATE shardkit_migrations SET steps_done = $2 WHERE version = $1", version, steps_done);
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

}  // namespace shardkit::detail
