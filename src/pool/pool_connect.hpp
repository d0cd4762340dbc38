// How the pool opens a connection: the one place that decides what the pool
// adds to a shard's connection string, and an asynchronous connect
// (PQconnectStartParams/PQconnectPoll) that honours the caller's deadline.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/pg/session.hpp"

namespace shardkit::detail {

// libpq keyword/value pairs for PQconnectStartParams(..., expand_dbname = 1),
// in three layers, later ones winning (libpq: "the last value is used"):
//   1. defaults the pool adds: TCP keepalives and tcp_user_timeout, so that a
//      host that vanishes without a word cannot pin a thread, and
//      fallback_application_name; a DSN that sets any of these wins;
//   2. the shard's DSN (key=value string or URI), expanded by libpq, with
//      the session settings merged answers rely on appended to its
//      `options` (session.hpp: WithSessionSettings; they win over the DSN's);
//   3. settings the pool enforces over anything in the DSN (none yet).
class ConnectParameters {
 public:
  // Throws ConfigError for an empty time zone.
  ConnectParameters(const Dsn& dsn, const SessionChoices& session);
  ConnectParameters(const ConnectParameters&) = delete;
  ConnectParameters& operator=(const ConnectParameters&) = delete;

  // Null-terminated arrays for PQconnectStartParams.
  [[nodiscard]] const char* const* Keywords() const noexcept { return keyword_ptrs_.data(); }
  [[nodiscard]] const char* const* Values() const noexcept { return value_ptrs_.data(); }
  // Every pair in order, the DSN as ("dbname", dsn): for tests only (the
  // DSN may hold a password).
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& Pairs() const noexcept { return pairs_; }
  // Can libpq parse the DSN? If not, connecting fails without showing
  // libpq's message, which may quote part of a password.
  [[nodiscard]] bool DsnParses() const noexcept { return dsn_parses_; }

 private:
  std::vector<std::pair<std::string, std::string>> pairs_;
  bool dsn_parses_ = false;
  std::vector<const char*> keyword_ptrs_;
  std::vector<const char*> value_ptrs_;
};

// The defaults of layer 1 (seconds for keepalives, milliseconds for
// tcp_user_timeout): an unanswered peer is given up after about 20 s.
inline constexpr int kKeepalivesIdleSeconds = 10;
inline constexpr int kKeepalivesIntervalSeconds = 5;
inline constexpr int kKeepalivesCount = 3;
inline constexpr int kTcpUserTimeoutMillis = 20'000;

struct PGconnCloser {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
using UniquePGconn = std::unique_ptr<PGconn, PGconnCloser>;

// Opens a connection without waiting past `deadline`: libpq's steps are
// driven by PQconnectPoll and the socket is polled for the time left (and
// re-read after every step: libpq changes it when it tries the next address
// or host). Only resolving a host name (not an address) in PQconnectStart
// may block. On failure returns null and says why in *error; *timed_out
// tells a deadline from a refusal.
[[nodiscard]] UniquePGconn ConnectBefore(const ConnectParameters& parameters,
                                         std::chrono::steady_clock::time_point deadline, std::string* error,
                                         bool* timed_out);

}  // namespace shardkit::detail
