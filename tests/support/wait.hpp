// Waiting for a condition instead of sleeping: a test polls what it waits for
// until it holds, or fails once a generous deadline has passed.
//
//   ASSERT_TRUE(shardkit::test::WaitFor([&] { return pool.Stats().waiting == 1; }));
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace shardkit::test {

// True as soon as condition() is; false if it still is not after `timeout`.
template <typename Condition>
[[nodiscard]] bool WaitFor(Condition&& condition, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20'000));
  }
}

}  // namespace shardkit::test
