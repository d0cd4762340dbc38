#include "queries/link_estimates.hpp"

#include <algorithm>

namespace shardkit::detail {

void LinkEstimates::Record(ShardId shard, std::optional<std::chrono::steady_clock::duration> round_trip,
                           std::size_t bytes, std::optional<std::chrono::steady_clock::duration> transfer) {
  const int index = ToInt(shard);
  if (index < 0) return;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  std::lock_guard lock(mutex_);
  if (static_cast<std::size_t>(index) >= shards_.size()) shards_.resize(static_cast<std::size_t>(index) + 1);
  Shard& s = shards_[static_cast<std::size_t>(index)];
  if (round_trip) {
    s.round_trip_us[s.round_trips++ % kWindow] = duration_cast<microseconds>(*round_trip).count();
  }
  if (transfer && bytes >= kMinTransferBytes) {
    const auto slot = s.transfers++ % kWindow;
    s.transfer_bytes[slot] = static_cast<std::int64_t>(bytes);
    s.transfer_us[slot] = std::max<std::int64_t>(1, duration_cast<microseconds>(*transfer).count());
  }
}

ShardLink LinkEstimates::Get(ShardId shard) const {
  ShardLink link;
  const int index = ToInt(shard);
  std::lock_guard lock(mutex_);
  if (index < 0 || static_cast<std::size_t>(index) >= shards_.size()) return link;
  const Shard& s = shards_[static_cast<std::size_t>(index)];
  const std::size_t n = std::min(s.round_trips, kWindow);
  if (n > 0) {
    // The median: one reply delayed by a busy server moves it little.
    std::array<std::int64_t, kWindow> sorted = s.round_trip_us;
    const auto end = sorted.begin() + static_cast<std::ptrdiff_t>(n);
    const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(n / 2);
    std::nth_element(sorted.begin(), mid, end);
    link.round_trip = std::chrono::microseconds(*mid);
    link.round_trip_samples = static_cast<int>(s.round_trips);
  }
  const std::size_t t = std::min(s.transfers, kWindow);
  if (t > 0) {
    // The fastest transfer: a slow one is most often the server producing
    // its rows slowly (a busy CPU), which both methods pay alike, not the
    // link; none can be faster than the link.
    double best = 0;
    for (std::size_t i = 0; i < t; ++i) {
      best = std::max(best, static_cast<double>(s.transfer_bytes[i]) * 1e6 / static_cast<double>(s.transfer_us[i]));
    }
    link.bytes_per_second = best;
    link.transfer_samples = static_cast<int>(s.transfers);
  }
  return link;
}

}  // namespace shardkit::detail
