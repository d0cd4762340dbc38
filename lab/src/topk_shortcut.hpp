// The deliberately wrong "top k per shard, merged" list of the Bookstore case: each
// shard's own top k, summed across shards and ranked. Keys split across
// shards are missed and totals are partial, so it is NOT an exact answer;
// the lab shows it next to TPUT, tests and benchmarks compare against it.
// Header-only: a teaching aid, not part of shardkit.
//
//   shardkit::SqlTopKSource source(scatter, query);
//   auto wrong = shardkit::lab::PerShardShortcutTopK(source, 10);
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardkit/queries/topk.hpp"

namespace shardkit::lab {

inline constexpr const char* kShortcutName = "per-shard top-k shortcut (NOT exact)";

// What the shortcut returns: one phase, no guarantee.
template <class Measure>
struct ShortcutTopKResult {
  std::vector<TopKEntry<Measure>> items;  // ranked, at most k
  std::vector<TopKPhaseStats> phases;     // one
  std::size_t total_rows = 0;
  std::size_t total_bytes = 0;
  std::chrono::microseconds elapsed{0};
  std::vector<std::string> warnings;
};

template <class Measure>
[[nodiscard]] ShortcutTopKResult<Measure> PerShardShortcutTopK(TopKShardSource<Measure>& source, std::size_t k) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  ShortcutTopKResult<Measure> result;
  if (k == 0) return result;
  TopKReply<Measure> reply = source.LocalTopK(k, false);
  TopKPhaseStats phase;
  phase.name = "local top-k (shortcut)";
  phase.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  for (const auto& rows : reply.shards) phase.rows += rows.size();
  phase.bytes = reply.bytes;
  phase.shards_asked = reply.shards_asked;
  result.total_rows = phase.rows;
  result.total_bytes = phase.bytes;
  result.phases.push_back(std::move(phase));
  std::unordered_map<TopKKey, Measure> totals;
  for (auto& rows : reply.shards) {
    for (auto& e : rows) {
      auto [it, inserted] = totals.try_emplace(std::move(e.key), e.value);
      if (!inserted) it->second = TopKMeasureTraits<Measure>::Add(it->second, e.value, it->first);
    }
  }
  std::vector<TopKEntry<Measure>> items;
  items.reserve(totals.size());
  for (auto& [key, total] : totals) items.push_back(TopKEntry<Measure>{key, total});
  result.items = RankTopK(std::move(items), k);
  result.warnings = std::move(reply.warnings);
  result.warnings.push_back(
      "per-shard top-k shortcut: each shard's own top k merged; keys split across shards can be missed "
      "and totals are partial. Not an exact answer.");
  result.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  return result;
}

}  // namespace shardkit::lab
