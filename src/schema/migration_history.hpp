// A server's history of migrations, its table shardkit_migrations: one row
// per set (migrate.hpp: kLibraryMigrations, kApplicationMigrations) and version, written with the migration's own
// transaction (or, step by step, after each step), and read together with the server's INVALID indexes.
#pragma once

#include <pqxx/connection>
#include <pqxx/transaction_base>
#include <string>
#include <string_view>

#include "shardkit/schema/migrate.hpp"

namespace shardkit::detail {

// Creates the table if it does not exist, or gives a history from before
// the sets its set column, in a transaction of its own.
void CreateHistoryTable(pqxx::connection_base& connection);

// The row of `set`'s `m`, inserted or replaced (applied_at: now()). An
// empty `error` is stored as NULL.
void WriteHistory(pqxx::transaction_base& tx, std::string_view set, const Migration& m, bool transactional,
                  bool success, int steps_done, int steps_total, double duration_ms, const std::string& applied_by,
                  const std::string& error);

// Progress of a step-by-step migration: steps 1..steps_done are applied.
void WriteStepsDone(pqxx::transaction_base& tx, std::string_view set, int version, int steps_done);

// The server's history of `set` (if it has the table) and its INVALID
// indexes, into `out` (history, has_history, invalid_indexes), in one read
// transaction.
void ReadServer(pqxx::connection_base& connection, std::string_view set, ServerMigrationStatus& out);

}  // namespace shardkit::detail
