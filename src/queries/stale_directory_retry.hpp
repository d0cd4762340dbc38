// When a shard refuses a bucket for a stale directory, the whole scatter (or
// top-k session) runs again with a newer one, never a mix of two: at most 3
// newer directories; while the catalog has nothing newer yet (a move's
// cutover, between the source's retirement and the flip) again after pauses
// of 1, 2, 4 ... 32 ms, for up to 250 ms in all; never past the deadline.
#pragma once

#include <chrono>
#include <cstdint>

#include "shardkit/errors.hpp"

namespace shardkit {

class BucketShardResolver;
class DirectoryWatcher;

class StaleDirectoryRetry {
 public:
  using Clock = std::chrono::steady_clock;
  StaleDirectoryRetry(BucketShardResolver& resolver, DirectoryWatcher* watcher, Clock::time_point deadline)
      : resolver_(resolver), watcher_(watcher), deadline_(deadline) {}

  // Before each attempt: the directory version it runs with.
  void Attempting();
  // After an attempt failed with `e`: true to run again (after a pause when
  // the catalog has nothing newer yet), false to give up and rethrow `e`.
  [[nodiscard]] bool Again(const ScatterError& e);
  [[nodiscard]] int Retries() const noexcept { return retries_; }

 private:
  BucketShardResolver& resolver_;
  DirectoryWatcher* watcher_;
  Clock::time_point deadline_;
  std::int64_t used_ = 0;
  int newer_ = 0;
  int retries_ = 0;
  std::chrono::milliseconds waited_{0};
  std::chrono::milliseconds pause_{1};
};

// Runs `run` (a scatter, a top-k or percentile session) until it answers
// on one directory, or StaleDirectoryRetry gives up and its ScatterError
// goes to the caller.
template <class Run>
auto RunFollowingDirectory(BucketShardResolver& resolver, DirectoryWatcher* watcher,
                           StaleDirectoryRetry::Clock::time_point deadline, const Run& run) {
  StaleDirectoryRetry retry(resolver, watcher, deadline);
  for (;;) {
    retry.Attempting();
    try {
      return run();
    } catch (const ScatterError& e) {
      if (!retry.Again(e)) throw;
    }
  }
}

}  // namespace shardkit
