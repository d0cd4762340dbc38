// Scatter-gather: (1) a statement of a few ms on 2 shards in parallel vs the
// same statements one after another; (2) fan-out width 2, 8 and 32 for a
// cheap statement and for one with 5 ms of server work: scatter time vs the
// slowest single shard's time; (3) client CPU per shard request of a
// scatter vs a bare libpq loop that sends the same pipelines (BEGIN READ
// ONLY, SET LOCAL statement_timeout, statement, COMMIT, Sync) over the same
// pooled connections from one thread.
//
// Needs the local cluster (lab/cluster start; $SHARDKIT_CONFIG as for the
// tests), where it makes two scratch databases. Touches no table.
//
// The 8 and 32 "shards" are extra pools over the two local servers, shard i
// on server i % 2. Extra databases on the same servers would behave the same
// way: each pool connection is its own backend process either way, and the
// statements read no table. What cannot be reproduced here is 32 machines:
// every backend, and the client, share this machine's cores, so at width 32
// the servers' CPU, not the fan-out, sets the pace (see the counters).
//
// Every iteration times the baseline and the scatter back to back and the
// figures are medians, so that load from other processes hits both alike.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "pg/libpq_handle.hpp"
#include "shardkit/config.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kHeavy = "SELECT count(*) FROM generate_series(1, 200000)";
constexpr const char* kCheap = "SELECT $1::int";
// Cheap in CPU but 5 ms long: stands in for shards on machines of their own,
// so that the fan-out is measured without 32 backends sharing two cores.
constexpr const char* kWaiting = "SELECT $1::int, pg_sleep(0.005)";

// Two scratch databases (migrated, not enrolled: the fake 8- and 32-shard
// directories below are not what any fenced shard owns), one per server of
// the local cluster, kept for the whole run and dropped by main() (not at
// exit: libpq's TLS library is torn down by then); nullopt without a cluster.
std::unique_ptr<shardkit::test::ScratchCluster> cluster;

std::optional<shardkit::ClusterConfig> Config() {
  if (!cluster) {
    try {
      cluster = std::make_unique<shardkit::test::ScratchCluster>(
          "scatter_bench", shardkit::test::ScratchOptions().Shards(2).Unenrolled());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scatter_bench: %s\n", e.what());
      return std::nullopt;
    }
  }
  return cluster->Config();
}

// `width` pools; pool i connects to configured shard i % (configured count).
std::unique_ptr<shardkit::BucketShardResolver> Resolver(const shardkit::ClusterConfig& config, int width) {
  std::vector<std::unique_ptr<shardkit::ConnectionPool>> pools;
  std::vector<std::string> names;
  const int servers = static_cast<int>(config.shards.size());
  for (int i = 0; i < width; ++i) {
    const auto& server = config.shards[static_cast<std::size_t>(i % servers)];
    pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{i}, server.dsn, config.pool));
    names.push_back("s" + std::to_string(i) + "@" + server.name);
  }
  // BucketDirectory needs no more shards than buckets; 32 <= 64.
  return std::make_unique<shardkit::BucketShardResolver>(shardkit::BucketDirectory::EvenSplit(width), std::move(pools),
                                                         std::move(names));
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// CPU time of the whole process (every thread: the scatter's workers too).
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

shardkit::ScatterOptions Only(shardkit::ShardId shard) {
  shardkit::ScatterOptions options;
  options.shards = std::vector<shardkit::ShardId>{shard};
  return options;
}

// What reading the process CPU clock itself costs (it sums every thread's
// time, and the scatter has a hundred idle threads): subtracted from both
// sides, so that the ratio compares the requests, not the clock.
double ClockReadSeconds() {
  std::vector<double> deltas;
  for (int i = 0; i < 201; ++i) {
    const double a = ProcessCpuSeconds();
    deltas.push_back(ProcessCpuSeconds() - a);
  }
  return Median(deltas);
}

// (1) 2 shards in parallel vs one after another, same code path each time.
void BM_TwoShardsParallelVsSequential(benchmark::State& state) {
  auto config = Config();
  if (!config) {
    state.SkipWithError("no local cluster: run lab/cluster start (see stderr)");
    return;
  }
  auto resolver = Resolver(*config, 2);
  shardkit::ScatterGather scatter{*resolver};
  for (int i = 0; i < 3; ++i) (void)scatter.Run(kHeavy);  // connect and warm up

  std::vector<double> sequential;
  std::vector<double> parallel;
  for (auto _ : state) {
    auto t0 = Clock::now();
    for (const shardkit::ShardId s : shardkit::FirstShards(2)) (void)scatter.Run(kHeavy, {}, Only(s));
    auto t1 = Clock::now();
    auto result = scatter.Run(kHeavy);
    auto t2 = Clock::now();
    if (result.shards.size() != 2) state.SkipWithError("a shard did not answer");
    sequential.push_back(Seconds(t1 - t0));
    parallel.push_back(Seconds(t2 - t1));
    state.SetIterationTime(Seconds(t2 - t1));
  }
  const double seq = Median(sequential);
  const double par = Median(parallel);
  state.counters["sequential_ms"] = seq * 1e3;
  state.counters["scatter_ms"] = par * 1e3;
  state.counters["scatter_over_sequential"] = par / seq;
}
BENCHMARK(BM_TwoShardsParallelVsSequential)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(40);

// (2) Fan-out width: a statement on `width` shards at once vs each shard
// alone (BEGIN READ ONLY, SET LOCAL statement_timeout, the bucket step, the
// statement, COMMIT: one round trip). Arg 1: 0 = kCheap, 1 = kWaiting.
void BM_FanOutWidth(benchmark::State& state) {
  auto config = Config();
  if (!config) {
    state.SkipWithError("no local cluster: run lab/cluster start (see stderr)");
    return;
  }
  const int width = static_cast<int>(state.range(0));
  auto resolver = Resolver(*config, width);
  shardkit::ScatterGather scatter{*resolver, width};
  shardkit::ScatterOptions all;
  const shardkit::SqlParams params{"42"};
  const char* sql = state.range(1) == 0 ? kCheap : kWaiting;
  for (int i = 0; i < 5; ++i) (void)scatter.Run(sql, params, all);  // connect every pool

  const double clock_read = ClockReadSeconds();
  std::vector<double> scatter_times;
  std::vector<double> scatter_cpu;                                          // per shard request
  std::vector<std::vector<double>> alone(static_cast<std::size_t>(width));  // per shard, per iteration
  std::vector<double> in_scatter_slowest;
  for (auto _ : state) {
    for (const shardkit::ShardId s : shardkit::FirstShards(width)) {
      auto one = Only(s);
      const auto t0 = Clock::now();
      (void)scatter.Run(sql, params, one);
      alone[static_cast<std::size_t>(s)].push_back(Seconds(Clock::now() - t0));
    }
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    auto result = scatter.Run(sql, params, all);
    const auto t1 = Clock::now();
    scatter_cpu.push_back((ProcessCpuSeconds() - cpu0 - clock_read) / width);
    if (static_cast<int>(result.shards.size()) != width) state.SkipWithError("a shard did not answer");
    scatter_times.push_back(Seconds(t1 - t0));
    in_scatter_slowest.push_back(std::chrono::duration<double>(result.slowest_elapsed).count());
    state.SetIterationTime(Seconds(t1 - t0));
  }
  // The slowest single shard: the shard whose median time alone is highest.
  double slowest_alone = 0;
  std::vector<double> shard_medians;
  for (const auto& times : alone) {
    shard_medians.push_back(Median(times));
    slowest_alone = std::max(slowest_alone, shard_medians.back());
  }
  const double wall = Median(scatter_times);
  state.counters["scatter_us"] = wall * 1e6;
  state.counters["slowest_alone_us"] = slowest_alone * 1e6;
  state.counters["typical_alone_us"] = Median(shard_medians) * 1e6;
  state.counters["in_scatter_slowest_us"] = Median(in_scatter_slowest) * 1e6;
  state.counters["cpu_us_per_request"] = Median(scatter_cpu) * 1e6;
  // The goal's figure: scatter time / the slowest single shard's time.
  state.counters["over_slowest_alone"] = wall / slowest_alone;
  // The fan-out's own overhead: wall time / the slowest shard's time inside
  // that same scatter (dispatch, wake-up and gathering; not CPU contention).
  state.counters["over_in_scatter_slowest"] = wall / Median(in_scatter_slowest);
}
BENCHMARK(BM_FanOutWidth)
    ->ArgsProduct({{2, 8, 32}, {0}})
    ->ArgNames({"width", "sleep5ms"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(300);
BENCHMARK(BM_FanOutWidth)
    ->ArgsProduct({{2, 8, 32}, {1}})
    ->ArgNames({"width", "sleep5ms"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(40);

// The scatter's bucket step for shard i of `width` (ScatterGather sends it
// after BEGIN: the buckets its directory gives that shard, checked).
std::vector<std::string> BucketSetups(int width) {
  const auto directory = shardkit::BucketDirectory::EvenSplit(width);
  std::vector<std::string> setups;
  for (const shardkit::ShardId s : shardkit::FirstShards(width)) {
    setups.push_back(fmt::format("SELECT set_config('shardkit.buckets', '{}', true), shardkit_check_buckets()",
                                 shardkit::BucketSet::Of(directory, s).Setting()));
  }
  return setups;
}

// One pipeline per connection, written with nothing but libpq: what a
// shard request costs the client at the least. The same steps as the
// scatter's (BEGIN READ ONLY, the timeout, the bucket step, the statement,
// COMMIT). Sends every connection's pipeline first, then reads them all in
// order, from one thread.
bool BarePipelines(const std::vector<PGconn*>& conns, const std::vector<std::string>& setups, const char* sql,
                   const char* const* values, int count) {
  bool ok = true;
  char timeout[64];
  for (std::size_t i = 0; i < conns.size(); ++i) {
    PGconn* conn = conns[i];
    std::snprintf(timeout, sizeof timeout, "SET LOCAL statement_timeout = %d", 30000);
    ok &= PQenterPipelineMode(conn) == 1;
    ok &= PQsendQueryParams(conn, "BEGIN READ ONLY", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    ok &= PQsendQueryParams(conn, timeout, 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    ok &= PQsendQueryParams(conn, setups[i].c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    ok &= PQsendQueryParams(conn, sql, count, nullptr, values, nullptr, nullptr, 0) == 1;
    ok &= PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    ok &= PQpipelineSync(conn) == 1;
  }
  for (PGconn* conn : conns) {
    for (int step = 0; step < 5; ++step) {
      PGresult* result = PQgetResult(conn);
      const auto status = PQresultStatus(result);
      ok &= status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
      PQclear(result);
      while (PGresult* end = PQgetResult(conn)) PQclear(end);
    }
    PGresult* sync = PQgetResult(conn);
    ok &= PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    ok &= PQexitPipelineMode(conn) == 1;
  }
  return ok;
}

// (3) Client CPU per shard request: the scatter (worker threads, pool,
// deadline, results as pqxx::result) vs the bare libpq loop above over the
// very connections the scatter used, back to back in every iteration.
// Arg 1: 0 = kCheap, 1 = kWaiting (5 ms of server work: how close the bare
// loop itself gets to the slowest shard alone, i.e. what the servers allow).
void BM_ScatterCpuVsBareLibpq(benchmark::State& state) {
  auto config = Config();
  if (!config) {
    state.SkipWithError("no local cluster: run lab/cluster start (see stderr)");
    return;
  }
  const int width = static_cast<int>(state.range(0));
  auto resolver = Resolver(*config, width);
  shardkit::ScatterGather scatter{*resolver, width};
  const shardkit::SqlParams params{"42"};
  const char* const values[] = {"42"};
  const char* sql = state.range(1) == 0 ? kCheap : kWaiting;
  const std::vector<std::string> setups = BucketSetups(width);
  // One after another: every pool ends up with exactly one connection, which
  // both sides then use.
  for (int i = 0; i < 5; ++i) (void)scatter.Run(sql, params);

  const double clock_read = ClockReadSeconds();
  std::vector<double> scatter_cpu;
  std::vector<double> bare_cpu;
  std::vector<double> scatter_wall;
  std::vector<double> bare_wall;
  bool bare_first = false;
  for (auto _ : state) {
    // Alternate which goes first, so that neither always finds the servers
    // (and the caches) as the other left them.
    bare_first = !bare_first;
    for (int side = 0; side < 2; ++side) {
      if ((side == 0) != bare_first) {
        const double cpu0 = ProcessCpuSeconds();
        const auto t0 = Clock::now();
        bool answered = false;
        {
          const auto result = scatter.Run(sql, params);
          answered = static_cast<int>(result.shards.size()) == width;
        }  // the rows are freed inside the measurement, as the bare loop's are
        const auto t1 = Clock::now();
        scatter_cpu.push_back((ProcessCpuSeconds() - cpu0 - clock_read) / width);
        scatter_wall.push_back(Seconds(t1 - t0));
        if (!answered) state.SkipWithError("a shard did not answer");
      } else {
        std::vector<shardkit::ConnectionPool::Lease> leases;
        std::vector<PGconn*> conns;
        for (const shardkit::ShardId s : shardkit::FirstShards(width)) {
          leases.push_back(resolver->Pool(s).Acquire());
          conns.push_back(shardkit::detail::LibpqHandle(leases.back().Connection()));
        }
        const double cpu0 = ProcessCpuSeconds();
        const auto t0 = Clock::now();
        const bool ok = BarePipelines(conns, setups, sql, values, 1);
        const auto t1 = Clock::now();
        bare_cpu.push_back((ProcessCpuSeconds() - cpu0 - clock_read) / width);
        bare_wall.push_back(Seconds(t1 - t0));
        if (!ok) state.SkipWithError("the bare libpq loop failed");
        state.SetIterationTime(Seconds(t1 - t0));
      }
    }
  }
  std::size_t fresh = 0;
  for (const shardkit::ShardId s : shardkit::FirstShards(width)) fresh += resolver->Pool(s).Stats().connects;
  state.counters["connections"] = static_cast<double>(fresh);  // = width: the same connections throughout
  state.counters["clock_read_us"] = clock_read * 1e6;
  state.counters["scatter_cpu_us_per_request"] = Median(scatter_cpu) * 1e6;
  state.counters["bare_cpu_us_per_request"] = Median(bare_cpu) * 1e6;
  state.counters["cpu_scatter_over_bare"] = Median(scatter_cpu) / Median(bare_cpu);
  state.counters["scatter_us"] = Median(scatter_wall) * 1e6;
  state.counters["bare_us"] = Median(bare_wall) * 1e6;
}
BENCHMARK(BM_ScatterCpuVsBareLibpq)
    ->ArgsProduct({{2, 8, 32}, {0}})
    ->ArgNames({"width", "sleep5ms"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(300);
BENCHMARK(BM_ScatterCpuVsBareLibpq)
    ->ArgsProduct({{32}, {1}})
    ->ArgNames({"width", "sleep5ms"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(40);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  cluster.reset();
  return 0;
}
