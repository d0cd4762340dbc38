// Exact percentiles and COUNT(DISTINCT) by distributed selection vs
// gathering every value, on the lab's Bookstore data and on a skewed data
// set, next to the unsharded reference server; and the sketches'
// (t-digest, HyperLogLog) error against the exact answer. Needs the local
// cluster (lab/cluster start).
//
//   build/bench/percentile_bench                          # lab data at scale 1 (loaded into scratch databases)
//   PERCENTILE_BENCH_LAB_SCALE=0.1 build/bench/percentile_bench
//
// Counters: rows (received from the shards), rounds, bytes; for the
// sketches, error = |estimate - exact| / exact.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <random>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/queries/percentile.hpp"
#include "shardkit/queries/sketches.hpp"
#include "support/test_cluster.hpp"

namespace {

using shardkit::OrderStatistic;

// The lab's question: order amount per category, last 30 days.
constexpr const char* kPerOrderCategory =
    "(SELECT b.category, sum(i.quantity * i.unit_price) AS amount FROM order_items i "
    "JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
    "JOIN books b ON b.book_id = i.book_id WHERE o.ordered_at >= $1::timestamptz "
    "GROUP BY i.customer_id, i.order_id, b.category) per_order";

struct Setup {
  std::unique_ptr<shardkit::test::ScratchCluster> scratch;
  std::unique_ptr<shardkit::Cluster> cluster;
  std::unique_ptr<pqxx::connection> reference;
};

Setup& Lab() {
  static Setup setup = [] {
    Setup s;
    const char* scale = std::getenv("PERCENTILE_BENCH_LAB_SCALE");
    s.scratch = std::make_unique<shardkit::test::ScratchCluster>("percentile_bench");
    {
      shardkit::lab::Lab lab(s.scratch->Config());
      (void)shardkit::lab::LoadDataset(lab,
                                       shardkit::lab::GenerateDataset({scale != nullptr ? std::atof(scale) : 1.0, 1}),
                                       {shardkit::lab::ProgressMode::kNone});
    }
    // The skewed set: 90% of 400,000 values are one number, the rest a
    // long tail (Pareto), over every shard.
    s.scratch->ExecEverywhere(
        "CREATE TABLE skewed (customer_id int NOT NULL, bucket smallint NOT NULL, grp int NOT NULL, v numeric)");
    std::mt19937_64 rng(25);
    std::vector<std::string> per_shard(static_cast<std::size_t>(s.scratch->ShardCount()));
    std::string all;
    const auto directory = s.scratch->Directory();
    for (int i = 0; i < 400000; ++i) {
      const shardkit::CustomerId c{std::uniform_int_distribution<std::int32_t>(1, 1000000)(rng)};
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      const std::string v = i % 10 != 0 ? "7.00" : fmt::format("{:.2f}", 10 / std::pow(1 - u, 1 / 1.2));
      const std::string row =
          fmt::format("({},{},{},{})", shardkit::ToInt(c), shardkit::ToInt(shardkit::BucketOf(c)), i % 8, v);
      auto& shard = per_shard[static_cast<std::size_t>(shardkit::ToInt(directory.ShardFor(c)))];
      shard += (shard.empty() ? "" : ",") + row;
      all += (all.empty() ? "" : ",") + row;
      if (all.size() > 4000000 || i == 399999) {
        for (int sh = 0; sh < s.scratch->ShardCount(); ++sh) {
          auto& rows = per_shard[static_cast<std::size_t>(sh)];
          if (!rows.empty()) s.scratch->ExecOnShard(sh, "INSERT INTO skewed VALUES " + rows);
          rows.clear();
        }
        s.scratch->ExecOnReference("INSERT INTO skewed VALUES " + all);
        all.clear();
      }
    }
    for (int sh = 0; sh < s.scratch->ShardCount(); ++sh) s.scratch->ExecOnShard(sh, "ANALYZE");
    s.scratch->ExecOnReference("ANALYZE");
    s.cluster = shardkit::Cluster::Open(s.scratch->Config());
    s.reference = std::make_unique<pqxx::connection>(s.scratch->ReferenceDsn().Reveal());
    return s;
  }();
  return setup;
}

const std::string& Window() {
  static const std::string w = shardkit::lab::FormatTimestamp(shardkit::lab::kWindowStart);
  return w;
}

shardkit::PercentileQuery LabQuery() {
  shardkit::PercentileQuery q;
  q.from = kPerOrderCategory;
  q.params = {Window()};
  q.group_by = {{"category", "category"}};
  q.columns = {{OrderStatistic::kPercentileCont, "amount", 0.5, "median"},
               {OrderStatistic::kPercentileCont, "amount", 0.95, "p95"}};
  return q;
}

shardkit::PercentileQuery SkewedQuery() {
  shardkit::PercentileQuery q;
  q.from = "skewed";
  q.group_by = {{"grp", "grp"}};
  q.columns = {{OrderStatistic::kPercentileCont, "v", 0.5, "median"},
               {OrderStatistic::kPercentileCont, "v", 0.99, "p99"}};
  return q;
}

void Exact(benchmark::State& state, const shardkit::PercentileQuery& q) {
  shardkit::Cluster& cluster = *Lab().cluster;
  shardkit::PercentileResult r;
  for (auto _ : state) r = cluster.Percentiles(q);
  state.counters["rows"] = static_cast<double>(r.rows_shipped);
  state.counters["rounds"] = r.rounds;
  state.counters["bytes"] = static_cast<double>(r.bytes_shipped);
  state.counters["rows_all_values"] = static_cast<double>(r.rows_all_values);
}

// Every value to the client, sorted there per group, the percentile read
// off: what an application does without the selection.
void GatherAll(benchmark::State& state, const std::string& sql, const shardkit::SqlParams& params) {
  shardkit::Cluster& cluster = *Lab().cluster;
  std::size_t rows = 0;
  std::size_t bytes = 0;
  for (auto _ : state) {
    const shardkit::ScatterResult r = cluster.Scatter(sql, params);
    std::map<std::string, std::vector<double>> groups;
    for (const auto& shard : r.shards) {
      for (const auto& row : shard.rows) groups[row[0].c_str()].push_back(std::stod(row[1].c_str()));
    }
    double sum = 0;
    for (auto& [key, values] : groups) {
      std::sort(values.begin(), values.end());
      sum += values[values.size() / 2];
    }
    benchmark::DoNotOptimize(sum);
    rows = r.TotalRows();
    bytes = r.TotalBytes();
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["bytes"] = static_cast<double>(bytes);
}

void OnReference(benchmark::State& state, const std::string& sql, const shardkit::SqlParams& params) {
  pqxx::connection& ref = *Lab().reference;
  for (auto _ : state) {
    pqxx::nontransaction tx{ref};
    benchmark::DoNotOptimize(tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params)));
  }
}

void BM_LabMedianP95PerCategory_Exact(benchmark::State& state) {
  Exact(state, LabQuery());
}
BENCHMARK(BM_LabMedianP95PerCategory_Exact)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabMedianP95PerCategory_GatherAll(benchmark::State& state) {
  GatherAll(state, fmt::format("SELECT category, amount FROM {}", kPerOrderCategory), {Window()});
}
BENCHMARK(BM_LabMedianP95PerCategory_GatherAll)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabMedianP95PerCategory_Reference(benchmark::State& state) {
  OnReference(state,
              fmt::format("SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), percentile_cont(0.95) "
                          "WITHIN GROUP (ORDER BY amount) FROM {} GROUP BY category",
                          kPerOrderCategory),
              {Window()});
}
BENCHMARK(BM_LabMedianP95PerCategory_Reference)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabDistinctBooks_Exact(benchmark::State& state) {
  shardkit::PercentileQuery q;
  q.from = "order_items";
  q.columns = {{OrderStatistic::kCountDistinct, "book_id", std::nullopt, "books"}};
  Exact(state, q);
}
BENCHMARK(BM_LabDistinctBooks_Exact)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabDistinctBooks_GatherAll(benchmark::State& state) {
  GatherAll(state, "SELECT '' AS g, book_id FROM order_items", {});
}
BENCHMARK(BM_LabDistinctBooks_GatherAll)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SkewedMedianP99PerGroup_Exact(benchmark::State& state) {
  Exact(state, SkewedQuery());
}
BENCHMARK(BM_SkewedMedianP99PerGroup_Exact)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SkewedMedianP99PerGroup_GatherAll(benchmark::State& state) {
  GatherAll(state, "SELECT grp::text, v FROM skewed", {});
}
BENCHMARK(BM_SkewedMedianP99PerGroup_GatherAll)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SkewedMedianP99PerGroup_Reference(benchmark::State& state) {
  OnReference(state,
              "SELECT grp, percentile_cont(0.5) WITHIN GROUP (ORDER BY v), percentile_cont(0.99) WITHIN GROUP "
              "(ORDER BY v) FROM skewed GROUP BY grp",
              {});
}
BENCHMARK(BM_SkewedMedianP99PerGroup_Reference)->UseRealTime()->Unit(benchmark::kMillisecond);

// The sketches: time, rows, and the largest relative error over the groups.
void Sketch(benchmark::State& state, const char* from, const char* value, const shardkit::SqlParams& params,
            double fraction, bool hll) {
  shardkit::Cluster& cluster = *Lab().cluster;
  shardkit::SketchQuery q;
  q.from = from;
  q.params = params;
  q.value = value;
  q.fraction = fraction;
  shardkit::ApproximateResult a;
  for (auto _ : state) a = hll ? cluster.ApproxCountDistinct(q) : cluster.ApproxPercentile(q);
  shardkit::PercentileQuery e;
  e.from = from;
  e.params = params;
  e.columns = {{hll ? OrderStatistic::kCountDistinct : OrderStatistic::kPercentileCont, value, fraction, "exact"}};
  const shardkit::PercentileResult exact = cluster.Percentiles(e);
  const double truth = std::stod(exact.rows.at(0).at(0).ToString());
  const double estimate = std::stod(a.rows.at(0).at(0).ToString());
  state.counters["rows"] = static_cast<double>(a.rows_shipped);
  state.counters["bytes"] = static_cast<double>(a.bytes_shipped);
  state.counters["error"] = truth != 0 ? std::fabs(estimate - truth) / std::fabs(truth) : std::fabs(estimate);
  state.counters["bound"] = a.relative_error;
}

void BM_LabMedian_TDigest(benchmark::State& state) {
  Sketch(state, kPerOrderCategory, "amount", {Window()}, 0.5, false);
}
BENCHMARK(BM_LabMedian_TDigest)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabP95_TDigest(benchmark::State& state) {
  Sketch(state, kPerOrderCategory, "amount", {Window()}, 0.95, false);
}
BENCHMARK(BM_LabP95_TDigest)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SkewedP99_TDigest(benchmark::State& state) {
  Sketch(state, "skewed", "v", {}, 0.99, false);
}
BENCHMARK(BM_SkewedP99_TDigest)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LabDistinctBooks_HyperLogLog(benchmark::State& state) {
  Sketch(state, "order_items", "book_id", {}, 0, true);
}
BENCHMARK(BM_LabDistinctBooks_HyperLogLog)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SkewedDistinctValues_HyperLogLog(benchmark::State& state) {
  Sketch(state, "skewed", "v", {}, 0, true);
}
BENCHMARK(BM_SkewedDistinctValues_HyperLogLog)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
