// Reads on replicas and the cost of read-your-writes: a routed read on the
// customer's shard's replica next to the same read on its primary; one probe
// round of the replica monitor (what it costs the servers, per interval);
// and the read token's cost on the write path: a whole routed write through
// Cluster::Run, with and without a token in turn
// (BM_TokenShareOfClusterRun). Needs the local cluster with replicas
// (SHARDKIT_REPLICAS=1 lab/cluster start).
#include <benchmark/benchmark.h>
#include <atomic>
#include <memory>
#include <pqxx/pqxx>
#include <string>

#include "shardkit/cluster.hpp"
#include "support/bookstore_rows.hpp"
#include "support/test_cluster.hpp"

namespace {

// FillBookstore gives customer i (i % 5) orders: four.
constexpr shardkit::CustomerId kCustomer{4};
constexpr std::size_t kOrders = 4;
constexpr const char* kMyOrders =
    "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";

struct Setup {
  std::unique_ptr<shardkit::test::ScratchCluster> scratch;
  std::unique_ptr<shardkit::Cluster> cluster;
  bool has_replicas = false;
};

Setup& Shared() {
  static Setup setup = [] {
    Setup s;
    s.has_replicas = shardkit::test::HasReplicas();
    if (!s.has_replicas) return s;
    s.scratch = std::make_unique<shardkit::test::ScratchCluster>("replica_bench",
                                                                 shardkit::test::ScratchOptions().WithReplicas());
    shardkit::test::FillBookstore(*s.scratch, 1000);
    s.scratch->CatchUpReplicas();
    s.cluster = shardkit::Cluster::Open(s.scratch->Config());
    s.cluster->Replicas()->ProbeNow();
    s.cluster->Replicas()->ProbeNow();
    return s;
  }();
  return setup;
}

bool Ready(benchmark::State& state) {
  if (!Shared().has_replicas) {
    state.SkipWithError("the local cluster has no replicas: SHARDKIT_REPLICAS=1 lab/cluster start");
    return false;
  }
  return true;
}

void RoutedRead(benchmark::State& state, shardkit::ReadPreference preference) {
  if (!Ready(state)) return;
  shardkit::Cluster& cluster = *Shared().cluster;
  shardkit::RoutedOptions options;
  options.read.preference = preference;
  options.read.max_lag = std::chrono::hours(1);
  const shardkit::SqlParams params{std::to_string(shardkit::ToInt(kCustomer))};
  for (auto _ : state) {
    shardkit::RoutedOutcome outcome;
    const auto rows = cluster.Transactions().Read(kCustomer, kMyOrders, params, options, &outcome);
    if (rows.size() != kOrders) state.SkipWithError("expected the customer's orders");
    if (outcome.on_replica != (preference != shardkit::ReadPreference::kPrimary)) {
      state.SkipWithError("the read ran on the wrong server");
    }
  }
}

void BM_RoutedReadOnPrimary(benchmark::State& state) {
  RoutedRead(state, shardkit::ReadPreference::kPrimary);
}
BENCHMARK(BM_RoutedReadOnPrimary)->UseRealTime();

void BM_RoutedReadOnReplica(benchmark::State& state) {
  RoutedRead(state, shardkit::ReadPreference::kReplicaOnly);
}
BENCHMARK(BM_RoutedReadOnReplica)->UseRealTime();

// One probe of every server (in parallel, as the monitor's threads do every
// probe interval): its wall time.
void BM_ProbeRound(benchmark::State& state) {
  if (!Ready(state)) return;
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) cluster.Replicas()->ProbeNow();
}
BENCHMARK(BM_ProbeRound)->UseRealTime();

// The whole routed write as a service makes it: with a read token
// (argument 1, the default) or without (0, RoutedOptions::read_token =
// false); the COMMIT is the library's own (bounded by the deadline; the
// token read by the bucket check, sql/046).
// One order of kCustomer through Cluster::Run, with a read token or without.
void WriteOrder(benchmark::State& state, bool token) {
  static std::atomic<std::int64_t> next_order{200'000'000};
  shardkit::RoutedOptions options;
  options.read_token = token;
  shardkit::RoutedOutcome outcome;
  Shared().cluster->Run(
      kCustomer,
      [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& at) {
        tx.exec_params(
            "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 1)",
            at.key, at.bucket, next_order++);
      },
      options, &outcome);
  if (token == outcome.token.Empty()) state.SkipWithError("a token where none was asked, or none");
}

void BM_RoutedWriteClusterRun(benchmark::State& state) {
  if (!Ready(state)) return;
  for (auto _ : state) WriteOrder(state, state.range(0) != 0);
}
BENCHMARK(BM_RoutedWriteClusterRun)->Arg(1)->Arg(0)->UseRealTime();

// The token's share of the whole routed write (each iteration one Cluster::Run with a token and one without, in
// turn, so that a machine whose load drifts affects both alike), through
// the library's own COMMIT.
void BM_TokenShareOfClusterRun(benchmark::State& state) {
  if (!Ready(state)) return;
  std::chrono::nanoseconds with{0};
  std::chrono::nanoseconds without{0};
  const auto write = [&](bool token) {
    const auto started = std::chrono::steady_clock::now();
    WriteOrder(state, token);
    return std::chrono::steady_clock::now() - started;
  };
  for (auto _ : state) {
    with += write(true);
    without += write(false);
  }
  const auto us = [&](std::chrono::nanoseconds total) {
    return static_cast<double>(total.count()) / static_cast<double>(state.iterations()) / 1000.0;
  };
  state.counters["token_us"] = us(with);
  state.counters["no_token_us"] = us(without);
  state.counters["token_pct_of_write"] = 100.0 * (us(with) - us(without)) / us(with);
}
BENCHMARK(BM_TokenShareOfClusterRun)->UseRealTime();

// The primary lease's check at COMMIT (sql/042) as a share of the whole
// routed write: each iteration two Cluster::Runs in turn, with leases on and
// a lease in force on the customer's primary (a deferred trigger checks it
// at COMMIT), and with leases off (no trigger). Switched by hand between
// them, on the admin's own connection.
void BM_LeaseShareOfClusterRun(benchmark::State& state) {
  if (!Ready(state)) return;
  const shardkit::ShardId shard = Shared().cluster->Route(kCustomer).shard;
  const auto& config = Shared().scratch->Config().shards.at(static_cast<std::size_t>(shardkit::ToInt(shard)));
  pqxx::connection admin{config.AdminDsn().Reveal()};
  pqxx::nontransaction tx{admin};
  std::chrono::nanoseconds lease{0};
  std::chrono::nanoseconds off{0};
  // The first write after a change is not timed: the DDL makes the session
  // rebuild its cached plans and relation entries.
  const auto write = [&] {
    WriteOrder(state, true);
    const auto started = std::chrono::steady_clock::now();
    WriteOrder(state, true);
    return std::chrono::steady_clock::now() - started;
  };
  for (auto _ : state) {
    tx.exec("SELECT shardkit_lease_enforce(true)");
    tx.exec("SELECT shardkit_lease_extend(9000000000000000)");  // in force (year 2255)
    lease += write();
    tx.exec("SELECT shardkit_lease_enforce(false)");
    off += write();
  }
  const auto us = [&](std::chrono::nanoseconds total) {
    return static_cast<double>(total.count()) / static_cast<double>(state.iterations()) / 1000.0;
  };
  state.counters["lease_us"] = us(lease);
  state.counters["off_us"] = us(off);
  state.counters["lease_pct_of_write"] = 100.0 * (us(lease) - us(off)) / us(lease);
}
BENCHMARK(BM_LeaseShareOfClusterRun)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
