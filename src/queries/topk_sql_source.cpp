// The SQL source of top-k: TPUT's phases as scatters over ScatterGather.
#include "shardkit/queries/topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <mutex>
#include <pqxx/pqxx>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

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

TopKStatements BuildTopKStatements(const TopKQuery& q, bool integer_sums) {
  if (q.from.empty() || q.key.empty() || q.measure.empty()) {
    throw UnmergeableQuery(
        "top-k query: from, key and measure must all be given (e.g. from = \"order_items\", "
        "key = \"book_id\", measure = \"quantity\")");
  }
  const bool text = q.key_type == TopKKeyType::kText;
  const std::string type = text ? "text" : "bigint";
  const std::size_t n = q.params.size();
  const std::string where = q.where.empty() ? "" : fmt::format(" WHERE ({})", q.where);
  const std::string grouped = fmt::format("SELECT ({})::{} AS k, coalesce(sum({}), 0) AS s FROM {}{} GROUP BY 1", q.key,
                                          type, q.measure, q.from, where);
  // The C collation for text keys, whatever the column's collation is.
  const std::string order = text ? "s DESC, k COLLATE \"C\"" : "s DESC, k";
  TopKStatements st;
  st.local_top_k = fmt::format("SELECT k, s FROM ({}) g ORDER BY {} LIMIT ${}", grouped, order, n + 1);
  st.local_top_k_min = fmt::format(
      "WITH g AS MATERIALIZED ({}) SELECT k, s, (SELECT min(s) FROM g) AS min_s FROM g ORDER BY {} LIMIT ${}", grouped,
      order, n + 1);
  st.at_least = fmt::format(
      "SELECT k, s FROM ({0}) g WHERE s::numeric * ${1}::integer >= ${2}::numeric "
      "AND CASE WHEN k IS NULL THEN NOT ${4}::boolean ELSE NOT (k = ANY(${3}::{5}[])) END",
      grouped, n + 1, n + 2, n + 3, n + 4, type);
  // The key filter goes before the aggregation, where an index on the key helps.
  st.partials = fmt::format(
      "SELECT ({0})::{1} AS k, coalesce(sum({2}), 0) AS s FROM {3} WHERE {4}(({0}) = ANY(${5}::{1}[]) "
      "OR (${6}::boolean AND ({0}) IS NULL)) GROUP BY 1",
      q.key, type, q.measure, q.from, q.where.empty() ? std::string() : fmt::format("({}) AND ", q.where), n + 1,
      n + 2);
  st.all_partials = grouped;

  // The session's temporary table, made before its transaction turns
  // read-only (ON COMMIT DROP: nothing to clean up); phase 1 fills it with
  // the one aggregation.
  const std::string table = "pg_temp.shardkit_topk";
  st.snapshot_setup = fmt::format("CREATE TEMP TABLE shardkit_topk (k {}{}, s {}) ON COMMIT DROP", type,
                                  text ? " COLLATE \"C\"" : "", integer_sums ? "bigint" : "numeric");
  // TPUT's phase 1: a negative partial fails the fill (SQLSTATE 23514), so
  // that the top k need not be sorted to show one (that cost 1.2 ms a shard).
  st.snapshot_setup_non_negative = fmt::format(
      "CREATE TEMP TABLE shardkit_topk (k {}{}, s {} CONSTRAINT shardkit_topk_non_negative CHECK (s >= 0)) ON "
      "COMMIT DROP",
      type, text ? " COLLATE \"C\"" : "", integer_sums ? "bigint" : "numeric");
  // A bigint sum (of smallint or integer) goes in as it is; a numeric one
  // only if it is a whole number that fits: an assignment cast would round
  // 1.5 to 2, so anything else goes through text, which fails (22P02), as
  // does one out of range (22003). (All of it through text cost ~10% of
  // phase 1.)
  st.snapshot_fill =
      integer_sums ? fmt::format(
                         "INSERT INTO {} (k, s) SELECT k, CASE WHEN s = s::bigint THEN s::bigint ELSE s::text::bigint "
                         "END FROM ({}) g",
                         table, grouped)
                   : fmt::format("INSERT INTO {} (k, s) {}", table, grouped);
  // Phase 1 reads the table in the same round trip that fills it: the top
  // k, or (kAuto) the top k after one statistics row (o = 0). {} = k.
  st.snapshot_top_k = fmt::format("SELECT k, s FROM {} ORDER BY {} LIMIT {{}}", table, order);
  // The statistics come from the distinct partials (few): the logarithm
  // once per value, not per group (per group it cost 3 ms a shard).
  st.snapshot_top_k_stats = fmt::format(
      "WITH d AS MATERIALIZED (SELECT s, count(*) AS c FROM {0} GROUP BY s) "
      "SELECT k, s, min_s, n, hist FROM ("
      "SELECT 0 AS o, NULL::{2} AS k, NULL::{3} AS s, (SELECT min(s) FROM d)::numeric AS min_s, "
      "coalesce((SELECT sum(c) FROM d), 0)::bigint AS n, "
      "(SELECT coalesce(string_agg(e || ':' || c, ',' ORDER BY e), '') FROM "
      "(SELECT floor(4 * ln(s::float8) / ln(2))::int AS e, sum(c) AS c FROM d WHERE s > 0 GROUP BY 1) h) AS hist "
      "UNION ALL "
      "(SELECT 1, k, s, NULL, NULL, NULL FROM {0} ORDER BY {1} LIMIT {{}})) u ORDER BY o, {1}",
      table, order, type, integer_sums ? "bigint" : "numeric");
  // s * m >= tau1. With bigint partials, as s >= ceil(tau1 / m) in exact
  // integer division: a bigint constant once the parameters are bound, so
  // each row is one integer comparison instead of a numeric product.
  const std::string at_least =
      integer_sums ? "s >= (CASE WHEN $2::numeric > 0 THEN div($2::numeric + $1::integer - 1, $1::integer) "
                     "ELSE div($2::numeric, $1::integer) END)::bigint"
                   : "s * $1::integer >= $2::numeric";
  st.snapshot_at_least = fmt::format(
      "SELECT k, s FROM {0} WHERE {2} "
      "AND CASE WHEN k IS NULL THEN NOT $4::boolean ELSE NOT (k = ANY($3::{1}[])) END",
      table, type, at_least);
  st.snapshot_rest = fmt::format(
      "SELECT k, s FROM {0} WHERE CASE WHEN k IS NULL THEN NOT $2::boolean ELSE NOT (k = ANY($1::{1}[])) END", table,
      type);
  st.snapshot_partials =
      fmt::format("SELECT k, s FROM {0} WHERE k = ANY($1::{1}[]) OR ($2::boolean AND k IS NULL)", table, type);
  return st;
}

namespace {

template <class Measure>
[[nodiscard]] Measure ParseMeasure(const pg::Field& f, ShardId shard, const TopKKey& key) {
  const std::string_view text(f.c_str(), f.size());
  std::optional<Measure> value;
  if (!f.is_null()) value = TopKMeasureTraits<Measure>::FromText(text);
  if (!value) {
    throw UnmergeableQuery(
        fmt::format("top-k by sum: shard {} returned the sum '{}' for key {}, which the measure type cannot hold "
                    "exactly; rank numeric measures (or integer sums beyond 64 bits) with TopKBySum<Decimal>",
                    shard, f.is_null() ? std::string_view("NULL") : text, TopKKeyToString(key)));
  }
  return *std::move(value);
}

[[nodiscard]] TopKKey ParseKey(const pg::Field& f, TopKKeyType type, ShardId shard) {
  if (f.is_null()) return std::monostate{};
  if (type == TopKKeyType::kText) return std::string(f.c_str(), f.size());
  std::int64_t value = 0;
  const char* begin = f.c_str();
  const char* end = begin + f.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || ptr != end) {
    throw ShardQueryError(
        shard, fmt::format("top-k: shard {} returned the key '{}', not a bigint", shard, std::string(begin, f.size())));
  }
  return value;
}

[[nodiscard]] bool HasNull(const std::vector<TopKKey>& keys) {
  return std::any_of(keys.begin(), keys.end(),
                     [](const TopKKey& k) { return std::holds_alternative<std::monostate>(k); });
}

}  // namespace

template <class Measure>
BasicSqlTopKSource<Measure>::BasicSqlTopKSource(ScatterGather& scatter, TopKQuery query, ScatterOptions options)
    : scatter_(scatter),
      query_(std::move(query)),
      options_(std::move(options)),
      statements_(BuildTopKStatements(query_, std::is_same_v<Measure, std::int64_t>)),
      shard_count_(scatter.Resolver().ShardCount()) {}

template <class Measure>
BasicSqlTopKSource<Measure>::~BasicSqlTopKSource() {
  EndSession();
}

template <class Measure>
ScatterSession& BasicSqlTopKSource<Measure>::Session(bool non_negative) {
  if (!session_) {
    SessionOptions o;
    o.deadline = options_.deadline;
    o.label = query_.label;
    o.setup = {non_negative ? statements_.snapshot_setup_non_negative : statements_.snapshot_setup};
    o.directory_buckets = options_.directory_buckets;
    session_ = std::make_shared<ScatterSession>(scatter_, std::move(o));
    session_open_ = session_->OpenTime();
  }
  return *session_;
}

template <class Measure>
void BasicSqlTopKSource<Measure>::EndSession() noexcept {
  if (session_) session_->Finish();
  session_.reset();
  in_session_ = false;
}

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

namespace {

// "5:12,6:3" -> {(5, 12), (6, 3)}.
std::vector<std::pair<int, std::int64_t>> ParseHistogram(const pg::Field& f) {
  std::vector<std::pair<int, std::int64_t>> out;
  const std::string hist = f.is_null() ? std::string() : f.c_str();
  std::size_t pos = 0;
  while (pos < hist.size()) {
    const auto comma = std::min(hist.find(',', pos), hist.size());
    const auto colon = hist.find(':', pos);
    if (colon == std::string::npos || colon > comma) break;
    out.emplace_back(std::stoi(hist.substr(pos, colon - pos)), std::stoll(hist.substr(colon + 1, comma - colon - 1)));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::LocalTopK(std::size_t k, bool want_min_partial) {
  EndSession();  // a new phase 1 starts a new snapshot
  const bool with_stats = want_statistics_;
  const std::string read =
      fmt::format(fmt::runtime(with_stats ? statements_.snapshot_top_k_stats : statements_.snapshot_top_k), k);
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (int s = 0; s < shard_count_; ++s) {
    statements.emplace_back(ShardId{s}, ScatterGather::Statement{statements_.snapshot_fill, query_.params});
  }
  // One round trip: the aggregation into the table, then (the statistics
  // row and) the top k from it.
  ScatterResult result;
  try {
    result = Session(want_min_partial).RunPerShardThen(statements, {read});
  } catch (const ScatterError& e) {
    for (const auto& f : e.failures()) {
      if (f.sqlstate == "23514" && want_min_partial) {
        EndSession();
        throw UnmergeableQuery(fmt::format(
            "top-k by sum: shard {} has a negative partial sum ({}); TPUT's bounds hold only for non-negative "
            "measures. Rank a non-negative measure, or use TopKMethod::kAllPartials, which is exact for any sign",
            f.shard, f.cause));
      }
    }
    if constexpr (std::is_same_v<Measure, std::int64_t>) {
      for (const auto& f : e.failures()) {
        if (f.sqlstate == "22P02" || f.sqlstate == "22003") {
          EndSession();
          throw UnmergeableQuery(fmt::format(
              "top-k by sum: shard {} has a partial sum that a 64-bit integer cannot hold exactly ({}); rank "
              "numeric measures (or integer sums beyond 64 bits) with TopKBySum<Decimal>",
              f.shard, f.cause));
        }
      }
    }
    throw;
  }
  TopKReply<Measure> reply;
  const auto shards = static_cast<std::size_t>(shard_count_);
  reply.shards.resize(shards);
  reply.min_partial.resize(shards);
  reply.groups.assign(shards, 0);
  reply.histogram.resize(shards);
  reply.bytes = result.TotalBytes();
  reply.shards_asked = static_cast<int>(result.shards.size());
  for (const auto& shard : result.shards) {
    const int index = ToInt(shard.shard);
    if (index < 0 || index >= shard_count_) throw UnknownShard(shard.shard, shard_count_);
    const auto i = static_cast<std::size_t>(index);
    auto& out = reply.shards[i];
    pg::Rows::size_type first_row = 0;
    if (with_stats) {
      if (shard.rows.empty() || shard.rows[0][3].is_null()) {
        throw ShardQueryError(shard.shard,
                              fmt::format("top-k: shard {} did not send its statistics row first", shard.shard));
      }
      const auto stats = shard.rows[0];
      reply.groups[i] = stats[3].as<std::int64_t>();
      if (reply.groups[i] > 0) {
        reply.min_partial[i] = ParseMeasure<Measure>(stats[2], shard.shard, TopKKey{std::monostate{}});
      }
      reply.histogram[i] = ParseHistogram(stats[4]);
      first_row = 1;
    }
    out.reserve(shard.rows.size() - first_row);
    for (pg::Rows::size_type r = first_row; r < shard.rows.size(); ++r) {
      const auto row = shard.rows[r];
      auto& entry = out.emplace_back();
      entry.key = ParseKey(row[0], query_.key_type, shard.shard);
      entry.value = ParseMeasure<Measure>(row[1], shard.shard, entry.key);
    }
    if (!with_stats && !out.empty()) {
      // The table refused negative partials (want_min_partial): none here.
      reply.min_partial[i] = Measure{};
    }
  }
  in_session_ = true;
  if (!with_stats) {
    reply.groups.clear();
    reply.histogram.clear();
  }
  if (!want_min_partial) reply.min_partial.clear();
  return reply;
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::AtLeast(const TopKThreshold<Measure>& threshold,
                                                        const std::vector<std::vector<TopKKey>>& exclude) {
  static const std::vector<TopKKey> kNone;
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (int s = 0; s < shard_count_; ++s) {
    const auto& ex = static_cast<std::size_t>(s) < exclude.size() ? exclude[static_cast<std::size_t>(s)] : kNone;
    // In the session: from its table; else (no phase 1 before) a plain
    // scatter over the shards' current data.
    SqlParams params = in_session_ ? SqlParams{} : query_.params;
    params.emplace_back(std::to_string(threshold.shards));
    params.emplace_back(TopKMeasureTraits<Measure>::ToString(threshold.tau1));
    params.emplace_back(TopKKeysArrayLiteral(ex));
    params.emplace_back(HasNull(ex) ? "true" : "false");
    statements.emplace_back(ShardId{s},
                            ScatterGather::Statement{in_session_ ? statements_.snapshot_at_least : statements_.at_least,
                                                     std::move(params)});
  }
  if (!in_session_) return Decode(scatter_.RunPerShard(statements, PhaseOptions("threshold")), false);
  return Decode(Session().RunPerShard(statements), false);
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
    EndSession();
    TopKReply<Measure> none;
    none.shards.resize(static_cast<std::size_t>(shard_count_));
    return none;
  }
  if (!in_session_) {
    return Decode(scatter_.RunPerShard(statements, PhaseOptions("exact partials")), false);
  }
  // The candidates' partials from the session's table (same snapshot,
  // aggregated once).
  std::vector<std::pair<ShardId, ScatterGather::Statement>> lookups;
  for (auto& [shard, statement] : statements) {
    const auto& ks = keys[static_cast<std::size_t>(ToInt(shard))];
    SqlParams params;
    params.emplace_back(TopKKeysArrayLiteral(ks));
    params.emplace_back(HasNull(ks) ? "true" : "false");
    lookups.emplace_back(shard, ScatterGather::Statement{statements_.snapshot_partials, std::move(params)});
  }
  TopKReply<Measure> reply = Decode(Session().RunPerShard(lookups), false);
  EndSession();  // phase 3 is the last
  return reply;
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::RestOfPartials(const std::vector<std::vector<TopKKey>>& exclude) {
  if (!in_session_) return TopKShardSource<Measure>::RestOfPartials(exclude);
  static const std::vector<TopKKey> kNone;
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (int s = 0; s < shard_count_; ++s) {
    const auto& ex = static_cast<std::size_t>(s) < exclude.size() ? exclude[static_cast<std::size_t>(s)] : kNone;
    SqlParams params;
    params.emplace_back(TopKKeysArrayLiteral(ex));
    params.emplace_back(HasNull(ex) ? "true" : "false");
    statements.emplace_back(ShardId{s}, ScatterGather::Statement{statements_.snapshot_rest, std::move(params)});
  }
  TopKReply<Measure> reply = Decode(Session().RunPerShard(statements), false);
  EndSession();
  return reply;
}

template <class Measure>
TopKReply<Measure> BasicSqlTopKSource<Measure>::AllPartials() {
  return Decode(scatter_.Run(statements_.all_partials, query_.params, PhaseOptions("all partials")), false);
}

namespace {

// What kAuto saw per query, for the next run of it. Bounded: when full, it
// starts over (the next run of each query measures it again).
class ObservedByQuery {
 public:
  static ObservedByQuery& Instance() {
    static ObservedByQuery instance;
    return instance;
  }
  std::optional<TopKObserved> Get(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto it = by_query_.find(key);
    if (it == by_query_.end()) return std::nullopt;
    return it->second;
  }
  void Put(const std::string& key, const TopKObserved& observed) {
    std::lock_guard lock(mutex_);
    if (by_query_.size() >= kCapacity && !by_query_.contains(key)) by_query_.clear();
    by_query_[key] = observed;
  }

 private:
  static constexpr std::size_t kCapacity = 256;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, TopKObserved> by_query_;
};

}  // namespace

template <class Measure>
std::vector<ShardLink> BasicSqlTopKSource<Measure>::Links() const {
  std::vector<ShardLink> links;
  links.reserve(static_cast<std::size_t>(shard_count_));
  for (int s = 0; s < shard_count_; ++s) links.push_back(scatter_.Link(ShardId{s}));
  return links;
}

template <class Measure>
std::optional<TopKObserved> BasicSqlTopKSource<Measure>::Recall() const {
  return ObservedByQuery::Instance().Get(fmt::format("{}\n{}", shard_count_, statements_.all_partials));
}

template <class Measure>
void BasicSqlTopKSource<Measure>::Remember(const TopKObserved& observed) {
  ObservedByQuery::Instance().Put(fmt::format("{}\n{}", shard_count_, statements_.all_partials), observed);
}

template class BasicSqlTopKSource<std::int64_t>;
template class BasicSqlTopKSource<Decimal>;

}  // namespace shardkit
