#include "shardkit/pool.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <pqxx/except>

#include "detail/pooled_connection.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace detail {
namespace {
// The policy object is built inside the libpqxx connection's constructor and
// cannot be handed arguments, so the slot travels through this variable.
thread_local PGconn** constructing_slot = nullptr;
}  // namespace

HandleTrackingConnect::HandleTrackingConnect(const std::string& options)
    : pqxx::connect_direct(options), slot_(constructing_slot) {}

HandleTrackingConnect::handle HandleTrackingConnect::do_startconnect(handle orig) {
  handle h = pqxx::connect_direct::do_startconnect(orig);
  if (slot_ != nullptr) *slot_ = h;
  return h;
}

HandleTrackingConnect::handle HandleTrackingConnect::do_dropconnect(handle orig) noexcept {
  if (slot_ != nullptr) *slot_ = nullptr;
  return pqxx::connect_direct::do_dropconnect(orig);
}

HandleTrackingConnect::handle HandleTrackingConnect::do_disconnect(handle orig) noexcept {
  if (slot_ != nullptr) *slot_ = nullptr;
  return pqxx::connect_direct::do_disconnect(orig);
}

PooledConnection::PooledConnection(const std::string& dsn) {
  constructing_slot = handle.get();
  try {
    connection = std::make_unique<TrackedConnection>(dsn);
  } catch (...) {
    constructing_slot = nullptr;
    throw;
  }
  constructing_slot = nullptr;
  // The pool, not libpqxx, decides what happens to a broken connection: no
  // silent reconnect (it would also swap the handle under a concurrent
  // cancel_query() from the scatter's canceller). Deprecated in libpqxx 6.4
  // only because 7.x drops reactivation altogether.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  connection->inhibit_reactivation(true);
#pragma GCC diagnostic pop
}

PooledConnection::State PooledConnection::CurrentState() const noexcept {
  PGconn* h = *handle;
  if (h == nullptr || !connection->is_open() || PQstatus(h) != CONNECTION_OK) return State::kBroken;
  switch (PQtransactionStatus(h)) {
    case PQTRANS_IDLE:
      return State::kIdle;
    case PQTRANS_INTRANS:
    case PQTRANS_INERROR:
    case PQTRANS_ACTIVE:
      return State::kInTransaction;
    default:
      return State::kBroken;
  }
}

bool PooledConnection::LooksAliveWhileIdle() const noexcept {
  if (CurrentState() != State::kIdle) return false;
  pollfd fd{};
  fd.fd = PQsocket(*handle);
  fd.events = POLLIN;
  if (fd.fd < 0) return false;
  const int ready = ::poll(&fd, 1, 0);
  return ready == 0;  // nothing to read, no hang-up
}

}  // namespace detail

using detail::PooledConnection;

namespace {
constexpr std::size_t kRecentWaits = 1024;

std::chrono::microseconds ToMicros(ConnectionPool::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d);
}
}  // namespace

ConnectionPool::ConnectionPool(ShardId shard, std::string dsn, PoolOptions options)
    : shard_(shard),
      dsn_(WithSessionSettings(WithConnectTimeout(dsn, options.connect_timeout), options.time_zone)),
      redacted_dsn_(RedactDsn(dsn)),
      options_(options) {
  if (options_.max_size < 1) {
    throw ConfigError("pool.max_size", fmt::format("must be at least 1 (shard {})", shard));
  }
  counters_.max_size = options_.max_size;
  recent_waits_.reserve(kRecentWaits);
}

ConnectionPool::~ConnectionPool() = default;

std::unique_ptr<PooledConnection> ConnectionPool::Connect() {
  try {
    return std::make_unique<PooledConnection>(dsn_);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    while (!cause.empty() && (cause.back() == '\n' || cause.back() == ' ')) cause.pop_back();
    throw ShardUnavailable(shard_, fmt::format("shard {} ({}) is unreachable: {}; is its server running "
                                               "and does it accept this connection string?",
                                               shard_, redacted_dsn_, RedactDsn(cause)));
  }
}

void ConnectionPool::LearnFactsOnce(PooledConnection& c) {
  {
    std::lock_guard lock(mutex_);
    if (facts_) return;
  }
  // Two first connections may both read them; either answer will do.
  auto facts = std::make_shared<const SessionFacts>(ReadSessionFacts(*c.connection, shard_));
  std::lock_guard lock(mutex_);
  if (!facts_) facts_ = std::move(facts);
}

std::shared_ptr<const SessionFacts> ConnectionPool::Facts() const {
  std::lock_guard lock(mutex_);
  return facts_;
}

std::unique_ptr<PooledConnection> ConnectionPool::TakeLiveIdleLocked() {
  while (!idle_.empty()) {
    // Most recently used first: it is the most likely to be warm and alive.
    auto candidate = std::move(idle_.back());
    idle_.pop_back();
    if (candidate->LooksAliveWhileIdle()) return candidate;
    ++counters_.broken;  // the server went away while it sat idle
  }
  return nullptr;
}

void ConnectionPool::RecordWaitLocked(Clock::duration waited) {
  const auto micros = ToMicros(waited);
  if (recent_waits_.size() < kRecentWaits) {
    recent_waits_.push_back(micros);
  } else {
    recent_waits_[recent_next_] = micros;
    recent_next_ = (recent_next_ + 1) % kRecentWaits;
  }
}

void ConnectionPool::ThrowTimeoutLocked(Clock::duration waited) {
  ++counters_.timeouts;
  throw PoolTimeout(shard_, fmt::format("shard {}: no connection within {} ms: pool exhausted ({} of {} in "
                                        "use, {} connecting, {} waiting); raise pool.max_size, give a "
                                        "later deadline or hold connections for less time",
                                        shard_, std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(),
                                        in_use_, options_.max_size, connecting_, waiting_));
}

ConnectionPool::Lease ConnectionPool::Acquire(Clock::time_point deadline) {
  return *AcquireUntil(deadline, /*may_wait=*/true);
}

std::optional<ConnectionPool::Lease> ConnectionPool::TryAcquire() {
  return AcquireUntil(Clock::now(), /*may_wait=*/false);
}

std::optional<ConnectionPool::Lease> ConnectionPool::AcquireUntil(Clock::time_point deadline, bool may_wait) {
  const auto started = Clock::now();
  std::unique_lock lock(mutex_);
  bool waited = false;
  for (;;) {
    if (auto idle = TakeLiveIdleLocked()) {
      ++in_use_;
      ++counters_.acquired;
      if (waited) ++counters_.waited;
      RecordWaitLocked(Clock::now() - started);
      return Lease(this, std::move(idle), false);
    }
    if (in_use_ + connecting_ + static_cast<int>(idle_.size()) < options_.max_size) {
      ++connecting_;
      lock.unlock();
      std::unique_ptr<PooledConnection> fresh;
      try {
        fresh = Connect();
        LearnFactsOnce(*fresh);
      } catch (...) {
        lock.lock();
        --connecting_;
        ++counters_.connect_failures;
        available_.notify_one();  // the slot is free again for another caller
        throw;
      }
      lock.lock();
      --connecting_;
      ++in_use_;
      ++counters_.connects;
      ++counters_.acquired;
      if (waited) ++counters_.waited;
      RecordWaitLocked(Clock::now() - started);
      return Lease(this, std::move(fresh), true);
    }
    if (!may_wait) return std::nullopt;
    if (Clock::now() >= deadline) ThrowTimeoutLocked(Clock::now() - started);
    if (waiting_ >= options_.max_waiters) {
      ++counters_.rejected;
      throw PoolExhausted(shard_, fmt::format("shard {}: pool exhausted ({} of {} in use, {} waiting, the "
                                              "waiter limit pool.max_waiters = {}); shed load or raise the limits",
                                              shard_, in_use_, options_.max_size, waiting_, options_.max_waiters));
    }
    waited = true;
    ++waiting_;
    available_.wait_until(lock, deadline);
    --waiting_;
  }
}

void ConnectionPool::Return(std::unique_ptr<PooledConnection> c, bool discard) noexcept {
  // Decide the connection's fate: only a healthy, idle session is reused.
  std::unique_ptr<PooledConnection> to_close;
  const auto state = discard ? PooledConnection::State::kBroken : c->CurrentState();
  {
    std::lock_guard lock(mutex_);
    --in_use_;
    if (state == PooledConnection::State::kIdle) {
      c->idle_since = Clock::now();
      idle_.push_back(std::move(c));
    } else {
      if (state == PooledConnection::State::kInTransaction) {
        ++counters_.discarded_in_transaction;
      } else {
        ++counters_.broken;
      }
      to_close = std::move(c);
    }
  }
  available_.notify_one();
  // to_close is destroyed here, outside the lock (closing may block briefly).
}

void ConnectionPool::CloseIdle() {
  std::deque<std::unique_ptr<PooledConnection>> closing;
  {
    std::lock_guard lock(mutex_);
    closing.swap(idle_);
  }
  available_.notify_all();
}

PoolStats ConnectionPool::Stats() const {
  std::vector<std::chrono::microseconds> waits;
  PoolStats stats;
  {
    std::lock_guard lock(mutex_);
    stats = counters_;
    stats.in_use = in_use_;
    stats.idle = static_cast<int>(idle_.size());
    stats.connecting = connecting_;
    stats.waiting = waiting_;
    waits = recent_waits_;
  }
  if (!waits.empty()) {
    std::sort(waits.begin(), waits.end());
    auto at = [&](double q) { return waits[static_cast<std::size_t>(q * static_cast<double>(waits.size() - 1))]; };
    stats.acquire_wait_p50 = at(0.50);
    stats.acquire_wait_p99 = at(0.99);
    stats.acquire_wait_max = waits.back();
  }
  return stats;
}

// ---- Lease ----

ConnectionPool::Lease::Lease(ConnectionPool* pool, std::unique_ptr<PooledConnection> c, bool fresh) noexcept
    : pool_(pool), connection_(std::move(c)), fresh_(fresh) {}

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      connection_(std::move(other.connection_)),
      fresh_(other.fresh_),
      discard_(other.discard_) {}

ConnectionPool::Lease& ConnectionPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    connection_ = std::move(other.connection_);
    fresh_ = other.fresh_;
    discard_ = other.discard_;
  }
  return *this;
}

ConnectionPool::Lease::~Lease() { Release(); }

void ConnectionPool::Lease::Release() noexcept {
  if (pool_ != nullptr && connection_) pool_->Return(std::move(connection_), discard_);
  pool_ = nullptr;
}

pqxx::connection_base& ConnectionPool::Lease::Connection() const {
  if (!connection_) throw Error("this lease holds no connection (moved from or released)");
  return *connection_->connection;
}

ShardId ConnectionPool::Lease::Shard() const noexcept { return pool_ != nullptr ? pool_->shard_ : ShardId{-1}; }

}  // namespace shardkit
