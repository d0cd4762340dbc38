// Exact distributed selection (percentile.hpp): the rounds, the ranks and
// the answer. The SQL is in percentile_statements.cpp.
#include "shardkit/queries/percentile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "queries/percentile_statements.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter_merge.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

std::int64_t PercentileDiscRow(double fraction, std::int64_t n) {
  // orderedsetaggs.c: rownum = (int64) ceil(percentile * number_of_rows), at least 1.
  const auto row = static_cast<std::int64_t>(std::ceil(fraction * static_cast<double>(n)));
  return std::max<std::int64_t>(1, row);
}

PercentileContRows PercentileContRowsFor(double fraction, std::int64_t n) {
  // orderedsetaggs.c's percentile_cont_final_common, 1-based.
  PercentileContRows rows;
  const double at = fraction * static_cast<double>(n - 1);
  const auto first = static_cast<std::int64_t>(std::floor(at));
  rows.first = 1 + first;
  rows.second = 1 + static_cast<std::int64_t>(std::ceil(at));
  rows.proportion = at - static_cast<double>(first);
  return rows;
}

double PercentileInterpolate(double lo, double hi, double proportion) {
  return lo + (proportion * (hi - lo));
}

namespace {

using Clock = std::chrono::steady_clock;
using detail::PercentileDomain;
using detail::PercentileStatements;

constexpr TypeOid kInt2 = 21, kInt4 = 23, kInt8 = 20, kNumeric = 1700, kFloat4 = 700, kFloat8 = 701, kDate = 1082,
                  kTimestamp = 1114, kTimestampTz = 1184, kText = 25;

bool IsNumber(TypeOid t) {
  return t == kInt2 || t == kInt4 || t == kInt8 || t == kNumeric || t == kFloat4 || t == kFloat8;
}
bool IsRankable(TypeOid t) {
  return IsNumber(t) || t == kDate || t == kTimestamp || t == kTimestampTz;
}

// A value as percentile_cont reads it: the column cast to double
// precision. numeric's cast parses its text (numeric_float8 calls
// float8in), integers convert exactly or to the nearest double as strtod
// does, and real widens its float.
double AsDouble(const std::string& text, TypeOid type) {
  const char* end = text.data() + text.size();
  if (type == kFloat4) {
    float f = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), end, f);
    if (ec == std::errc{} && ptr == end) return static_cast<double>(f);
  } else {
    double d = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), end, d);
    if (ec == std::errc{} && ptr == end) return d;
  }
  throw Error(fmt::format("percentile_cont: a shard returned '{}', which is not a number", text));
}

struct Group {
  std::vector<std::optional<std::string>> key_texts;  // as the first shard printed them
  std::vector<std::optional<std::string>> gk;         // per shard: its name of the group
  std::int64_t rows = 0;
  std::vector<std::int64_t> n;                          // per domain
  std::vector<std::vector<std::string>> samples;        // per domain, round 1
  std::vector<std::map<std::int64_t, std::string>> at;  // per domain: rank -> value
  std::vector<std::optional<std::int64_t>> distinct;    // per domain: the count
};

// A stretch of one group's values in one domain, strictly between two
// values whose global ranks are known, holding ranks still unpinned.
struct Range {
  std::size_t group = 0;
  std::size_t domain = 0;
  std::optional<std::string> lo, hi;
  std::int64_t below = 0;   // values <= lo, over all shards
  std::int64_t inside = 0;  // values strictly between lo and hi
  std::vector<std::int64_t> targets;
  std::vector<std::string> candidates;
  bool all = false;
};

class Selection {
 public:
  Selection(ScatterGather& scatter, const PercentileQuery& query, const ScatterOptions& options)
      : scatter_(scatter), query_(query), options_(options), shards_(scatter.Resolver().ShardCount()) {}

  PercentileResult Run();

 private:
  ScatterResult Round(const std::string& name, const std::vector<std::pair<ShardId, ScatterGather::Statement>>& st,
                      const std::vector<std::string>& then = {});
  void ReadFirstRound(const ScatterResult& result);
  std::vector<Range> FirstRanges();
  bool ResolveWhole(Group& g, std::size_t d, const std::vector<std::int64_t>& targets);
  std::vector<Range> Count(std::vector<Range> ranges);
  void Sample(std::vector<Range>& ranges);
  void FetchDistinct();
  PercentileResult Answer();

  ScatterGather& scatter_;
  const PercentileQuery& query_;
  const ScatterOptions& options_;
  int shards_;
  std::vector<PercentileDomain> domains_;
  std::vector<std::size_t> column_domain_;  // per query column
  std::unique_ptr<PercentileStatements> statements_;
  std::unique_ptr<ScatterSession> session_;
  std::vector<TypeOid> key_types_;
  bool keys_typed_ = false;  // from the first shard's result
  std::vector<Group> groups_;
  std::map<std::vector<Value>, std::size_t, detail::GroupKeyLess> group_index_;
  PercentileResult result_;
};

ScatterResult Selection::Round(const std::string& name,
                               const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements,
                               const std::vector<std::string>& then) {
  if (result_.rounds >= query_.max_rounds) {
    throw Error(
        fmt::format("exact percentiles: no answer after {} rounds (max_rounds); nothing was returned", result_.rounds));
  }
  const auto start = Clock::now();
  ScatterResult r = then.empty() ? session_->RunPerShard(statements) : session_->RunPerShardThen(statements, then);
  ++result_.rounds;
  PercentileRound stats;
  stats.name = fmt::format("{} {}", result_.rounds, name);
  stats.rows = r.TotalRows();
  stats.bytes = r.TotalBytes();
  stats.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  result_.rows_shipped += stats.rows;
  result_.bytes_shipped += stats.bytes;
  result_.round_stats.push_back(std::move(stats));
  return r;
}

std::optional<std::string> FieldText(const pg::Field& f) {
  if (f.is_null()) return std::nullopt;
  return std::string(f.c_str(), f.size());
}

void Selection::ReadFirstRound(const ScatterResult& result) {
  const detail::FirstRoundColumns col{static_cast<int>(query_.group_by.size())};
  const std::size_t domains = domains_.size();
  for (const ShardResult& shard : result.shards) {
    if (shard.session) CheckMergeAssumptions(*shard.session, shard.shard);
    const pg::Rows& rows = shard.rows;
    if (!keys_typed_) {
      keys_typed_ = true;
      for (std::size_t k = 0; k < query_.group_by.size(); ++k) {
        key_types_.push_back(static_cast<TypeOid>(rows.column_type(static_cast<pqxx::row_size_type>(1 + k))));
        const PgTypeInfo info = TypeInfoFor(key_types_.back());
        if (!info.groupable) {
          throw UnmergeableQuery(fmt::format(
              "GROUP BY {}: its type {} has equal values that print differently, so groups cannot be matched "
              "across shards exactly; {}",
              query_.group_by[k].expression, info.name, GroupingAdvice(key_types_.back())));
        }
      }
      group_index_ = std::map<std::vector<Value>, std::size_t, detail::GroupKeyLess>(detail::GroupKeyLess{key_types_});
    }
    const auto s = static_cast<std::size_t>(ToInt(shard.shard));
    std::vector<std::vector<bool>> counted;  // per group: rows, then each domain's n, taken once per shard
    for (const auto& row : rows) {
      const auto d = static_cast<std::size_t>(row[col.Domain()].as<int>());
      if (row[col.Rows()].is_null()) {  // the meta row: the domain's type
        const auto type = static_cast<TypeOid>(row[col.Type()].as<unsigned>());
        if (domains_[d].type != 0 && domains_[d].type != type) {
          throw UnmergeableQuery(fmt::format("{}: the shards' columns have different types ({} and {})",
                                             domains_[d].expression, TypeInfoFor(domains_[d].type).name,
                                             TypeInfoFor(type).name));
        }
        domains_[d].type = type;
        continue;
      }
      std::vector<Value> keys;
      std::vector<std::optional<std::string>> texts;
      for (std::size_t k = 0; k < key_types_.size(); ++k) {
        texts.push_back(FieldText(row[col.Key(k)]));
        keys.push_back(detail::ReadResultValue(texts.back(), key_types_[k]));
      }
      auto [it, inserted] = group_index_.try_emplace(std::move(keys), groups_.size());
      if (inserted) {
        Group& g = groups_.emplace_back();
        g.key_texts = std::move(texts);
        g.gk.resize(static_cast<std::size_t>(shards_));
        g.n.assign(domains, 0);
        g.samples.resize(domains);
        g.at.resize(domains);
        g.distinct.resize(domains);
      }
      const std::size_t gi = it->second;
      Group& g = groups_[gi];
      if (counted.size() <= gi) counted.resize(gi + 1);
      if (counted[gi].empty()) {
        counted[gi].assign(domains + 1, false);
        g.gk[s] = FieldText(row[0]);
        g.rows += row[col.Rows()].as<std::int64_t>();
        counted[gi][0] = true;
      }
      if (!counted[gi][1 + d]) {
        g.n[d] += row[col.Count()].as<std::int64_t>();
        counted[gi][1 + d] = true;
      }
      if (!row[col.Sample()].is_null()) g.samples[d].emplace_back(row[col.Sample()].c_str());
    }
  }
  for (auto& g : groups_) result_.rows_all_values += g.rows;
}

// A group whose every value round 1 brought (each shard had at most
// samples_per_shard of them) needs no count: its values are ordered here,
// for the number types, whose order shardkit's values reproduce exactly
// (numeric by Decimal, NaN above every number, -0 = 0), and for dates and
// timestamps without 'infinity' (ComparisonForm orders BC years).
bool Selection::ResolveWhole(Group& g, std::size_t d, const std::vector<std::int64_t>& targets) {
  const TypeOid type = domains_[d].type;
  std::vector<std::string>& values = g.samples[d];
  if (static_cast<std::int64_t>(values.size()) != g.n[d]) return false;
  if (!IsNumber(type)) {
    if (type != kDate && type != kTimestamp) return false;
    if (std::any_of(values.begin(), values.end(), [](const std::string& v) { return v.ends_with("infinity"); })) {
      return false;
    }
  }
  std::vector<std::pair<Value, const std::string*>> sorted;
  sorted.reserve(values.size());
  for (const std::string& v : values) {
    sorted.emplace_back(ComparisonForm(detail::ReadResultValue(v, type), type), &v);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return CompareValues(a.first, b.first) < 0; });
  for (const std::int64_t t : targets) g.at[d][t] = *sorted[static_cast<std::size_t>(t - 1)].second;
  return true;
}

std::vector<Range> Selection::FirstRanges() {
  std::vector<Range> ranges;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      if (domains_[d].distinct || g.n[d] == 0) continue;
      Range r;
      r.group = gi;
      r.domain = d;
      r.inside = g.n[d];
      for (std::size_t c = 0; c < query_.columns.size(); ++c) {
        const OrderStatisticColumn& column = query_.columns[c];
        if (column_domain_[c] != d || !column.fraction) continue;
        if (column.kind == OrderStatistic::kPercentileDisc) {
          r.targets.push_back(PercentileDiscRow(*column.fraction, g.n[d]));
        } else {
          const PercentileContRows rows = PercentileContRowsFor(*column.fraction, g.n[d]);
          r.targets.push_back(rows.first);
          r.targets.push_back(rows.second);
        }
      }
      std::sort(r.targets.begin(), r.targets.end());
      r.targets.erase(std::unique(r.targets.begin(), r.targets.end()), r.targets.end());
      if (r.targets.empty()) continue;
      if (ResolveWhole(g, d, r.targets)) continue;
      r.candidates = std::move(g.samples[d]);
      ranges.push_back(std::move(r));
    }
  }
  return ranges;
}

// One count round over every range's candidates: ranks pinned on a
// candidate are answered; the others get the narrower range between the
// closest candidates below and above them.
std::vector<Range> Selection::Count(std::vector<Range> ranges) {
  std::vector<std::vector<PercentileStatements::RangeParam>> range_params(static_cast<std::size_t>(shards_));
  std::vector<PercentileStatements::CandidateParam> candidates;
  struct Tally {
    std::size_t range = 0;
    std::size_t index = 0;
    std::int64_t lt = 0;
    std::int64_t le = 0;
  };
  std::vector<Tally> tally;
  for (std::size_t ri = 0; ri < ranges.size(); ++ri) {
    Range& r = ranges[ri];
    std::sort(r.candidates.begin(), r.candidates.end());
    r.candidates.erase(std::unique(r.candidates.begin(), r.candidates.end()), r.candidates.end());
    for (std::size_t s = 0; s < range_params.size(); ++s) {
      range_params[s].push_back({r.domain, groups_[r.group].gk[s], static_cast<std::int64_t>(ri), r.lo, r.hi, false});
    }
    for (std::size_t c = 0; c < r.candidates.size(); ++c) {
      candidates.push_back(
          {r.domain, static_cast<std::int64_t>(ri), r.candidates[c], static_cast<std::int64_t>(tally.size())});
      tally.push_back({ri, c, static_cast<std::int64_t>(r.below), static_cast<std::int64_t>(r.below)});
    }
  }
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (const ShardId s : session_->Shards()) {
    auto [sql, params] = statements_->CountRound(range_params[static_cast<std::size_t>(ToInt(s))], candidates);
    statements.emplace_back(s, ScatterGather::Statement{std::move(sql), std::move(params)});
  }
  const ScatterResult result = Round("count", statements);
  for (const ShardResult& shard : result.shards) {
    for (const auto& row : shard.rows) {
      const auto id = row[0].as<std::int64_t>();
      if (id < 0 || static_cast<std::size_t>(id) >= tally.size()) {
        throw ShardQueryError(
            shard.shard, fmt::format("exact percentiles: shard {} counted an unknown candidate {}", shard.shard, id));
      }
      tally[static_cast<std::size_t>(id)].lt += row[1].as<std::int64_t>();
      tally[static_cast<std::size_t>(id)].le += row[2].as<std::int64_t>();
    }
  }
  std::vector<Range> next;
  std::size_t t = 0;
  for (std::size_t ri = 0; ri < ranges.size(); ++ri) {
    const Range& r = ranges[ri];
    const std::size_t first = t;
    while (t < tally.size() && tally[t].range == ri) ++t;
    for (const std::int64_t target : r.targets) {
      std::optional<std::size_t> hit, below, above;
      for (std::size_t i = first; i < t; ++i) {
        const Tally& c = tally[i];
        if (c.lt < target && target <= c.le) hit = i;
        if (c.le < target && (!below || c.le > tally[*below].le)) below = i;
        if (c.lt >= target && (!above || c.lt < tally[*above].lt)) above = i;
      }
      if (hit) {
        groups_[r.group].at[r.domain][target] = r.candidates[tally[*hit].index];
        continue;
      }
      if (r.all) {
        throw Error(
            fmt::format("exact percentiles: rank {} of {} was not among the values of its range; the shards' "
                        "data changed inside one snapshot?",
                        target, domains_[r.domain].expression));
      }
      Range n;
      n.group = r.group;
      n.domain = r.domain;
      n.lo = below ? std::optional(r.candidates[tally[*below].index]) : r.lo;
      n.hi = above ? std::optional(r.candidates[tally[*above].index]) : r.hi;
      n.below = below ? tally[*below].le : r.below;
      const std::int64_t up_to = above ? tally[*above].lt : r.below + r.inside;
      n.inside = up_to - n.below;
      // Neighbouring ranks share a range (percentile_cont's two rows).
      if (!next.empty() && next.back().group == n.group && next.back().domain == n.domain && next.back().lo == n.lo &&
          next.back().hi == n.hi) {
        next.back().targets.push_back(target);
        continue;
      }
      n.targets.push_back(target);
      n.all = n.inside <= query_.fetch_all_at_most;
      next.push_back(std::move(n));
    }
  }
  return next;
}

void Selection::Sample(std::vector<Range>& ranges) {
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  bool all = true;
  for (const ShardId s : session_->Shards()) {
    std::vector<PercentileStatements::RangeParam> params;
    for (std::size_t ri = 0; ri < ranges.size(); ++ri) {
      const Range& r = ranges[ri];
      params.push_back({r.domain, groups_[r.group].gk[static_cast<std::size_t>(ToInt(s))],
                        static_cast<std::int64_t>(ri), r.lo, r.hi, r.all});
      all = all && r.all;
    }
    auto [sql, p] = statements_->SampleRound(params);
    statements.emplace_back(s, ScatterGather::Statement{std::move(sql), std::move(p)});
  }
  const ScatterResult result = Round(all ? "values in range" : "sample in range", statements);
  for (Range& r : ranges) r.candidates.clear();
  for (const ShardResult& shard : result.shards) {
    for (const auto& row : shard.rows) {
      const auto id = row[0].as<std::int64_t>();
      if (id < 0 || static_cast<std::size_t>(id) >= ranges.size()) {
        throw ShardQueryError(shard.shard,
                              fmt::format("exact percentiles: shard {} sampled an unknown range {}", shard.shard, id));
      }
      ranges[static_cast<std::size_t>(id)].candidates.emplace_back(row[1].c_str());
    }
  }
  for (const Range& r : ranges) {
    if (r.candidates.empty()) {
      throw Error(
          fmt::format("exact percentiles: no shard has a value of {} inside a range counted to hold {}; the "
                      "shards' data changed inside one snapshot?",
                      domains_[r.domain].expression, r.inside));
    }
  }
}

void Selection::FetchDistinct() {
  std::int64_t total = 0;
  for (const Group& g : groups_) {
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      if (domains_[d].distinct) total += g.n[d];
    }
  }
  if (total > query_.max_distinct) {
    throw UnmergeableQuery(fmt::format(
        "count(DISTINCT ...): the shards hold {} distinct values together (summed per shard and group), above the "
        "limit of {} (max_distinct) that bounds the client's memory; raise the limit, narrow the WHERE, or ask for "
        "approx_count_distinct (HyperLogLog, with its error bound)",
        total, query_.max_distinct));
  }
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    if (!domains_[d].distinct || domains_[d].type == 0) continue;
    if (!TypeInfoFor(domains_[d].type).groupable) {
      throw UnmergeableQuery(fmt::format(
          "count(DISTINCT {}): its type {} has equal values that print differently, so the shards' distinct values "
          "cannot be merged exactly; {}",
          domains_[d].expression, TypeInfoFor(domains_[d].type).name, GroupingAdvice(domains_[d].type)));
    }
  }
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (const ShardId s : session_->Shards()) {
    statements.emplace_back(s, ScatterGather::Statement{statements_->DistinctValues(), {}});
  }
  const ScatterResult result = Round("distinct values", statements);
  // Per shard, its name of each group.
  std::vector<std::map<std::string, std::size_t>> by_gk(static_cast<std::size_t>(shards_));
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    for (std::size_t s = 0; s < by_gk.size(); ++s) {
      if (groups_[gi].gk[s]) by_gk[s][*groups_[gi].gk[s]] = gi;
    }
  }
  std::map<std::pair<std::size_t, std::size_t>, std::set<Value, detail::TypedValueLess>> sets;
  for (const ShardResult& shard : result.shards) {
    const auto& names = by_gk[static_cast<std::size_t>(ToInt(shard.shard))];
    for (const auto& row : shard.rows) {
      const auto d = static_cast<std::size_t>(row[0].as<int>());
      const auto it = names.find(row[1].c_str());
      if (it == names.end()) throw ShardQueryError(shard.shard, "count(DISTINCT): a group that round 1 did not see");
      auto [set, inserted] = sets.try_emplace({it->second, d}, detail::TypedValueLess{domains_[d].type});
      set->second.insert(detail::ReadResultValue(std::optional<std::string_view>(row[2].c_str()), domains_[d].type));
    }
  }
  for (Group& g : groups_) {
    for (std::size_t d = 0; d < domains_.size(); ++d) {
      if (domains_[d].distinct) g.distinct[d] = 0;
    }
  }
  for (const auto& [where, set] : sets)
    groups_[where.first].distinct[where.second] = static_cast<std::int64_t>(set.size());
}

PercentileResult Selection::Answer() {
  std::vector<std::string> names;
  std::vector<TypeOid> types;
  for (std::size_t k = 0; k < query_.group_by.size(); ++k) {
    names.push_back(query_.group_by[k].name);
    types.push_back(keys_typed_ ? key_types_[k] : kText);
  }
  for (std::size_t c = 0; c < query_.columns.size(); ++c) {
    const OrderStatisticColumn& column = query_.columns[c];
    names.push_back(column.name);
    TypeOid type = kInt8;
    if (column.kind == OrderStatistic::kPercentileCont) type = kFloat8;
    if (column.kind == OrderStatistic::kPercentileDisc) type = domains_[column_domain_[c]].type;
    types.push_back(type);
  }
  std::vector<std::vector<Value>> rows;
  const auto fill = [&](const Group* g) {
    auto& out = rows.emplace_back();
    for (std::size_t k = 0; k < query_.group_by.size(); ++k) {
      out.push_back(detail::ReadResultValue(g->key_texts[k], types[k]));
    }
    for (std::size_t c = 0; c < query_.columns.size(); ++c) {
      const OrderStatisticColumn& column = query_.columns[c];
      const std::size_t d = column_domain_[c];
      if (column.kind == OrderStatistic::kCountDistinct) {
        out.push_back(Value::Int(g != nullptr ? g->distinct[d].value_or(0) : 0));
        continue;
      }
      if (g == nullptr || !column.fraction || g->n[d] == 0) {
        out.emplace_back();
        continue;
      }
      const auto& at = g->at[d];
      if (column.kind == OrderStatistic::kPercentileDisc) {
        out.push_back(detail::ReadResultValue(at.at(PercentileDiscRow(*column.fraction, g->n[d])), domains_[d].type));
        continue;
      }
      const PercentileContRows r = PercentileContRowsFor(*column.fraction, g->n[d]);
      const double lo = AsDouble(at.at(r.first), domains_[d].type);
      out.push_back(Value::Double(
          r.second > r.first ? PercentileInterpolate(lo, AsDouble(at.at(r.second), domains_[d].type), r.proportion)
                             : lo));
    }
  };
  for (const Group& g : groups_) fill(&g);
  // No group at all: one row without keys, as an aggregate over no rows gives.
  if (groups_.empty() && query_.group_by.empty()) fill(nullptr);
  // Without ORDER BY: in group-key order, as the merge returns groups.
  std::vector<SortKey> order = query_.order_by;
  if (order.empty()) {
    for (std::size_t k = 0; k < query_.group_by.size(); ++k) {
      if (TypeInfoFor(types[k]).orderable) order.push_back({query_.group_by[k].name});
    }
  }
  static_cast<ResultSet&>(result_) =
      detail::OrderedResult(std::move(names), types, std::move(rows), order, query_.limit, query_.offset);
  result_.groups = groups_.size();
  return std::move(result_);
}

PercentileResult Selection::Run() {
  if (query_.columns.empty()) {
    throw UnmergeableQuery("exact percentiles: no column asked for (a percentile or count(DISTINCT ...))");
  }
  if (options_.allow_partial) {
    throw UnmergeableQuery(
        "exact percentiles: allow_partial is refused, a missing shard's values would move every rank");
  }
  if (query_.samples_per_shard < 2) throw UnmergeableQuery("exact percentiles: samples_per_shard must be at least 2");
  for (const OrderStatisticColumn& column : query_.columns) {
    if (column.kind != OrderStatistic::kCountDistinct && column.fraction &&
        (std::isnan(*column.fraction) || *column.fraction < 0 || *column.fraction > 1)) {
      throw Error(fmt::format("percentile value {:g} is not between 0 and 1", *column.fraction));
    }
    // Percentiles over one expression share a column; each COUNT(DISTINCT) has its own.
    const bool distinct = column.kind == OrderStatistic::kCountDistinct;
    std::size_t d = 0;
    while (d < domains_.size() && (domains_[d].distinct != distinct || domains_[d].expression != column.value)) ++d;
    if (d == domains_.size()) domains_.push_back({column.value, distinct, 0, {}});
    column_domain_.push_back(d);
  }
  statements_ = std::make_unique<PercentileStatements>(query_, domains_);

  SessionOptions session;
  session.deadline = options_.deadline;
  session.shards = options_.shards;
  session.label = query_.label.empty() ? options_.label : query_.label;
  session.setup = statements_->Setup();
  session.directory_buckets = options_.directory_buckets;
  session_ = std::make_unique<ScatterSession>(scatter_, std::move(session));

  std::vector<std::pair<ShardId, ScatterGather::Statement>> fill;
  for (const ShardId s : session_->Shards())
    fill.emplace_back(s, ScatterGather::Statement{statements_->Fill(), query_.params});
  ReadFirstRound(Round("fill and sample", fill, {statements_->FirstRound()}));
  for (std::size_t c = 0; c < query_.columns.size(); ++c) {
    const OrderStatisticColumn& column = query_.columns[c];
    const PercentileDomain& domain = domains_[column_domain_[c]];
    const PgTypeInfo info = TypeInfoFor(domain.type);
    if (column.kind == OrderStatistic::kCountDistinct) continue;
    const char* function = column.kind == OrderStatistic::kPercentileCont ? "percentile_cont" : "percentile_disc";
    if (column.kind == OrderStatistic::kPercentileCont ? !IsNumber(domain.type) : !IsRankable(domain.type)) {
      throw UnmergeableQuery(fmt::format(
          "{} over {} ({}): answered exactly over smallint, integer, bigint, numeric, real and double precision{}; "
          "cast the value to one of them, or pin customer_id so that one shard answers",
          function, domain.expression, info.name,
          column.kind == OrderStatistic::kPercentileCont ? "" : ", date, timestamp and timestamptz"));
    }
  }
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    if (!domains_[d].distinct) domains_[d].type_name = TypeInfoFor(domains_[d].type).name;
  }
  statements_->MutableDomains() = domains_;

  std::vector<Range> ranges = FirstRanges();
  while (!ranges.empty()) {
    ranges = Count(std::move(ranges));
    if (!ranges.empty()) Sample(ranges);
  }
  if (std::any_of(domains_.begin(), domains_.end(), [](const PercentileDomain& d) { return d.distinct; })) {
    FetchDistinct();
  }
  session_->Finish();
  return Answer();
}

}  // namespace

PercentileResult ExactPercentiles(ScatterGather& scatter, const PercentileQuery& query, const ScatterOptions& options) {
  return Selection(scatter, query, options).Run();
}

}  // namespace shardkit
