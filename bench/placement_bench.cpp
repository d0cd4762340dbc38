// Placement functions per call: modulo, jump hash, ring (1, 160, 256
// virtual nodes), rendezvous, and the bucket table (BucketOf + a lookup).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/resharding/placement.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/workers/hot_keys.hpp"

namespace {

std::vector<std::uint64_t> Keys() {
  std::vector<std::uint64_t> keys(4096);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = shardkit::PlacementHash(static_cast<std::uint64_t>(i));
  return keys;
}

void BM_PlacementHash(benchmark::State& state) {
  std::uint64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::PlacementHash(i++));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_PlacementHash);

void BM_Modulo(benchmark::State& state) {
  const auto keys = Keys();
  const auto nodes = static_cast<int>(state.range(0));
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::ModuloNode(keys[i++ & 4095], nodes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Modulo)->Arg(5)->ArgName("nodes");

void BM_JumpConsistentHash(benchmark::State& state) {
  const auto keys = Keys();
  const auto nodes = static_cast<int>(state.range(0));
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::JumpConsistentHash(keys[i++ & 4095], nodes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_JumpConsistentHash)->Arg(5)->Arg(64)->Arg(1024)->ArgName("nodes");

void BM_HashRing(benchmark::State& state) {
  const auto keys = Keys();
  const shardkit::HashRing ring(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(ring.NodeFor(keys[i++ & 4095]));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_HashRing)->ArgsProduct({{5, 64}, {1, 160, 256}})->ArgNames({"nodes", "vnodes"});

void BM_Rendezvous(benchmark::State& state) {
  const auto keys = Keys();
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(state.range(0)));
  std::iota(ids.begin(), ids.end(), std::uint64_t{0});
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::RendezvousNode(keys[i++ & 4095], ids));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Rendezvous)->Arg(5)->Arg(64)->ArgName("nodes");

void BM_BucketTable(benchmark::State& state) {
  const auto directory = shardkit::BucketDirectory::EvenSplit(5);
  std::int32_t id = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(directory.ShardFor(shardkit::CustomerId{id}));
    id += 7919;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_BucketTable);

void BM_SaltedPartition(benchmark::State& state) {
  std::int64_t key = 0;
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::SaltedPartition(shardkit::CustomerId{4242}, key++, 8, 64));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_SaltedPartition);

}  // namespace

BENCHMARK_MAIN();
