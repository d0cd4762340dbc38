// shardkit/ids/id_clock.hpp — the wall clock that ID generators read, injectable.
//
// Generators (uuidv7.hpp, snowflake.hpp, bucketed_id.hpp) take an optional
// std::shared_ptr<IdClock>; null means the system clock. Tests pass a
// ManualIdClock to step time back, freeze it, and see when a generator waits:
//
//   auto clock = std::make_shared<shardkit::ManualIdClock>(1'700'000'000'000);  // Unix ms
//   shardkit::SnowflakeGenerator gen{7, {.clock = clock}};
//   clock->AdvanceMs(-5);              // a step back within tolerance ...
//   auto id = gen.Next();              // ... waits: clock->WaitCount() == 1
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace shardkit {

class IdClock {
 public:
  virtual ~IdClock() = default;
  // Wall-clock time in nanoseconds since the Unix epoch.
  [[nodiscard]] virtual std::int64_t NowUnixNanos() noexcept = 0;
  // Called when a generator must not issue before `unix_nanos` (sequence used
  // up, clock stepped back). Returns when that time has probably come;
  // generators read the clock again afterwards.
  virtual void WaitUntil(std::int64_t unix_nanos) = 0;
};

// CLOCK_REALTIME. WaitUntil sleeps while far away and spins (with pause and
// yield) for the last stretch, so a saturated generator starts the next
// millisecond within microseconds of it.
class SystemIdClock final : public IdClock {
 public:
  [[nodiscard]] std::int64_t NowUnixNanos() noexcept override;
  void WaitUntil(std::int64_t unix_nanos) override;
};

// A clock that only moves when told to, or when a generator waits on it:
// WaitUntil(t) jumps to t (never back) and records the wait. Thread-safe.
class ManualIdClock final : public IdClock {
 public:
  explicit ManualIdClock(std::int64_t start_unix_ms) noexcept : now_ns_(start_unix_ms * 1'000'000) {}

  [[nodiscard]] std::int64_t NowUnixNanos() noexcept override { return now_ns_.load(std::memory_order_acquire); }
  void WaitUntil(std::int64_t unix_nanos) override;

  void SetUnixNanos(std::int64_t unix_nanos) noexcept { now_ns_.store(unix_nanos, std::memory_order_release); }
  void SetUnixMs(std::int64_t unix_ms) noexcept { SetUnixNanos(unix_ms * 1'000'000); }
  void AdvanceNanos(std::int64_t delta) noexcept { now_ns_.fetch_add(delta, std::memory_order_acq_rel); }
  void AdvanceMs(std::int64_t delta_ms) noexcept { AdvanceNanos(delta_ms * 1'000'000); }
  [[nodiscard]] std::int64_t NowUnixMs() noexcept { return NowUnixNanos() / 1'000'000; }

  // How often generators waited, and for how long in total (clock time).
  [[nodiscard]] int WaitCount() const noexcept { return wait_count_.load(std::memory_order_acquire); }
  [[nodiscard]] std::int64_t WaitedNanos() const noexcept { return waited_ns_.load(std::memory_order_acquire); }

 private:
  std::atomic<std::int64_t> now_ns_;
  std::atomic<int> wait_count_{0};
  std::atomic<std::int64_t> waited_ns_{0};
};

// "2024-05-01T12:34:56.789Z": Unix milliseconds as ISO-8601 UTC, for
// messages and the CLI.
[[nodiscard]] std::string FormatUnixMsUtc(std::int64_t unix_ms);

}  // namespace shardkit
