// A libpqxx connection that also knows its libpq handle, so that the pool can
// ask libpq whether a returned connection is idle, mid-transaction or broken
// (libpqxx 6 keeps the handle private; its connection policy sees it). The
// pool opens the libpq connection itself (asynchronously, see
// pool_connect.hpp) and hands the open handle to libpqxx through the policy.
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <pqxx/connection>
#include <string>
#include <vector>

#include "pool/hangup_watcher.hpp"
#include "pool/pool_connect.hpp"
#include "shardkit/pool/pool.hpp"

namespace shardkit::detail {

class HandleTrackingConnect : public pqxx::connect_direct {
 public:
  explicit HandleTrackingConnect(const std::string& options);
  // Takes the handle opened by the pool; never opens one itself (the pool,
  // not libpqxx, decides when to connect).
  handle do_startconnect(handle orig) override;
  handle do_dropconnect(handle orig) noexcept override;
  handle do_disconnect(handle orig) noexcept override;

 private:
  PGconn** slot_;  // where the current handle is published; owned by PooledConnection
};

using TrackedConnection = pqxx::basic_connection_base<HandleTrackingConnect>;

struct PooledConnection {
  // Takes over an open libpq connection; builds the libpqxx connection and
  // the cancel handle on the calling thread.
  explicit PooledConnection(UniquePGconn open);
  // Stops watching for hangups, then closes.
  ~PooledConnection();
  PooledConnection(const PooledConnection&) = delete;
  PooledConnection& operator=(const PooledConnection&) = delete;

  // From now on, calls callback(context) (once, on the watcher's thread)
  // when the server closes the connection, after setting peer_closed. False
  // if it cannot be watched.
  bool WatchForHangup(HangupWatcher::Callback callback, void* context) noexcept;

  enum class State { kIdle, kInTransaction, kBroken };
  // From libpq's own view of the session; no system call, no round trip.
  [[nodiscard]] State CurrentState() const noexcept;
  // An idle connection must have nothing to read: data or EOF on its socket
  // means the server ended the session (restart, terminate, idle timeout).
  // One poll() system call.
  [[nodiscard]] bool LooksAliveWhileIdle() const noexcept;
  // Whether the server's last reported value of each setting is the pinned
  // one (libpq's ParameterStatus: no round trip).
  [[nodiscard]] bool Reports(const std::vector<PinnedSetting>& settings) const noexcept;
  [[nodiscard]] bool PeerClosed() const noexcept { return peer_closed.load(std::memory_order_acquire); }

  std::unique_ptr<PGconn*> handle = std::make_unique<PGconn*>(nullptr);
  std::unique_ptr<TrackedConnection> connection;
  std::shared_ptr<const ConnectionPool::CancelHandle> cancel;
  std::atomic<bool> peer_closed{false};
  std::uint64_t watch_id = 0;
  PoolSlot* home = nullptr;  // the pool slot it lives in, for the hangup callback
};

}  // namespace shardkit::detail
