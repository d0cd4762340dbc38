// shardkit/pool/pool.hpp — one bounded connection pool per shard.
//
// Every wait has a deadline, connecting included; the pool is bounded in
// connections and in waiters; the lease's release decides a connection's
// fate (broken or left mid-transaction -> closed, otherwise back to idle). A
// pool whose server went away recovers by itself: connections the server
// closes are noticed as it happens and pruned, idle ones not used for a while
// are checked before they are handed out, and new ones are opened as needed.
// Every connection opens with the session settings merged answers rely on
// (session.hpp); the first one also reads the server's SessionFacts, once.
//
//   auto lease = pool.Acquire(std::chrono::steady_clock::now() + 500ms);
//   pqxx::nontransaction tx{*lease};
//   auto rows = tx.exec_params("SELECT ... WHERE customer_id = $1", id);
//
// Thread safety: ConnectionPool — every member function may be called from
// any number of threads at once. Lease — one thread at a time (it may be
// moved to another thread). CancelHandle — any thread, any time. PoolStats,
// PoolOptions — plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/pg/session.hpp"

namespace pqxx {
class connection_base;
}
struct pg_cancel;  // libpq's PGcancel

namespace shardkit {

struct PoolOptions {
  int max_size = 8;      // connections open at most (idle + in use + connecting)
  int max_waiters = 64;  // callers allowed to queue; beyond that Acquire fails at once
  // Opening one connection takes at most this long (the caller's deadline
  // may cut it shorter): TCP connect, TLS, authentication.
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds acquire_timeout{1000};  // deadline of Acquire() without one
  // An idle connection returned less than this long ago is handed out
  // without a liveness check (HikariCP's "alive bypass window"); older ones
  // are checked first (a poll of the socket, no round trip). Either way a
  // connection the server closed is pruned as soon as its socket says so.
  // Zero checks every time.
  std::chrono::milliseconds alive_bypass_window{500};
  // Every connection's TimeZone. All shards must agree: merged timestamptz
  // values (group keys) are compared as text.
  std::string time_zone = "UTC";
  // Every connection's search_path (session.hpp pins it, with the settings
  // that change what a statement means). All shards must agree.
  std::string search_path = "public";
};
// Every connection also gets TCP keepalives (idle 10 s, interval 5 s, 3
// probes) and tcp_user_timeout = 20 s unless its DSN sets them: a server that
// vanishes without closing its sockets (power loss, partition) is given up
// after about 20 s instead of pinning a thread for the kernel's 15 minutes.

// A plain snapshot of counters; cheap to read at any time.
struct PoolStats {
  std::uint64_t acquired = 0;                  // leases handed out
  std::uint64_t waited = 0;                    // of those, how many had to wait for another caller's connection
  std::uint64_t timeouts = 0;                  // Acquire calls that hit their deadline (connecting included)
  std::uint64_t rejected = 0;                  // Acquire calls refused: waiter bound reached
  std::uint64_t connects = 0;                  // connections opened
  std::uint64_t connect_failures = 0;          // connection attempts that failed or ran out of time
  std::uint64_t broken = 0;                    // connections dropped because they were broken or closed by the server
  std::uint64_t discarded_in_transaction = 0;  // dropped because left mid-transaction
  // Dropped because the holder changed a pinned setting that the server
  // reports (DateStyle, IntervalStyle, TimeZone, standard_conforming_strings,
  // client_encoding) with SET and gave it back without RESET.
  std::uint64_t discarded_changed_session = 0;
  std::uint64_t checked = 0;  // idle connections polled before use (idle longer than alive_bypass_window)
  int in_use = 0;
  int idle = 0;
  int connecting = 0;
  int waiting = 0;
  int max_size = 0;
  // Time from the call to the lease, over about the 1,024 most recent
  // acquisitions (connecting included; one found idle at once counts 0).
  std::chrono::microseconds acquire_wait_p50{0};
  std::chrono::microseconds acquire_wait_p99{0};
  std::chrono::microseconds acquire_wait_max{0};
};

namespace detail {
class PoolCore;
struct PoolSlot;
struct PooledConnection;
}  // namespace detail

class ConnectionPool {
 public:
  using Clock = std::chrono::steady_clock;

  // Connections are opened lazily. `dsn` is a libpq connection string or URI;
  // it is never shown unredacted.
  ConnectionPool(ShardId shard, Dsn dsn, PoolOptions options = {});
  // Closes the idle connections. Leases still out stay usable: each
  // connection is closed when its lease is released, and the pool's state is
  // freed with the last one. No thread may be inside Acquire/TryAcquire.
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Asks the server to cancel whatever a connection is running (libpq's
  // PQcancel). Built on the thread that opened the connection; Send() may be
  // called from any thread, also while another thread uses the connection,
  // and blocks for one short connection to the server (bounded by the
  // keepalive and tcp_user_timeout settings). A request that arrives when
  // nothing runs does nothing, but one that arrives late may hit the next
  // statement on that session: whoever cancels should Discard() the lease.
  class CancelHandle {
   public:
    ~CancelHandle();
    CancelHandle(const CancelHandle&) = delete;
    CancelHandle& operator=(const CancelHandle&) = delete;
    // False, with the reason in *error, if the request could not be sent.
    bool Send(std::string* error = nullptr) const noexcept;

   private:
    friend struct detail::PooledConnection;
    explicit CancelHandle(pg_cancel* handle) noexcept : handle_(handle) {}
    pg_cancel* handle_;
  };

  // RAII: returns the connection to its pool when destroyed. May outlive
  // the pool (see ~ConnectionPool).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }

    [[nodiscard]] pqxx::connection_base& Connection() const;
    pqxx::connection_base& operator*() const { return Connection(); }
    pqxx::connection_base* operator->() const { return &Connection(); }
    // The shard of the pool it came from; ShardId{-1} for an empty lease.
    [[nodiscard]] ShardId Shard() const noexcept;
    // Was this connection opened by this very Acquire (no reuse)?
    [[nodiscard]] bool FreshConnection() const noexcept { return fresh_; }
    // The connection's cancel handle (null for an empty lease).
    [[nodiscard]] std::shared_ptr<const CancelHandle> Canceller() const;
    // Tell the pool not to reuse this connection (e.g. after a protocol error).
    void Discard() noexcept { discard_ = true; }
    // Give the connection back now instead of at destruction.
    void Release() noexcept;

   private:
    friend class ConnectionPool;
    Lease(detail::PoolSlot* slot, bool fresh) noexcept : slot_(slot), fresh_(fresh) {}
    detail::PoolSlot* slot_ = nullptr;  // its pool's state lives as long as the slot is leased
    bool fresh_ = false;
    bool discard_ = false;
  };

  // Waits until `deadline` at most, connecting included. Throws PoolTimeout
  // (with counts), PoolExhausted (waiter bound) or ShardUnavailable (cannot
  // connect).
  [[nodiscard]] Lease Acquire(Clock::time_point deadline);
  [[nodiscard]] Lease Acquire();  // deadline: now + options.acquire_timeout
  // Never waits for another caller's connection: an idle one, a new one if
  // below max_size (connecting for options.connect_timeout at most), or
  // nothing. Throws ShardUnavailable if connecting fails.
  [[nodiscard]] std::optional<Lease> TryAcquire();
  // An idle connection right away, or nothing: never connects, never waits
  // (the same check of a connection idle for long as Acquire's).
  [[nodiscard]] std::optional<Lease> TryAcquireIdle() noexcept;

  [[nodiscard]] PoolStats Stats() const;
  [[nodiscard]] ShardId Shard() const noexcept;
  [[nodiscard]] const std::string& RedactedDsn() const noexcept;
  [[nodiscard]] const PoolOptions& Options() const noexcept;
  // What the first connection this pool opened reported about its database
  // and session (read once); nullptr until then.
  [[nodiscard]] std::shared_ptr<const SessionFacts> Facts() const;
  // Closes idle connections (e.g. before a planned server restart); leased
  // ones are untouched.
  void CloseIdle();

 private:
  detail::PoolCore* core_;  // shared with the leases (see ~ConnectionPool)
};

}  // namespace shardkit
