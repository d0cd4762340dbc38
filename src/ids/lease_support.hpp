// What the two kinds of leases share (worker_lease.hpp: Snowflake worker
// ids; partition_lease.hpp: worker partitions): the owner's default name,
// the rules their timings must obey, the bookkeeping connection, and the
// local deadline that always falls before the server's lease_until.
//
// A lease row's lease_until is set by the server (clock_timestamp() +
// duration) while a request is in flight; the holder only knows when it
// *sent* that request. Counting from then, on the steady clock, and
// stopping safety_margin early, the holder stops using the lease before
// the server can hand it to anyone else, however slow the reply was.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <pqxx/connection>
#include <string>
#include <string_view>

#include "shardkit/core/dsn.hpp"

namespace shardkit::detail {

using LeaseClock = std::chrono::steady_clock;

struct LeaseTimings {
  std::chrono::milliseconds duration;
  std::chrono::milliseconds safety_margin;
  std::chrono::milliseconds renew_interval;
};

// "<hostname>:<pid>": written to lease tables for people looking at them.
[[nodiscard]] std::string DefaultLeaseOwner();

// Throws ConfigError (keys "<prefix>.lease_duration", "<prefix>.renew_interval")
// unless 0 < safety_margin < duration and 0 < renew_interval < duration - margin.
void ValidateLeaseTimings(const LeaseTimings& timings, std::string_view key_prefix);

// A connection for lease bookkeeping: connect timeout 2 s, and a statement
// timeout of half the safety margin (at least 1 s) so that a hanging claim
// or renewal fails in time to be retried. Throws what libpqxx throws.
[[nodiscard]] std::unique_ptr<pqxx::connection> ConnectForLeases(const Dsn& dsn,
                                                                 std::chrono::milliseconds safety_margin);

// The bookkeeping connection of a lease object; public headers only
// forward-declare it (libpqxx's connection is a typedef).
struct LeaseConnection {
  explicit LeaseConnection(std::unique_ptr<pqxx::connection> c) : holder(std::move(c)), connection(*holder) {}
  std::unique_ptr<pqxx::connection> holder;
  pqxx::connection& connection;
};

// Until when the holder may work, for a request sent at `sent`.
[[nodiscard]] inline LeaseClock::time_point LocalLeaseDeadline(LeaseClock::time_point sent,
                                                               const LeaseTimings& timings) noexcept {
  return sent + timings.duration - timings.safety_margin;
}

// A steady-clock deadline readable from any thread without a lock.
class AtomicDeadline {
 public:
  void Set(LeaseClock::time_point t) noexcept { ticks_.store(t.time_since_epoch().count(), std::memory_order_seq_cst); }
  [[nodiscard]] LeaseClock::time_point Get() const noexcept {
    return LeaseClock::time_point(LeaseClock::duration(ticks_.load(std::memory_order_seq_cst)));
  }
  [[nodiscard]] bool Passed(LeaseClock::time_point now = LeaseClock::now()) const noexcept { return now >= Get(); }

 private:
  std::atomic<LeaseClock::rep> ticks_{LeaseClock::time_point::min().time_since_epoch().count()};
};

}  // namespace shardkit::detail
