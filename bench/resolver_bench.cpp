// BucketOf and ShardFor per call: the cost of routing one customer.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/resolver.hpp"

namespace {

std::vector<shardkit::CustomerId> Ids() {
  std::vector<shardkit::CustomerId> ids(4096);
  std::uint32_t x = 12345;
  for (auto& id : ids) {
    x = x * 1664525U + 1013904223U;
    id = shardkit::CustomerId{static_cast<std::int32_t>(x)};
  }
  return ids;
}

void BM_BucketOf(benchmark::State& state) {
  const auto ids = Ids();
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(shardkit::BucketOf(ids[i++ & 4095]));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_BucketOf);

void BM_DirectoryShardFor(benchmark::State& state) {
  const auto ids = Ids();
  const auto directory = shardkit::BucketDirectory::EvenSplit(2);
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(directory.ShardFor(ids[i++ & 4095]));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_DirectoryShardFor);

// Through the resolver: one atomic load of the bucket's routing word in the
// DirectoryHolder, which is what makes directory swaps safe (goal: at most
// 2 ns and at most 2x BM_DirectoryShardFor).
void BM_ResolverShardFor(benchmark::State& state) {
  const auto ids = Ids();
  std::vector<std::unique_ptr<shardkit::ConnectionPool>> pools;
  const shardkit::Dsn nowhere{"host=127.0.0.1 port=1"};
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{0}, nowhere));
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{1}, nowhere));
  shardkit::BucketShardResolver resolver{shardkit::BucketDirectory::EvenSplit(2), std::move(pools)};
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(resolver.ShardFor(ids[i++ & 4095]));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_ResolverShardFor)->Threads(1)->Threads(2);

// Resolve: bucket, shard, directory version and pool, consistently; the
// shard and version come from the same routing word (one atomic load).
void BM_ResolverResolve(benchmark::State& state) {
  const auto ids = Ids();
  std::vector<std::unique_ptr<shardkit::ConnectionPool>> pools;
  const shardkit::Dsn nowhere{"host=127.0.0.1 port=1"};
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{0}, nowhere));
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{1}, nowhere));
  shardkit::BucketShardResolver resolver{shardkit::BucketDirectory::EvenSplit(2), std::move(pools)};
  std::size_t i = 0;
  for (auto _ : state) {
    const auto route = resolver.Resolve(ids[i++ & 4095]);
    benchmark::DoNotOptimize(route.directory_version);
    benchmark::DoNotOptimize(&route.pool);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_ResolverResolve);

// The whole snapshot (a shared_ptr copy): what a reader that needs every
// bucket at once pays, e.g. once per scatter.
void BM_DirectoryHolderCurrent(benchmark::State& state) {
  static shardkit::DirectoryHolder holder{shardkit::BucketDirectory::EvenSplit(2)};
  for (auto _ : state) {
    auto snapshot = holder.Current();
    benchmark::DoNotOptimize(snapshot.get());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_DirectoryHolderCurrent)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
