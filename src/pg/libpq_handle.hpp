// The libpq handle behind a libpqxx connection, for the few paths that talk
// to libpq directly (COPY buffers; pipelined statements, whose results are
// read as pg::Rows, shardkit/pg/rows.hpp), found through libpqxx's public
// extension points: a pool connection's connection policy sees its handle
// (pooled_connection.hpp) and publishes it here; a transaction's handle
// comes from libpqxx's largeobject. Whoever uses it must leave the session
// as libpqxx expects it: no result pending, no COPY or pipeline left open,
// and no libpqxx call on the connection meanwhile.
#pragma once

#include <libpq-fe.h>

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

// Whether the server reported default_transaction_read_only = on to this
// session (PostgreSQL 14 and later report it at connection start and after
// a change): a failover's fence sets it on the old primary. False for a
// connection no pool opened.
[[nodiscard]] bool ReportsReadOnly(const pqxx::connection_base& connection) noexcept;

// For the pool: from now on LibpqHandle(connection) reads *slot (the
// policy keeps it current); until Forget.
void PublishHandle(const pqxx::connection_base& connection, PGconn* const* slot);
void ForgetHandle(const pqxx::connection_base& connection) noexcept;

}  // namespace shardkit::detail
