// A scatter refused for a stale directory runs again, whole, with a newer
// one (ScatterGather::FollowDirectory).
#include "queries/scatter_internal.hpp"

#include <algorithm>
#include <thread>

#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

using detail::scatter::Clock;
using detail::scatter::kDefaultTimeout;
using detail::scatter::kMaxTimeout;
using std::chrono::milliseconds;

ScatterResult ScatterGather::ExecuteFollowingDirectory(
    std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements, const ScatterOptions& options) {
  constexpr int kMaxDirectoryRetries = 3;
  // A shard refuses a bucket from the moment a move retires it, a few ms
  // before the catalog's directory flips: while the catalog has nothing
  // newer, run again after a pause (1, 2, 4 ... ms), this long in all.
  constexpr auto kMaxFlipWait = milliseconds(250);
  ScatterOptions attempt = options;
  attempt.deadline = std::min(options.deadline.value_or(Clock::now() + kDefaultTimeout), Clock::now() + kMaxTimeout);
  int newer_directories = 0;
  auto waited = milliseconds(0);
  auto pause = milliseconds(1);
  for (int retry = 0;; ++retry) {
    try {
      ScatterResult result = impl_->Execute(statements, attempt);
      result.directory_retries = retry;
      return result;
    } catch (const ScatterError& e) {
      const bool stale = std::any_of(e.failures().begin(), e.failures().end(),
                                     [](const ScatterError::Failure& f) { return f.stale_directory; });
      if (!stale || watcher_ == nullptr || Clock::now() >= *attempt.deadline) throw;
      // A shard refused a bucket this directory gave it: the whole scatter
      // runs again with a newer directory, never a mix of two.
      const std::int64_t used = resolver_.Directory()->Version();
      std::int64_t now_version = used;
      try {
        now_version = watcher_->RefreshNow();
      } catch (const Error&) {
        throw e;
      }
      if (now_version > used) {
        if (++newer_directories > kMaxDirectoryRetries) throw;
      } else {
        if (waited >= kMaxFlipWait || Clock::now() + pause >= *attempt.deadline) throw;
        std::this_thread::sleep_for(pause);
        waited += pause;
        pause = std::min(pause * 2, milliseconds(32));
      }
    }
  }
}

}  // namespace shardkit
