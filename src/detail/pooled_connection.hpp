// A libpqxx connection that also knows its libpq handle, so that the pool can
// ask libpq whether a returned connection is idle, mid-transaction or broken
// (libpqxx 6 keeps the handle private; its connection policy sees it).
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <pqxx/connection>
#include <string>

namespace shardkit::detail {

class HandleTrackingConnect : public pqxx::connect_direct {
 public:
  explicit HandleTrackingConnect(const std::string& options);
  handle do_startconnect(handle orig) override;
  handle do_dropconnect(handle orig) noexcept override;
  handle do_disconnect(handle orig) noexcept override;

 private:
  PGconn** slot_;  // where the current handle is published; owned by PooledConnection
};

using TrackedConnection = pqxx::basic_connection_base<HandleTrackingConnect>;

struct PooledConnection {
  // Opens the connection (blocking, bounded by libpq's connect_timeout).
  explicit PooledConnection(const std::string& dsn);

  enum class State { kIdle, kInTransaction, kBroken };
  // From libpq's own view of the session; no round trip.
  [[nodiscard]] State CurrentState() const noexcept;
  // An idle connection must have nothing to read: data or EOF on its socket
  // means the server ended the session (restart, terminate, idle timeout).
  [[nodiscard]] bool LooksAliveWhileIdle() const noexcept;

  std::unique_ptr<PGconn*> handle = std::make_unique<PGconn*>(nullptr);
  std::unique_ptr<TrackedConnection> connection;
  std::chrono::steady_clock::time_point idle_since{};
};

}  // namespace shardkit::detail
