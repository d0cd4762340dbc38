// The migrator's lock on a server: one pg_advisory_lock per database, held
// by the run's session there for the whole run, so two migrators never
// interleave on a server.
#pragma once

#include <chrono>
#include <map>
#include <pqxx/connection>
#include <string>

#include "shardkit/schema/migrate.hpp"

namespace shardkit::detail {

// Takes the lock on `server` through `connection`, waiting up to `timeout`
// for another migrator to let go; throws MigrationError naming the holder
// when it does not. `mine`: backend pid -> server name of the sessions this
// run has locked already. If one of them holds this lock, two configured
// servers are one database (MigrationError at once: waiting would only time
// out).
void TakeLock(pqxx::connection_base& connection, const MigrationServer& server, std::chrono::milliseconds timeout,
              const std::map<int, std::string>& mine);

}  // namespace shardkit::detail
