// A pipelined call (pg/pipelined_statement.hpp) that a COMMIT may be part
// of, driven to its end within a deadline. A primary waits at COMMIT for its
// synchronous standby, past any statement_timeout; at the deadline (at least
// a grace period after the call began) the wait is cancelled, which the
// server answers with a warning and a commit on the primary only (a
// SyncStandbyWatch on the connection sees it).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "pg/pipelined_statement.hpp"
#include "shardkit/pool/pool.hpp"

namespace shardkit::detail {

struct BoundedAnswer {
  std::optional<pg::Rows> rows;   // the call's rows, unless it was cancelled and failed
  std::optional<pg::Rows> setup;  // PipelinedStatement::SetupRows()
  bool cancelled = false;         // the deadline passed and a cancel was sent
  std::string failure;            // after a cancel: how the call failed (empty: it did not)
};

// Runs `request` on the lease's connection. Failures are thrown as the
// pipelined call throws them (the lease discarded when its connection
// cannot be reused), except a connection lost after a cancel: returned in
// `failure` (the lease discarded), as the outcome of a COMMIT then is open.
// `commit_queued` is set even when it throws.
BoundedAnswer RunBounded(ConnectionPool::Lease& lease, const PipelineRequest& request,
                         std::chrono::steady_clock::time_point deadline, bool& commit_queued);

}  // namespace shardkit::detail
