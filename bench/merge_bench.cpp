// Cost of merging per-shard partials in the application, on the Bookstore case's
// best-sellers shape: per-book partial sums from 2 shards, 37,644 rows in all
// (the "exact" answer's transfer), merged, ordered by the total and cut to
// the top 10. Also the AVG path (numeric SUM + COUNT, divided like
// numeric_div) and Decimal division alone.
//
//   build/bench/merge_bench --benchmark_counters_tabular=true
//
// Counter: rows_per_s (partial rows merged per second, parsing included).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "shardkit/core/decimal.hpp"
#include "shardkit/queries/merge.hpp"

namespace {

constexpr shardkit::TypeOid kInt8 = 20;
constexpr shardkit::TypeOid kNumeric = 1700;

// The Bookstore case: 37,644 per-book partial rows from 2 shards; books sold on both
// shards appear twice.
std::vector<shardkit::PartialRows> BestSellerPartials(bool with_price) {
  std::mt19937_64 rng(1);
  std::vector<shardkit::PartialRows> shards(2);
  for (int s = 0; s < 2; ++s) {
    auto& p = shards[static_cast<std::size_t>(s)];
    p.shard = shardkit::ShardId{s};
    p.column_names = {"book_id", "sold"};
    p.column_types = {kInt8, kInt8};
    if (with_price) {
      p.column_names.insert(p.column_names.end(), {"revenue", "lines"});
      p.column_types.insert(p.column_types.end(), {kNumeric, kInt8});
    }
    for (int book = 0; book < 18822; ++book) {
      std::vector<std::optional<std::string>> row = {std::to_string(book * 2 + (s == 1 && book % 3 == 0 ? 1 : 0)),
                                                     std::to_string(1 + rng() % 17)};
      if (with_price) {
        row.emplace_back(std::to_string(rng() % 100000) + "." + std::to_string(10 + rng() % 90));
        row.emplace_back(std::to_string(1 + rng() % 9));
      }
      p.rows.push_back(std::move(row));
    }
  }
  return shards;
}

void BM_MergeTopTenBestSellers(benchmark::State& state) {
  const auto partials = BestSellerPartials(false);
  shardkit::MergePlan plan;
  plan.Key("book_id").Sum("sold").OrderBy("sold", shardkit::SortDirection::kDesc).OrderBy("book_id").Limit(10);
  std::size_t rows = 0;
  for (auto _ : state) {
    auto merged = shardkit::Merge(plan, partials);
    rows += merged.rows_in;
    benchmark::DoNotOptimize(merged);
  }
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MergeTopTenBestSellers)->Unit(benchmark::kMillisecond);

void BM_MergeNumericSumAndAvg(benchmark::State& state) {
  const auto partials = BestSellerPartials(true);
  shardkit::MergePlan plan;
  plan.Key("book_id").Sum("sold").Sum("revenue").Avg("revenue", "lines", "avg_line");
  std::size_t rows = 0;
  for (auto _ : state) {
    auto merged = shardkit::Merge(plan, partials);
    rows += merged.rows_in;
    benchmark::DoNotOptimize(merged);
  }
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MergeNumericSumAndAvg)->Unit(benchmark::kMillisecond);

void BM_DecimalDivideLikePostgres(benchmark::State& state) {
  const auto sum = shardkit::Decimal::Parse("123456789.25");
  const auto count = shardkit::Decimal::FromInt(37);
  for (auto _ : state) {
    auto q = sum.DivideLikePostgres(count);
    benchmark::DoNotOptimize(q);
  }
}
BENCHMARK(BM_DecimalDivideLikePostgres);

}  // namespace

BENCHMARK_MAIN();
