// shardctl verify on whatever the configured cluster holds: run `lab/run
// load` (scale 1: ~1M orders) first for the figure quoted in bench/results.md. Reports the rows
// checked per second next to a plain count(*) of the same tables on every
// server at once (the floor: one scan of each table).
//
//   lab/run load && build/bench/verify_bench
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <pqxx/pqxx>
#include <thread>

#include "shardkit/config.hpp"
#include "shardkit/schema/verify.hpp"
#include "support/test_cluster.hpp"

namespace {

std::int64_t RowsChecked(const shardkit::VerifyReport& report) {
  std::int64_t rows = 0;
  for (const auto& s : report.servers) {
    for (const auto& t : s.tables) rows += t.rows;
  }
  return rows;
}

void BM_VerifyCluster(benchmark::State& state) {
  const auto config = shardkit::test::LoadTestConfig();
  shardkit::VerifyOptions options;
  options.migrations = shardkit::test::ClusterMigrations();
  std::int64_t rows = 0;
  std::size_t findings = 0;
  for (auto _ : state) {
    const auto report = shardkit::VerifyCluster(config, options);
    rows = RowsChecked(report);
    findings = report.findings.size();
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["findings"] = static_cast<double>(findings);
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_VerifyCluster)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// The floor: SELECT count(*) of each sharded table on every shard and the
// reference, all servers at once, one connection each.
void BM_CountStarEverywhere(benchmark::State& state) {
  const auto config = shardkit::test::LoadTestConfig();
  std::vector<shardkit::Dsn> dsns;
  for (const auto& s : config.shards) dsns.push_back(s.dsn);
  if (config.reference_dsn) dsns.push_back(*config.reference_dsn);
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (const auto& dsn : dsns) {
      threads.emplace_back([&dsn] {
        pqxx::connection c{dsn.Reveal()};
        pqxx::nontransaction tx{c};
        tx.exec("SET jit = off");
        for (const char* table : {"customers", "orders", "order_items"}) {
          benchmark::DoNotOptimize(tx.exec(fmt::format("SELECT count(*) FROM {}", table)));
        }
      });
    }
    for (auto& t : threads) t.join();
  }
}
BENCHMARK(BM_CountStarEverywhere)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
