// Migrating: the full history (shardkit's and the Bookstore's) onto fresh, empty databases (the
// "migrate time on a fresh cluster" figure), and a run that finds nothing to
// do (what every lab/cluster start pays). Needs the local cluster
// (lab/cluster start); works in scratch databases of its own.
//
//   build/bench/migrate_bench
#include <benchmark/benchmark.h>

#include <memory>

#include "shardkit/schema/migrate.hpp"
#include "support/test_cluster.hpp"

namespace {

using shardkit::test::ScratchCluster;
using shardkit::test::ScratchOptions;

// Fresh databases each iteration (not timed), then every migration (shardkit's
// own, then the Bookstore's) on every server: state.range(0) shards, the
// reference and the catalog.
void BM_MigrateFullHistoryOnAFreshCluster(benchmark::State& state) {
  const auto& sets = shardkit::test::ClusterMigrations();
  int applied = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto cluster = std::make_unique<ScratchCluster>(
        "migrate_bench", ScratchOptions().Shards(static_cast<int>(state.range(0))).Unmigrated());
    state.ResumeTiming();
    applied = 0;
    for (const auto& set : sets) {
      shardkit::Migrator migrator(set, cluster->MigrationServers());
      const auto report = migrator.Apply();
      if (!report.Ok()) state.SkipWithError("a migration failed");
      applied += report.AppliedCount();
    }
    state.PauseTiming();
    cluster.reset();
    state.ResumeTiming();
  }
  std::size_t files = 0;
  for (const auto& set : sets) files += set.All().size();
  state.counters["files"] = static_cast<double>(files);
  state.counters["applied"] = applied;
}
BENCHMARK(BM_MigrateFullHistoryOnAFreshCluster)
    ->Arg(2)
    ->Arg(3)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Everything applied already: connect, lock, read every history, apply
// nothing (the Bookstore's set).
void BM_MigrateNothingToDo(benchmark::State& state) {
  ScratchCluster cluster{"migrate_bench_noop", ScratchOptions().Shards(3)};
  shardkit::Migrator migrator(shardkit::test::BookstoreMigrations(), cluster.MigrationServers());
  for (auto _ : state) {
    const auto report = migrator.Apply();
    if (report.AppliedCount() != 0) state.SkipWithError("something was left to apply");
  }
}
BENCHMARK(BM_MigrateNothingToDo)->Unit(benchmark::kMillisecond)->UseRealTime();

// The server x version matrix of five servers.
void BM_MigrateStatus(benchmark::State& state) {
  ScratchCluster cluster{"migrate_bench_status", ScratchOptions().Shards(3)};
  shardkit::Migrator migrator(shardkit::test::BookstoreMigrations(), cluster.MigrationServers());
  for (auto _ : state) benchmark::DoNotOptimize(migrator.Status().UpToDate());
}
BENCHMARK(BM_MigrateStatus)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
