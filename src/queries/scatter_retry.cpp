// A scatter refused for a stale directory runs again, whole, with a newer
// one (ScatterGather::FollowDirectory).
#include "queries/scatter_internal.hpp"

#include <algorithm>

#include "queries/stale_directory_retry.hpp"

namespace shardkit {

using detail::scatter::Clock;
using detail::scatter::kDefaultTimeout;
using detail::scatter::kMaxTimeout;

ScatterResult ScatterGather::ExecuteFollowingDirectory(
    std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements, const ScatterOptions& options) {
  ScatterOptions attempt = options;
  attempt.deadline = std::min(options.deadline.value_or(Clock::now() + kDefaultTimeout), Clock::now() + kMaxTimeout);
  StaleDirectoryRetry retry(resolver_, watcher_, *attempt.deadline);
  for (;;) {
    retry.Attempting();
    try {
      ScatterResult result = impl_->Execute(statements, attempt);
      result.directory_retries = retry.Retries();
      return result;
    } catch (const ScatterError& e) {
      if (!retry.Again(e)) throw;
    }
  }
}

}  // namespace shardkit
