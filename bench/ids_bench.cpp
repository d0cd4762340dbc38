// IDs per second per thread: shardkit's UUIDv7, Snowflake and bucketed
// generators, next to what a user would pick instead (libuuid's time-based
// uuid_generate_time, Boost.Uuid's random generator) and next to the
// formats' own limits (Snowflake: 4096 per ms per worker = 4,096,000/s;
// bucketed: 256 per ms per worker = 256,000/s).
//
//   build/bench/ids_bench --benchmark_counters_tabular=true
//
// Counters: ns_per_id (lower is better), ids_per_s, of_limit (fraction of the
// format's limit, saturated generators only). Saturated generators run on
// the real clock, so the format limit binds: they spend most of their time
// waiting for the next millisecond, and of_limit says how little of each
// millisecond they lose.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <time.h>

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "shardkit/ids/bucketed_id.hpp"
#include "shardkit/ids/id_clock.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/uuidv7.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Per-thread rate counters; Google Benchmark sums them over threads, so
// "ids_per_s" is the total and "ns_per_id" is per thread.
void Report(benchmark::State& state, Clock::time_point start, double format_limit_per_s = 0) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto ids = static_cast<double>(state.iterations());
  state.counters["ids_per_s"] = benchmark::Counter(ids / seconds);
  state.counters["ns_per_id"] = benchmark::Counter(seconds * 1e9 / ids, benchmark::Counter::kAvgThreads);
  if (format_limit_per_s > 0) state.counters["of_limit"] = benchmark::Counter(ids / seconds / format_limit_per_s);
}

// ---- shardkit UUIDv7 -------------------------------------------------------

void BM_Uuidv7_Next(benchmark::State& state) {
  shardkit::Uuidv7Generator generator;  // one per thread, as documented
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator.Next());
  Report(state, start);
}
BENCHMARK(BM_Uuidv7_Next)->UseRealTime()->Threads(1)->Threads(2);

void BM_Uuidv7_NextAsText(benchmark::State& state) {
  shardkit::Uuidv7Generator generator;
  char text[shardkit::Uuid::kTextSize];
  const auto start = Clock::now();
  for (auto _ : state) {
    generator.Next().WriteText(text);
    benchmark::DoNotOptimize(text);
  }
  Report(state, start);
}
BENCHMARK(BM_Uuidv7_NextAsText)->UseRealTime();

void BM_Uuidv7_ThreadLocal(benchmark::State& state) {
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(shardkit::NewUuidv7());
  Report(state, start);
}
BENCHMARK(BM_Uuidv7_ThreadLocal)->UseRealTime();

void BM_Uuidv7_Fill256(benchmark::State& state) {
  shardkit::Uuidv7Generator generator;
  std::vector<shardkit::Uuid> batch(256);
  const auto start = Clock::now();
  for (auto _ : state) {
    generator.Fill(batch);
    benchmark::DoNotOptimize(batch.data());
  }
  state.SetItemsProcessed(state.iterations() * 256);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  state.counters["ns_per_id"] = benchmark::Counter(seconds * 1e9 / (static_cast<double>(state.iterations()) * 256));
}
BENCHMARK(BM_Uuidv7_Fill256)->UseRealTime();

// The generator's cost without the system clock (a manual clock that stands
// still): what the clock read costs is the difference to BM_Uuidv7_Next.
void BM_Uuidv7_NextManualClock(benchmark::State& state) {
  auto clock = std::make_shared<shardkit::ManualIdClock>(1'750'000'000'000);
  shardkit::Uuidv7Generator generator{clock};
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator.Next());
  Report(state, start);
}
BENCHMARK(BM_Uuidv7_NextManualClock)->UseRealTime();

// ---- what users pick instead ------------------------------------------------

// libuuid (Debian's uuid-dev / libuuid1), loaded at run time so the bench
// needs no extra link dependency: uuid_generate_time makes version 1 UUIDs.
using UuidGenerateFn = void (*)(unsigned char out[16]);
UuidGenerateFn LibuuidFunction(const char* name) {
  static void* library = dlopen("libuuid.so.1", RTLD_NOW);
  return library == nullptr ? nullptr : reinterpret_cast<UuidGenerateFn>(dlsym(library, name));
}

void BM_Libuuid_GenerateTime(benchmark::State& state) {
  const UuidGenerateFn generate = LibuuidFunction("uuid_generate_time");
  if (generate == nullptr) {
    state.SkipWithError("libuuid.so.1 not found (Debian package libuuid1)");
    return;
  }
  unsigned char out[16];
  const auto start = Clock::now();
  for (auto _ : state) {
    generate(out);
    benchmark::DoNotOptimize(out);
  }
  Report(state, start);
}
BENCHMARK(BM_Libuuid_GenerateTime)->UseRealTime()->Threads(1)->Threads(2);

void BM_Libuuid_GenerateRandom(benchmark::State& state) {
  const UuidGenerateFn generate = LibuuidFunction("uuid_generate_random");
  if (generate == nullptr) {
    state.SkipWithError("libuuid.so.1 not found (Debian package libuuid1)");
    return;
  }
  unsigned char out[16];
  const auto start = Clock::now();
  for (auto _ : state) {
    generate(out);
    benchmark::DoNotOptimize(out);
  }
  Report(state, start);
}
BENCHMARK(BM_Libuuid_GenerateRandom)->UseRealTime();

// Boost.Uuid's random_generator: version 4 from the OS entropy source.
void BM_Boost_RandomGenerator(benchmark::State& state) {
  boost::uuids::random_generator generator;
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator());
  Report(state, start);
}
BENCHMARK(BM_Boost_RandomGenerator)->UseRealTime()->Threads(1)->Threads(2);

// Boost.Uuid with a Mersenne twister: fast, but predictable (not a CSPRNG).
void BM_Boost_RandomGeneratorMt19937(benchmark::State& state) {
  boost::uuids::random_generator_mt19937 generator;
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator());
  Report(state, start);
}
BENCHMARK(BM_Boost_RandomGeneratorMt19937)->UseRealTime();

// ---- Snowflake and bucketed ------------------------------------------------

// Saturated: one worker, real clock, as fast as it goes. The format allows
// 4096 IDs per millisecond; the rest of each millisecond is spent waiting.
void BM_Snowflake_Saturated(benchmark::State& state) {
  static std::unique_ptr<shardkit::SnowflakeGenerator> generator;
  if (state.thread_index() == 0) generator = std::make_unique<shardkit::SnowflakeGenerator>(1);
  // Google Benchmark lines threads up before the loop starts.
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator->Next());
  Report(state, start, 4'096'000.0);
}
BENCHMARK(BM_Snowflake_Saturated)->UseRealTime()->MinTime(1.0)->Threads(1)->Threads(2);

void BM_Bucketed_Saturated(benchmark::State& state) {
  shardkit::BucketedIdGenerator generator{1};
  int bucket = 0;
  const auto start = Clock::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(generator.Next(shardkit::BucketId{bucket}));
    bucket = (bucket + 1) & (shardkit::kBucketCount - 1);
  }
  Report(state, start, 256'000.0);
}
BENCHMARK(BM_Bucketed_Saturated)->UseRealTime()->MinTime(1.0);

// The cost of one Snowflake ID when the format limit does not bind: a manual
// clock that jumps to the next millisecond whenever the generator waits.
void BM_Snowflake_CostPerId(benchmark::State& state) {
  shardkit::SnowflakeOptions options;
  options.clock = std::make_shared<shardkit::ManualIdClock>(1'750'000'000'000);
  shardkit::SnowflakeGenerator generator{1, options};
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator.Next());
  Report(state, start);
}
BENCHMARK(BM_Snowflake_CostPerId)->UseRealTime();

void BM_Bucketed_CostPerId(benchmark::State& state) {
  shardkit::SnowflakeOptions options;
  options.clock = std::make_shared<shardkit::ManualIdClock>(1'750'000'000'000);
  shardkit::BucketedIdGenerator generator{1, options};
  const auto start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(generator.Next(shardkit::BucketId{44}));
  Report(state, start);
}
BENCHMARK(BM_Bucketed_CostPerId)->UseRealTime();

// ---- context -----------------------------------------------------------------

void BM_ClockGettimeRealtime(benchmark::State& state) {
  timespec ts{};
  for (auto _ : state) {
    clock_gettime(CLOCK_REALTIME, &ts);
    benchmark::DoNotOptimize(ts);
  }
}
BENCHMARK(BM_ClockGettimeRealtime);

}  // namespace

BENCHMARK_MAIN();
