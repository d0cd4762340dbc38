#include "queries/stale_directory_retry.hpp"

#include <algorithm>
#include <thread>

#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

namespace {
constexpr int kMaxNewerDirectories = 3;
constexpr auto kMaxFlipWait = std::chrono::milliseconds(250);
constexpr auto kMaxPause = std::chrono::milliseconds(32);
}  // namespace

void StaleDirectoryRetry::Attempting() {
  used_ = resolver_.Directory()->Version();
}

bool StaleDirectoryRetry::Again(const ScatterError& e) {
  const bool stale = std::any_of(e.failures().begin(), e.failures().end(),
                                 [](const ScatterError::Failure& f) { return f.stale_directory; });
  if (!stale || watcher_ == nullptr || Clock::now() >= deadline_) return false;
  std::int64_t now_version = used_;
  try {
    now_version = watcher_->RefreshNow();
  } catch (const Error&) {
    return false;  // the catalog cannot say: the refusal stands
  }
  if (now_version > used_) {
    if (++newer_ > kMaxNewerDirectories) return false;
  } else {
    if (waited_ >= kMaxFlipWait || Clock::now() + pause_ >= deadline_) return false;
    std::this_thread::sleep_for(pause_);
    waited_ += pause_;
    pause_ = std::min(pause_ * 2, kMaxPause);
  }
  ++retries_;
  return true;
}

}  // namespace shardkit
