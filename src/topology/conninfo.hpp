// A standby's primary_conninfo: libpq connection strings taken apart and put
// together again, and the one with which a standby follows another primary
// (failover.cpp re-points replicas with it, replica_rebuild.cpp writes it
// for a rebuilt server).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/core/dsn.hpp"

namespace shardkit::detail {

// A libpq connection string's keywords and values, in libpq's order (set
// ones only).
using Conninfo = std::vector<std::pair<std::string, std::string>>;

// Throws Error (the string, redacted, and libpq's reason) if libpq cannot
// parse it.
[[nodiscard]] Conninfo ParseConninfo(const std::string& text);
[[nodiscard]] std::string ConninfoGet(const Conninfo& c, std::string_view key);
// Sets `key` (removes it when `value` is empty).
void ConninfoSet(Conninfo& c, const std::string& key, const std::string& value);
// key='value' pairs, quoted as libpq reads them.
[[nodiscard]] std::string ConninfoText(const Conninfo& c);

// The primary_conninfo with which a standby follows `to`: the one it has
// (user, password or passfile, application_name, TLS settings: what let it
// stream from the old primary) with the address replaced by `to`'s
// configured one. A Unix socket directory is kept when the old and new
// primaries' configured hosts are the same machine's (a lab's servers on
// one host, whose pg_hba lets replication in through the socket only).
// Without a user, the configured dsn's user and password; without an
// application_name, `replica` (the standby's name).
[[nodiscard]] std::string FollowConninfo(const std::string& current, const Dsn& old_primary, const Dsn& to,
                                         const std::string& replica);

}  // namespace shardkit::detail
