#include "pg/raw_pg.hpp"

#include <fmt/format.h>

#include <poll.h>

#include <cerrno>

#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"

namespace shardkit::detail {
namespace {

std::string Trimmed(const char* text) {
  return FirstLine(text == nullptr ? "" : text);
}

struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

}  // namespace

Dsn WithConnectionOption(const Dsn& dsn, const std::string& key, const std::string& value) {
  const std::string& text = dsn.Reveal();
  if (text.starts_with("postgresql://") || text.starts_with("postgres://")) {
    return Dsn(text + (text.find('?') == std::string::npos ? "?" : "&") + key + "=" + value);
  }
  return Dsn(text + " " + key + "=" + value);
}

RawConnection::RawConnection(const Dsn& dsn, std::string what) : what_(std::move(what)) {
  conn_ = PQconnectdb(dsn.Reveal().c_str());
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    const std::string why = conn_ == nullptr ? "out of memory" : Trimmed(PQerrorMessage(conn_));
    if (conn_ != nullptr) PQfinish(conn_);
    conn_ = nullptr;
    throw RawPgError(fmt::format("cannot connect to {} ({}): {}", what_, dsn, why), "", true);
  }
}

RawConnection::~RawConnection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

bool RawConnection::Alive() const noexcept {
  return conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK;
}

void RawConnection::Fail(const std::string& doing, PGresult* result) {
  std::string state;
  std::string message;
  if (result != nullptr) {
    if (const char* s = PQresultErrorField(result, PG_DIAG_SQLSTATE)) state = s;
    message = Trimmed(PQresultErrorMessage(result));
  }
  if (message.empty()) message = Trimmed(PQerrorMessage(conn_));
  const bool lost = PQstatus(conn_) != CONNECTION_OK;
  throw RawPgError(fmt::format("{} on {}: {}", doing, what_, message), state, lost);
}

RawConnection::Rows RawConnection::Exec(const std::string& sql, std::optional<std::chrono::milliseconds> timeout) {
  if (PQsendQuery(conn_, sql.c_str()) == 0) Fail("sending a statement", nullptr);
  bool timed_out = false;
  if (timeout) {
    // Wait for the answer ourselves, so that we can cancel at the deadline.
    const auto deadline = std::chrono::steady_clock::now() + *timeout;
    while (PQisBusy(conn_) != 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 && !timed_out) {
        timed_out = true;
        if (PGcancel* cancel = PQgetCancel(conn_)) {
          char error[256];
          PQcancel(cancel, error, sizeof error);
          PQfreeCancel(cancel);
        }
      }
      pollfd fd{PQsocket(conn_), POLLIN, 0};
      const int wait_ms = timed_out ? 1000 : static_cast<int>(std::min<long long>(left.count(), 1000));
      if (::poll(&fd, 1, std::max(wait_ms, 1)) < 0 && errno != EINTR) Fail("waiting for an answer", nullptr);
      if (PQconsumeInput(conn_) == 0) Fail("reading an answer", nullptr);
    }
  }
  Rows rows;
  while (PGresult* raw = PQgetResult(conn_)) {
    Result r(raw);
    const auto status = PQresultStatus(r.get());
    if (status == PGRES_FATAL_ERROR || status == PGRES_BAD_RESPONSE) {
      // Drain the remaining results before reporting.
      while (PGresult* rest = PQgetResult(conn_)) PQclear(rest);
      if (timed_out) {
        throw RawPgError(fmt::format("{} did not answer within {} ms and was cancelled", what_, timeout->count()),
                         "57014", false, true);
      }
      Fail("a statement failed", r.get());
    }
    if (status == PGRES_TUPLES_OK) {
      rows = Rows{};
      for (int c = 0; c < PQnfields(r.get()); ++c) rows.columns.emplace_back(PQfname(r.get(), c));
      for (int i = 0; i < PQntuples(r.get()); ++i) {
        std::vector<std::string> row;
        for (int c = 0; c < PQnfields(r.get()); ++c) row.emplace_back(PQgetvalue(r.get(), i, c));
        rows.values.push_back(std::move(row));
      }
    }
  }
  if (PQstatus(conn_) != CONNECTION_OK) Fail("the connection was lost", nullptr);
  return rows;
}

std::int64_t RawConnection::CopyInto(const std::string& copy_out_sql, RawConnection& into,
                                     const std::string& copy_in_sql,
                                     const std::function<void(std::int64_t)>& on_progress) {
  {
    Result out(PQexec(conn_, copy_out_sql.c_str()));
    if (PQresultStatus(out.get()) != PGRES_COPY_OUT) Fail("starting COPY TO", out.get());
  }
  {
    Result in(PQexec(into.conn_, copy_in_sql.c_str()));
    if (PQresultStatus(in.get()) != PGRES_COPY_IN) {
      // Leave this side's COPY OUT behind cleanly: the connection is reset
      // by the caller's rollback path.
      into.Fail("starting COPY FROM", in.get());
    }
  }
  std::int64_t messages = 0;
  for (;;) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn_, &buffer, 0);
    if (n > 0) {
      const int sent = PQputCopyData(into.conn_, buffer, n);
      PQfreemem(buffer);
      if (sent != 1) {
        PQputCopyEnd(into.conn_, "shardkit: the move's copy failed");
        into.Fail("sending COPY data", nullptr);
      }
      if (on_progress && (++messages % 4096) == 0) on_progress(messages);
      continue;
    }
    if (n == -1) break;  // COPY OUT done
    PQputCopyEnd(into.conn_, "shardkit: the source's COPY failed");
    Fail("reading COPY data", nullptr);
  }
  {
    Result done(PQgetResult(conn_));
    if (PQresultStatus(done.get()) != PGRES_COMMAND_OK) {
      PQputCopyEnd(into.conn_, "shardkit: the source's COPY failed");
      Fail("finishing COPY TO", done.get());
    }
    while (PGresult* rest = PQgetResult(conn_)) PQclear(rest);
  }
  if (PQputCopyEnd(into.conn_, nullptr) != 1) into.Fail("ending COPY FROM", nullptr);
  Result done(PQgetResult(into.conn_));
  if (PQresultStatus(done.get()) != PGRES_COMMAND_OK) into.Fail("finishing COPY FROM", done.get());
  const char* tuples = PQcmdTuples(done.get());
  const std::int64_t rows = (tuples != nullptr && *tuples != '\0') ? std::stoll(tuples) : 0;
  while (PGresult* rest = PQgetResult(into.conn_)) PQclear(rest);
  if (on_progress) on_progress(rows);
  return rows;
}

}  // namespace shardkit::detail
