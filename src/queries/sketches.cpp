// Approximate COUNT(DISTINCT) and percentiles from HyperLogLog and t-digest
// sketches (sketches.hpp): one sketch per shard and group, merged and read
// on one shard.
#include "shardkit/queries/sketches.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <utility>

#include "pg/pg_array.hpp"
#include "queries/percentile_statements.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter_merge.hpp"

namespace shardkit {
namespace {

constexpr TypeOid kFloat8 = 701, kInt8 = 20, kText = 25;

enum class Sketch { kHll, kTDigest };

ApproximateResult Run(ScatterGather& scatter, const SketchQuery& q, const ScatterOptions& options, Sketch sketch) {
  if (q.value.empty() || q.from.empty()) throw UnmergeableQuery("approximate: from and value must be given");
  if (sketch == Sketch::kHll && (q.hll_log2m < 4 || q.hll_log2m > 17)) {
    throw UnmergeableQuery(fmt::format("approx_count_distinct: log2m {} is outside 4..17", q.hll_log2m));
  }
  if (sketch == Sketch::kTDigest && (q.tdigest_compression < 10 || q.tdigest_compression > 10000)) {
    throw UnmergeableQuery(
        fmt::format("approx_percentile: compression {} is outside 10..10000", q.tdigest_compression));
  }
  if (sketch == Sketch::kTDigest && (std::isnan(q.fraction) || q.fraction < 0 || q.fraction > 1)) {
    throw Error(fmt::format("percentile value {:g} is not between 0 and 1", q.fraction));
  }
  ApproximateResult result;
  std::string keys;
  std::string group_by;
  for (std::size_t k = 0; k < q.group_by.size(); ++k) {
    keys += fmt::format("({}) AS k{}, ", q.group_by[k].expression, k);
    group_by += fmt::format("{}{}", k == 0 ? " GROUP BY " : ", ", k + 1);
  }
  const std::string where = q.where.empty() ? std::string() : fmt::format(" WHERE ({})", q.where);
  const std::string aggregate = sketch == Sketch::kHll
                                    ? fmt::format("hll_add_agg(hll_hash_any({}), {}) FILTER (WHERE ({}) IS NOT NULL)",
                                                  q.value, q.hll_log2m, q.value)
                                    : fmt::format("tdigest(({})::float8, {}) FILTER (WHERE ({}) IS NOT NULL)", q.value,
                                                  q.tdigest_compression, q.value);
  const std::string sql = fmt::format("SELECT {}({})::text AS s FROM {}{}{}", keys, aggregate, q.from, where, group_by);
  ScatterOptions o = options;
  if (o.label.empty()) o.label = q.label;
  const ScatterResult sketches = scatter.Run(sql, q.params, o);
  ++result.rounds;
  result.rows_shipped += sketches.TotalRows();
  result.bytes_shipped += sketches.TotalBytes();

  // Groups matched by their keys' own equality; each gets the shards' sketches.
  std::vector<TypeOid> key_types;
  bool keys_typed = false;
  std::vector<std::vector<std::optional<std::string>>> key_texts;
  std::map<std::vector<Value>, std::size_t, detail::GroupKeyLess> index{detail::GroupKeyLess{}};
  std::vector<std::optional<std::string>> ids;
  std::vector<std::optional<std::string>> texts;
  for (const ShardResult& shard : sketches.shards) {
    if (shard.session) CheckMergeAssumptions(*shard.session, shard.shard);
    if (!keys_typed) {
      keys_typed = true;
      for (std::size_t k = 0; k < q.group_by.size(); ++k) {
        key_types.push_back(static_cast<TypeOid>(shard.rows.column_type(static_cast<pqxx::row_size_type>(k))));
        if (!TypeInfoFor(key_types.back()).groupable) {
          throw UnmergeableQuery(fmt::format("GROUP BY {}: its type {} cannot be matched across shards; {}",
                                             q.group_by[k].expression, TypeInfoFor(key_types.back()).name,
                                             GroupingAdvice(key_types.back())));
        }
      }
      index = std::map<std::vector<Value>, std::size_t, detail::GroupKeyLess>(detail::GroupKeyLess{key_types});
    }
    for (const auto& row : shard.rows) {
      std::vector<Value> key;
      std::vector<std::optional<std::string>> text;
      for (std::size_t k = 0; k < key_types.size(); ++k) {
        const auto field = row[static_cast<int>(k)];
        text.push_back(field.is_null() ? std::nullopt : std::optional<std::string>(field.c_str()));
        key.push_back(detail::ReadResultValue(text.back(), key_types[k]));
      }
      const auto [it, inserted] = index.try_emplace(std::move(key), key_texts.size());
      if (inserted) key_texts.push_back(std::move(text));
      const auto s = row[static_cast<int>(key_types.size())];
      if (s.is_null()) continue;  // a group whose values are all NULL
      ids.emplace_back(std::to_string(it->second));
      texts.emplace_back(s.c_str());
    }
  }
  // No group at all and no keys: one row over no rows.
  if (key_texts.empty() && q.group_by.empty()) key_texts.emplace_back();

  // The merge and the estimate, on one shard.
  const std::string merge =
      sketch == Sketch::kHll
          ? "SELECT i, round(hll_cardinality(hll_union_agg(s::hll)))::bigint::text FROM unnest($1::bigint[], "
            "$2::text[]) AS u(i, s) GROUP BY i"
          : "SELECT i, tdigest_percentile(s::tdigest, $3::float8)::text FROM unnest($1::bigint[], $2::text[]) AS u(i, "
            "s) GROUP BY i";
  SqlParams params{detail::PgTextArray(ids), detail::PgTextArray(texts)};
  if (sketch == Sketch::kTDigest) params.emplace_back(fmt::format("{:.17g}", q.fraction));
  std::vector<std::optional<std::string>> estimates(key_texts.size());
  if (!ids.empty()) {
    ScatterOptions one = o;
    one.shards = std::vector<ShardId>{sketches.shards.front().shard};
    one.directory_buckets = false;  // reads no table
    const ScatterResult merged = scatter.Run(merge, params, one);
    ++result.rounds;
    result.rows_shipped += merged.TotalRows();
    result.bytes_shipped += merged.TotalBytes();
    for (const ShardResult& shard : merged.shards) {
      for (const auto& row : shard.rows) {
        estimates.at(static_cast<std::size_t>(row[0].as<std::int64_t>())) =
            row[1].is_null() ? std::nullopt : std::optional<std::string>(row[1].c_str());
      }
    }
  }
  std::vector<std::string> names;
  std::vector<TypeOid> types;
  std::vector<SortKey> order;
  for (std::size_t k = 0; k < q.group_by.size(); ++k) {
    names.push_back(q.group_by[k].name);
    types.push_back(keys_typed ? key_types[k] : kText);
    if (TypeInfoFor(types.back()).orderable) order.push_back({q.group_by[k].name});
  }
  names.push_back(q.name);
  types.push_back(sketch == Sketch::kHll ? kInt8 : kFloat8);
  std::vector<std::vector<Value>> rows;
  for (std::size_t g = 0; g < key_texts.size(); ++g) {
    auto& out = rows.emplace_back();
    for (std::size_t k = 0; k < q.group_by.size(); ++k)
      out.push_back(detail::ReadResultValue(key_texts[g][k], types[k]));
    const std::optional<std::string> estimate =
        sketch == Sketch::kHll && !estimates[g] ? std::optional<std::string>("0") : estimates[g];
    out.push_back(ReadValue(estimate, types.back()));
  }
  static_cast<ResultSet&>(result) =
      detail::OrderedResult(std::move(names), types, std::move(rows), order, std::nullopt, 0);
  if (sketch == Sketch::kHll) {
    result.relative_error = 1.04 / std::sqrt(std::ldexp(1.0, q.hll_log2m));
    result.method = fmt::format("HyperLogLog (hll, log2m {})", q.hll_log2m);
    result.error_bound = fmt::format(
        "within ±{:.2g}% of the true count about 95% of the time (two standard errors "
        "of HyperLogLog with 2^{} registers)",
        200 * result.relative_error, q.hll_log2m);
  } else {
    result.relative_error = 2 * q.fraction * (1 - q.fraction) / q.tdigest_compression;
    result.method = fmt::format("t-digest (tdigest, compression {})", q.tdigest_compression);
    result.error_bound = fmt::format(
        "the value's rank nominally within ±{:.2g}% of the rows of rank {} (t-digest's centroid size limit; not a "
        "guarantee)",
        100 * result.relative_error, q.fraction);
  }
  return result;
}

}  // namespace

ApproximateResult ApproxCountDistinct(ScatterGather& scatter, const SketchQuery& query, const ScatterOptions& options) {
  return Run(scatter, query, options, Sketch::kHll);
}

ApproximateResult ApproxPercentile(ScatterGather& scatter, const SketchQuery& query, const ScatterOptions& options) {
  return Run(scatter, query, options, Sketch::kTDigest);
}

}  // namespace shardkit
