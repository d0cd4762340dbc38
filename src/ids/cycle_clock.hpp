// A cheap wall clock: CLOCK_REALTIME interpolated with the CPU's time-stamp
// counter (private to shardkit; the idea of absl::Now's cycle clock).
//
// Reading CLOCK_REALTIME through the vDSO costs ~30 ns on virtual machines
// (an ordered rdtsc plus pvclock arithmetic), more than the rest of a UUIDv7.
// This clock reads the kernel clock at most every 100 microseconds and in
// between adds elapsed TSC ticks, converted with a rate measured against
// CLOCK_MONOTONIC over an ever longer baseline. The error is the rate error
// over 100 us (nanoseconds). Used only where the kernel's own clocksource is
// the TSC (so it is invariant and synchronised across CPUs); otherwise, and
// during the first millisecond while the rate is unknown, every call reads
// the kernel clock. One instance per generator: not thread-safe.
#pragma once

#include <time.h>

#include <cstdint>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace shardkit::detail {

inline std::int64_t RealtimeNanos() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

inline std::int64_t MonotonicNanos() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// True when the kernel itself keeps time with the TSC (checked once).
inline bool KernelClockIsTsc() {
#if defined(__x86_64__)
  static const bool is_tsc = [] {
    std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string name;
    return static_cast<bool>(in >> name) && name == "tsc";
  }();
  return is_tsc;
#else
  return false;
#endif
}

class CycleClock {
 public:
  static constexpr std::int64_t kResyncNanos = 100'000;         // re-read the kernel clock this often
  static constexpr std::int64_t kMinBaselineNanos = 1'000'000;  // before this, no interpolation
  static constexpr std::int64_t kMaxBaselineNanos = 10'000'000'000;

  CycleClock() : use_tsc_(KernelClockIsTsc()) {}

  [[nodiscard]] std::int64_t NowUnixNanos() noexcept {
#if defined(__x86_64__)
    if (use_tsc_) {
      const std::uint64_t ticks = __rdtsc() - base_tsc_;  // wraps to huge if the TSC went back
      if (ticks < resync_ticks_) {
        return base_ns_ + static_cast<std::int64_t>((ticks * ns_per_tick_q32_) >> 32);
      }
      return Resync();
    }
#endif
    return RealtimeNanos();
  }

 private:
#if defined(__x86_64__)
  std::int64_t Resync() noexcept {
    const std::uint64_t before = __rdtsc();
    const std::int64_t real = RealtimeNanos();
    const std::int64_t mono = MonotonicNanos();
    const std::uint64_t after = __rdtsc();
    const std::uint64_t tsc = before + (after - before) / 2;
    base_tsc_ = tsc;
    base_ns_ = real;
    if (anchor_tsc_ == 0 || tsc <= anchor_tsc_ || mono <= anchor_mono_ns_) {
      anchor_tsc_ = tsc;
      anchor_mono_ns_ = mono;
      resync_ticks_ = 0;
      return real;
    }
    const std::int64_t elapsed_ns = mono - anchor_mono_ns_;
    if (elapsed_ns >= kMinBaselineNanos) {
      // Doubles carry 53 bits: far more precision than the rate has.
      const double ns_per_tick = static_cast<double>(elapsed_ns) / static_cast<double>(tsc - anchor_tsc_);
      ns_per_tick_q32_ = static_cast<std::uint64_t>(ns_per_tick * 4294967296.0);
      resync_ticks_ = static_cast<std::uint64_t>(static_cast<double>(kResyncNanos) / ns_per_tick);
      // A rolling baseline: a rate change (VM migration, suspend) is
      // forgotten after one window.
      if (elapsed_ns >= kMaxBaselineNanos) {
        anchor_tsc_ = tsc;
        anchor_mono_ns_ = mono;
      }
    }
    return real;
  }
#endif

  bool use_tsc_ = false;
  std::uint64_t base_tsc_ = 0;
  std::int64_t base_ns_ = 0;
  std::uint64_t anchor_tsc_ = 0;
  std::int64_t anchor_mono_ns_ = 0;
  std::uint64_t ns_per_tick_q32_ = 0;
  std::uint64_t resync_ticks_ = 0;  // 0: not calibrated yet, read the kernel clock every time
};

}  // namespace shardkit::detail
