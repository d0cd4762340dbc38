// Exact distributed top-k (TPUT) and its two comparison methods.
//
// The core is a template over the measure (TopKMeasureTraits), instantiated
// for std::int64_t and Decimal at the end of each section.
#include "shardkit/topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <pqxx/pqxx>
#include <unordered_set>
#include <utility>

#include "shardkit/errors.hpp"
#include "shardkit/resolver.hpp"

namespace shardkit {

std::string TopKKeyToString(const TopKKey& key) {
  if (const auto* i = std::get_if<std::int64_t>(&key)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&key)) return "'" + *s + "'";
  return "NULL";
}

std::int64_t TopKMeasureTraits<std::int64_t>::Add(std::int64_t a, std::int64_t b, const TopKKey& what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw UnmergeableQuery(fmt::format(
        "top-k by sum: the total of key {} overflows a 64-bit integer ({} + {}); nothing was answered",
        TopKKeyToString(what), a, b));
  }
  return sum;
}

std::int64_t TopKMeasureTraits<std::int64_t>::Scale(std::int64_t a, std::int64_t factor, const TopKKey& what) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, factor, &product)) {
    throw UnmergeableQuery(fmt::format(
        "top-k by sum: a TPUT bound for key {} overflows a 64-bit integer ({} * {}); "
        "use the all-partials method for sums this large",
        TopKKeyToString(what), a, factor));
  }
  return product;
}

std::optional<std::int64_t> TopKMeasureTraits<std::int64_t>::FromText(std::string_view text) noexcept {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end || text.empty()) return std::nullopt;
  return value;
}

const char* TopKMethodName(TopKMethod method) noexcept {
  switch (method) {
    case TopKMethod::kTput: return "TPUT (exact)";
    case TopKMethod::kAllPartials: return "all partials (exact)";
    case TopKMethod::kPerShardShortcut: return "per-shard top-k shortcut (NOT exact)";
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
  throw UnmergeableQuery(fmt::format(
      "top-k by sum: shard {} has a negative partial sum ({}) for {}; TPUT's bounds hold only for "
      "non-negative measures. Rank a non-negative measure, or use TopKMethod::kAllPartials, which is "
      "exact for any sign",
      shard, TopKMeasureTraits<Measure>::ToString(value), what));
}

// The first k of `items` in the reference order (all of them if k is
// larger). Sorts pointers, not entries: moving std::variant inside the
// standard heap and sort code trips a false -Wmaybe-uninitialized in GCC 12.
template <class Measure>
std::vector<TopKEntry<Measure>> Rank(std::vector<TopKEntry<Measure>> items, std::size_t k) {
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
      throw Error(fmt::format("top-k: shard {} reported key {} twice (in {}); the source broke its contract",
                              shard, TopKKeyToString(entry.key), phase));
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

template <class Measure>
TopKResult<Measure> TputTopK(TopKShardSource<Measure>& source, std::size_t k) {
  using Traits = TopKMeasureTraits<Measure>;
  const auto start = Clock::now();
  TopKResult<Measure> result;
  result.method = TopKMethod::kTput;
  result.exact = true;
  if (k == 0) return result;
  const int m = source.ShardCount();
  const auto shards = static_cast<std::size_t>(m);
  Ledger<Measure> ledger(m);

  // Phase 1: local top k. A key missing from a shard's list counts 0 there.
  auto p1 = Phase(result, m, "1 local top-k", [&] { return source.LocalTopK(k, true); });
  for (std::size_t s = 0; s < shards; ++s) {
    if (s < p1.min_partial.size() && p1.min_partial[s]) RequireNonNegative(*p1.min_partial[s], static_cast<int>(s), nullptr);
    for (auto& e : p1.shards[s]) {
      RequireNonNegative(e.value, static_cast<int>(s), &e.key);
      ledger.Add(static_cast<int>(s), e, "phase 1");
    }
  }
  const Measure tau1 = ledger.KthLowerBound(k);
  result.tau1 = tau1;

  // Phase 2: every key with a partial >= tau1/m, except those already sent.
  const TopKThreshold<Measure> threshold{tau1, m};
  std::vector<std::vector<TopKKey>> exclude(shards);
  for (std::size_t s = 0; s < shards; ++s) {
    for (const auto& e : p1.shards[s]) exclude[s].push_back(e.key);
  }
  auto p2 = Phase(result, m, "2 threshold", [&] { return source.AtLeast(threshold, exclude); });
  for (std::size_t s = 0; s < shards; ++s) {
    for (auto& e : p2.shards[s]) {
      RequireNonNegative(e.value, static_cast<int>(s), &e.key);
      if (!threshold.Admits(e.value)) {
        throw Error(fmt::format("top-k: shard {} sent key {} with partial {} below the phase-2 threshold {}/{}",
                                s, TopKKeyToString(e.key), Traits::ToString(e.value), Traits::ToString(tau1), m));
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
    result.warnings.push_back(fmt::format(
        "top-k: {} partial(s) fetched in phase 3 were at or above the phase-2 threshold (first: {}): "
        "the data changed between phases, so the ranking mixes moments; rerun for a settled answer",
        above_threshold, first_above));
  }

  std::vector<TopKEntry<Measure>> ranked;
  ranked.reserve(candidates.size());
  for (auto& key : candidates) {
    ranked.push_back(TopKEntry<Measure>{key, ledger.Items().at(key).sum});
  }
  result.items = Rank(std::move(ranked), k);
  result.elapsed = Since(start);
  return result;
}

template <class Measure>
TopKResult<Measure> AllPartialsTopK(TopKShardSource<Measure>& source, std::size_t k) {
  const auto start = Clock::now();
  TopKResult<Measure> result;
  result.method = TopKMethod::kAllPartials;
  result.exact = true;
  if (k == 0) return result;
  const int m = source.ShardCount();
  auto reply = Phase(result, m, "all partials", [&] { return source.AllPartials(); });
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
  result.candidates = items.size();
  result.items = Rank(std::move(items), k);
  result.elapsed = Since(start);
  return result;
}

template <class Measure>
TopKResult<Measure> PerShardShortcutTopK(TopKShardSource<Measure>& source, std::size_t k) {
  const auto start = Clock::now();
  TopKResult<Measure> result;
  result.method = TopKMethod::kPerShardShortcut;
  result.exact = false;  // even when it happens to be right
  if (k == 0) return result;
  const int m = source.ShardCount();
  auto reply = Phase(result, m, "local top-k (shortcut)", [&] { return source.LocalTopK(k, false); });
  std::unordered_map<TopKKey, Measure> totals;
  for (auto& rows : reply.shards) {
    for (auto& e : rows) {
      auto [it, inserted] = totals.try_emplace(std::move(e.key), e.value);
      if (!inserted) it->second = TopKMeasureTraits<Measure>::Add(it->second, e.value, it->first);
    }
  }
  std::vector<TopKEntry<Measure>> items;
  for (auto& [key, total] : totals) items.push_back(TopKEntry<Measure>{key, total});
  result.candidates = items.size();
  result.items = Rank(std::move(items), k);
  result.warnings.push_back(
      "per-shard top-k shortcut: each shard's own top k merged; keys split across shards can be missed "
      "and totals are partial. Not an exact answer.");
  result.elapsed = Since(start);
  return result;
}

template <class Measure>
TopKResult<Measure> RunTopK(TopKShardSource<Measure>& source, std::size_t k, TopKMethod method) {
  switch (method) {
    case TopKMethod::kTput: return TputTopK(source, k);
    case TopKMethod::kAllPartials: return AllPartialsTopK(source, k);
    case TopKMethod::kPerShardShortcut: return PerShardShortcutTopK(source, k);
  }
  throw Error("top-k: unknown method");
}

// ---------------------------------------------------------------------------
// In memory.

template <class Measure>
MemoryTopKSource<Measure>::MemoryTopKSource(std::vector<std::vector<TopKEntry<Measure>>> shards)
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
    rows = Rank(std::move(rows), n);
  }
}

template <class Measure>
TopKReply<Measure> MemoryTopKSource<Measure>::LocalTopK(std::size_t k, bool want_min_partial) {
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
  return reply;
}

template <class Measure>
TopKReply<Measure> MemoryTopKSource<Measure>::AtLeast(const TopKThreshold<Measure>& threshold,
                                                      const std::vector<std::vector<TopKKey>>& exclude) {
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

template <class Measure>
TopKReply<Measure> MemoryTopKSource<Measure>::Partials(const std::vector<std::vector<TopKKey>>& keys) {
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

template <class Measure>
TopKReply<Measure> MemoryTopKSource<Measure>::AllPartials() {
  TopKReply<Measure> reply;
  reply.shards = by_rank_;
  reply.shards_asked = ShardCount();
  return reply;
}

template class MemoryTopKSource<std::int64_t>;
template TopKResult<std::int64_t> TputTopK(TopKShardSource<std::int64_t>&, std::size_t);
template TopKResult<std::int64_t> AllPartialsTopK(TopKShardSource<std::int64_t>&, std::size_t);
template TopKResult<std::int64_t> PerShardShortcutTopK(TopKShardSource<std::int64_t>&, std::size_t);
template TopKResult<std::int64_t> RunTopK(TopKShardSource<std::int64_t>&, std::size_t, TopKMethod);

template class MemoryTopKSource<Decimal>;
template TopKResult<Decimal> TputTopK(TopKShardSource<Decimal>&, std::size_t);
template TopKResult<Decimal> AllPartialsTopK(TopKShardSource<Decimal>&, std::size_t);
template TopKResult<Decimal> PerShardShortcutTopK(TopKShardSource<Decimal>&, std::size_t);
template TopKResult<Decimal> RunTopK(TopKShardSource<Decimal>&, std::size_t, TopKMethod);

// ---------------------------------------------------------------------------
// Over SQL.

std::string TopKKeysArrayLiteral(const std::vector<TopKKey>& keys) {
  std::string out = "{";
  bool first = true;
  for (const auto& key : keys) {
    if (std::holds_alternative<std::monostate>(key)) continue;
    if (!first) out += ',';
    first = false;
    if (const auto* i = std::get_if<std::int64_t>(&key)) {
      out += std::to_string(*i);
    } else {
      out += '"';
      for (char c : std::get<std::string>(key)) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += '"';
    }
  }
  out += '}';
  return out;
}

TopKStatements BuildTopKStatements(const TopKQuery& q) {
  if (q.from.empty() || q.key.empty() || q.measure.empty()) {
    throw UnmergeableQuery("top-k query: from, key and measure must all be given (e.g. from = \"order_items\", "
                           "key = \"book_id\", measure = \"quantity\")");
  }
  const bool text = q.key_type == TopKKeyType::kText;
  const std::string type = text ? "text" : "bigint";
  const std::size_t n = q.params.size();
  const std::string where = q.where.empty() ? "" : fmt::format(" WHERE ({})", q.where);
  const std::string grouped = fmt::format("SELECT ({})::{} AS k, coalesce(sum({}), 0) AS s FROM {}{} GROUP BY 1",
                                          q.key, type, q.measure, q.from, where);
  // The C collation for text keys, whatever the column's collation is.
  const std::string order = text ? "s DESC, k COLLATE \"C\"" : "s DESC, k";
  TopKStatements st;
  st.local_top_k = fmt::format("SELECT k, s FROM ({}) g ORDER BY {} LIMIT ${}", grouped, order, n + 1);
  st.local_top_k_min = fmt::format(
      "WITH g AS MATERIALIZED ({}) SELECT k, s, (SELECT min(s) FROM g) AS min_s FROM g ORDER BY {} LIMIT ${}",
      grouped, order, n + 1);
  st.at_least = fmt::format(
      "SELECT k, s FROM ({0}) g WHERE s::numeric * ${1}::integer >= ${2}::numeric "
      "AND CASE WHEN k IS NULL THEN NOT ${4}::boolean ELSE NOT (k = ANY(${3}::{5}[])) END",
      grouped, n + 1, n + 2, n + 3, n + 4, type);
  // The key filter goes before the aggregation, where an index on the key helps.
  st.partials = fmt::format(
      "SELECT ({0})::{1} AS k, coalesce(sum({2}), 0) AS s FROM {3} WHERE {4}(({0}) = ANY(${5}::{1}[]) "
      "OR (${6}::boolean AND ({0}) IS NULL)) GROUP BY 1",
      q.key, type, q.measure, q.from, q.where.empty() ? std::string() : fmt::format("({}) AND ", q.where),
      n + 1, n + 2);
  st.all_partials = grouped;
  return st;
}

namespace {

template <class Measure>
[[nodiscard]] Measure ParseMeasure(const pqxx::field& f, ShardId shard, const TopKKey& key) {
  const std::string_view text(f.c_str(), f.size());
  std::optional<Measure> value;
  if (!f.is_null()) value = TopKMeasureTraits<Measure>::FromText(text);
  if (!value) {
    throw UnmergeableQuery(fmt::format(
        "top-k by sum: shard {} returned the sum '{}' for key {}, which the measure type cannot hold "
        "exactly; rank numeric measures (or integer sums beyond 64 bits) with TopKBySum<Decimal>",
        shard, f.is_null() ? std::string_view("NULL") : text, TopKKeyToString(key)));
  }
  return *std::move(value);
}

[[nodiscard]] TopKKey ParseKey(const pqxx::field& f, TopKKeyType type, ShardId shard) {
  if (f.is_null()) return std::monostate{};
  if (type == TopKKeyType::kText) return std::string(f.c_str(), f.size());
  std::int64_t value = 0;
  const char* begin = f.c_str();
  const char* end = begin + f.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || ptr != end) {
    throw ShardQueryError(shard, fmt::format("top-k: shard {} returned the key '{}', not a bigint", shard,
                                             std::string(begin, f.size())));
  }
  return value;
}

[[nodiscard]] bool HasNull(const std::vector<TopKKey>& keys) {
  return std::any_of(keys.begin(), keys.end(), [](const TopKKey& k) { return std::holds_alternative<std::monostate>(k); });
}

}  // namespace

template <class Measure>
BasicSqlTopKSource<Measure>::BasicSqlTopKSource(ScatterGather& scatter, TopKQuery query, ScatterOptions options)
    : scatter_(scatter),
      query_(std::move(query)),
      options_(std::move(options)),
      statements_(BuildTopKStatements(query_)),
      shard_count_(scatter.Resolver().ShardCount()) {}

template <class Measure>
ScatterOptions BasicSqlTopKSource<Measure>::PhaseOptions(const char* phase) const {
  ScatterOptions o = options_;
  o.shards.reset();
  o.allow_partial = false;
  o.label = query_.label.empty() ? std::string(phase) : fmt::format("{} {}", query_.label, phase);
  return o;
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::Decode(const ScatterResult& result, bool with_min) const {
  TopKReply<Measure> reply;
  reply.shards.resize(static_cast<std::size_t>(shard_count_));
  if (with_min) reply.min_partial.resize(static_cast<std::size_t>(shard_count_));
  reply.bytes = result.TotalBytes();
  reply.shards_asked = static_cast<int>(result.shards.size());
  if (result.warning) reply.warnings.push_back(*result.warning);
  for (const auto& shard : result.shards) {
    const int index = ToInt(shard.shard);
    if (index < 0 || index >= shard_count_) throw UnknownShard(shard.shard, shard_count_);
    auto& out = reply.shards[static_cast<std::size_t>(index)];
    out.reserve(shard.rows.size());
    for (const auto& row : shard.rows) {
      // Built in place: moving a temporary Decimal entry trips a false
      // -Wmaybe-uninitialized in GCC 12 with the sanitizers on.
      auto& entry = out.emplace_back();
      entry.key = ParseKey(row[0], query_.key_type, shard.shard);
      entry.value = ParseMeasure<Measure>(row[1], shard.shard, entry.key);
    }
    if (with_min && !shard.rows.empty()) {
      reply.min_partial[static_cast<std::size_t>(index)] =
          ParseMeasure<Measure>(shard.rows[0][2], shard.shard, TopKKey{std::monostate{}});
    }
  }
  return reply;
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::LocalTopK(std::size_t k, bool want_min_partial) {
  SqlParams params = query_.params;
  params.emplace_back(std::to_string(k));
  const auto& sql = want_min_partial ? statements_.local_top_k_min : statements_.local_top_k;
  return Decode(scatter_.Run(sql, params, PhaseOptions("local top-k")), want_min_partial);
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::AtLeast(const TopKThreshold<Measure>& threshold,
                                                        const std::vector<std::vector<TopKKey>>& exclude) {
  static const std::vector<TopKKey> kNone;
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (int s = 0; s < shard_count_; ++s) {
    const auto& ex = static_cast<std::size_t>(s) < exclude.size() ? exclude[static_cast<std::size_t>(s)] : kNone;
    SqlParams params = query_.params;
    params.emplace_back(std::to_string(threshold.shards));
    params.emplace_back(TopKMeasureTraits<Measure>::ToString(threshold.tau1));
    params.emplace_back(TopKKeysArrayLiteral(ex));
    params.emplace_back(HasNull(ex) ? "true" : "false");
    statements.emplace_back(ShardId{s}, ScatterGather::Statement{statements_.at_least, std::move(params)});
  }
  return Decode(scatter_.RunPerShard(statements, PhaseOptions("threshold")), false);
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::Partials(const std::vector<std::vector<TopKKey>>& keys) {
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (int s = 0; s < shard_count_ && static_cast<std::size_t>(s) < keys.size(); ++s) {
    const auto& ks = keys[static_cast<std::size_t>(s)];
    if (ks.empty()) continue;
    SqlParams params = query_.params;
    params.emplace_back(TopKKeysArrayLiteral(ks));
    params.emplace_back(HasNull(ks) ? "true" : "false");
    statements.emplace_back(ShardId{s}, ScatterGather::Statement{statements_.partials, std::move(params)});
  }
  if (statements.empty()) {
    TopKReply<Measure> none;
    none.shards.resize(static_cast<std::size_t>(shard_count_));
    return none;
  }
  return Decode(scatter_.RunPerShard(statements, PhaseOptions("exact partials")), false);
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::AllPartials() {
  return Decode(scatter_.Run(statements_.all_partials, query_.params, PhaseOptions("all partials")), false);
}

template class BasicSqlTopKSource<std::int64_t>;
template class BasicSqlTopKSource<Decimal>;

}  // namespace shardkit
