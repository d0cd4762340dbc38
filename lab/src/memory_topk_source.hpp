// Shards held in memory as a TopKShardSource: for top-k unit tests and for
// simulations at scale (bench/topk_bench.cpp), where real shards would only
// add noise. Header-only: a teaching and test aid, not part of shardkit.
//
//   shardkit::lab::MemoryTopKSource<std::int64_t> source({shard0_groups, shard1_groups});
//   auto top = shardkit::TputTopK(source, 10);
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/topk.hpp"

namespace shardkit::lab {

template <class Measure>
class MemoryTopKSource final : public TopKShardSource<Measure> {
 public:
  // shards[i] = shard i's groups; a key at most once per shard.
  explicit MemoryTopKSource(std::vector<std::vector<TopKEntry<Measure>>> shards)
      : by_rank_(std::move(shards)), by_key_(by_rank_.size()) {
    for (std::size_t s = 0; s < by_rank_.size(); ++s) {
      auto& rows = by_rank_[s];
      by_key_[s].reserve(rows.size());
      for (const auto& e : rows) {
        if (!by_key_[s].emplace(e.key, e.value).second) {
          throw Error(fmt::format("MemoryTopKSource: key {} appears twice on shard {}", TopKKeyToString(e.key), s));
        }
      }
      const std::size_t n = rows.size();
      rows = RankTopK(std::move(rows), n);
    }
  }

  [[nodiscard]] int ShardCount() const override { return static_cast<int>(by_rank_.size()); }

  [[nodiscard]] TopKReply<Measure> LocalTopK(std::size_t k, bool want_min_partial) override {
    TopKReply<Measure> reply;
    reply.shards.resize(by_rank_.size());
    reply.shards_asked = ShardCount();
    if (want_min_partial) reply.min_partial.resize(by_rank_.size());
    for (std::size_t s = 0; s < by_rank_.size(); ++s) {
      const auto& rows = by_rank_[s];
      const auto n = std::min(k, rows.size());
      reply.shards[s].assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n));
      if (want_min_partial && !rows.empty()) reply.min_partial[s] = rows.back().value;
    }
    // kAuto's statistics, as the SQL source computes them: the group count
    // and a histogram of the positive partials by quarter powers of two.
    reply.groups.resize(by_rank_.size());
    reply.histogram.resize(by_rank_.size());
    for (std::size_t s = 0; s < by_rank_.size(); ++s) {
      reply.groups[s] = static_cast<std::int64_t>(by_rank_[s].size());
      std::map<int, std::int64_t> buckets;
      for (const auto& e : by_rank_[s]) {
        const double v = TopKMeasureTraits<Measure>::ToDouble(e.value);
        if (v > 0) ++buckets[static_cast<int>(std::floor(4 * std::log2(v)))];
      }
      reply.histogram[s].assign(buckets.begin(), buckets.end());
    }
    return reply;
  }

  [[nodiscard]] TopKReply<Measure> AtLeast(const TopKThreshold<Measure>& threshold,
                                           const std::vector<std::vector<TopKKey>>& exclude) override {
    TopKReply<Measure> reply;
    reply.shards.resize(by_rank_.size());
    reply.shards_asked = ShardCount();
    for (std::size_t s = 0; s < by_rank_.size(); ++s) {
      std::unordered_set<TopKKey> skip;
      if (s < exclude.size()) skip.insert(exclude[s].begin(), exclude[s].end());
      // Sorted by value DESC: the admitted groups are a prefix.
      for (const auto& e : by_rank_[s]) {
        if (!threshold.Admits(e.value)) break;
        if (!skip.contains(e.key)) reply.shards[s].push_back(e);
      }
    }
    return reply;
  }

  [[nodiscard]] TopKReply<Measure> Partials(const std::vector<std::vector<TopKKey>>& keys) override {
    TopKReply<Measure> reply;
    reply.shards.resize(by_rank_.size());
    for (std::size_t s = 0; s < by_rank_.size() && s < keys.size(); ++s) {
      if (keys[s].empty()) continue;
      ++reply.shards_asked;
      for (const auto& key : keys[s]) {
        if (auto it = by_key_[s].find(key); it != by_key_[s].end()) reply.shards[s].push_back({key, it->second});
      }
    }
    return reply;
  }

  [[nodiscard]] TopKReply<Measure> AllPartials() override {
    TopKReply<Measure> reply;
    reply.shards = by_rank_;
    reply.shards_asked = ShardCount();
    return reply;
  }

 private:
  std::vector<std::vector<TopKEntry<Measure>>> by_rank_;  // per shard, RanksBefore order
  std::vector<std::unordered_map<TopKKey, Measure>> by_key_;
};

}  // namespace shardkit::lab
