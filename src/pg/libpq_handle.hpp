// The libpq handle behind a libpqxx connection, for the few paths that talk
// to libpq directly (COPY buffers, pipelined scatter statements): libpqxx 6
// keeps it private. Whoever uses it must leave the session as libpqxx
// expects it: no result pending, no COPY or pipeline left open, and no
// libpqxx call on the connection meanwhile.
#pragma once

#include <libpq-fe.h>

#include <string>

#include <pqxx/result>

namespace pqxx {
class connection_base;
}

namespace shardkit::detail {

[[nodiscard]] PGconn* LibpqHandle(const pqxx::connection_base& connection) noexcept;

// Wraps a result read from that handle as a pqxx::result (which takes
// ownership), with the connection's client encoding, as libpqxx itself
// would. No status check: the caller has looked at PQresultStatus.
[[nodiscard]] pqxx::result AdoptResult(pqxx::connection_base& connection, PGresult* result, const std::string& query);

}  // namespace shardkit::detail
