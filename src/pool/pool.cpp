#include "shardkit/pool/pool.hpp"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "pool/hangup_watcher.hpp"
#include "pool/pool_connect.hpp"
#include "pool/pooled_connection.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/errors.hpp"

// How the pool works and why:
//
// * Connections live in a fixed array of max_size slots, each with an atomic
//   state: empty, idle, busy (leased), connecting; closed or orphaned once the
//   pool is gone. Acquiring an idle connection is one compare-and-swap on its
//   slot (idle -> busy), releasing one another (busy -> idle): no mutex, no
//   shared counter, no system call on that path. Each thread starts its scan
//   at the slot it used last, so threads mostly touch different slots.
//   Counters and recent wait times are kept per slot, written only by the
//   slot's holder, and summed by Stats().
// * Liveness without a system call per acquisition: the process-wide
//   HangupWatcher (epoll, EPOLLRDHUP) notices a server closing a connection
//   when it happens, flags the connection and prunes it if idle. A connection
//   returned within options.alive_bypass_window is then trusted as is; an
//   older one is also polled before it is handed out, which catches what the
//   watcher cannot see (e.g. data the server sent to an idle session). A
//   connection found dead is closed and the caller gets another one.
// * Waiting: only when no slot is idle or empty does a caller take the
//   mutex, count itself in `waiting` and sleep on the condition variable
//   until its deadline. A release that makes a slot idle or empty wakes one
//   waiter if `waiting` is not zero; both sides use sequentially consistent
//   operations (the slot's CAS, the waiter count) and the waiter re-checks
//   the slots under the mutex before sleeping, so no wakeup is lost.
// * Connecting happens outside any lock, in a slot reserved for it
//   (empty -> connecting), asynchronously, bounded by the earlier of the
//   caller's deadline and options.connect_timeout (pool_connect.hpp).
// * Lifetime: the slots and counters live in a PoolCore shared by the pool
//   and its leases. ~ConnectionPool closes idle connections and marks busy
//   slots orphaned, taking one reference per orphan; a lease released later
//   finds its slot orphaned, closes its connection and drops the reference.
//   The last reference frees the core. A lease outliving its pool is thus
//   safe and costs nothing on the normal path (the release's CAS is there
//   anyway).

namespace shardkit {
namespace detail {

// ---- The pool's shared state ----

enum SlotState : int { kEmpty, kIdle, kBusy, kConnecting, kClosed, kOrphaned };

struct alignas(64) PoolSlot {
  std::atomic<int> state{kEmpty};
  // Coarse monotonic nanoseconds of the last release (or the connect).
  std::atomic<std::int64_t> last_used{0};
  // Owned by whoever holds the slot (busy, connecting, or the pool while idle).
  std::unique_ptr<PooledConnection> connection;
  PoolCore* core = nullptr;
  // Written only by the slot's holder; read by Stats().
  std::atomic<std::uint64_t> acquired{0};
  std::atomic<std::uint64_t> waited{0};
  std::atomic<std::uint64_t> waits_recorded{0};
  std::unique_ptr<std::atomic<std::int64_t>[]> waits;  // ring of PoolCore::waits_per_slot, microseconds
};

class PoolCore {
 public:
  using Clock = std::chrono::steady_clock;

  PoolCore(ShardId shard_id, const Dsn& dsn, const PoolOptions& pool_options);

  // The fast path: an idle, live connection, or null. The slot returned is busy.
  PoolSlot* TakeIdle() noexcept;
  // Counts an acquisition in the slot it got (the caller holds the slot).
  void Record(PoolSlot& slot, bool waited, Clock::duration wait) noexcept;
  // Waits, connects or gives up; the slot returned is busy.
  std::pair<PoolSlot*, bool> AcquireSlow(Clock::time_point deadline, bool may_wait);
  void Release(PoolSlot& slot, bool discard) noexcept;
  void CloseIdle() noexcept;
  void PruneIfIdle(PoolSlot& slot, const PooledConnection* dead) noexcept;
  PoolStats Stats() const;
  std::shared_ptr<const SessionFacts> Facts() const;
  // ~ConnectionPool.
  void Shutdown() noexcept;

  const ShardId shard;
  const std::string redacted_dsn;
  const PoolOptions options;

 private:
  PoolSlot* ReserveEmpty() noexcept;
  bool AnyIdleOrEmpty() const noexcept;
  // Moves a slot the caller holds (in state `from`) to `next`; false if the
  // pool is gone (the slot is orphaned and still the caller's).
  bool HandOver(PoolSlot& slot, int from, int next) noexcept;
  void WakeWaiter() noexcept;
  void Unref() noexcept;
  // Closes a slot's connection (the caller holds it busy) and empties it.
  void Drop(PoolSlot& slot) noexcept;
  PoolSlot* Connect(PoolSlot& slot, Clock::time_point started, Clock::time_point deadline, bool deadline_is_callers);
  struct Counts {
    int in_use = 0, idle = 0, connecting = 0;
  };
  Counts CountSlots() const noexcept;
  [[noreturn]] void ThrowTimeout(Clock::duration waited, const char* while_doing);

  const ConnectParameters parameters_;
  const std::uint32_t size_;
  const std::uint32_t waits_per_slot_;
  const std::int64_t bypass_nanos_;
  std::unique_ptr<PoolSlot[]> slots_;
  std::atomic<std::uint32_t> high_water_{0};  // slots [0, high_water) have ever held a connection

  mutable std::mutex mutex_;  // only for waiting
  std::condition_variable available_;
  std::atomic<int> waiting_{0};

  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> connects_{0};
  std::atomic<std::uint64_t> connect_failures_{0};
  std::atomic<std::uint64_t> broken_{0};
  std::atomic<std::uint64_t> discarded_{0};
  std::atomic<std::uint64_t> changed_session_{0};
  std::atomic<std::uint64_t> checked_{0};
  // The pinned settings the server reports on every change (ParameterStatus):
  // checked on release at no cost, so a connection given back with one of
  // them SET is not handed to the next caller.
  const std::vector<PinnedSetting> reported_;

  std::atomic<int> refs_{1};  // the pool, plus one per orphaned lease

  // Read on the first connection and never changed after: once
  // facts_known_ is set, facts_ is read without the mutex (every scatter
  // reads it once per shard).
  mutable std::mutex facts_mutex_;
  std::shared_ptr<const SessionFacts> facts_;  // written under facts_mutex_, then only read
  std::atomic<bool> facts_known_{false};
};

namespace {

constexpr std::uint32_t kRecentWaits = 1024;  // over all slots

// CLOCK_MONOTONIC_COARSE: a few nanoseconds through the vDSO, resolution of
// a scheduler tick, plenty for a window of hundreds of milliseconds.
std::int64_t CoarseNanos() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t Micros(std::chrono::steady_clock::duration d) noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

long long Millis(std::chrono::steady_clock::duration d) noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Where each thread starts looking for an idle slot: the one it used last.
constinit thread_local std::uint32_t t_slot_hint = 0;

void OnHangup(void* context) noexcept {
  auto* connection = static_cast<PooledConnection*>(context);
  connection->peer_closed.store(true, std::memory_order_release);
  // The connection is alive until this returns (its destructor waits in
  // Unwatch), so its slot and the pool's state are too.
  PoolSlot* slot = connection->home;
  slot->core->PruneIfIdle(*slot, connection);
}

std::vector<PinnedSetting> ReportedPins(const SessionChoices& choices) {
  std::vector<PinnedSetting> out;
  for (auto& s : PinnedSettings(choices)) {
    for (const char* reported :
         {"DateStyle", "IntervalStyle", "TimeZone", "standard_conforming_strings", "client_encoding"}) {
      if (s.name == reported) {
        out.push_back(std::move(s));
        break;
      }
    }
  }
  return out;
}

}  // namespace

PoolCore::PoolCore(ShardId shard_id, const Dsn& dsn, const PoolOptions& pool_options)
    : shard(shard_id),
      redacted_dsn(dsn.Redacted()),
      options(pool_options),
      parameters_(dsn, SessionChoices{pool_options.time_zone, pool_options.search_path}),
      size_(static_cast<std::uint32_t>(std::max(1, pool_options.max_size))),
      waits_per_slot_(std::clamp<std::uint32_t>(kRecentWaits / size_, 4, kRecentWaits)),
      bypass_nanos_(std::chrono::duration_cast<std::chrono::nanoseconds>(pool_options.alive_bypass_window).count()),
      slots_(std::make_unique<PoolSlot[]>(size_)),
      reported_(ReportedPins(SessionChoices{pool_options.time_zone, pool_options.search_path})) {
  for (std::uint32_t i = 0; i < size_; ++i) {
    slots_[i].core = this;
    slots_[i].waits = std::make_unique<std::atomic<std::int64_t>[]>(waits_per_slot_);
  }
}

PoolSlot* PoolCore::TakeIdle() noexcept {
  const std::uint32_t used = high_water_.load(std::memory_order_acquire);
  if (used == 0) return nullptr;
  std::uint32_t i = t_slot_hint;
  if (i >= used) i = 0;
  std::int64_t now = 0;
  for (std::uint32_t n = 0; n < used; ++n, i = (i + 1 == used) ? 0 : i + 1) {
    PoolSlot& slot = slots_[i];
    if (slot.state.load(std::memory_order_relaxed) != kIdle) continue;
    int expected = kIdle;
    if (!slot.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire, std::memory_order_relaxed)) {
      continue;
    }
    const PooledConnection& c = *slot.connection;
    bool alive = !c.PeerClosed();
    if (alive) {
      if (now == 0) now = CoarseNanos();
      const bool trusted = c.watch_id != 0 && now - slot.last_used.load(std::memory_order_relaxed) < bypass_nanos_;
      if (!trusted) {
        checked_.fetch_add(1, std::memory_order_relaxed);
        alive = c.LooksAliveWhileIdle();
      }
    }
    if (alive) {
      t_slot_hint = i;
      return &slot;
    }
    broken_.fetch_add(1, std::memory_order_relaxed);  // the server went away while it sat idle
    Drop(slot);
  }
  return nullptr;
}

void PoolCore::Record(PoolSlot& slot, bool waited, Clock::duration wait) noexcept {
  // Only the slot's holder writes these: plain increments, atomic for Stats().
  slot.acquired.store(slot.acquired.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (waited) slot.waited.store(slot.waited.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const auto n = slot.waits_recorded.load(std::memory_order_relaxed);
  slot.waits[n % waits_per_slot_].store(Micros(wait), std::memory_order_relaxed);
  slot.waits_recorded.store(n + 1, std::memory_order_release);
}

PoolSlot* PoolCore::ReserveEmpty() noexcept {
  for (std::uint32_t i = 0; i < size_; ++i) {
    PoolSlot& slot = slots_[i];
    if (slot.state.load(std::memory_order_relaxed) != kEmpty) continue;
    int expected = kEmpty;
    if (slot.state.compare_exchange_strong(expected, kConnecting, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
      std::uint32_t used = high_water_.load(std::memory_order_relaxed);
      while (used < i + 1 && !high_water_.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
      }
      return &slot;
    }
  }
  return nullptr;
}

bool PoolCore::AnyIdleOrEmpty() const noexcept {
  for (std::uint32_t i = 0; i < size_; ++i) {
    const int s = slots_[i].state.load(std::memory_order_seq_cst);
    if (s == kIdle || s == kEmpty) return true;
  }
  return false;
}

bool PoolCore::HandOver(PoolSlot& slot, int from, int next) noexcept {
  int expected = from;
  if (!slot.state.compare_exchange_strong(expected, next, std::memory_order_seq_cst)) return false;
  if (next == kIdle || next == kEmpty) WakeWaiter();
  return true;
}

void PoolCore::WakeWaiter() noexcept {
  if (waiting_.load(std::memory_order_seq_cst) == 0) return;
  // Taking the mutex orders this wakeup after a waiter's re-check: a waiter
  // that counted itself is either asleep already or will see the slot.
  { std::lock_guard lock(mutex_); }
  available_.notify_one();
}

void PoolCore::Unref() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void PoolCore::Drop(PoolSlot& slot) noexcept {
  auto closing = std::move(slot.connection);
  if (!HandOver(slot, kBusy, kEmpty)) {
    closing.reset();
    Unref();
    return;
  }
  // Closed here, outside any lock (closing may take a moment).
}

void PoolCore::Release(PoolSlot& slot, bool discard) noexcept {
  const PooledConnection& c = *slot.connection;
  auto state = discard ? PooledConnection::State::kBroken : c.CurrentState();
  if (state == PooledConnection::State::kIdle && c.PeerClosed()) state = PooledConnection::State::kBroken;
  if (state == PooledConnection::State::kIdle && !c.Reports(reported_)) {
    changed_session_.fetch_add(1, std::memory_order_relaxed);
    Drop(slot);
    return;
  }
  if (state == PooledConnection::State::kIdle) {
    slot.last_used.store(CoarseNanos(), std::memory_order_relaxed);
    if (!HandOver(slot, kBusy, kIdle)) {  // the pool is gone
      slot.connection.reset();
      Unref();
    }
    return;
  }
  if (state == PooledConnection::State::kInTransaction) {
    discarded_.fetch_add(1, std::memory_order_relaxed);
  } else {
    broken_.fetch_add(1, std::memory_order_relaxed);
  }
  Drop(slot);
}

void PoolCore::PruneIfIdle(PoolSlot& slot, const PooledConnection* dead) noexcept {
  int expected = kIdle;
  // In use: its holder sees peer_closed on release.
  if (!slot.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) return;
  if (slot.connection.get() != dead) {  // the slot has another connection by now
    if (!HandOver(slot, kBusy, kIdle)) {
      slot.connection.reset();
      Unref();
    }
    return;
  }
  broken_.fetch_add(1, std::memory_order_relaxed);
  Drop(slot);  // the connection's destructor runs here, on the watcher's thread
}

void PoolCore::CloseIdle() noexcept {
  for (std::uint32_t i = 0; i < size_; ++i) {
    PoolSlot& slot = slots_[i];
    int expected = kIdle;
    if (slot.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) Drop(slot);
  }
}

void PoolCore::Shutdown() noexcept {
  std::vector<std::unique_ptr<PooledConnection>> closing;
  for (std::uint32_t i = 0; i < size_; ++i) {
    PoolSlot& slot = slots_[i];
    for (;;) {
      int s = slot.state.load(std::memory_order_acquire);
      if (s == kIdle || s == kEmpty) {
        if (slot.state.compare_exchange_strong(s, kClosed, std::memory_order_acq_rel)) {
          if (slot.connection) closing.push_back(std::move(slot.connection));
          break;
        }
        continue;
      }
      // Busy: a lease holds it; it will close the connection and drop the
      // reference taken here.
      refs_.fetch_add(1, std::memory_order_relaxed);
      if (slot.state.compare_exchange_strong(s, kOrphaned, std::memory_order_acq_rel)) break;
      refs_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  closing.clear();
  Unref();
}

PoolCore::Counts PoolCore::CountSlots() const noexcept {
  Counts counts;
  for (std::uint32_t i = 0; i < size_; ++i) {
    switch (slots_[i].state.load(std::memory_order_relaxed)) {
      case kBusy:
        ++counts.in_use;
        break;
      case kIdle:
        ++counts.idle;
        break;
      case kConnecting:
        ++counts.connecting;
        break;
      default:
        break;
    }
  }
  return counts;
}

void PoolCore::ThrowTimeout(Clock::duration waited, const char* while_doing) {
  timeouts_.fetch_add(1, std::memory_order_relaxed);
  const Counts counts = CountSlots();
  // Another waiter may have missed a wakeup this one absorbed while timing out.
  if (waiting_.load(std::memory_order_seq_cst) > 0 && AnyIdleOrEmpty()) WakeWaiter();
  throw PoolTimeout(shard, fmt::format("shard {}: no connection within {} ms: {} ({} of {} in use, {} connecting, "
                                       "{} waiting); raise pool.max_size, give a later deadline or hold "
                                       "connections for less time",
                                       shard, Millis(waited), while_doing, counts.in_use, options.max_size,
                                       counts.connecting, waiting_.load(std::memory_order_relaxed)));
}

PoolSlot* PoolCore::Connect(PoolSlot& slot, Clock::time_point started, Clock::time_point deadline,
                            bool deadline_is_callers) {
  std::string error;
  bool timed_out = false;
  std::unique_ptr<PooledConnection> fresh;
  try {
    if (auto open = ConnectBefore(parameters_, deadline, &error, &timed_out)) {
      fresh = std::make_unique<PooledConnection>(std::move(open));
      // Every new connection is verified to run with the pinned settings
      // (one query); the pool keeps the first one's facts (two first
      // connections may both offer theirs, either will do).
      auto facts = std::make_shared<const SessionFacts>(ReadSessionFacts(*fresh->connection, shard));
      VerifyPinnedSettings(*facts, SessionChoices{options.time_zone, options.search_path}, shard);
      if (!facts_known_.load(std::memory_order_acquire)) {
        std::lock_guard lock(facts_mutex_);
        if (!facts_known_.load(std::memory_order_relaxed)) {
          facts_ = std::move(facts);
          facts_known_.store(true, std::memory_order_release);
        }
      }
    }
  } catch (const Error&) {  // ReadSessionFacts, VerifyPinnedSettings: they name the shard
    fresh.reset();
    connect_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!HandOver(slot, kConnecting, kEmpty)) Unref();
    throw;
  } catch (const std::exception& e) {
    fresh.reset();
    error = e.what();
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  }
  if (!fresh) {
    connect_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!HandOver(slot, kConnecting, kEmpty)) {
      Unref();
      throw ShardUnavailable(shard, fmt::format("shard {}: the pool was destroyed while connecting", shard));
    }
    if (timed_out && deadline_is_callers) {
      ThrowTimeout(Clock::now() - started,
                   "connecting did not finish before the deadline (the server did not "
                   "answer in time)");
    }
    if (timed_out) {
      throw ShardUnavailable(shard, fmt::format("shard {} ({}) is unreachable: no answer within "
                                                "pool.connect_timeout_ms = {} ms; is the server running and "
                                                "reachable?",
                                                shard, redacted_dsn, options.connect_timeout.count()));
    }
    throw ShardUnavailable(shard, fmt::format("shard {} ({}) is unreachable: {}; is the server running and "
                                              "accepting connections?",
                                              shard, redacted_dsn, RedactDsn(error)));
  }
  fresh->home = &slot;
  slot.last_used.store(CoarseNanos(), std::memory_order_relaxed);
  slot.connection = std::move(fresh);
  (void)slot.connection->WatchForHangup(&OnHangup, slot.connection.get());
  connects_.fetch_add(1, std::memory_order_relaxed);
  if (!HandOver(slot, kConnecting, kBusy)) {
    slot.connection.reset();
    Unref();
    throw ShardUnavailable(shard, fmt::format("shard {}: the pool was destroyed while connecting", shard));
  }
  return &slot;
}

std::pair<PoolSlot*, bool> PoolCore::AcquireSlow(Clock::time_point deadline, bool may_wait) {
  const auto started = Clock::now();
  bool waited = false;
  for (;;) {
    if (PoolSlot* slot = TakeIdle()) {
      Record(*slot, waited, Clock::now() - started);
      return {slot, false};
    }
    if (may_wait && Clock::now() >= deadline) ThrowTimeout(Clock::now() - started, "pool exhausted");
    if (PoolSlot* slot = ReserveEmpty()) {
      const auto now = Clock::now();
      const auto limit = now + options.connect_timeout;
      const bool callers = may_wait && deadline < limit;
      Connect(*slot, started, callers ? deadline : limit, callers);
      Record(*slot, waited, Clock::now() - started);
      return {slot, true};
    }
    if (!may_wait) return {nullptr, false};
    std::unique_lock lock(mutex_);
    if (waiting_.load(std::memory_order_relaxed) >= options.max_waiters) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      const Counts counts = CountSlots();
      throw PoolExhausted(shard, fmt::format("shard {}: pool exhausted ({} of {} in use, {} waiting, the waiter "
                                             "limit pool.max_waiters = {}); shed load or raise the limits",
                                             shard, counts.in_use, options.max_size,
                                             waiting_.load(std::memory_order_relaxed), options.max_waiters));
    }
    waiting_.fetch_add(1, std::memory_order_seq_cst);
    if (!AnyIdleOrEmpty()) {
      waited = true;
      available_.wait_until(lock, deadline);
    }
    waiting_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

std::shared_ptr<const SessionFacts> PoolCore::Facts() const {
  if (facts_known_.load(std::memory_order_acquire)) return facts_;
  std::lock_guard lock(facts_mutex_);
  return facts_;
}

PoolStats PoolCore::Stats() const {
  PoolStats stats;
  stats.timeouts = timeouts_.load(std::memory_order_relaxed);
  stats.rejected = rejected_.load(std::memory_order_relaxed);
  stats.connects = connects_.load(std::memory_order_relaxed);
  stats.connect_failures = connect_failures_.load(std::memory_order_relaxed);
  stats.broken = broken_.load(std::memory_order_relaxed);
  stats.discarded_in_transaction = discarded_.load(std::memory_order_relaxed);
  stats.discarded_changed_session = changed_session_.load(std::memory_order_relaxed);
  stats.checked = checked_.load(std::memory_order_relaxed);
  const Counts counts = CountSlots();
  stats.in_use = counts.in_use;
  stats.idle = counts.idle;
  stats.connecting = counts.connecting;
  stats.waiting = waiting_.load(std::memory_order_relaxed);
  stats.max_size = options.max_size;
  std::vector<std::int64_t> waits;
  for (std::uint32_t i = 0; i < size_; ++i) {
    const PoolSlot& slot = slots_[i];
    stats.acquired += slot.acquired.load(std::memory_order_relaxed);
    stats.waited += slot.waited.load(std::memory_order_relaxed);
    const auto recorded = slot.waits_recorded.load(std::memory_order_acquire);
    const auto kept = std::min<std::uint64_t>(recorded, waits_per_slot_);
    for (std::uint64_t k = 0; k < kept; ++k) waits.push_back(slot.waits[k].load(std::memory_order_relaxed));
  }
  if (!waits.empty()) {
    std::sort(waits.begin(), waits.end());
    // Nearest rank: the smallest sample with at least q of them at or below it.
    auto at = [&](double q) {
      const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(waits.size())));
      return std::chrono::microseconds(waits[std::max<std::size_t>(rank, 1) - 1]);
    };
    stats.acquire_wait_p50 = at(0.50);
    stats.acquire_wait_p99 = at(0.99);
    stats.acquire_wait_max = std::chrono::microseconds(waits.back());
  }
  return stats;
}

}  // namespace detail

using detail::PoolCore;
using detail::PoolSlot;

// ---- ConnectionPool ----

ConnectionPool::ConnectionPool(ShardId shard, Dsn dsn, PoolOptions options) : core_(nullptr) {
  if (options.max_size < 1) {
    throw ConfigError("pool.max_size", fmt::format("must be at least 1 (shard {})", shard));
  }
  if (options.max_waiters < 0) {
    throw ConfigError("pool.max_waiters", fmt::format("must not be negative (shard {})", shard));
  }
  core_ = new PoolCore(shard, dsn, options);
}

ConnectionPool::~ConnectionPool() {
  core_->Shutdown();
}

ConnectionPool::Lease ConnectionPool::Acquire(Clock::time_point deadline) {
  if (PoolSlot* slot = core_->TakeIdle()) {
    core_->Record(*slot, false, Clock::duration::zero());
    return Lease(slot, false);
  }
  auto [slot, fresh] = core_->AcquireSlow(deadline, /*may_wait=*/true);
  return Lease(slot, fresh);
}

ConnectionPool::Lease ConnectionPool::Acquire() {
  return Acquire(Clock::now() + core_->options.acquire_timeout);
}

std::optional<ConnectionPool::Lease> ConnectionPool::TryAcquire() {
  auto [slot, fresh] = core_->AcquireSlow(Clock::now(), /*may_wait=*/false);
  if (slot == nullptr) return std::nullopt;
  return Lease(slot, fresh);
}

std::optional<ConnectionPool::Lease> ConnectionPool::TryAcquireIdle() noexcept {
  PoolSlot* slot = core_->TakeIdle();
  if (slot == nullptr) return std::nullopt;
  core_->Record(*slot, false, Clock::duration::zero());
  return Lease(slot, false);
}

PoolStats ConnectionPool::Stats() const {
  return core_->Stats();
}
ShardId ConnectionPool::Shard() const noexcept {
  return core_->shard;
}
const std::string& ConnectionPool::RedactedDsn() const noexcept {
  return core_->redacted_dsn;
}
const PoolOptions& ConnectionPool::Options() const noexcept {
  return core_->options;
}
std::shared_ptr<const SessionFacts> ConnectionPool::Facts() const {
  return core_->Facts();
}
void ConnectionPool::CloseIdle() {
  core_->CloseIdle();
}

// ---- CancelHandle ----

ConnectionPool::CancelHandle::~CancelHandle() {
  PQfreeCancel(handle_);
}

bool ConnectionPool::CancelHandle::Send(std::string* error) const noexcept {
  char buffer[256] = {};
  if (PQcancel(handle_, buffer, static_cast<int>(sizeof buffer)) != 0) return true;
  if (error != nullptr) {
    try {
      *error = buffer;
    } catch (...) {
    }
  }
  return false;
}

// ---- Lease ----

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)), fresh_(other.fresh_), discard_(other.discard_) {}

ConnectionPool::Lease& ConnectionPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    slot_ = std::exchange(other.slot_, nullptr);
    fresh_ = other.fresh_;
    discard_ = other.discard_;
  }
  return *this;
}

void ConnectionPool::Lease::Release() noexcept {
  if (slot_ == nullptr) return;
  PoolSlot* slot = std::exchange(slot_, nullptr);
  slot->core->Release(*slot, discard_);
}

pqxx::connection_base& ConnectionPool::Lease::Connection() const {
  if (slot_ == nullptr) throw Error("this lease holds no connection (moved from or released)");
  return *slot_->connection->connection;
}

std::shared_ptr<const ConnectionPool::CancelHandle> ConnectionPool::Lease::Canceller() const {
  if (slot_ == nullptr) return nullptr;
  return slot_->connection->cancel;
}

ShardId ConnectionPool::Lease::Shard() const noexcept {
  return slot_ != nullptr ? slot_->core->shard : ShardId{-1};
}

}  // namespace shardkit
