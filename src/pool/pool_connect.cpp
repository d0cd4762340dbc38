#include "pool/pool_connect.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "shardkit/pg/session.hpp"

namespace shardkit::detail {

ConnectParameters::ConnectParameters(const Dsn& dsn, const SessionChoices& session) {
  const Dsn with_session = WithSessionSettings(dsn, session);
  {
    char* error = nullptr;
    PQconninfoOption* parsed = PQconninfoParse(with_session.Reveal().c_str(), &error);
    dsn_parses_ = parsed != nullptr;
    if (parsed != nullptr) PQconninfoFree(parsed);
    if (error != nullptr) PQfreemem(error);
  }
  // 1. Defaults; the DSN's own settings win.
  pairs_.emplace_back("keepalives", "1");
  pairs_.emplace_back("keepalives_idle", std::to_string(kKeepalivesIdleSeconds));
  pairs_.emplace_back("keepalives_interval", std::to_string(kKeepalivesIntervalSeconds));
  pairs_.emplace_back("keepalives_count", std::to_string(kKeepalivesCount));
  pairs_.emplace_back("tcp_user_timeout", std::to_string(kTcpUserTimeoutMillis));
  pairs_.emplace_back("fallback_application_name", "shardkit");
  // 2. The shard's DSN with the session settings, expanded by libpq
  //    (expand_dbname = 1).
  pairs_.emplace_back("dbname", with_session.Reveal());
  // 3. Enforced settings go here, after the DSN.

  keyword_ptrs_.reserve(pairs_.size() + 1);
  value_ptrs_.reserve(pairs_.size() + 1);
  for (const auto& [key, value] : pairs_) {
    keyword_ptrs_.push_back(key.c_str());
    value_ptrs_.push_back(value.c_str());
  }
  keyword_ptrs_.push_back(nullptr);
  value_ptrs_.push_back(nullptr);
}

namespace {

std::string ErrorOf(const PGconn* c) {
  std::string text = PQerrorMessage(c);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

UniquePGconn ConnectBefore(const ConnectParameters& parameters, std::chrono::steady_clock::time_point deadline,
                           std::string* error, bool* timed_out) {
  using Clock = std::chrono::steady_clock;
  *timed_out = false;
  if (!parameters.DsnParses()) {
    *error = "libpq cannot parse the connection string (its message is not shown: it may quote a password)";
    return nullptr;
  }
  UniquePGconn c{PQconnectStartParams(parameters.Keywords(), parameters.Values(), /*expand_dbname=*/1)};
  if (!c) throw std::bad_alloc();
  if (PQstatus(c.get()) == CONNECTION_BAD) {
    *error = ErrorOf(c.get());
    return nullptr;
  }
  // Before the first PQconnectPoll, libpq wants the socket to be writable.
  PostgresPollingStatusType step = PGRES_POLLING_WRITING;
  for (;;) {
    if (step == PGRES_POLLING_OK) return c;
    if (step == PGRES_POLLING_FAILED) {
      *error = ErrorOf(c.get());
      return nullptr;
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      *error = "no answer before the deadline";
      return nullptr;
    }
    pollfd fd{};
    fd.fd = PQsocket(c.get());  // may change after every step
    if (fd.fd < 0) {
      *error = "libpq has no socket for this connection attempt";
      return nullptr;
    }
    fd.events = step == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    const int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      *error = std::string("poll failed: ") + std::strerror(errno);
      return nullptr;
    }
    if (ready == 0) continue;  // the deadline check above decides
    step = PQconnectPoll(c.get());
  }
}

}  // namespace shardkit::detail
