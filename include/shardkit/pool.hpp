// shardkit/pool.hpp — one bounded connection pool per shard.
//
// Every wait has a deadline; the pool is bounded in connections and in
// waiters; the lease's release decides a connection's fate (broken or left
// mid-transaction -> closed, otherwise back to idle). A pool whose server went
// away recovers by itself: dead idle connections are noticed and replaced.
// Every connection opens with the session settings merged answers rely on
// (session.hpp); the first one also reads the server's SessionFacts, once.
//
//   auto lease = pool.Acquire(std::chrono::steady_clock::now() + 500ms);
//   pqxx::nontransaction tx{*lease};
//   auto rows = tx.exec_params("SELECT ... WHERE customer_id = $1", id);
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/bucket.hpp"
#include "shardkit/session.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

struct PoolOptions {
  int max_size = 8;          // connections open at most (idle + in use)
  int max_waiters = 64;      // callers allowed to queue; beyond that Acquire fails at once
  std::chrono::milliseconds connect_timeout{2000};  // libpq connect_timeout (whole seconds, >= 2)
  std::chrono::milliseconds acquire_timeout{1000};  // deadline of Acquire() without one
  // Every connection's TimeZone. All shards must agree: merged timestamptz
  // values (group keys) are compared as text.
  std::string time_zone = "UTC";
};

// A plain snapshot of counters; cheap to read at any time.
struct PoolStats {
  std::uint64_t acquired = 0;          // leases handed out
  std::uint64_t waited = 0;            // of those, how many had to wait
  std::uint64_t timeouts = 0;          // Acquire calls that hit their deadline
  std::uint64_t rejected = 0;          // Acquire calls refused: waiter bound reached
  std::uint64_t connects = 0;          // connections opened
  std::uint64_t connect_failures = 0;  // connection attempts that failed
  std::uint64_t broken = 0;            // connections dropped because they were broken
  std::uint64_t discarded_in_transaction = 0;  // dropped because left mid-transaction
  int in_use = 0;
  int idle = 0;
  int connecting = 0;
  int waiting = 0;
  int max_size = 0;
  std::chrono::microseconds acquire_wait_p50{0};  // over the most recent acquisitions
  std::chrono::microseconds acquire_wait_p99{0};
  std::chrono::microseconds acquire_wait_max{0};
};

namespace detail {
struct PooledConnection;
}

class ConnectionPool {
 public:
  using Clock = std::chrono::steady_clock;

  // Connections are opened lazily. `dsn` is a libpq connection string or URI;
  // it is never shown unredacted.
  ConnectionPool(ShardId shard, std::string dsn, PoolOptions options = {});
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // RAII: returns the connection to its pool when destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    [[nodiscard]] pqxx::connection_base& Connection() const;
    pqxx::connection_base& operator*() const { return Connection(); }
    pqxx::connection_base* operator->() const { return &Connection(); }
    [[nodiscard]] ShardId Shard() const noexcept;
    // Was this connection opened by this very Acquire (no reuse)?
    [[nodiscard]] bool FreshConnection() const noexcept { return fresh_; }
    // Tell the pool not to reuse this connection (e.g. after a protocol error).
    void Discard() noexcept { discard_ = true; }
    // Give the connection back now instead of at destruction.
    void Release() noexcept;

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<detail::PooledConnection> c, bool fresh) noexcept;
    ConnectionPool* pool_ = nullptr;
    std::unique_ptr<detail::PooledConnection> connection_;
    bool fresh_ = false;
    bool discard_ = false;
  };

  // Waits until `deadline` at most. Throws PoolTimeout (with counts),
  // PoolExhausted (waiter bound) or ShardUnavailable (cannot connect).
  [[nodiscard]] Lease Acquire(Clock::time_point deadline);
  [[nodiscard]] Lease Acquire() { return Acquire(Clock::now() + options_.acquire_timeout); }
  // Never waits for another caller's connection: an idle one, a new one if
  // below max_size (this may connect), or nothing.
  [[nodiscard]] std::optional<Lease> TryAcquire();

  [[nodiscard]] PoolStats Stats() const;
  [[nodiscard]] ShardId Shard() const noexcept { return shard_; }
  [[nodiscard]] const std::string& RedactedDsn() const noexcept { return redacted_dsn_; }
  [[nodiscard]] const PoolOptions& Options() const noexcept { return options_; }
  // What the first connection this pool opened reported about its database
  // and session (read once); nullptr until then.
  [[nodiscard]] std::shared_ptr<const SessionFacts> Facts() const;
  // Closes idle connections (e.g. before a planned server restart).
  void CloseIdle();

 private:
  // The one acquisition path: without may_wait it never queues (TryAcquire).
  std::optional<Lease> AcquireUntil(Clock::time_point deadline, bool may_wait);
  void Return(std::unique_ptr<detail::PooledConnection> c, bool discard) noexcept;
  std::unique_ptr<detail::PooledConnection> Connect();  // without the lock held
  void LearnFactsOnce(detail::PooledConnection& c);     // without the lock held
  std::unique_ptr<detail::PooledConnection> TakeLiveIdleLocked();
  void RecordWaitLocked(Clock::duration waited);
  [[noreturn]] void ThrowTimeoutLocked(Clock::duration waited);

  const ShardId shard_;
  const std::string dsn_;
  const std::string redacted_dsn_;
  const PoolOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable available_;
  std::deque<std::unique_ptr<detail::PooledConnection>> idle_;
  int in_use_ = 0;
  int connecting_ = 0;
  int waiting_ = 0;
  PoolStats counters_;
  std::vector<std::chrono::microseconds> recent_waits_;  // ring buffer
  std::size_t recent_next_ = 0;
  std::shared_ptr<const SessionFacts> facts_;
};

}  // namespace shardkit
