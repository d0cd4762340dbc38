// Statements on several connections in one round trip: each connection's
// statements are sent at once in libpq's pipeline mode (a Sync after each,
// so each runs as the session would run it on its own: BEGIN keeps its
// transaction open across them, COMMIT PREPARED is not in a block), every
// connection's before any is read. A cross-shard transaction's BEGINs,
// PREPAREs and COMMIT PREPAREDs take one round trip whatever the shard count.
#pragma once

#include <libpq-fe.h>

#include <optional>
#include <string>
#include <vector>

namespace shardkit::detail {

// One connection's answer.
struct EachAnswer {
  bool failed = false;
  bool connection_lost = false;           // the connection is gone (no SQLSTATE)
  int failed_statement = -1;              // the index of the first statement that failed
  std::string sqlstate;                   // its SQLSTATE
  std::string message;                    // its error message (first line)
  std::optional<std::string> last_value;  // the last statement's first field of its first row
};

// statements[i] on connections[i] (all in blocking mode, idle, not in
// pipeline mode; they are left so). No statement takes parameters.
[[nodiscard]] std::vector<EachAnswer> PipelinedOnEach(const std::vector<PGconn*>& connections,
                                                      const std::vector<std::vector<std::string>>& statements);

}  // namespace shardkit::detail
