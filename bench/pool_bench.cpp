// Pool Acquire+release (uncontended and contended), and the Bookstore case's routed
// "my orders" query through shardkit vs the same query on a raw libpqxx
// connection held by the benchmark. Needs the local cluster (lab/cluster start).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <pqxx/pqxx>

#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace {

constexpr shardkit::CustomerId kCustomer{4242};
constexpr const char* kMyOrders =
    "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";

// One scratch cluster for the whole run, with customer 4242's ten orders.
shardkit::test::ScratchCluster& Cluster() {
  static auto cluster = [] {
    auto c = std::make_unique<shardkit::test::ScratchCluster>("pool_bench");
    const int shard = shardkit::ToInt(shardkit::BucketDirectory::EvenSplit(2).ShardFor(kCustomer));
    c->ExecOnShard(
        shard,
        fmt::format(
            "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
            "SELECT {0}, bucket_of({0}), 1000 + g, now() - g * interval '1 day', 10 * g FROM generate_series(1, 10) g",
            kCustomer));
    return c;
  }();
  return *cluster;
}

void BM_PoolAcquireRelease(benchmark::State& state) {
  static std::unique_ptr<shardkit::ConnectionPool> pool;
  if (state.thread_index() == 0) {
    shardkit::PoolOptions options;
    options.max_size = 4;
    options.max_waiters = 64;
    pool = std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{0}, Cluster().ShardDsn(0), options);
    std::vector<shardkit::ConnectionPool::Lease> warm;
    for (int i = 0; i < 4; ++i) warm.push_back(pool->Acquire());
  }
  for (auto _ : state) {
    auto lease = pool->Acquire(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    benchmark::DoNotOptimize(&lease.Connection());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  if (state.thread_index() == 0) {
    state.counters["waited"] = static_cast<double>(pool->Stats().waited);
  }
}
// 1 thread: uncontended; 8 threads over 4 connections: contended.
BENCHMARK(BM_PoolAcquireRelease)->Threads(1)->Threads(4)->Threads(8)->UseRealTime();

void BM_MyOrdersRawLibpqxx(benchmark::State& state) {
  auto& cluster = Cluster();
  const shardkit::ShardId shard = shardkit::BucketDirectory::EvenSplit(2).ShardFor(kCustomer);
  pqxx::connection connection{cluster.ShardDsn(shardkit::ToInt(shard)).Reveal()};
  for (auto _ : state) {
    pqxx::read_transaction tx{connection};
    auto rows = tx.exec_params(kMyOrders, kCustomer);
    tx.commit();
    if (rows.size() != 10) state.SkipWithError("expected 10 orders");
  }
}
BENCHMARK(BM_MyOrdersRawLibpqxx)->UseRealTime();

void BM_MyOrdersRoutedByShardkit(benchmark::State& state) {
  auto resolver = Cluster().MakeResolver();
  for (auto _ : state) {
    auto lease = resolver->PoolFor(kCustomer).Acquire();
    pqxx::read_transaction tx{*lease};
    auto rows = tx.exec_params(kMyOrders, kCustomer);
    tx.commit();
    if (rows.size() != 10) state.SkipWithError("expected 10 orders");
  }
}
BENCHMARK(BM_MyOrdersRoutedByShardkit)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
