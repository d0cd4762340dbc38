// BucketOf and ShardFor per call: the cost of routing one customer.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "shardkit/bucket.hpp"
#include "shardkit/directory.hpp"
#include "shardkit/resolver.hpp"

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

// Through the resolver: includes the atomic load of the current directory
// snapshot (a shared_ptr copy), which is what makes directory swaps safe.
void BM_ResolverShardFor(benchmark::State& state) {
  const auto ids = Ids();
  std::vector<std::unique_ptr<shardkit::ConnectionPool>> pools;
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{0}, "host=127.0.0.1 port=1"));
  pools.push_back(std::make_unique<shardkit::ConnectionPool>(shardkit::ShardId{1}, "host=127.0.0.1 port=1"));
  shardkit::BucketShardResolver resolver{shardkit::BucketDirectory::EvenSplit(2), std::move(pools)};
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(resolver.ShardFor(ids[i++ & 4095]));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_ResolverShardFor)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
