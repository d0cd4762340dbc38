#include "detail/pipelined_statement.hpp"

#include <fmt/format.h>

#include <optional>
#include <utility>
#include <pqxx/connection_base>
#include <pqxx/except>

#include "detail/libpq_handle.hpp"

namespace shardkit::detail {
namespace {

// The first step that failed, as the server reported it.
struct StepFailure {
  std::string message;
  std::string sqlstate;
  const std::string* query = nullptr;
  bool connection_lost = false;
};

// Frees a PGresult unless ownership was passed on.
struct ResultGuard {
  PGresult* result;
  ~ResultGuard() {
    if (result != nullptr) PQclear(result);
  }
  PGresult* Release() noexcept { return std::exchange(result, nullptr); }
};

std::string ConnectionMessage(PGconn* conn) {
  const char* text = PQerrorMessage(conn);
  return text != nullptr && *text != '\0' ? std::string(text) : std::string("the connection was closed");
}

bool Send(PGconn* conn, const std::string& sql, const std::vector<const char*>* values) {
  const int count = values == nullptr ? 0 : static_cast<int>(values->size());
  return PQsendQueryParams(conn, sql.c_str(), count, nullptr, count == 0 ? nullptr : values->data(), nullptr,
                           nullptr, 0) == 1;
}

}  // namespace

pqxx::result RunPipelined(pqxx::connection_base& connection, const PipelinedStatement& statement, bool& reusable) {
  PGconn* conn = LibpqHandle(connection);
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    reusable = false;
    throw pqxx::broken_connection(conn == nullptr ? "the connection is closed" : ConnectionMessage(conn));
  }
  const bool transaction = statement.wrap == PipelinedStatement::Wrap::kTransaction;
  // The steps in the order the server runs them; `main` is the statement's.
  static const std::string kBeginReadOnly = "BEGIN READ ONLY";
  static const std::string kBegin = "BEGIN";
  static const std::string kCommit = "COMMIT";
  std::string timeout;
  const std::string* steps[4];
  int count = 0;
  if (transaction) {
    // The timeout is a number computed by the caller; SET takes no parameters.
    timeout = fmt::format("SET LOCAL statement_timeout = {}", statement.statement_timeout_ms);
    steps[count++] = statement.read_only ? &kBeginReadOnly : &kBegin;
    steps[count++] = &timeout;
  }
  const int main = count;
  steps[count++] = statement.sql;
  if (transaction) steps[count++] = &kCommit;

  if (PQenterPipelineMode(conn) != 1) {
    // Not idle: something was left pending by an earlier user.
    reusable = false;
    throw pqxx::broken_connection(fmt::format("the connection was not idle ({})", ConnectionMessage(conn)));
  }
  bool sent = true;
  for (int i = 0; i < count && sent; ++i) sent = Send(conn, *steps[i], i == main ? statement.values : nullptr);
  if (!sent || PQpipelineSync(conn) != 1) {
    reusable = false;
    throw pqxx::broken_connection(ConnectionMessage(conn));
  }

  // Each step yields one result (PGRES_PIPELINE_ABORTED once an earlier one
  // failed) followed by a null; then the Sync's PGRES_PIPELINE_SYNC.
  std::optional<pqxx::result> rows;
  std::optional<StepFailure> failure;
  bool broken = false;
  for (int i = 0; i < count && !broken; ++i) {
    ResultGuard result{PQgetResult(conn)};
    if (result.result == nullptr) {
      broken = true;
      if (!failure) failure = StepFailure{ConnectionMessage(conn), {}, steps[i], true};
      break;
    }
    switch (PQresultStatus(result.result)) {
      case PGRES_TUPLES_OK:
      case PGRES_COMMAND_OK:
      case PGRES_EMPTY_QUERY:
        if (i == main) rows = AdoptResult(connection, result.Release(), *steps[i]);
        break;
      case PGRES_PIPELINE_ABORTED:
        break;
      case PGRES_FATAL_ERROR: {
        if (failure) break;
        const char* state = PQresultErrorField(result.result, PG_DIAG_SQLSTATE);
        StepFailure f{PQresultErrorMessage(result.result), state != nullptr ? state : "", steps[i], false};
        // No SQLSTATE and a closed connection: libpq's own report of the loss.
        f.connection_lost = f.sqlstate.starts_with("08") || (f.sqlstate.empty() && PQstatus(conn) == CONNECTION_BAD);
        failure = std::move(f);
        break;
      }
      default:
        // COPY and the like have no place here: nothing says how to end them.
        if (!failure) {
          failure = StepFailure{fmt::format("unexpected {} result", PQresStatus(PQresultStatus(result.result))),
                                {}, steps[i], false};
        }
        broken = true;
        break;
    }
    if (PQstatus(conn) == CONNECTION_BAD) {
      broken = true;
      if (!failure) failure = StepFailure{ConnectionMessage(conn), {}, steps[i], true};
      break;
    }
    // The null that ends this step's results.
    if (!broken) {
      if (PGresult* extra = PQgetResult(conn); extra != nullptr) {
        PQclear(extra);
        broken = true;
        if (!failure) failure = StepFailure{"more than one result for one statement", {}, steps[i], false};
      }
    }
  }
  if (!broken) {
    ResultGuard sync{PQgetResult(conn)};
    broken = sync.result == nullptr || PQresultStatus(sync.result) != PGRES_PIPELINE_SYNC;
  }
  if (broken || PQexitPipelineMode(conn) != 1) {
    reusable = false;
  } else if (transaction && PQtransactionStatus(conn) != PQTRANS_IDLE) {
    // A failed step left the transaction aborted: end it, so that the
    // connection can go back to the pool (only on failure: one more trip).
    ResultGuard rollback{failure ? PQexec(conn, "ROLLBACK") : nullptr};
    if (rollback.result == nullptr || PQresultStatus(rollback.result) != PGRES_COMMAND_OK ||
        PQtransactionStatus(conn) != PQTRANS_IDLE) {
      reusable = false;
    }
  }

  if (failure) {
    if (failure->connection_lost) {
      reusable = false;
      if (transaction && failure->query == steps[count - 1] && !statement.read_only) {
        throw pqxx::broken_connection("connection lost during COMMIT: whether this shard committed is unknown");
      }
      throw pqxx::broken_connection(failure->message);
    }
    throw pqxx::sql_error(failure->message, *failure->query,
                          failure->sqlstate.empty() ? nullptr : failure->sqlstate.c_str());
  }
  if (!rows) {
    reusable = false;
    throw pqxx::broken_connection(ConnectionMessage(conn));
  }
  return std::move(*rows);
}

}  // namespace shardkit::detail
