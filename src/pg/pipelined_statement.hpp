// One statement on a pooled connection in one round trip: libpq pipeline
// mode sends the transaction's BEGIN [READ ONLY] and SET LOCAL
// statement_timeout, the statement (extended protocol, text parameters, so a
// single statement is enforced and values are never spliced into SQL), the
// COMMIT and a Sync together, and reads the results back in order. The
// server runs them one after another as if sent one by one; after a failing
// step it skips the rest up to the Sync.
//
// Blocking, on a thread of its own:
//   bool reusable = true;
//   pg::Rows rows = detail::RunPipelined(lease.Connection(), request, reusable);
//   if (!reusable) lease.Discard();
// Non-blocking, many connections driven from one thread (poll Socket() for
// input, and for output while WantsWrite()):
//   detail::PipelinedStatement call{lease.Connection(), request, /*nonblocking=*/true};
//   call.Send();
//   while (!call.Advance()) wait_for(call.Socket(), call.WantsWrite());
//   rows = call.Finish(reusable);
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/pg/rows.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit::detail {

struct PipelineRequest {
  enum class Wrap {
    kTransaction,    // BEGIN [READ ONLY]; statement_timeout and setup; statement; COMMIT
    kStatementOnly,  // the statement alone (its own implicit transaction, or an open one's)
  };
  const std::string* sql = nullptr;
  const std::vector<const char*>* values = nullptr;  // text parameters; a null pointer is NULL
  Wrap wrap = Wrap::kTransaction;
  bool read_only = true;  // kTransaction only
  // kTransaction only: the BEGIN statement (e.g. with an isolation level);
  // null: BEGIN [READ ONLY] as read_only says.
  const std::string* begin = nullptr;
  long long statement_timeout_ms = 0;  // kTransaction only; at least 1
  // kTransaction only: one more statement without parameters after the
  // BEGIN (the bucket setting and its check); a SELECT also sets the
  // timeout in its select list (one statement fewer), and its row is kept
  // (SetupRows(): e.g. a write's read token read there). null: none.
  const std::string* setup = nullptr;
  // kTransaction only: a statement without parameters sent before the
  // BEGIN, in an implicit transaction of its own that a Sync ends (so the
  // transaction's snapshot is taken after it ran, e.g. a replica's replay
  // position read for the setup to check). Its failure does not stop the
  // rest; PresyncValue() has its first value. null: none.
  const std::string* presync = nullptr;
  // kStatementOnly only: statements without parameters sent before the
  // statement (a session's BEGIN and setup); null or empty: none.
  const std::vector<std::string>* before = nullptr;
  // More statements without parameters right after the statement, in the
  // same round trip; the last one's rows are the ones returned (e.g. a
  // DECLARE ... CURSOR with the parameters, then the first FETCH). null or
  // empty: none.
  const std::vector<std::string>* then = nullptr;
  // Ask the server to send the first step's reply at once, so that
  // Timings() measures a round trip (the scatter's link estimates). It costs
  // the client a second wake-up; routed calls go without.
  bool time_round_trip = false;
};

// A SELECT setup (the bucket setting and its check) that also sets the
// transaction's statement_timeout in its select list, in force from the
// next statement: one statement fewer than SET LOCAL then the setup (~15-20
// us of a 0.3-0.4 ms one-row write here). nullopt when `setup` is not a
// SELECT. The timeout is a number computed by the caller.
[[nodiscard]] std::optional<std::string> SetupSettingTimeout(const std::string& setup, long long timeout_ms);

// Failures are thrown as libpqxx throws them for the same steps sent one
// by one, so callers map them the same way: pqxx::sql_error carrying the
// first failing step's SQLSTATE (the server skipped the later ones),
// pqxx::broken_connection when the connection is lost or the server reports
// a class 08 error (for a lost COMMIT of a writing transaction it says that
// the outcome is unknown).
class PipelinedStatement {
 public:
  // Prepares the steps; sends nothing yet. Throws pqxx::broken_connection
  // for a closed connection.
  PipelinedStatement(pqxx::connection_base& connection, const PipelineRequest& request, bool nonblocking);
  // Enters pipeline mode and sends every step and the Sync (in non-blocking
  // mode whatever the socket takes now; Advance() sends the rest). Throws
  // pqxx::broken_connection if that fails: discard the connection then.
  // Apart from the constructor so that a caller driving many connections
  // can prepare them all, then send back to back.
  void Send();
  PipelinedStatement(const PipelinedStatement&) = delete;
  PipelinedStatement& operator=(const PipelinedStatement&) = delete;

  [[nodiscard]] int Socket() const noexcept { return PQsocket(conn_); }
  // Output is still queued: wait for the socket to be writable too.
  [[nodiscard]] bool WantsWrite() const noexcept { return wants_write_; }
  // Non-blocking: sends what is queued, reads what has arrived; true once
  // every result and the Sync are in (or the connection failed).
  bool Advance();
  // Blocking: reads until every result and the Sync are in.
  void Wait();

  // After Advance() returned true or Wait(): the connection goes back out
  // of pipeline mode, to blocking mode, with nothing pending, and a
  // transaction this call began and that failed is rolled back (one more
  // round trip, on failure only). Returns the statement's rows (libpq's
  // result itself, no copy) or throws.
  // `reusable` is set to false when the connection could not be left clean:
  // the caller must then discard it, as it must a connection whose call it
  // gives up on before the end. With `rollback_pending`, a failed
  // transaction is not rolled back here (no blocking round trip): it is set
  // to true and the caller must RollBack() before reusing the connection.
  [[nodiscard]] pg::Rows Finish(bool& reusable, bool* rollback_pending = nullptr);
  // The returned rows' payload: the sum of their values' lengths.
  [[nodiscard]] std::size_t Bytes() const noexcept { return bytes_; }
  // What the call measured of the link, for the scatter's estimates
  // (ScatterGather::Link). round_trip: Send to the first step's result, when
  // a step came before the statement and time_round_trip asked the server
  // to flush right after it (so it arrives one round trip after sending). transfer: from
  // the returned rows' first data to the Sync, non-blocking calls only.
  struct Timing {
    std::optional<std::chrono::steady_clock::duration> round_trip;
    std::optional<std::chrono::steady_clock::duration> transfer;
  };
  [[nodiscard]] Timing Timings() const noexcept;
  // For a caller that drives several calls from one thread: call it when it
  // starts waiting on this call's socket. If something has arrived already,
  // the times this call would measure are those of its reading, not of the
  // arrival: it measures no round trip, and, unless it is watched right
  // after sending (only the first step's reply can be there then), no
  // transfer either.
  void StartWatching(bool right_after_send);
  // The presync statement's first value (nullopt if it failed or returned
  // no row or NULL).
  [[nodiscard]] const std::optional<std::string>& PresyncValue() const noexcept { return presync_value_; }
  // A SELECT setup's rows (nullopt for none, or if it failed). Its first
  // column is the timeout's set_config.
  [[nodiscard]] const std::optional<pg::Rows>& SetupRows() const noexcept { return setup_rows_; }
  // Whether the COMMIT of a kTransaction call may have reached the server:
  // true from the moment Send() hands it to libpq, even if Send() then
  // throws. A call lost before that committed nothing.
  [[nodiscard]] bool CommitQueued() const noexcept { return commit_queued_; }

 private:
  // Takes one PQgetResult() outcome (null included) in pipeline order.
  void Take(PGresult* result);
  void Fail(std::string message, std::string sqlstate, bool connection_lost);

  enum class Expect { kResult, kEndOfStep, kPresyncSync, kSync, kDone };
  struct Failure {
    std::string message;
    std::string sqlstate;
    int step = 0;
    bool connection_lost = false;
  };

  pqxx::connection_base& connection_;
  PGconn* conn_;
  PipelineRequest request_;
  bool nonblocking_;
  std::string timeout_;
  std::vector<const std::string*> steps_;
  int count_ = 0;
  int presync_ = -1;  // the presync statement's step (followed by a Sync), or -1
  int commit_ = -1;   // the COMMIT's step, or -1
  int setup_ = -1;    // the step of a SELECT setup, or -1
  int main_ = 0;      // the statement's step (it takes the parameters)
  int returned_ = 0;  // the step whose rows are returned: main_, or the last of `then`
  int step_ = 0;
  Expect expect_ = Expect::kResult;
  bool broken_ = false;
  bool wants_write_ = false;
  std::optional<pg::Rows> rows_;
  std::optional<std::string> presync_value_;
  std::optional<pg::Rows> setup_rows_;
  bool commit_queued_ = false;
  std::size_t bytes_ = 0;
  std::optional<Failure> failure_;
  std::chrono::steady_clock::time_point sent_at_{};
  std::optional<std::chrono::steady_clock::time_point> first_result_at_;
  std::optional<std::chrono::steady_clock::time_point> data_at_;
  std::optional<std::chrono::steady_clock::time_point> done_at_;
  bool round_trip_stale_ = false;  // see StartWatching
  bool transfer_stale_ = false;
};

// Ends an aborted transaction (blocking); false if the connection is not
// idle afterwards.
[[nodiscard]] bool RollBack(pqxx::connection_base& connection) noexcept;

// Sends and reads a request on a blocking connection (a thread per call).
// `bytes`, if given, receives the rows' payload (PipelinedStatement::Bytes),
// `timing` what it measured (Timings(): the round trip only, as it blocks),
// `presync` PresyncValue().
[[nodiscard]] pg::Rows RunPipelined(pqxx::connection_base& connection, const PipelineRequest& request, bool& reusable,
                                    std::size_t* bytes = nullptr, PipelinedStatement::Timing* timing = nullptr,
                                    std::optional<std::string>* presync = nullptr);

}  // namespace shardkit::detail
