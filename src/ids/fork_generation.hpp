// How many times this process's ancestry has forked (private to shardkit).
//
// A child after fork() inherits every generator's state: the same random
// stream (duplicate UUIDv7s) and the same worker id (duplicate Snowflakes).
// A pthread_atfork child handler bumps this counter; generators remember the
// value they started with and compare it on every ID, a relaxed load.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace shardkit::detail {

inline std::atomic<std::uint64_t> fork_generation_counter{0};

inline void OnForkChild() noexcept {
  fork_generation_counter.fetch_add(1, std::memory_order_relaxed);
}

// Registers the atfork handler once per process (first caller) and returns
// the current generation.
inline std::uint64_t ForkGeneration() noexcept {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &OnForkChild);
    return true;
  }();
  (void)registered;
  return fork_generation_counter.load(std::memory_order_relaxed);
}

// The hot-path read, for objects that called ForkGeneration() when created.
inline std::uint64_t CurrentForkGeneration() noexcept {
  return fork_generation_counter.load(std::memory_order_relaxed);
}

}  // namespace shardkit::detail
