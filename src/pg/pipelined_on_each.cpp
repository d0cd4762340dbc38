#include "pg/pipelined_on_each.hpp"

#include "pg/server_message.hpp"

namespace shardkit::detail {
namespace {

std::string ConnectionError(PGconn* conn) {
  const char* text = PQerrorMessage(conn);
  return FirstLine(text != nullptr && *text != '\0' ? text : "connection lost");
}

void Lost(EachAnswer& answer, PGconn* conn) {
  if (answer.failed) return;
  answer.failed = true;
  answer.connection_lost = true;
  answer.message = ConnectionError(conn);
}

bool Send(PGconn* conn, const std::vector<std::string>& statements) {
  if (PQstatus(conn) != CONNECTION_OK || PQenterPipelineMode(conn) != 1) return false;
  for (const std::string& sql : statements) {
    if (PQsendQueryParams(conn, sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0) != 1) return false;
    if (PQpipelineSync(conn) != 1) return false;
  }
  return PQflush(conn) == 0;
}

// Reads one statement's results and its Sync; false when the connection broke.
bool ReadOne(PGconn* conn, EachAnswer& answer, int index, bool last) {
  for (;;) {
    PGresult* result = PQgetResult(conn);
    if (result == nullptr) {
      // The end of one statement's results (its Sync follows), or a
      // connection that broke.
      if (PQstatus(conn) != CONNECTION_OK) return false;
      continue;
    }
    const ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_PIPELINE_SYNC) {
      PQclear(result);
      return true;
    }
    if (status == PGRES_FATAL_ERROR && !answer.failed) {
      const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
      answer.failed = true;
      answer.failed_statement = index;
      answer.sqlstate = state != nullptr ? state : "";
      answer.message = FirstLine(PQresultErrorMessage(result));
      if (answer.sqlstate.empty()) answer.connection_lost = true;
    } else if (status == PGRES_TUPLES_OK && last && PQntuples(result) > 0 && PQnfields(result) > 0) {
      answer.last_value = PQgetvalue(result, 0, 0);
    }
    PQclear(result);
    if (PQstatus(conn) != CONNECTION_OK) return false;
  }
}

}  // namespace

std::vector<EachAnswer> PipelinedOnEach(const std::vector<PGconn*>& connections,
                                        const std::vector<std::vector<std::string>>& statements) {
  std::vector<EachAnswer> answers(connections.size());
  std::vector<bool> sent(connections.size(), false);
  for (std::size_t i = 0; i < connections.size(); ++i) {
    sent[i] = Send(connections[i], statements[i]);
    if (!sent[i]) Lost(answers[i], connections[i]);
  }
  for (std::size_t i = 0; i < connections.size(); ++i) {
    if (!sent[i]) continue;
    PGconn* conn = connections[i];
    const auto& mine = statements[i];
    for (std::size_t s = 0; s < mine.size(); ++s) {
      if (!ReadOne(conn, answers[i], static_cast<int>(s), s + 1 == mine.size())) {
        Lost(answers[i], conn);
        break;
      }
    }
    if (PQstatus(conn) == CONNECTION_OK && PQexitPipelineMode(conn) != 1) Lost(answers[i], conn);
  }
  return answers;
}

}  // namespace shardkit::detail
