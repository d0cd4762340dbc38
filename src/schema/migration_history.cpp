// The history table of a server (migration_history.hpp).
#include "schema/migration_history.hpp"

#include <pqxx/pqxx>
#include <utility>

namespace shardkit::detail {
namespace {

constexpr const char* kHistoryDdl = R"(
CREATE TABLE IF NOT EXISTS shardkit_migrations (
  migration_set text        NOT NULL,
  version       integer     NOT NULL CHECK (version >= 1),
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
  error         text,
  PRIMARY KEY (migration_set, version)
);
COMMENT ON TABLE shardkit_migrations IS
  'shardkit schema migrations applied to this database (shardctl migrate): one row per set (shardkit: the library''s own, app: the application''s) and version; success = false: the last attempt failed, steps_done says how far a non-transactional one got';
)";

// A history from before the library's migrations were a set of their own
// (one sequence held both) gets the set column: its rows of the library's
// versions are the library's, the others the application's.
constexpr const char* kAddSetColumn = "ALTER TABLE shardkit_migrations ADD COLUMN migration_set text";
constexpr const char* kFillSetColumn =
    "UPDATE shardkit_migrations SET migration_set = CASE WHEN version = ANY ($1::int[]) THEN 'shardkit' ELSE 'app' END";
constexpr const char* kKeyBySet =
    "ALTER TABLE shardkit_migrations ALTER COLUMN migration_set SET NOT NULL, DROP CONSTRAINT "
    "shardkit_migrations_pkey, "
    "ADD PRIMARY KEY (migration_set, version)";

constexpr const char* kUpsertHistory = R"(
INSERT INTO shardkit_migrations AS h (migration_set, version, name, checksum, transactional, success, steps_done,
                                      steps_total, applied_at, duration_ms, applied_by, db_user, error)
VALUES ($11, $1, $2, $3, $4, $5, $6, $7, now(), $8, $9, current_user, NULLIF($10, ''))
ON CONFLICT (migration_set, version) DO UPDATE SET
  name = EXCLUDED.name, checksum = EXCLUDED.checksum, transactional = EXCLUDED.transactional,
  success = EXCLUDED.success, steps_done = EXCLUDED.steps_done, steps_total = EXCLUDED.steps_total,
  applied_at = EXCLUDED.applied_at, duration_ms = EXCLUDED.duration_ms, applied_by = EXCLUDED.applied_by,
  db_user = EXCLUDED.db_user, error = EXCLUDED.error
)";

constexpr const char* kReadHistory = R"(
SELECT version, name, checksum, success, transactional, steps_done, steps_total,
       to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       coalesce(duration_ms, 0), applied_by, coalesce(error, '')
FROM shardkit_migrations WHERE migration_set = $1 ORDER BY version
)";

// The same from a history without sets (the rule of kFillSetColumn).
constexpr const char* kReadHistoryWithoutSets = R"(
SELECT version, name, checksum, success, transactional, steps_done, steps_total,
       to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       coalesce(duration_ms, 0), applied_by, coalesce(error, '')
FROM shardkit_migrations WHERE (version = ANY ($2::int[])) = ($1 = 'shardkit') ORDER BY version
)";

constexpr const char* kHasSets = R"(
SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = 'shardkit_migrations'::regclass AND attname = 'migration_set' AND NOT attisdropped)
)";

// The library's versions as an int[] literal.
std::string LibraryVersions() {
  std::string out = "{";
  for (const Migration& m : MigrationSet::Library().All()) {
    out += (out.size() > 1 ? "," : "") + std::to_string(m.version);
  }
  return out + "}";
}

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
  const bool exists = tx.exec1("SELECT to_regclass('shardkit_migrations') IS NOT NULL")[0].as<bool>();
  if (!exists) {
    tx.exec0(kHistoryDdl);
  } else if (!tx.exec1(kHasSets)[0].as<bool>()) {
    tx.exec0(kAddSetColumn);
    tx.exec_params0(kFillSetColumn, LibraryVersions());
    tx.exec0(kKeyBySet);
  }
  tx.commit();
}

void WriteHistory(pqxx::transaction_base& tx, std::string_view set, const Migration& m, bool transactional,
                  bool success, int steps_done, int steps_total, double duration_ms, const std::string& applied_by,
                  const std::string& error) {
  tx.exec_params0(kUpsertHistory, m.version, m.name, m.checksum, transactional, success, steps_done, steps_total,
                  duration_ms, applied_by, error, std::string(set));
}

void WriteStepsDone(pqxx::transaction_base& tx, std::string_view set, int version, int steps_done) {
  tx.exec_params0("UPDATE shardkit_migrations SET steps_done = $2 WHERE version = $1 AND migration_set = $3", version,
                  steps_done, std::string(set));
}

void ReadServer(pqxx::connection_base& connection, std::string_view set, ServerMigrationStatus& out) {
  pqxx::read_transaction tx{connection};
  out.history.clear();
  out.invalid_indexes.clear();
  out.has_history = tx.exec1("SELECT to_regclass('shardkit_migrations') IS NOT NULL")[0].as<bool>();
  if (out.has_history) {
    const bool has_sets = tx.exec1(kHasSets)[0].as<bool>();
    const pqxx::result rows = has_sets ? tx.exec_params(kReadHistory, std::string(set))
                                       : tx.exec_params(kReadHistoryWithoutSets, std::string(set), LibraryVersions());
    for (const auto& row : rows) {
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
