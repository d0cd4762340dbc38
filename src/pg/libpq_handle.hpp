// The libpq handle behind a libpqxx connection, for the few paths that talk
// to libpq directly (COPY buffers, pipelined scatter statements), found
// through libpqxx's public extension points: a pool connection's connection
// policy sees its handle (pooled_connection.hpp) and publishes it here; a
// transaction's handle comes from libpqxx's largeobject. Whoever uses it must
// leave the session as libpqxx expects it: no result pending, no COPY or
// pipeline left open, and no libpqxx call on the connection meanwhile.
#pragma once

#include <libpq-fe.h>

#include <string>

#include <pqxx/result>

namespace pqxx {
class connection_base;
class dbtransaction;
}  // namespace pqxx

namespace shardkit::detail {

// The handle of a connection opened by a ConnectionPool; nullptr once it is
// closed, and for a connection no pool opened.
[[nodiscard]] PGconn* LibpqHandle(const pqxx::connection_base& connection) noexcept;
// The handle of the connection a transaction runs on (any connection).
[[nodiscard]] PGconn* LibpqHandle(const pqxx::dbtransaction& transaction) noexcept;

// For the pool: from now on LibpqHandle(connection) reads *slot (the
// policy keeps it current); until Forget.
void PublishHandle(const pqxx::connection_base& connection, PGconn* const* slot);
void ForgetHandle(const pqxx::connection_base& connection) noexcept;

// Wraps a result read from that handle as a pqxx::result (which takes
// ownership), with the connection's client encoding, as libpqxx itself
// would. No status check: the caller has looked at PQresultStatus.
[[nodiscard]] pqxx::result AdoptResult(pqxx::connection_base& connection, PGresult* result, const std::string& query);

}  // namespace shardkit::detail
