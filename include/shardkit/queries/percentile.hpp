// shardkit/queries/percentile.hpp — exact medians, percentiles and COUNT(DISTINCT x)
// over shards, without shipping every value.
//
// The answer one unsharded server gives to
//
//   SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount),
//          percentile_disc(0.95) WITHIN GROUP (ORDER BY amount), count(DISTINCT book_id)
//   FROM ... WHERE ... GROUP BY category
//
// by distributed selection: an order statistic needs counts, not rows. In
// one REPEATABLE READ snapshot per shard (a ScatterSession: every round sees
// the same rows), each shard copies its matching rows once into a temporary
// table and sends a few evenly spaced values of each group (round 1); the
// client asks every shard how many of its values lie below and at or below
// each of those candidates (round 2), which pins the rank between two
// neighbouring candidates, or on one; then the values inside that narrow
// range (all of them once few enough remain, else another sample) and
// their counts (rounds 3, 4) until the rank is pinned. Every comparison is
// the server's own (SQL on the shards, in the column's type: NaN above every
// number, BC dates, ties); values travel as the server prints them. On the
// lab's data that is 4 rounds whatever the shard count.
//
// Semantics are PostgreSQL's ordered-set aggregates': NULLs are ignored; an
// empty group gives NULL; percentile_disc(f) is the value at row
// max(1, ceil(f * N)) in the value's own type; percentile_cont(f) (a
// number type: the values as double precision) interpolates between rows
// 1 + floor(f * (N - 1)) and 1 + ceil(f * (N - 1)) with PostgreSQL's own
// double arithmetic (lo + (f * (N - 1) - floor(...)) * (hi - lo)), so the
// result equals the server's to the last bit; a NULL fraction gives NULL;
// one outside [0, 1] is refused as PostgreSQL refuses it. Value types:
// smallint, integer, bigint, numeric, real, double precision, date,
// timestamp and timestamptz (percentile_cont: the number types only, as in
// PostgreSQL, where it is defined for double precision and interval).
//
// COUNT(DISTINCT x) off the shard key: each shard's distinct values of each
// group (sorted, as the server prints them), merged by the type's own
// equality (numeric 1.5 = 1.50); refused before any value is shipped when
// the shards hold more than `max_distinct` distinct values together.
//
//   shardkit::PercentileQuery q;
//   q.from = "orders o JOIN order_items i USING (customer_id, order_id) JOIN books b USING (book_id)";
//   q.where = "o.ordered_at >= $1::timestamptz";
//   q.params = {"2026-10-15 00:00:00+00"};
//   q.group_by = {{"b.category", "category"}};
//   q.columns = {{shardkit::OrderStatistic::kPercentileCont, "o.amount", 0.5, "median"},
//                {shardkit::OrderStatistic::kPercentileCont, "o.amount", 0.95, "p95"}};
//   auto r = shardkit::ExactPercentiles(scatter, q);     // or cluster->Percentiles(q)
//   r.rows;  r.rounds;  r.rows_shipped;  r.rows_all_values;
//
// The expressions (keys, values, FROM) are SQL text written by the
// application; values belong in $n parameters (in the WHERE, or in a FROM
// subquery's). A parameter whose type nothing in the statement decides
// fails, as it would on one server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/sql_params.hpp"
#include "shardkit/core/value.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/scatter.hpp"

namespace shardkit {

enum class OrderStatistic {
  kPercentileCont,  // percentile_cont(fraction) WITHIN GROUP (ORDER BY value); median = 0.5
  kPercentileDisc,  // percentile_disc(fraction) WITHIN GROUP (ORDER BY value)
  kCountDistinct,   // count(DISTINCT value)
};

struct OrderStatisticColumn {
  OrderStatistic kind = OrderStatistic::kPercentileCont;
  std::string value;               // SQL expression
  std::optional<double> fraction;  // percentiles: in [0, 1]; nullopt is NULL (a NULL result)
  std::string name;                // the result column's name
};

struct PercentileQuery {
  std::string from;   // FROM clause text (sharded tables co-located on the shard key)
  std::string where;  // condition text; empty: none
  SqlParams params;   // the WHERE's $n
  struct Key {
    std::string expression;
    std::string name;
  };
  std::vector<Key> group_by;
  std::vector<OrderStatisticColumn> columns;
  // After the answer, on the result's column names (as a merge plan's).
  std::vector<SortKey> order_by;
  std::optional<std::int64_t> limit;
  std::int64_t offset = 0;

  // Values each shard sends per group and range when it samples: more
  // ships more values per round and narrows faster.
  int samples_per_shard = 64;
  // A range holding at most this many values (over all shards) is fetched
  // whole, which pins every rank in it with one more count.
  std::int64_t fetch_all_at_most = 8192;
  // COUNT(DISTINCT): refused when the shards' distinct values of one
  // column, summed over shards and groups, exceed this.
  std::int64_t max_distinct = 1'000'000;
  // A safety bound; the selection needs far fewer.
  int max_rounds = 64;
  std::string label;
};

struct PercentileRound {
  std::string name;  // "1 sample", "2 count", ...
  std::size_t rows = 0;
  std::size_t bytes = 0;
  std::chrono::microseconds elapsed{0};
};

struct PercentileResult : ResultSet {
  int rounds = 0;                    // round trips to the shards (the snapshot's BEGIN rides on the first)
  std::size_t rows_shipped = 0;      // rows received from all shards, all rounds
  std::size_t bytes_shipped = 0;     // their payload bytes
  std::int64_t rows_all_values = 0;  // the rows a gather of every matching row's values would ship
  std::size_t groups = 0;            // groups before ORDER BY / LIMIT
  std::vector<PercentileRound> round_stats;
};

// Throws UnmergeableQuery (a value or key type that cannot be answered
// exactly, too many distinct values, no columns), Error (a fraction outside
// [0, 1]) and ScatterError (a shard's failure, e.g. the statement's own
// error). The shards run it in one transaction each (options.deadline
// bounds it all; allow_partial is refused: a missing shard changes ranks).
[[nodiscard]] PercentileResult ExactPercentiles(ScatterGather& scatter, const PercentileQuery& query,
                                                const ScatterOptions& options = {});

// PostgreSQL's ranks, exposed for tests: percentile_disc's row (1-based)
// among n values, and percentile_cont's two rows and interpolation weight.
[[nodiscard]] std::int64_t PercentileDiscRow(double fraction, std::int64_t n);
struct PercentileContRows {
  std::int64_t first = 0;  // 1-based
  std::int64_t second = 0;
  double proportion = 0;
};
[[nodiscard]] PercentileContRows PercentileContRowsFor(double fraction, std::int64_t n);
// float8_lerp: lo + (proportion * (hi - lo)), as PostgreSQL computes it.
[[nodiscard]] double PercentileInterpolate(double lo, double hi, double proportion);

}  // namespace shardkit
