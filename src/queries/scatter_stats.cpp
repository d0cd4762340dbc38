// Statistics: of one scatter's result, and of every scatter a ScatterGather
// ran.
#include "queries/scatter_internal.hpp"

#include <algorithm>
#include <mutex>

namespace shardkit {

using std::chrono::microseconds;

std::size_t ScatterResult::TotalRows() const noexcept {
  std::size_t total = 0;
  for (const auto& s : shards) total += s.rows.size();
  return total;
}

std::size_t ScatterResult::TotalBytes() const noexcept {
  std::size_t total = 0;
  for (const auto& s : shards) total += s.bytes;
  return total;
}

ScatterStats ScatterGather::Stats() const {
  std::lock_guard lock(impl_->stats_mutex);
  return impl_->stats;
}

ShardLink ScatterGather::Link(ShardId shard) const {
  return impl_->links.Get(shard);
}

void ScatterGather::Impl::Record(const ScatterResult* result, std::size_t fanout, std::size_t failures,
                                 microseconds slowest, bool threw) {
  std::lock_guard lock(stats_mutex);
  if (fanout > 1) {
    ++stats.scatters;
  } else {
    ++stats.single_shard;
  }
  stats.shard_requests += fanout;
  stats.max_fanout = std::max<std::uint64_t>(stats.max_fanout, fanout);
  stats.shard_failures += failures;
  if (threw) ++stats.failed;
  if (result != nullptr) {
    if (!result->failures.empty()) ++stats.partial;
    stats.rows += result->TotalRows();
    stats.bytes += result->TotalBytes();
    for (const auto& shard : result->shards) stats.replica_requests += shard.on_replica ? 1 : 0;
    stats.replica_fallbacks += static_cast<std::uint64_t>(result->replica_fallbacks);
  }
  stats.total_slowest += slowest;
  stats.max_slowest = std::max(stats.max_slowest, slowest);
}

}  // namespace shardkit
