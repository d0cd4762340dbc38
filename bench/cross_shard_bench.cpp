// Cross-shard transactions: a transfer of store credit between customers on
// two shards (two UPDATEs through Cluster::TransactAcross: two-phase commit
// decided in the catalog) next to the same two UPDATEs on one shard
// (Cluster::Transact, two customers of one shard); BM_TransferRatio runs
// both in every iteration, so drifting load hits them alike, and times each
// step of the two-phase commit with the on_step hook. And the recovery
// pass (RecoverInDoubt) on an idle cluster: what each interval costs when
// nothing is in doubt. Local cluster (lab/cluster start), scratch databases.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <pqxx/pqxx>
#include <string>

#include "shardkit/cluster.hpp"
#include "support/test_cluster.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Setup {
  std::unique_ptr<shardkit::test::ScratchCluster> scratch;
  std::unique_ptr<shardkit::Cluster> cluster;
  int a = 0;  // shard 0
  int c = 0;  // shard 0, a's bucket (a one-shard transaction is pinned to one bucket)
  int b = 0;  // shard 1
};

Setup& Shared() {
  static Setup setup = [] {
    Setup s;
    s.scratch = std::make_unique<shardkit::test::ScratchCluster>("cross_shard_bench");
    shardkit::ClusterOptions options;
    options.in_doubt_interval = std::chrono::milliseconds(0);
    s.cluster = shardkit::Cluster::Open(s.scratch->Config(), options);
    for (int id = 1; s.a == 0 || s.b == 0 || s.c == 0; ++id) {
      const shardkit::Route route = s.cluster->Route(shardkit::CustomerId{id});
      const int shard = shardkit::ToInt(route.shard);
      if (shard == 0 && s.a == 0) {
        s.a = id;
      } else if (shard == 0 && s.c == 0 && route.bucket == s.cluster->Route(shardkit::CustomerId{s.a}).bucket) {
        s.c = id;
      } else if (shard == 1 && s.b == 0) {
        s.b = id;
      }
    }
    for (const int id : {s.a, s.b, s.c}) {
      (void)s.cluster->Execute("INSERT INTO store_credit (customer_id, balance_cents) VALUES ($1, 1000000000000)",
                               {std::to_string(id)});
    }
    return s;
  }();
  return setup;
}

constexpr const char* kDebit = "UPDATE store_credit SET balance_cents = balance_cents - 1 WHERE customer_id = $1";
constexpr const char* kCredit = "UPDATE store_credit SET balance_cents = balance_cents + 1 WHERE customer_id = $1";

// `fn_began` and `fn_ended`: when the function ran (the last attempt).
void TwoShards(const shardkit::CrossShardOptions& options, Clock::time_point* fn_began = nullptr,
               Clock::time_point* fn_ended = nullptr) {
  Setup& s = Shared();
  s.cluster->TransactAcross(
      {shardkit::CustomerId{s.a}, shardkit::CustomerId{s.b}},
      [&](shardkit::CrossShardTransaction& tx) {
        if (fn_began != nullptr) *fn_began = Clock::now();
        tx.On(shardkit::CustomerId{s.a}).Execute(kDebit, {std::to_string(s.a)});
        tx.On(shardkit::CustomerId{s.b}).Execute(kCredit, {std::to_string(s.b)});
        if (fn_ended != nullptr) *fn_ended = Clock::now();
      },
      options);
}

void OneShard(const shardkit::RoutedOptions& options) {
  Setup& s = Shared();
  s.cluster->Transact(
      shardkit::CustomerId{s.a},
      [&](shardkit::SqlTransaction& tx) {
        tx.Execute(kDebit, {std::to_string(s.a)});
        tx.Execute(kCredit, {std::to_string(s.c)});
      },
      options);
}

void BM_TransferTwoShards(benchmark::State& state) {
  shardkit::CrossShardOptions options;
  options.read_token = state.range(0) != 0;
  (void)Shared();  // set up before the timing
  for (auto _ : state) TwoShards(options);
}
BENCHMARK(BM_TransferTwoShards)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_TransactOneShard(benchmark::State& state) {
  shardkit::RoutedOptions options;
  options.read_token = state.range(0) != 0;
  (void)Shared();
  for (auto _ : state) OneShard(options);
}
BENCHMARK(BM_TransactOneShard)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Both in every iteration; counters: each one's mean time, the ratio, and
// the two-phase commit's steps: BEGIN on every shard (the call to the
// function), the function (two UPDATEs), the coordinator log's row (to
// "logged"), then each step to the next, the last "committed" to the return
// (the row deleted).
void BM_TransferRatio(benchmark::State& state) {
  using std::chrono::duration;
  double two = 0;
  double one = 0;
  double begin = 0;
  double fn = 0;
  double steps[7] = {};  // fn end to logged, prepare 1, prepare 2, decide, commit 1, commit 2, forget
  int n = 0;
  Clock::time_point fn_began;
  Clock::time_point fn_ended;
  Clock::time_point last;
  int step = 0;
  shardkit::CrossShardOptions options;
  options.on_step = [&](const shardkit::CrossShardStep&) {
    const auto now = Clock::now();
    if (step < 6) steps[step] += duration<double, std::micro>(now - (step == 0 ? fn_ended : last)).count();
    ++step;
    last = now;
  };
  const shardkit::RoutedOptions plain;
  (void)Shared();
  for (auto _ : state) {
    step = 0;
    const auto t0 = Clock::now();
    TwoShards(options, &fn_began, &fn_ended);
    const auto t1 = Clock::now();
    begin += duration<double, std::micro>(fn_began - t0).count();
    fn += duration<double, std::micro>(fn_ended - fn_began).count();
    steps[6] += duration<double, std::micro>(t1 - last).count();
    OneShard(plain);
    const auto t2 = Clock::now();
    two += duration<double, std::micro>(t1 - t0).count();
    one += duration<double, std::micro>(t2 - t1).count();
    ++n;
  }
  state.counters["two_shard_us"] = two / n;
  state.counters["one_shard_us"] = one / n;
  state.counters["ratio"] = two / one;
  state.counters["s0a_begin_us"] = begin / n;
  state.counters["s0b_fn_us"] = fn / n;
  const char* names[7] = {"s0c_log_us",    "s1_prepare1_us", "s2_prepare2_us", "s3_decide_us",
                          "s4_commit1_us", "s5_commit2_us",  "s6_forget_us"};
  for (int i = 0; i < 7; ++i) state.counters[names[i]] = steps[i] / n;
}
BENCHMARK(BM_TransferRatio)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One recovery pass with nothing in doubt (a pass opens its catalog
// connection, lists every shard's pg_prepared_xacts, reads the log's old rows).
void BM_RecoveryPassIdle(benchmark::State& state) {
  Setup& s = Shared();
  for (auto _ : state) {
    const shardkit::InDoubtReport report = shardkit::RecoverInDoubt(s.cluster->Resolver(), s.scratch->CatalogDsn());
    if (!report.failures.empty() || !report.committed.empty() || !report.rolled_back.empty()) {
      state.SkipWithError("the pass found something to do on an idle cluster");
    }
  }
}
BENCHMARK(BM_RecoveryPassIdle)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Its first step alone: a new connection to the catalog (what a pass
// opens each time), for where the pass's time goes.
void BM_CatalogConnect(benchmark::State& state) {
  Setup& s = Shared();
  const std::string dsn = s.scratch->CatalogDsn().Reveal();
  for (auto _ : state) {
    pqxx::connection c{dsn};
    benchmark::DoNotOptimize(c.is_open());
  }
}
BENCHMARK(BM_CatalogConnect)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
BENCHMARK_MAIN();
