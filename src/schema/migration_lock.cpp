// The migrator's advisory lock on a server (migration_lock.hpp).
#include "schema/migration_lock.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <pqxx/pqxx>

#include "pg/server_message.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

// pg_advisory_lock key of the migrator: "SHKMIGRT". Advisory locks are per
// database, so this is one lock per server.
constexpr std::int64_t kLockKey = 0x53484B4D49475254;

// Who holds the migration lock on this database, for the message.
struct Holder {
  int pid = 0;
  std::string text;
};

Holder LockHolder(pqxx::connection_base& connection) {
  try {
    pqxx::nontransaction tx{connection};
    const auto rows = tx.exec_params(
        "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''), "
        "coalesce(host(a.client_addr), 'local socket'), "
        "to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = $1::oid AND l.objid = $2::oid",
        std::to_string(static_cast<std::uint64_t>(kLockKey) >> 32),
        std::to_string(static_cast<std::uint64_t>(kLockKey) & 0xFFFFFFFFU));
    if (rows.empty()) return {0, "the holder has just let go"};
    const auto& r = rows[0];
    return {r[0].as<int>(), fmt::format("held by pid {}, application '{}', user {}, from {}, connected since {} UTC",
                                        r[0].as<int>(), r[1].as<std::string>(), r[2].as<std::string>(),
                                        r[3].as<std::string>(), r[4].as<std::string>())};
  } catch (const std::exception& e) {
    return {0, "holder unknown: " + ErrorText(e)};
  }
}

}  // namespace

void TakeLock(pqxx::connection_base& connection, const MigrationServer& server, std::chrono::milliseconds timeout,
              const std::map<int, std::string>& mine) {
  bool locked = false;
  {
    pqxx::nontransaction tx{connection};
    locked = tx.exec_params1("SELECT pg_try_advisory_lock($1)", kLockKey)[0].as<bool>();
  }
  if (!locked) {
    const Holder holder = LockHolder(connection);
    if (const auto it = mine.find(holder.pid); it != mine.end()) {
      throw MigrationError(fmt::format("{} and {} are the same database (this run holds its migration lock through "
                                       "{}): give one database one connection string in the configuration, so it "
                                       "is one server with both roles",
                                       server.name, it->second, it->second),
                           server.name);
    }
  }
  try {
    if (!locked && timeout.count() > 0) {
      pqxx::nontransaction tx{connection};
      tx.exec0(fmt::format("SET lock_timeout = {}", timeout.count()));
      tx.exec_params("SELECT pg_advisory_lock($1)", kLockKey);
      tx.exec0("RESET lock_timeout");
      locked = true;
    }
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() != "55P03") throw;  // lock_not_available: the timeout
  }
  if (!locked) {
    throw MigrationError(fmt::format("{}: another migrator holds the migration lock ({}); waited {} ms. Let it "
                                     "finish and run again, or wait longer (--lock-timeout)",
                                     server.name, LockHolder(connection).text, timeout.count()),
                         server.name);
  }
}

}  // namespace shardkit::detail
