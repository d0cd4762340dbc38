#include "pg/pipelined_statement.hpp"

#include <fmt/format.h>

#include <poll.h>

#include <algorithm>
#include <pqxx/connection_base>
#include <pqxx/except>
#include <string_view>
#include <utility>

#include "pg/libpq_handle.hpp"
#include "pg/server_message.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

const std::string kBeginReadOnly = "BEGIN READ ONLY";
const std::string kBegin = "BEGIN";
const std::string kCommit = "COMMIT";

// Frees a PGresult unless ownership was passed on.
struct ResultGuard {
  PGresult* result;
  ~ResultGuard() {
    if (result != nullptr) PQclear(result);
  }
  PGresult* Release() noexcept { return std::exchange(result, nullptr); }
};

std::size_t PayloadBytes(const PGresult* result) {
  std::size_t bytes = 0;
  const int rows = PQntuples(result);
  const int columns = PQnfields(result);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < columns; ++c) bytes += static_cast<std::size_t>(PQgetlength(result, r, c));
  }
  return bytes;
}

std::string ConnectionMessage(PGconn* conn) {
  const char* text = conn == nullptr ? nullptr : PQerrorMessage(conn);
  return text != nullptr && *text != '\0' ? std::string(text) : std::string("the connection was closed");
}

}  // namespace

std::optional<std::string> SetupSettingTimeout(const std::string& setup, long long timeout_ms) {
  constexpr std::string_view kSelect = "SELECT ";
  if (!setup.starts_with(kSelect)) return std::nullopt;
  return "SELECT set_config('statement_timeout', '" + std::to_string(timeout_ms) + "', true), " +
         setup.substr(kSelect.size());
}

PipelinedStatement::PipelinedStatement(pqxx::connection_base& connection, const PipelineRequest& request,
                                       bool nonblocking)
    : connection_(connection), conn_(LibpqHandle(connection)), request_(request), nonblocking_(nonblocking) {
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    throw pqxx::broken_connection(ConnectionMessage(conn_));
  }
  const bool transaction = request.wrap == PipelineRequest::Wrap::kTransaction;
  if (transaction) {
    if (request.presync != nullptr) {
      presync_ = static_cast<int>(steps_.size());
      steps_.push_back(request.presync);
    }
    steps_.push_back(request.begin != nullptr ? request.begin : request.read_only ? &kBeginReadOnly : &kBegin);
    auto folded =
        request.setup == nullptr ? std::nullopt : SetupSettingTimeout(*request.setup, request.statement_timeout_ms);
    if (folded) {
      timeout_ = std::move(*folded);
      setup_ = static_cast<int>(steps_.size());
      steps_.push_back(&timeout_);
    } else {
      // The timeout is a number computed by the caller; SET takes no parameters.
      timeout_ = "SET LOCAL statement_timeout = " + std::to_string(request.statement_timeout_ms);
      steps_.push_back(&timeout_);
      if (request.setup != nullptr) steps_.push_back(request.setup);
    }
  } else if (request.before != nullptr) {
    for (const auto& sql : *request.before) steps_.push_back(&sql);
  }
  main_ = static_cast<int>(steps_.size());
  steps_.push_back(request.sql);
  returned_ = main_;
  if (request.then != nullptr) {
    for (const auto& sql : *request.then) {
      returned_ = static_cast<int>(steps_.size());
      steps_.push_back(&sql);
    }
  }
  if (transaction) {
    commit_ = static_cast<int>(steps_.size());
    steps_.push_back(&kCommit);
  }
  count_ = static_cast<int>(steps_.size());
}

void PipelinedStatement::Send() {
  const PipelineRequest& request = request_;
  if (nonblocking_ && PQsetnonblocking(conn_, 1) != 0) throw pqxx::broken_connection(ConnectionMessage(conn_));
  // Fails when not idle: something was left pending by an earlier user.
  if (PQenterPipelineMode(conn_) != 1) throw pqxx::broken_connection(ConnectionMessage(conn_));
  sent_at_ = std::chrono::steady_clock::now();
  for (int i = 0; i < count_; ++i) {
    const auto* values = i == main_ ? request.values : nullptr;
    const int n = values == nullptr ? 0 : static_cast<int>(values->size());
    if (i == commit_) commit_queued_ = true;
    if (PQsendQueryParams(conn_, steps_[i]->c_str(), n, nullptr, n == 0 ? nullptr : values->data(), nullptr, nullptr,
                          0) != 1) {
      throw pqxx::broken_connection(ConnectionMessage(conn_));
    }
    // The server holds its replies until a Sync or a Flush: asked to
    // flush after the first step (a BEGIN, a few bytes), it sends that
    // step's reply at once, which times one round trip (Timings()).
    if (i == 0 && main_ > 0 && request.time_round_trip && PQsendFlushRequest(conn_) != 1) {
      throw pqxx::broken_connection(ConnectionMessage(conn_));
    }
    if (i == presync_ && PQpipelineSync(conn_) != 1) throw pqxx::broken_connection(ConnectionMessage(conn_));
  }
  // Flushes too: in blocking mode everything, else what the socket takes.
  if (PQpipelineSync(conn_) != 1) throw pqxx::broken_connection(ConnectionMessage(conn_));
  if (nonblocking_) {
    const int flushed = PQflush(conn_);
    if (flushed < 0) throw pqxx::broken_connection(ConnectionMessage(conn_));
    wants_write_ = flushed == 1;
  }
}

void PipelinedStatement::Fail(std::string message, std::string sqlstate, bool connection_lost) {
  // Once the COMMIT's result is in, the transaction committed: what fails
  // after it (the Sync) is not the call's failure.
  if (commit_ >= 0 && step_ > commit_) return;
  if (!failure_) failure_ = Failure{std::move(message), std::move(sqlstate), step_, connection_lost};
}

void PipelinedStatement::Take(PGresult* raw) {
  ResultGuard result{raw};
  if (step_ == 0 && expect_ == Expect::kResult && main_ > 0 && !first_result_at_) {
    first_result_at_ = std::chrono::steady_clock::now();
  }
  switch (expect_) {
    case Expect::kResult:
      if (result.result == nullptr) {
        Fail(ConnectionMessage(conn_), {}, true);
        broken_ = true;
        return;
      }
      if (step_ == presync_ && PQresultStatus(result.result) != PGRES_FATAL_ERROR) {
        // Its own implicit transaction: a failure here stops nothing.
        if (PQresultStatus(result.result) == PGRES_TUPLES_OK && PQntuples(result.result) > 0 &&
            PQnfields(result.result) > 0 && PQgetisnull(result.result, 0, 0) == 0) {
          presync_value_ = PQgetvalue(result.result, 0, 0);
        }
        expect_ = Expect::kEndOfStep;
        return;
      }
      if (step_ == presync_) {
        const char* state = PQresultErrorField(result.result, PG_DIAG_SQLSTATE);
        if ((state != nullptr && IsConnectionLost(state)) || PQstatus(conn_) == CONNECTION_BAD) {
          Fail(PQresultErrorMessage(result.result), state != nullptr ? state : "", true);
          broken_ = true;
          return;
        }
        expect_ = Expect::kEndOfStep;
        return;
      }
      switch (PQresultStatus(result.result)) {
        case PGRES_TUPLES_OK:
        case PGRES_COMMAND_OK:
        case PGRES_EMPTY_QUERY:
          if (step_ == returned_) {
            bytes_ = PayloadBytes(result.result);
            rows_ = pg::Rows(result.Release());
          } else if (step_ == setup_) {
            setup_rows_ = pg::Rows(result.Release());
          }
          break;
        case PGRES_PIPELINE_ABORTED:  // skipped after an earlier step failed
          break;
        case PGRES_FATAL_ERROR: {
          const char* state = PQresultErrorField(result.result, PG_DIAG_SQLSTATE);
          std::string sqlstate = state != nullptr ? state : "";
          // No SQLSTATE and a closed connection: libpq's own report of the loss.
          const bool lost = IsConnectionLost(sqlstate) || (sqlstate.empty() && PQstatus(conn_) == CONNECTION_BAD);
          Fail(PQresultErrorMessage(result.result), std::move(sqlstate), lost);
          break;
        }
        default:
          // COPY and the like have no place here: nothing says how to end them.
          Fail(fmt::format("unexpected {} result", PQresStatus(PQresultStatus(result.result))), {}, false);
          broken_ = true;
          return;
      }
      if (PQstatus(conn_) == CONNECTION_BAD) {
        Fail(ConnectionMessage(conn_), {}, true);
        broken_ = true;
        return;
      }
      expect_ = Expect::kEndOfStep;
      return;
    case Expect::kEndOfStep:
      if (result.result != nullptr) {
        Fail("more than one result for one statement", {}, false);
        broken_ = true;
        return;
      }
      if (step_ == presync_) {
        ++step_;
        expect_ = Expect::kPresyncSync;
        return;
      }
      expect_ = ++step_ < count_ ? Expect::kResult : Expect::kSync;
      return;
    case Expect::kPresyncSync:
      if (result.result == nullptr || PQresultStatus(result.result) != PGRES_PIPELINE_SYNC) {
        Fail(ConnectionMessage(conn_), {}, PQstatus(conn_) == CONNECTION_BAD);
        broken_ = true;
        return;
      }
      expect_ = Expect::kResult;
      return;
    case Expect::kSync:
      if (result.result == nullptr || PQresultStatus(result.result) != PGRES_PIPELINE_SYNC) {
        // Every step answered, the Sync did not: the session is gone or out
        // of step, and the last step's outcome (a lone COMMIT's) with it.
        Fail(ConnectionMessage(conn_), {}, true);
        broken_ = true;
        return;
      }
      expect_ = Expect::kDone;
      done_at_ = std::chrono::steady_clock::now();
      return;
    case Expect::kDone:
      return;
  }
}

bool PipelinedStatement::Advance() {
  if (broken_ || expect_ == Expect::kDone) return true;
  const auto entered = std::chrono::steady_clock::now();
  if (wants_write_) {
    const int flushed = PQflush(conn_);
    if (flushed < 0) {
      Fail(ConnectionMessage(conn_), {}, true);
      broken_ = true;
      return true;
    }
    wants_write_ = flushed == 1;
  }
  if (PQconsumeInput(conn_) != 1) {
    Fail(ConnectionMessage(conn_), {}, true);
    broken_ = true;
    return true;
  }
  while (!broken_ && expect_ != Expect::kDone && PQisBusy(conn_) == 0) Take(PQgetResult(conn_));
  // The returned step's first data came with this wake-up (the earlier
  // steps' replies travel with it: the server flushes them together).
  if (!data_at_ && step_ >= returned_) data_at_ = entered;
  return broken_ || expect_ == Expect::kDone;
}

void PipelinedStatement::StartWatching(bool right_after_send) {
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  if (::poll(&fd, 1, 0) == 0) return;
  round_trip_stale_ = true;
  transfer_stale_ = !right_after_send;
}

PipelinedStatement::Timing PipelinedStatement::Timings() const noexcept {
  Timing t;
  if (request_.time_round_trip && first_result_at_ && !round_trip_stale_) t.round_trip = *first_result_at_ - sent_at_;
  if (data_at_ && done_at_ && !transfer_stale_) t.transfer = *done_at_ - *data_at_;
  return t;
}

void PipelinedStatement::Wait() {
  while (!broken_ && expect_ != Expect::kDone) Take(PQgetResult(conn_));
}

bool RollBack(pqxx::connection_base& connection) noexcept {
  PGconn* conn = LibpqHandle(connection);
  if (conn == nullptr) return false;
  ResultGuard rollback{PQexec(conn, "ROLLBACK")};
  return rollback.result != nullptr && PQresultStatus(rollback.result) == PGRES_COMMAND_OK &&
         PQtransactionStatus(conn) == PQTRANS_IDLE;
}

pg::Rows PipelinedStatement::Finish(bool& reusable, bool* rollback_pending) {
  const bool transaction = request_.wrap == PipelineRequest::Wrap::kTransaction;
  if (broken_ || expect_ != Expect::kDone || PQexitPipelineMode(conn_) != 1 ||
      (nonblocking_ && PQsetnonblocking(conn_, 0) != 0)) {
    reusable = false;
  } else if (transaction && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
    // A failed step left the transaction aborted: end it, so that the
    // connection can go back to the pool.
    if (!failure_) {
      reusable = false;
    } else if (rollback_pending != nullptr) {
      *rollback_pending = true;
    } else if (!RollBack(connection_)) {
      reusable = false;
    }
  }

  if (failure_) {
    if (failure_->connection_lost) {
      reusable = false;
      // Every step went out at once: whatever step the loss interrupted, the
      // server may have run the statement and its COMMIT.
      if (transaction && !request_.read_only) {
        throw pqxx::broken_connection(
            "connection lost after the statement and its COMMIT were sent: whether this shard committed is unknown");
      }
      throw pqxx::broken_connection(failure_->message);
    }
    if (failure_->step == commit_ && IsServerGoingAway(failure_->sqlstate)) {
      // Terminated at COMMIT (a shutdown while it waited for a standby):
      // it may have committed locally first.
      throw pqxx::broken_connection(
          fmt::format("the server ended the session during COMMIT ({}): whether this shard "
                      "committed is unknown",
                      FirstLine(failure_->message)));
    }
    const int step = std::min(failure_->step, count_ - 1);
    throw pqxx::sql_error(failure_->message, *steps_[step],
                          failure_->sqlstate.empty() ? nullptr : failure_->sqlstate.c_str());
  }
  if (!rows_) {
    reusable = false;
    throw pqxx::broken_connection(ConnectionMessage(conn_));
  }
  return std::move(*rows_);
}

pg::Rows RunPipelined(pqxx::connection_base& connection, const PipelineRequest& request, bool& reusable,
                      std::size_t* bytes, PipelinedStatement::Timing* timing, std::optional<std::string>* presync) {
  std::optional<PipelinedStatement> call;
  try {
    call.emplace(connection, request, /*nonblocking=*/false);
    call->Send();
  } catch (...) {
    reusable = false;
    throw;
  }
  call->Wait();
  if (presync != nullptr) *presync = call->PresyncValue();
  pg::Rows rows = call->Finish(reusable);
  if (bytes != nullptr) *bytes = call->Bytes();
  if (timing != nullptr) *timing = call->Timings();
  return rows;
}

}  // namespace shardkit::detail
