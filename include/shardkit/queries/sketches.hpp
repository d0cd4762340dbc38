// shardkit/queries/sketches.hpp — approximate COUNT(DISTINCT x) and percentiles
// from mergeable sketches, only when the caller asks for them by name.
//
// approx_count_distinct(x): a HyperLogLog sketch per shard and group
// (postgresql-15-hll: hll_add_agg(hll_hash_any(x), log2m)), unioned on one
// shard (hll_union_agg) and read there (hll_cardinality). approx_percentile
// (f, x): a t-digest per shard and group (postgresql-15-tdigest:
// tdigest(x, compression)), merged and read on one shard
// (tdigest_percentile). Two round trips; each shard ships one sketch per
// group (HLL: ~2^log2m * 5 bits; t-digest: ~compression centroids).
//
// The result says it is approximate and carries its error bound; exact
// functions (percentile.hpp) never fall back to these. Both extensions are
// created on the shards by sql/035.
//
//   shardkit::SketchQuery q;
//   q.from = "order_items";
//   q.value = "book_id";
//   auto books = shardkit::ApproxCountDistinct(scatter, q);   // or cluster->ApproxCountDistinct(q)
//   books.rows[0][0];          // about 4,200
//   books.error_bound;         // "±1.6% (two standard errors of HyperLogLog, log2m 14)"
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/sql_params.hpp"
#include "shardkit/core/value.hpp"
#include "shardkit/queries/percentile.hpp"
#include "shardkit/queries/scatter.hpp"

namespace shardkit {

struct SketchQuery {
  std::string from;
  std::string where;  // empty: none
  SqlParams params;   // the WHERE's
  std::vector<PercentileQuery::Key> group_by;
  std::string value;      // the expression counted or ranked
  double fraction = 0.5;  // approx_percentile only, in [0, 1]
  std::string name = "approx";
  // HyperLogLog: 2^log2m registers (4..17); standard error 1.04 / sqrt(2^log2m).
  int hll_log2m = 14;
  // t-digest: centroids kept (10..10000); more is more accurate.
  int tdigest_compression = 100;
  std::string label;
};

struct ApproximateResult : ResultSet {
  bool approximate = true;  // always: these are estimates
  std::string method;       // "HyperLogLog (hll, log2m 14)", "t-digest (tdigest, compression 100)"
  // HLL: the relative standard error of the count. t-digest: a nominal
  // rank error as a fraction of the rows (2 f (1 - f) / compression: half
  // the largest centroid the k1 scale allows around f), not a guarantee;
  // on data with many equal values the value itself can be further off
  // (bench/results.md measures both against the exact answer).
  double relative_error = 0;
  std::string error_bound;  // in words, for people
  int rounds = 0;
  std::size_t rows_shipped = 0;
  std::size_t bytes_shipped = 0;
};

// Throw UnmergeableQuery for parameters out of range, ScatterError for a
// shard's failure (a missing extension: "function hll_add_agg does not
// exist": run the migrations, sql/035).
[[nodiscard]] ApproximateResult ApproxCountDistinct(ScatterGather& scatter, const SketchQuery& query,
                                                    const ScatterOptions& options = {});
[[nodiscard]] ApproximateResult ApproxPercentile(ScatterGather& scatter, const SketchQuery& query,
                                                 const ScatterOptions& options = {});

}  // namespace shardkit
