// Per-shard estimates of the link to each shard's server, from the
// statements a ScatterGather runs: the round trip (a BEGIN's reply, which
// the server is asked to flush at once) and the rate at which a result's
// rows arrive once they start (server output, network and libpq together:
// what shipping one more byte costs). The last 16 samples of each count.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "shardkit/queries/scatter.hpp"

namespace shardkit::detail {

class LinkEstimates {
 public:
  // Results smaller than this arrive in a packet or two: their transfer
  // time says nothing about the rate.
  static constexpr std::size_t kMinTransferBytes = 16 * 1024;

  // round_trip and transfer as PipelinedStatement::Timings gives them.
  void Record(ShardId shard, std::optional<std::chrono::steady_clock::duration> round_trip, std::size_t bytes,
              std::optional<std::chrono::steady_clock::duration> transfer);
  [[nodiscard]] ShardLink Get(ShardId shard) const;

 private:
  static constexpr std::size_t kWindow = 16;
  struct Shard {
    std::array<std::int64_t, kWindow> round_trip_us{};
    std::size_t round_trips = 0;  // recorded so far (the window holds the last kWindow)
    std::array<std::int64_t, kWindow> transfer_bytes{};
    std::array<std::int64_t, kWindow> transfer_us{};
    std::size_t transfers = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Shard> shards_;
};

}  // namespace shardkit::detail
