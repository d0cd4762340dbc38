// The clocks ID generators read (id_clock.hpp).
#include "shardkit/ids/id_clock.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "ids/cycle_clock.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shardkit {

std::int64_t SystemIdClock::NowUnixNanos() noexcept {
  return detail::RealtimeNanos();
}

void SystemIdClock::WaitUntil(std::int64_t unix_nanos) {
  // Sleep while the target is far away, then spin: a saturated Snowflake
  // generator waits for every next millisecond, and a sleep overshoots by
  // 50-100 us (more on a busy host), each microsecond lost throughput.
  // While spinning, yield now and then to other threads, but not in the last
  // stretch: a yield on a busy host can cost a whole time slice.
  constexpr std::int64_t kSpinBelowNanos = 1'500'000;
  constexpr std::int64_t kNoYieldBelowNanos = 200'000;
  for (int spins = 0;; ++spins) {
    const std::int64_t remaining = unix_nanos - detail::RealtimeNanos();
    if (remaining <= 0) return;
    if (remaining > kSpinBelowNanos) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(remaining - kSpinBelowNanos));
    } else if (remaining > kNoYieldBelowNanos && spins % 256 == 255) {
      std::this_thread::yield();
    } else {
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
  }
}

void ManualIdClock::WaitUntil(std::int64_t unix_nanos) {
  wait_count_.fetch_add(1, std::memory_order_acq_rel);
  std::int64_t now = now_ns_.load(std::memory_order_acquire);
  while (now < unix_nanos && !now_ns_.compare_exchange_weak(now, unix_nanos, std::memory_order_acq_rel)) {
  }
  if (now < unix_nanos) waited_ns_.fetch_add(unix_nanos - now, std::memory_order_acq_rel);
}

std::string FormatUnixMsUtc(std::int64_t unix_ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> t{milliseconds{unix_ms}};
  const sys_days day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> time{t - day};
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), time.hours().count(),
                     time.minutes().count(), time.seconds().count(), time.subseconds().count());
}

}  // namespace shardkit
