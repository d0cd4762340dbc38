// shardkit/queries/topk.hpp — exact distributed top-k by a summed measure (TPUT).
//
// "The 10 best-selling books of the last 30 days" over shards: the answer one
// unsharded server gives to
//
//   SELECT key, coalesce(sum(measure), 0) AS total FROM ... WHERE ...
//   GROUP BY key ORDER BY total DESC, key ASC LIMIT k      -- C collation
//
// computed with TPUT's three phases (Cao & Wang, PODC 2004) instead of
// shipping every shard's per-key partial sum:
//   1. every shard sends its local top k; tau1 = k-th largest summed lower bound;
//   2. every shard sends each key whose partial is >= tau1/m (m shards);
//      tau2 = k-th largest lower bound; keys whose upper bound is below tau2
//      are pruned;
//   3. the exact partials of the surviving candidates are fetched from the
//      shards that have not reported them, and the candidates are ranked.
// Stopping after phase 2 is not exact; TputTopK never does. Over SQL the
// three phases run in one REPEATABLE READ READ ONLY transaction per shard
// (a ScatterSession): each shard aggregates once, into a temporary table
// that phase 1 reads in the same round trip and phases 2 and 3 read later,
// and every phase sees the same snapshot, so concurrent writes cannot mix
// moments into the answer.
//
// TopKMethod::kAuto runs whichever of the two the cost model predicts
// faster (topk_cost.hpp: bytes over the links' measured rate, round trips
// times their measured round trip, fixed costs per statement and per
// group). Its data inputs (each shard's group count and how many rows TPUT's
// phase 2 sends) come from the last run of the same query; the first run
// has none, so it runs phase 1 with statistics (each shard's group count and
// a histogram of its partials), then prices TPUT's phases 2 and 3 against
// fetching the rest of the partials from the same temporary table. Every
// run remembers what it saw for the next. Either way the answer is exact;
// TopKResult::estimate says what was predicted and why.
//
//   shardkit::ScatterGather scatter{*resolver};
//   shardkit::TopKQuery q;
//   q.from = "order_items i JOIN orders o USING (customer_id, order_id)";
//   q.key = "i.book_id";
//   q.measure = "i.quantity";
//   q.where = "o.ordered_at >= $1::timestamptz";   // a fixed time, not now():
//   q.params = {"2026-10-15 00:00:00+00"};         // shards have their own clocks
//   q.k = 10;
//   auto top = shardkit::TopKBySum(scatter, q);             // TPUT, exact
//   for (const auto& [key, total] : top.items) ...
//   for (const auto& phase : top.phases) log(phase.name, phase.rows, phase.elapsed);
//
// The algorithm is separate from the transport: TputTopK() talks to a
// TopKShardSource, implemented here over SQL (SqlTopKSource); tests and
// simulations implement it in memory.
//
// Assumptions, checked where they can be:
// - The measure is non-negative: TPUT's bounds are wrong otherwise, so a
//   negative partial anywhere refuses the query (UnmergeableQuery). The
//   all-partials method has no such restriction.
// - A group whose measure values are all NULL counts as 0 (coalesce), so the
//   matching reference query orders by coalesce(sum(measure), 0).
// - Keys are bigint or text; text keys are ordered byte-wise, as the C
//   collation does (the cluster runs with it); a NULL key is ranked after
//   every other key among equal totals, as ORDER BY key ASC puts NULLs last.
// - Measures are exact: std::int64_t for integer/bigint columns (a sum that is
//   not an integer or does not fit refuses the query) or shardkit::Decimal for
//   numeric ones (TopKBySum<Decimal>); never floating point.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardkit/core/decimal.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/topk_cost.hpp"

namespace shardkit {

// A group key: bigint, text or SQL NULL (std::monostate). The variant's
// ordering is the reference's ORDER BY key ASC: integers numerically, text
// byte-wise (C collation), NULL last.
using TopKKey = std::variant<std::int64_t, std::string, std::monostate>;

// For messages: 90, 'abc', NULL.
[[nodiscard]] std::string TopKKeyToString(const TopKKey& key);

// The measure's arithmetic: exact 64-bit integers (sums checked for overflow)
// and exact decimals (numeric measures).
template <class Measure>
struct TopKMeasureTraits;

template <>
struct TopKMeasureTraits<std::int64_t> {
  // Throw UnmergeableQuery on overflow; `what` names the key for the message.
  [[nodiscard]] static std::int64_t Add(std::int64_t a, std::int64_t b, const TopKKey& what);
  [[nodiscard]] static std::int64_t Scale(std::int64_t a, std::int64_t factor, const TopKKey& what);
  [[nodiscard]] static bool IsNegative(std::int64_t a) noexcept { return a < 0; }
  [[nodiscard]] static std::string ToString(std::int64_t a) { return std::to_string(a); }
  [[nodiscard]] static double ToDouble(std::int64_t a) noexcept { return static_cast<double>(a); }
  // A sum in PostgreSQL's text form; nullopt unless an integer that fits.
  [[nodiscard]] static std::optional<std::int64_t> FromText(std::string_view text) noexcept;
};

template <>
struct TopKMeasureTraits<Decimal> {
  [[nodiscard]] static Decimal Add(const Decimal& a, const Decimal& b, const TopKKey&) { return a + b; }
  [[nodiscard]] static Decimal Scale(const Decimal& a, std::int64_t factor, const TopKKey&) {
    return Decimal(a.Unscaled() * factor, a.Scale());
  }
  [[nodiscard]] static bool IsNegative(const Decimal& a) noexcept { return a.Sign() < 0; }
  [[nodiscard]] static std::string ToString(const Decimal& a) { return a.ToString(); }
  [[nodiscard]] static double ToDouble(const Decimal& a) { return std::stod(a.ToString()); }
  [[nodiscard]] static std::optional<Decimal> FromText(std::string_view text) noexcept {
    return Decimal::TryParse(text);
  }
};

// One key and a measure: a shard's partial or a merged total.
template <class Measure>
struct TopKEntry {
  TopKKey key;
  Measure value{};
  friend bool operator==(const TopKEntry&, const TopKEntry&) = default;
};

// The order of the answer: value DESC, then key ASC.
template <class Measure>
[[nodiscard]] bool RanksBefore(const TopKEntry<Measure>& a, const TopKEntry<Measure>& b) {
  if (a.value != b.value) return b.value < a.value;
  return a.key < b.key;
}

// Phase 2's threshold tau1 / m kept as an exact fraction: a partial passes
// iff partial * shards >= tau1.
template <class Measure>
struct TopKThreshold {
  Measure tau1{};
  int shards = 1;
  [[nodiscard]] bool Admits(const Measure& partial) const {
    return !(TopKMeasureTraits<Measure>::Scale(partial, shards, std::monostate{}) < tau1);
  }
};

// What one call to a source returned: per shard (index = shard), the entries.
template <class Measure>
struct TopKReply {
  std::vector<std::vector<TopKEntry<Measure>>> shards;
  // Only from LocalTopK(k, true): the smallest partial of any group on the
  // shard (nullopt: the shard has no group), so a negative partial anywhere is
  // seen even if it is not in the top k.
  std::vector<std::optional<Measure>> min_partial;
  std::size_t bytes = 0;              // payload bytes received, when the source knows
  int shards_asked = 0;               // shards that were sent a request
  std::vector<std::string> warnings;  // e.g. a shard missing (allow_partial)
  // Only from LocalTopK, when the source can tell (else empty): per shard,
  // its number of groups and a histogram of its positive partials, as
  // (bucket, count) with bucket = floor(4 * log2(partial)). kAuto's input.
  std::vector<std::int64_t> groups;
  std::vector<std::vector<std::pair<int, std::int64_t>>> histogram;
};

// The transport TPUT runs over. One call = one round trip to every shard
// involved (in parallel); shard indexes are 0..ShardCount()-1.
template <class Measure>
class TopKShardSource {
 public:
  virtual ~TopKShardSource() = default;
  [[nodiscard]] virtual int ShardCount() const = 0;
  // Each shard's k groups with the largest partial (ties by key ASC).
  [[nodiscard]] virtual TopKReply<Measure> LocalTopK(std::size_t k, bool want_min_partial) = 0;
  // Shard i: every group whose partial passes `threshold`, except the keys in
  // exclude[i] (already reported).
  [[nodiscard]] virtual TopKReply<Measure> AtLeast(const TopKThreshold<Measure>& threshold,
                                                   const std::vector<std::vector<TopKKey>>& exclude) = 0;
  // Shard i: the partials of keys[i] (a key with no group: no entry, i.e. 0).
  // Shards with an empty list are not asked.
  [[nodiscard]] virtual TopKReply<Measure> Partials(const std::vector<std::vector<TopKKey>>& keys) = 0;
  // Every group's partial on every shard.
  [[nodiscard]] virtual TopKReply<Measure> AllPartials() = 0;
  // kAuto's inputs: the measured link to each shard (index = shard; empty:
  // nothing measured, the model's defaults) ...
  [[nodiscard]] virtual std::vector<ShardLink> Links() const { return {}; }
  // ... and what the last run of this query showed (nullopt: none yet),
  // which every kAuto run updates. By default the source object itself
  // remembers; the SQL source remembers per query across sources.
  [[nodiscard]] virtual std::optional<TopKObserved> Recall() const { return last_; }
  virtual void Remember(const TopKObserved& observed) { last_ = observed; }
  // Called before LocalTopK: whether its caller needs `groups` and
  // `histogram` (kAuto does, TPUT does not). A source may then skip them;
  // min_partial must still be negative iff the shard has a negative
  // partial. Sources that always fill them ignore this.
  virtual void WantStatistics(bool /*wanted*/) {}
  // After LocalTopK: every group's partial except the keys in exclude[i]
  // (already reported), from the same data LocalTopK saw where the source
  // can (the SQL source reads its snapshot's temporary table). This
  // default asks AllPartials() and drops the excluded keys.
  [[nodiscard]] virtual TopKReply<Measure> RestOfPartials(const std::vector<std::vector<TopKKey>>& exclude);

 private:
  std::optional<TopKObserved> last_;
};

struct TopKPhaseStats {
  std::string name;       // "1 local top-k", "2 threshold", "3 exact partials", ...
  std::size_t rows = 0;   // rows received from all shards
  std::size_t bytes = 0;  // payload bytes, if the source reports them
  int shards_asked = 0;
  std::chrono::microseconds elapsed{0};  // wall time of the round trip incl. decoding
};

template <class Measure>
struct TopKResult {
  TopKMethod method = TopKMethod::kTput;
  std::vector<TopKEntry<Measure>> items;  // ranked, at most k
  std::vector<TopKPhaseStats> phases;
  std::size_t total_rows = 0;
  std::size_t total_bytes = 0;
  std::chrono::microseconds elapsed{0};
  // TPUT's inner figures, for reports and tuning.
  std::optional<Measure> tau1;
  std::optional<Measure> tau2;
  std::size_t seen_after_phase2 = 0;  // distinct keys known after phase 2
  std::size_t candidates = 0;         // keys surviving the upper-bound prune
  std::size_t fetched_keys = 0;       // (shard, key) partials asked in phase 3
  // kAuto: the cost model's prediction for both methods and its inputs
  // (method is then kTput or kAllPartials); choice is estimate->Describe()
  // and where the inputs came from ("the last run's statistics" or "phase
  // 1's statistics").
  std::optional<TopKEstimate> estimate;
  std::optional<std::int64_t> groups;  // over all shards, as the model took them
  std::optional<std::int64_t> estimated_phase2_rows;
  std::string choice;
  // Something the caller should know: a shard missing, data that changed
  // between phases (a phase-3 partial above the phase-2 threshold).
  std::vector<std::string> warnings;
};

// The two exact methods. k == 0 gives an empty answer without asking
// anything. TputTopK throws UnmergeableQuery if a negative partial shows up.
template <class Measure>
[[nodiscard]] TopKResult<Measure> TputTopK(TopKShardSource<Measure>& source, std::size_t k);
template <class Measure>
[[nodiscard]] TopKResult<Measure> AllPartialsTopK(TopKShardSource<Measure>& source, std::size_t k);
template <class Measure>
[[nodiscard]] TopKResult<Measure> AutoTopK(TopKShardSource<Measure>& source, std::size_t k);
template <class Measure>
[[nodiscard]] TopKResult<Measure> RunTopK(TopKShardSource<Measure>& source, std::size_t k, TopKMethod method);

// The first k of `items` in the answer's order (RanksBefore); all of them,
// ranked, if k is larger. For sources that rank their own groups.
template <class Measure>
[[nodiscard]] std::vector<TopKEntry<Measure>> RankTopK(std::vector<TopKEntry<Measure>> items, std::size_t k);

// ---------------------------------------------------------------------------
// Over SQL.

enum class TopKKeyType {
  kBigint,  // integer/bigint key expressions, returned as int64
  kText,    // text/varchar key expressions, compared with the C collation
};

// "Top k keys by sum(measure)". from/key/measure/where are SQL text written
// by the application (never user input): values belong in params, which
// where may use as $1..$n. shardkit appends its own parameters after them.
struct TopKQuery {
  std::string from;  // FROM clause body: a (quoted) table name or joins
  std::string key;   // grouping expression, e.g. "i.book_id"
  TopKKeyType key_type = TopKKeyType::kBigint;
  std::string measure;  // summed expression, e.g. "i.quantity" (see TopKBySum's Measure)
  std::string where;    // optional filter (without WHERE)
  SqlParams params;     // $1..$n of where
  std::size_t k = 10;
  std::string label = "top-k";  // for scatter statistics and messages
};

// The statements SqlTopKSource sends, for logs and documentation.
struct TopKStatements {
  std::string local_top_k;      // $n+1 = k
  std::string local_top_k_min;  // the same plus the shard's smallest partial
  std::string at_least;         // $n+1 = m, $n+2 = tau1, $n+3 = excluded keys, $n+4 = exclude NULL key
  std::string partials;         // $n+1 = keys, $n+2 = include the NULL key
  std::string all_partials;
  // In a session (one snapshot per shard): phase 1 aggregates once into a
  // temporary table and reads its top k from it in the same round trip;
  // phases 2 and 3 and the rest of the partials read the table.
  std::string snapshot_setup;               // the session's temporary table (ON COMMIT DROP)
  std::string snapshot_setup_non_negative;  // the same, refusing a negative partial (SQLSTATE 23514)
  std::string snapshot_fill;                // the one aggregation into it; $1..$n = params
  // The top k ({} = k): TPUT's phase 1, which needs no statistics.
  std::string snapshot_top_k;
  // One statistics row first (k and s NULL; the smallest partial, the group
  // count and a histogram of the positive partials), then the top k ({} =
  // k): kAuto's phase 1.
  std::string snapshot_top_k_stats;
  std::string snapshot_at_least;  // $1 = m, $2 = tau1, $3 = excluded keys, $4 = exclude NULL key
  std::string snapshot_partials;  // $1 = keys, $2 = include the NULL key
  std::string snapshot_rest;      // $1 = excluded keys, $2 = exclude NULL key
};
// integer_sums: the session's table keeps the partials as bigint (cheap
// to sort) instead of numeric; a partial that is not an integer or does not
// fit fails phase 1 (SQLSTATE 22P02 / 22003), which the int64 source
// reports as UnmergeableQuery.
[[nodiscard]] TopKStatements BuildTopKStatements(const TopKQuery& query, bool integer_sums = false);

// TPUT's phases (LocalTopK, AtLeast, Partials, RestOfPartials) run in one
// ScatterSession: a connection per shard held from phase 1 to the last
// phase, one REPEATABLE READ READ ONLY transaction (one snapshot) per shard.
// Phase 1 begins the session's transaction, makes the temporary table (ON
// COMMIT DROP; for TPUT and kAuto it refuses a negative partial, which
// they cannot rank), aggregates once into it and reads the top k from it,
// all in one pipelined round trip; phases 2 and 3 and the rest of the
// partials (kAuto) read the table. No phase scans the shard's rows again.
// The last phase ends the session (its COMMITs in one more round trip);
// so does the destructor.
// AllPartials() is one plain scatter; AtLeast, Partials and RestOfPartials
// called without a LocalTopK before them are plain scatters too.
// options.deadline, if set, bounds the whole computation (otherwise each
// session or scatter gets the default 30 s); options.directory_buckets
// applies to the session too; options.shards and options.allow_partial are
// ignored: an exact top-k needs every shard. Measure: std::int64_t
// (integer/bigint measure) or Decimal (numeric, or integer sums beyond 64
// bits). Destroy the source before the ScatterGather.
//
// Cost: one GROUP BY per shard for either method; TPUT adds writing the
// partials into the temporary table and two short round trips, and saves
// shipping and decoding most partials.
template <class Measure>
class BasicSqlTopKSource final : public TopKShardSource<Measure> {
 public:
  BasicSqlTopKSource(ScatterGather& scatter, TopKQuery query, ScatterOptions options = {});
  ~BasicSqlTopKSource() override;
  BasicSqlTopKSource(const BasicSqlTopKSource&) = delete;
  BasicSqlTopKSource& operator=(const BasicSqlTopKSource&) = delete;
  [[nodiscard]] int ShardCount() const override { return shard_count_; }
  [[nodiscard]] TopKReply<Measure> LocalTopK(std::size_t k, bool want_min_partial) override;
  [[nodiscard]] TopKReply<Measure> AtLeast(const TopKThreshold<Measure>& threshold,
                                           const std::vector<std::vector<TopKKey>>& exclude) override;
  [[nodiscard]] TopKReply<Measure> Partials(const std::vector<std::vector<TopKKey>>& keys) override;
  [[nodiscard]] TopKReply<Measure> AllPartials() override;
  [[nodiscard]] TopKReply<Measure> RestOfPartials(const std::vector<std::vector<TopKKey>>& exclude) override;
  // Without statistics (TPUT), LocalTopK fills no group count and no
  // histogram, and min_partial is the smallest negative partial or else 0
  // (a shard without groups: nullopt). Default: wanted.
  void WantStatistics(bool wanted) override { want_statistics_ = wanted; }
  // The scatter's measured links (ScatterGather::Link).
  [[nodiscard]] std::vector<ShardLink> Links() const override;
  // kAuto's memory: per query (the aggregation's text and the shard
  // count), shared by every source in the process, the last 256 queries.
  [[nodiscard]] std::optional<TopKObserved> Recall() const override;
  void Remember(const TopKObserved& observed) override;
  [[nodiscard]] const TopKStatements& Statements() const noexcept { return statements_; }
  // Time spent opening the session (acquiring, BEGIN, the temporary table);
  // it is part of phase 1's elapsed time.
  [[nodiscard]] std::chrono::microseconds SessionOpenTime() const noexcept { return session_open_; }

 private:
  [[nodiscard]] TopKReply<Measure> Decode(const ScatterResult& result, bool with_min) const;
  [[nodiscard]] ScatterOptions PhaseOptions(const char* phase) const;
  // The open session, or a new one whose table refuses negative partials
  // if non_negative.
  ScatterSession& Session(bool non_negative = false);
  void EndSession() noexcept;

  ScatterGather& scatter_;
  TopKQuery query_;
  ScatterOptions options_;
  TopKStatements statements_;
  int shard_count_ = 0;
  std::shared_ptr<ScatterSession> session_;
  std::chrono::microseconds session_open_{0};
  bool in_session_ = false;  // after LocalTopK, until the last phase
  bool want_statistics_ = true;
};
using SqlTopKSource = BasicSqlTopKSource<std::int64_t>;
using DecimalSqlTopKSource = BasicSqlTopKSource<Decimal>;

// One call: builds the source and runs `method` with query.k.
//   TopKBySum(scatter, q)            // integer/bigint measure, int64 totals
//   TopKBySum<Decimal>(scatter, q)   // numeric measure, exact decimal totals
template <class Measure = std::int64_t>
[[nodiscard]] TopKResult<Measure> TopKBySum(ScatterGather& scatter, const TopKQuery& query,
                                            TopKMethod method = TopKMethod::kTput, const ScatterOptions& options = {}) {
  BasicSqlTopKSource<Measure> source(scatter, query, options);
  return RunTopK(source, query.k, method);
}

// A PostgreSQL array literal of the keys ({1,2} or {"a","b\"c"}), NULL keys
// left out; for `= ANY($n::bigint[])` / `::text[]` parameters.
[[nodiscard]] std::string TopKKeysArrayLiteral(const std::vector<TopKKey>& keys);

extern template TopKResult<std::int64_t> TputTopK(TopKShardSource<std::int64_t>&, std::size_t);
extern template TopKResult<std::int64_t> AllPartialsTopK(TopKShardSource<std::int64_t>&, std::size_t);
extern template TopKResult<std::int64_t> RunTopK(TopKShardSource<std::int64_t>&, std::size_t, TopKMethod);
extern template TopKResult<std::int64_t> AutoTopK(TopKShardSource<std::int64_t>&, std::size_t);
extern template std::vector<TopKEntry<std::int64_t>> RankTopK(std::vector<TopKEntry<std::int64_t>>, std::size_t);

extern template class BasicSqlTopKSource<std::int64_t>;
extern template TopKResult<Decimal> TputTopK(TopKShardSource<Decimal>&, std::size_t);
extern template TopKResult<Decimal> AllPartialsTopK(TopKShardSource<Decimal>&, std::size_t);
extern template TopKResult<Decimal> RunTopK(TopKShardSource<Decimal>&, std::size_t, TopKMethod);
extern template TopKResult<Decimal> AutoTopK(TopKShardSource<Decimal>&, std::size_t);
extern template std::vector<TopKEntry<Decimal>> RankTopK(std::vector<TopKEntry<Decimal>>, std::size_t);

extern template class BasicSqlTopKSource<Decimal>;

}  // namespace shardkit
