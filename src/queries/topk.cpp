// Exact distributed top-k: TPUT and the all-partials method, over any
// TopKShardSource (the SQL one is in topk_sql_source.cpp).
//
// The core is a template over the measure (TopKMeasureTraits), instantiated
// for std::int64_t and Decimal at the end.
#include "shardkit/queries/topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "shardkit/errors.hpp"

namespace shardkit {

std::string TopKKeyToString(const TopKKey& key) {
  if (const auto* i = std::get_if<std::int64_t>(&key)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&key)) return "'" + *s + "'";
  return "NULL";
}

std::int64_t TopKMeasureTraits<std::int64_t>::Add(std::int64_t a, std::int64_t b, const TopKKey& what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw UnmergeableQuery(
        fmt::format("top-k by sum: the total of key {} overflows a 64-bit integer ({} + {}); nothing was answered",
                    TopKKeyToString(what), a, b));
  }
  return sum;
}

std::int64_t TopKMeasureTraits<std::int64_t>::Scale(std::int64_t a, std::int64_t factor, const TopKKey& what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, factor, &product)) {
    throw UnmergeableQuery(
        fmt::format("top-k by sum: a TPUT bound for key {} overflows a 64-bit integer ({} * {}); "
                    "use the all-partials method for sums this large",
                    TopKKeyToString(what), a, factor));
  }
  return product;
}

std::optional<std::int64_t> TopKMeasureTraits<std::int64_t>::FromText(std::string_view text) noexcept {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || text.empty()) return std::nullopt;
  // A numeric partial that is a whole number ("25.00") is that integer, as
  // the SQL source's session table takes it; any other fraction is refused.
  if (ptr != end && (*ptr != '.' || std::any_of(ptr + 1, end, [](char c) { return c != '0'; }))) return std::nullopt;
  return value;
}

const char* TopKMethodName(TopKMethod method) noexcept {
  switch (method) {
    case TopKMethod::kTput:
      return "TPUT (exact)";
    case TopKMethod::kAllPartials:
      return "all partials (exact)";
    case TopKMethod::kAuto:
      return "auto (exact)";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

[[nodiscard]] std::chrono::microseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

// Runs one source call as a phase: times it, counts its rows and checks that
// it answered for every shard.
template <class Measure, class Call>
TopKReply<Measure> Phase(TopKResult<Measure>& result, int shard_count, std::string name, Call&& call) {
  const auto start = Clock::now();
  TopKReply<Measure> reply = std::forward<Call>(call)();
  TopKPhaseStats stats;
  stats.elapsed = Since(start);
  stats.name = std::move(name);
  if (reply.shards.size() != static_cast<std::size_t>(shard_count)) {
    throw Error(fmt::format("top-k: phase '{}' returned lists for {} shards, expected {}", stats.name,
                            reply.shards.size(), shard_count));
  }
  for (const auto& rows : reply.shards) stats.rows += rows.size();
  stats.bytes = reply.bytes;
  stats.shards_asked = reply.shards_asked;
  result.total_rows += stats.rows;
  result.total_bytes += stats.bytes;
  result.phases.push_back(std::move(stats));
  for (auto& w : reply.warnings) result.warnings.push_back(std::move(w));
  return reply;
}

template <class Measure>
void RequireNonNegative(const Measure& value, int shard, const TopKKey* key) {
  if (!TopKMeasureTraits<Measure>::IsNegative(value)) return;
  const std::string what = key != nullptr ? "key " + TopKKeyToString(*key) : std::string("a group");
  throw UnmergeableQuery(
      fmt::format("top-k by sum: shard {} has a negative partial sum ({}) for {}; TPUT's bounds hold only for "
                  "non-negative measures. Rank a non-negative measure, or use TopKMethod::kAllPartials, which is "
                  "exact for any sign",
                  shard, TopKMeasureTraits<Measure>::ToString(value), what));
}

// What TPUT knows about one key: the sum of the partials reported so far (a
// lower bound of its total) and which shards reported them.
template <class Measure>
struct Known {
  Measure sum{};
  std::vector<bool> reported;
  int reported_count = 0;
};

template <class Measure>
class Ledger {
 public:
  explicit Ledger(int shard_count) : shard_count_(shard_count) {}

  void Add(int shard, TopKEntry<Measure>& entry, const char* phase) {
    auto [it, inserted] = known_.try_emplace(entry.key);
    Known<Measure>& k = it->second;
    if (inserted) k.reported.assign(static_cast<std::size_t>(shard_count_), false);
    if (k.reported[static_cast<std::size_t>(shard)]) {
      throw Error(fmt::format("top-k: shard {} reported key {} twice (in {}); the source broke its contract", shard,
                              TopKKeyToString(entry.key), phase));
    }
    k.reported[static_cast<std::size_t>(shard)] = true;
    ++k.reported_count;
    k.sum = TopKMeasureTraits<Measure>::Add(k.sum, entry.value, entry.key);
  }

  // The k-th largest lower bound; zero if fewer than k keys are known.
  [[nodiscard]] Measure KthLowerBound(std::size_t k) const {
    if (k == 0 || known_.size() < k) return Measure{};
    // Pointers, not values: swapping Decimals in the standard algorithms
    // trips a false -Wmaybe-uninitialized in GCC 12 (sanitizer builds).
    std::vector<const Measure*> sums;
    sums.reserve(known_.size());
    for (const auto& [key, k_info] : known_) sums.push_back(&k_info.sum);
    const auto nth = sums.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(sums.begin(), nth, sums.end(), [](const Measure* a, const Measure* b) { return *b < *a; });
    return **nth;
  }

  [[nodiscard]] std::unordered_map<TopKKey, Known<Measure>>& Items() noexcept { return known_; }
  [[nodiscard]] const std::unordered_map<TopKKey, Known<Measure>>& Items() const noexcept { return known_; }

 private:
  int shard_count_;
  std::unordered_map<TopKKey, Known<Measure>> known_;
};

}  // namespace

// Sorts pointers, not entries: moving std::variant inside the standard heap
// and sort code trips a false -Wmaybe-uninitialized in GCC 12.
template <class Measure>
std::vector<TopKEntry<Measure>> RankTopK(std::vector<TopKEntry<Measure>> items, std::size_t k) {
  std::vector<TopKEntry<Measure>*> order;
  order.reserve(items.size());
  for (auto& e : items) order.push_back(&e);
  const auto by_rank = [](const TopKEntry<Measure>* a, const TopKEntry<Measure>* b) { return RanksBefore(*a, *b); };
  const std::size_t n = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), by_rank);
  std::vector<TopKEntry<Measure>> ranked;
  ranked.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ranked.push_back(std::move(*order[i]));
  return ranked;
}

template <class Measure>
TopKReply<Measure> TopKShardSource<Measure>::RestOfPartials(const std::vector<std::vector<TopKKey>>& exclude) {
  TopKReply<Measure> reply = AllPartials();
  std::size_t before = 0, after = 0;
  for (const auto& rows : reply.shards) before += rows.size();
  for (std::size_t s = 0; s < reply.shards.size() && s < exclude.size(); ++s) {
    if (exclude[s].empty()) continue;
    std::vector<TopKKey> sorted = exclude[s];
    std::sort(sorted.begin(), sorted.end());
    auto& rows = reply.shards[s];
    std::erase_if(rows,
                  [&](const TopKEntry<Measure>& e) { return std::binary_search(sorted.begin(), sorted.end(), e.key); });
  }
  // The bytes of the rows kept, pro rata: what the rest alone would ship.
  for (const auto& rows : reply.shards) after += rows.size();
  if (before > 0) reply.bytes = reply.bytes * after / before;
  return reply;
}

namespace {

// kAuto's estimate, per shard: how many groups phase 2 would ship
// (partial * m >= tau1, not already reported), from each shard's histogram
// of partials. Buckets are quarter powers of two; the bucket holding the
// threshold is counted whole, so the estimate errs high by at most that
// bucket.
template <class Measure>
std::vector<std::int64_t> EstimatePhase2Rows(const TopKReply<Measure>& p1, const Measure& tau1, int m) {
  const double threshold = TopKMeasureTraits<Measure>::ToDouble(tau1) / m;
  std::vector<std::int64_t> rows(p1.groups.size(), 0);
  for (std::size_t s = 0; s < p1.groups.size(); ++s) {
    const auto reported = static_cast<std::int64_t>(p1.shards[s].size());
    if (threshold <= 0) {
      rows[s] = std::max<std::int64_t>(0, p1.groups[s] - reported);  // every group passes
      continue;
    }
    const int from = static_cast<int>(std::floor(4 * std::log2(threshold)));
    std::int64_t passing = 0;
    if (s < p1.histogram.size()) {
      for (const auto& [bucket, count] : p1.histogram[s]) {
        if (bucket >= from) passing += count;
      }
    }
    rows[s] = std::max<std::int64_t>(0, passing - reported);
  }
  return rows;
}

// What TPUT's phase 2 would send from each shard, counted on every shard's
// partials (`all`, index = shard): phase 1's top k per shard, tau1 from
// their sums, then each shard's other partials with partial * m >= tau1.
template <class Measure>
std::vector<std::int64_t> CountPhase2Rows(const std::vector<std::vector<TopKEntry<Measure>>>& all, std::size_t k) {
  using Traits = TopKMeasureTraits<Measure>;
  const int m = static_cast<int>(all.size());
  std::vector<std::vector<const TopKEntry<Measure>*>> tops(all.size());
  std::unordered_map<TopKKey, Measure> lower;
  for (std::size_t s = 0; s < all.size(); ++s) {
    auto& top = tops[s];
    top.reserve(all[s].size());
    for (const auto& e : all[s]) top.push_back(&e);
    const std::size_t n = std::min(k, top.size());
    const auto by_rank = [](const TopKEntry<Measure>* a, const TopKEntry<Measure>* b) { return RanksBefore(*a, *b); };
    std::nth_element(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(n), top.end(), by_rank);
    top.resize(n);
    for (const auto* e : top) {
      auto [it, inserted] = lower.try_emplace(e->key, e->value);
      if (!inserted) it->second = Traits::Add(it->second, e->value, it->first);
    }
  }
  std::vector<std::int64_t> rows(all.size(), 0);
  if (lower.size() < k || k == 0) {
    for (std::size_t s = 0; s < all.size(); ++s) rows[s] = static_cast<std::int64_t>(all[s].size() - tops[s].size());
    return rows;
  }
  std::vector<const Measure*> sums;
  sums.reserve(lower.size());
  for (const auto& [key, sum] : lower) sums.push_back(&sum);
  const auto nth = sums.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(sums.begin(), nth, sums.end(), [](const Measure* a, const Measure* b) { return *b < *a; });
  const TopKThreshold<Measure> threshold{**nth, m};
  for (std::size_t s = 0; s < all.size(); ++s) {
    std::int64_t passing = 0;
    for (const auto& e : all[s]) passing += threshold.Admits(e.value) ? 1 : 0;
    // Less the shard's own top k, sent in phase 1 already.
    for (const auto* e : tops[s]) passing -= threshold.Admits(e->value) ? 1 : 0;
    rows[s] = passing;
  }
  return rows;
}

template <class Measure>
double BytesPerRow(const TopKReply<Measure>& reply) {
  std::size_t rows = 0;
  for (const auto& r : reply.shards) rows += r.size();
  return rows == 0 || reply.bytes == 0 ? 0.0 : static_cast<double>(reply.bytes) / static_cast<double>(rows);
}

// Merges every shard's partials (all of them) into the top k.
template <class Measure>
void RankAllPartials(TopKResult<Measure>& result, std::vector<std::vector<TopKEntry<Measure>>> shards,
                     std::unordered_map<TopKKey, Measure> totals, std::size_t k) {
  for (auto& rows : shards) {
    for (auto& e : rows) {
      auto [it, inserted] = totals.try_emplace(std::move(e.key), e.value);
      if (!inserted) it->second = TopKMeasureTraits<Measure>::Add(it->second, e.value, it->first);
    }
  }
  std::vector<TopKEntry<Measure>> items;
  items.reserve(totals.size());
  for (auto& [key, total] : totals) items.push_back(TopKEntry<Measure>{key, total});
  result.candidates = items.size();
  result.items = RankTopK(std::move(items), k);
}

// The all-partials method; with `observed`, what its partials show for
// kAuto's next decision.
template <class Measure>
TopKResult<Measure> AllPartialsImpl(TopKShardSource<Measure>& source, std::size_t k, TopKObserved* observed) {
  const auto start = Clock::now();
  TopKResult<Measure> result;
  result.method = TopKMethod::kAllPartials;
  if (k == 0) return result;
  const int m = source.ShardCount();
  auto reply = Phase(result, m, "all partials", [&] { return source.AllPartials(); });
  if (observed != nullptr) {
    for (const auto& rows : reply.shards) observed->groups.push_back(static_cast<std::int64_t>(rows.size()));
    observed->phase2_rows = CountPhase2Rows(reply.shards, k);
    observed->bytes_per_row = BytesPerRow(reply);
  }
  RankAllPartials(result, std::move(reply.shards), {}, k);
  result.elapsed = Since(start);
  return result;
}

}  // namespace

// TPUT; with `links` (kAuto without a last run to go by) phase 1 carries
// the statistics and the cost model may fetch the rest of the partials
// instead of phases 2 and 3. `observed`, if given, receives what the run
// saw (its groups only where phase 1 had statistics).
template <class Measure>
static TopKResult<Measure> TputOrAuto(TopKShardSource<Measure>& source, std::size_t k,
                                      const std::vector<ShardLink>* links, TopKObserved* observed) {
  using Traits = TopKMeasureTraits<Measure>;
  const auto start = Clock::now();
  TopKResult<Measure> result;
  result.method = TopKMethod::kTput;
  if (k == 0) return result;
  const int m = source.ShardCount();
  const auto shards = static_cast<std::size_t>(m);
  Ledger<Measure> ledger(m);
  const bool may_switch = links != nullptr;

  // Phase 1: local top k. A key missing from a shard's list counts 0 there.
  source.WantStatistics(may_switch);
  auto p1 = Phase(result, m, "1 local top-k", [&] { return source.LocalTopK(k, true); });
  for (std::size_t s = 0; s < shards; ++s) {
    if (s < p1.min_partial.size() && p1.min_partial[s])
      RequireNonNegative(*p1.min_partial[s], static_cast<int>(s), nullptr);
    for (auto& e : p1.shards[s]) {
      RequireNonNegative(e.value, static_cast<int>(s), &e.key);
      ledger.Add(static_cast<int>(s), e, "phase 1");
    }
  }
  const Measure tau1 = ledger.KthLowerBound(k);
  result.tau1 = tau1;
  std::vector<std::vector<TopKKey>> exclude(shards);
  for (std::size_t s = 0; s < shards; ++s) {
    for (const auto& e : p1.shards[s]) exclude[s].push_back(e.key);
  }
  const bool have_groups = p1.groups.size() == shards;
  if (observed != nullptr && have_groups) observed->groups = p1.groups;
  if (observed != nullptr && !may_switch) observed->bytes_per_row = BytesPerRow(p1);

  if (may_switch) {
    if (!have_groups) {
      result.choice = "the source gives no phase-1 statistics -> TPUT";
    } else {
      // Phase 1 is paid: the rest of the partials against phases 2 and 3.
      TopKCostInputs in;
      in.k = k;
      in.after_phase1 = true;
      in.data.groups = p1.groups;
      in.data.phase2_rows = EstimatePhase2Rows(p1, tau1, m);
      in.links = *links;
      const TopKEstimate estimate = EstimateTopKCosts(in);
      result.estimate = estimate;
      result.groups = estimate.groups;
      result.estimated_phase2_rows = estimate.phase2_rows;
      result.choice = "phase 1's statistics: " + estimate.Describe();
      if (estimate.choice == TopKMethod::kAllPartials) {
        result.method = TopKMethod::kAllPartials;
        auto rest = Phase(result, m, "2 rest of the partials", [&] { return source.RestOfPartials(exclude); });
        if (observed != nullptr) {
          // Every partial is here now: count what phase 2 would have sent.
          std::vector<std::vector<TopKEntry<Measure>>> all(shards);
          for (std::size_t s = 0; s < shards; ++s) {
            all[s] = p1.shards[s];
            all[s].insert(all[s].end(), rest.shards[s].begin(), rest.shards[s].end());
          }
          observed->phase2_rows = CountPhase2Rows(all, k);
          observed->bytes_per_row = BytesPerRow(rest);
        }
        std::unordered_map<TopKKey, Measure> totals;
        for (auto& [key, info] : ledger.Items()) totals.emplace(key, info.sum);
        RankAllPartials(result, std::move(rest.shards), std::move(totals), k);
        result.elapsed = Since(start);
        return result;
      }
    }
  }

  // Phase 2: every key with a partial >= tau1/m, except those already sent.
  const TopKThreshold<Measure> threshold{tau1, m};
  auto p2 = Phase(result, m, "2 threshold", [&] { return source.AtLeast(threshold, exclude); });
  if (observed != nullptr) {
    observed->phase2_rows.clear();
    for (const auto& rows : p2.shards) observed->phase2_rows.push_back(static_cast<std::int64_t>(rows.size()));
    if (const double b = BytesPerRow(p2); b > 0) observed->bytes_per_row = b;
  }
  for (std::size_t s = 0; s < shards; ++s) {
    for (auto& e : p2.shards[s]) {
      RequireNonNegative(e.value, static_cast<int>(s), &e.key);
      if (!threshold.Admits(e.value)) {
        throw Error(fmt::format("top-k: shard {} sent key {} with partial {} below the phase-2 threshold {}/{}", s,
                                TopKKeyToString(e.key), Traits::ToString(e.value), Traits::ToString(tau1), m));
      }
      ledger.Add(static_cast<int>(s), e, "phase 2");
    }
  }
  const Measure tau2 = ledger.KthLowerBound(k);
  result.tau2 = tau2;
  result.seen_after_phase2 = ledger.Items().size();

  // Prune. A shard that did not report a key has a partial < tau1/m there
  // (or none at all), so m * total <= m * sum + unreported * tau1, with
  // strict inequality when tau1 > 0. At least k keys have a total >= tau2, so
  // a key whose total is certainly below tau2 cannot be in the answer, not
  // even through a tie on the key. Unseen keys are below tau1 <= tau2.
  const Measure m_tau2 = Traits::Scale(tau2, m, std::monostate{});
  const bool strict = tau1 != Measure{};
  std::vector<std::vector<TopKKey>> fetch(shards);
  std::vector<TopKKey> candidates;
  for (auto& [key, info] : ledger.Items()) {
    const int unreported = m - info.reported_count;
    bool keep = true;
    if (unreported == 0 || !strict) {
      // Exact already: with tau1 == 0 every group passed phase 2.
      keep = !(info.sum < tau2);
    } else {
      const Measure upper_m = Traits::Add(Traits::Scale(info.sum, m, key), Traits::Scale(tau1, unreported, key), key);
      keep = m_tau2 < upper_m;
    }
    if (!keep) continue;
    candidates.push_back(key);
    if (unreported == 0 || !strict) continue;
    for (std::size_t s = 0; s < shards; ++s) {
      if (!info.reported[s]) fetch[s].push_back(key);
    }
  }
  result.candidates = candidates.size();
  for (const auto& f : fetch) result.fetched_keys += f.size();

  // Phase 3: exact partials of the candidates from the shards that did not
  // report them. Always run (it asks no shard when nothing is missing).
  auto p3 = Phase(result, m, "3 exact partials", [&] { return source.Partials(fetch); });
  std::size_t above_threshold = 0;
  std::string first_above;
  for (std::size_t s = 0; s < shards; ++s) {
    for (auto& e : p3.shards[s]) {
      RequireNonNegative(e.value, static_cast<int>(s), &e.key);
      auto it = ledger.Items().find(e.key);
      if (it == ledger.Items().end() || it->second.reported[s]) {
        throw Error(fmt::format("top-k: shard {} sent key {} in phase 3, which was not asked of it", s,
                                TopKKeyToString(e.key)));
      }
      if (strict && threshold.Admits(e.value)) {
        // The shard should have sent it in phase 2: its data changed since.
        if (above_threshold++ == 0) {
          first_above = fmt::format("shard {} key {} partial {}", s, TopKKeyToString(e.key), Traits::ToString(e.value));
        }
      }
      ledger.Add(static_cast<int>(s), e, "phase 3");
    }
  }
  if (above_threshold > 0) {
    result.warnings.push_back(
        fmt::format("top-k: {} partial(s) fetched in phase 3 were at or above the phase-2 threshold (first: {}): "
                    "the data changed between phases, so the ranking mixes moments; rerun for a settled answer",
                    above_threshold, first_above));
  }

  std::vector<TopKEntry<Measure>> ranked;
  ranked.reserve(candidates.size());
  for (auto& key : candidates) {
    ranked.push_back(TopKEntry<Measure>{key, ledger.Items().at(key).sum});
  }
  result.items = RankTopK(std::move(ranked), k);
  result.elapsed = Since(start);
  return result;
}

template <class Measure>
TopKResult<Measure> TputTopK(TopKShardSource<Measure>& source, std::size_t k) {
  return TputOrAuto(source, k, nullptr, nullptr);
}

template <class Measure>
TopKResult<Measure> AutoTopK(TopKShardSource<Measure>& source, std::size_t k) {
  if (k == 0) return TputOrAuto(source, k, nullptr, nullptr);
  const auto m = static_cast<std::size_t>(source.ShardCount());
  const std::vector<ShardLink> links = source.Links();
  const std::optional<TopKObserved> last = source.Recall();
  TopKObserved observed;
  TopKResult<Measure> result;
  if (last && last->groups.size() == m && last->phase2_rows.size() == m) {
    // The whole of both methods priced before anything runs.
    TopKCostInputs in;
    in.k = k;
    in.data = *last;
    in.links = links;
    const TopKEstimate estimate = EstimateTopKCosts(in);
    if (estimate.choice == TopKMethod::kAllPartials) {
      result = AllPartialsImpl(source, k, &observed);
    } else {
      result = TputOrAuto(source, k, nullptr, &observed);
      observed.groups = last->groups;  // phase 1 without statistics: the group counts stay as they were
    }
    if (observed.bytes_per_row <= 0) observed.bytes_per_row = last->bytes_per_row;
    result.estimate = estimate;
    result.groups = estimate.groups;
    result.estimated_phase2_rows = estimate.phase2_rows;
    result.choice = "the last run's statistics: " + estimate.Describe();
  } else {
    result = TputOrAuto(source, k, &links, &observed);
  }
  if (observed.groups.size() == m && observed.phase2_rows.size() == m) source.Remember(observed);
  return result;
}

template <class Measure>
TopKResult<Measure> AllPartialsTopK(TopKShardSource<Measure>& source, std::size_t k) {
  return AllPartialsImpl(source, k, nullptr);
}

template <class Measure>
TopKResult<Measure> RunTopK(TopKShardSource<Measure>& source, std::size_t k, TopKMethod method) {
  switch (method) {
    case TopKMethod::kTput:
      return TputTopK(source, k);
    case TopKMethod::kAllPartials:
      return AllPartialsTopK(source, k);
    case TopKMethod::kAuto:
      return AutoTopK(source, k);
  }
  throw Error("top-k: unknown method");
}

template TopKResult<std::int64_t> TputTopK(TopKShardSource<std::int64_t>&, std::size_t);
template TopKResult<std::int64_t> AllPartialsTopK(TopKShardSource<std::int64_t>&, std::size_t);
template TopKResult<std::int64_t> RunTopK(TopKShardSource<std::int64_t>&, std::size_t, TopKMethod);
template TopKResult<std::int64_t> AutoTopK(TopKShardSource<std::int64_t>&, std::size_t);
template class TopKShardSource<std::int64_t>;
template std::vector<TopKEntry<std::int64_t>> RankTopK(std::vector<TopKEntry<std::int64_t>>, std::size_t);

template TopKResult<Decimal> TputTopK(TopKShardSource<Decimal>&, std::size_t);
template TopKResult<Decimal> AllPartialsTopK(TopKShardSource<Decimal>&, std::size_t);
template TopKResult<Decimal> RunTopK(TopKShardSource<Decimal>&, std::size_t, TopKMethod);
template TopKResult<Decimal> AutoTopK(TopKShardSource<Decimal>&, std::size_t);
template class TopKShardSource<Decimal>;
template std::vector<TopKEntry<Decimal>> RankTopK(std::vector<TopKEntry<Decimal>>, std::size_t);

}  // namespace shardkit
