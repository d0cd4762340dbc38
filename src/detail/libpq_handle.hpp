// The libpq handle behind a libpqxx connection, for the few paths that talk
// to libpq directly (COPY buffers, pipelined scatter statements): libpqxx 6
// keeps it private. Whoever uses it must leave the session as libpqxx
// expects it: no result pending, no COPY or pipeline left open, and no
// libpqxx call on the connection meanwhile.
#pragma once

#include <libpq-fe.h>

namespace pqxx {
class connection_base;
}

namespace shardkit::detail {

[[nodiscard]] PGconn* LibpqHandle(const pqxx::connection_base& connection) noexcept;

}  // namespace shardkit::detail
