// Snowflake IDs: layout, clock behaviour with an injected clock (sequence
// exhaustion, steps back within and beyond tolerance), uniqueness across
// threads and generators, fork safety.
#include "shardkit/ids/snowflake.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/ids/id_clock.hpp"

namespace shardkit {
namespace {

constexpr std::int64_t kStart = 1'717'243'200'000;  // 2024-06-01T12:00:00Z

SnowflakeOptions WithClock(std::shared_ptr<ManualIdClock> clock) {
  SnowflakeOptions options;
  options.clock = std::move(clock);
  return options;
}

TEST(Snowflake, LayoutAndDecode) {
  const SnowflakeParts parts{kStart, 1023, 4095};
  const std::int64_t id = ComposeSnowflake(parts);
  EXPECT_EQ(id, ((kStart - kDefaultIdEpochUnixMs) << 22) | (1023 << 12) | 4095);
  EXPECT_EQ(DecodeSnowflake(id), parts);
  EXPECT_GT(id, 0);
  // The largest: 41 bits of time still leave the sign bit 0.
  const std::int64_t last = ComposeSnowflake({kDefaultIdEpochUnixMs + (std::int64_t{1} << 41) - 1, 1023, 4095});
  EXPECT_EQ(last, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(FormatUnixMsUtc(kDefaultIdEpochUnixMs + (std::int64_t{1} << 41) - 1), "2093-09-06T15:47:35.551Z");
  EXPECT_EQ(FormatUnixMsUtc(kDefaultIdEpochUnixMs), "2024-01-01T00:00:00.000Z");
}

TEST(Snowflake, CustomEpoch) {
  constexpr std::int64_t kTwitterEpoch = 1'288'834'974'657;
  const std::int64_t id = ComposeSnowflake({kStart, 5, 6}, kTwitterEpoch);
  EXPECT_EQ(DecodeSnowflake(id, kTwitterEpoch), (SnowflakeParts{kStart, 5, 6}));
  EXPECT_NE(DecodeSnowflake(id).unix_ms, kStart);
}

TEST(Snowflake, BadPartsAndNegativeIdsAreRejected) {
  EXPECT_THROW((void)DecodeSnowflake(-1), IdFormatError);
  EXPECT_THROW((void)ComposeSnowflake({kStart, 1024, 0}), IdFormatError);
  EXPECT_THROW((void)ComposeSnowflake({kStart, 0, 4096}), IdFormatError);
  EXPECT_THROW((void)ComposeSnowflake({kDefaultIdEpochUnixMs - 1, 0, 0}), IdFormatError);
  EXPECT_THROW(SnowflakeGenerator(1024), IdGeneratorError);
  EXPECT_THROW(SnowflakeGenerator(-1), IdGeneratorError);
}

TEST(SnowflakeGenerator, IdsCarryTheClockWorkerAndSequence) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{42, WithClock(clock)};
  EXPECT_EQ(generator.WorkerId(), 42);
  EXPECT_EQ(DecodeSnowflake(generator.Next()), (SnowflakeParts{kStart, 42, 0}));
  EXPECT_EQ(DecodeSnowflake(generator.Next()), (SnowflakeParts{kStart, 42, 1}));
  clock->AdvanceMs(1);
  EXPECT_EQ(DecodeSnowflake(generator.Next()), (SnowflakeParts{kStart + 1, 42, 0}));
  clock->AdvanceNanos(999'999);  // still the same millisecond
  EXPECT_EQ(DecodeSnowflake(generator.Next()), (SnowflakeParts{kStart + 1, 42, 1}));
  EXPECT_EQ(clock->WaitCount(), 0);
}

TEST(SnowflakeGenerator, SequenceExhaustionWaitsForTheNextMillisecond) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{1, WithClock(clock)};
  std::int64_t previous = -1;
  for (int i = 0; i < SnowflakeGenerator::kIdsPerMs; ++i) {
    const std::int64_t id = generator.Next();
    ASSERT_GT(id, previous);
    previous = id;
    ASSERT_EQ(DecodeSnowflake(id).sequence, i);
  }
  EXPECT_EQ(clock->WaitCount(), 0);
  const std::int64_t id = generator.Next();  // the 4097th in one millisecond
  EXPECT_EQ(clock->WaitCount(), 1);
  EXPECT_EQ(clock->NowUnixMs(), kStart + 1);                           // it waited until the next millisecond ...
  EXPECT_EQ(DecodeSnowflake(id), (SnowflakeParts{kStart + 1, 1, 0}));  // ... and issued there
  EXPECT_GT(id, previous);
}

TEST(SnowflakeGenerator, StepBackWithinToleranceWaits) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{3, WithClock(clock)};
  const std::int64_t before = generator.Next();
  clock->AdvanceMs(-5);  // NTP stepped the clock back 5 ms (tolerance: 10)
  const std::int64_t after = generator.Next();
  EXPECT_EQ(clock->WaitCount(), 1);
  EXPECT_EQ(clock->WaitedNanos(), 5'000'000);  // until the clock is back at the last millisecond
  EXPECT_GT(after, before);
  EXPECT_EQ(DecodeSnowflake(after), (SnowflakeParts{kStart, 3, 1}));
}

TEST(SnowflakeGenerator, StepBackOfExactlyTheToleranceWaits) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{3, WithClock(clock)};
  (void)generator.Next();
  clock->AdvanceMs(-10);
  EXPECT_NO_THROW((void)generator.Next());
  EXPECT_EQ(clock->WaitedNanos(), 10'000'000);
}

TEST(SnowflakeGenerator, StepBackBeyondToleranceThrowsNamingTheStep) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{3, WithClock(clock)};
  const std::int64_t before = generator.Next();
  clock->AdvanceMs(-11);
  try {
    (void)generator.Next();
    FAIL() << "no error for an 11 ms step back";
  } catch (const IdGeneratorError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("stepped back 11 ms"), std::string::npos) << message;
    EXPECT_NE(message.find("10 ms tolerated"), std::string::npos) << message;
    EXPECT_NE(message.find("worker id 3"), std::string::npos) << message;
  }
  EXPECT_EQ(clock->WaitCount(), 0);
  // Still refuses while the clock is behind; recovers once it has caught up.
  EXPECT_THROW((void)generator.Next(), IdGeneratorError);
  clock->AdvanceMs(11);
  const std::int64_t after = generator.Next();
  EXPECT_GT(after, before);
}

TEST(SnowflakeGenerator, ConfigurableTolerance) {
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeOptions strict = WithClock(clock);
  strict.max_clock_step_back = std::chrono::milliseconds{0};
  SnowflakeGenerator generator{3, strict};
  (void)generator.Next();
  clock->AdvanceMs(-1);
  EXPECT_THROW((void)generator.Next(), IdGeneratorError);

  auto clock2 = std::make_shared<ManualIdClock>(kStart);
  SnowflakeOptions lenient = WithClock(clock2);
  lenient.max_clock_step_back = std::chrono::milliseconds{1000};
  SnowflakeGenerator generator2{3, lenient};
  (void)generator2.Next();
  clock2->AdvanceMs(-700);
  EXPECT_NO_THROW((void)generator2.Next());
  EXPECT_EQ(clock2->WaitedNanos(), 700'000'000);
}

TEST(SnowflakeGenerator, ClockBeforeTheEpochIsAnError) {
  auto clock = std::make_shared<ManualIdClock>(kDefaultIdEpochUnixMs - 1000);
  SnowflakeGenerator generator{3, WithClock(clock)};
  EXPECT_THROW((void)generator.Next(), IdGeneratorError);
}

TEST(SnowflakeGenerator, SystemClockIdsAreCurrentAndIncreasing) {
  SnowflakeGenerator generator{7};
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const auto before = now_ms();
  std::int64_t previous = generator.Next();
  for (int i = 0; i < 200'000; ++i) {  // ~50 ms of saturated IDs: many sequence rollovers
    const std::int64_t id = generator.Next();
    ASSERT_GT(id, previous);
    previous = id;
  }
  const auto parts = DecodeSnowflake(previous);
  EXPECT_EQ(parts.worker_id, 7);
  EXPECT_GE(parts.unix_ms, before);
  EXPECT_LE(parts.unix_ms, now_ms());
}

TEST(SnowflakeGenerator, UniqueAcrossThreadsAndGenerators) {
  // 4 generators (distinct worker ids), each shared by 2 threads: 2,000,000 IDs.
  constexpr int kGenerators = 4;
  constexpr int kThreadsPerGenerator = 2;
  constexpr int kPerThread = 250'000;
  std::vector<std::unique_ptr<SnowflakeGenerator>> generators;
  for (int g = 0; g < kGenerators; ++g) generators.push_back(std::make_unique<SnowflakeGenerator>(100 + g));
  std::vector<std::vector<std::int64_t>> results(kGenerators * kThreadsPerGenerator);
  std::vector<std::thread> threads;
  for (int t = 0; t < kGenerators * kThreadsPerGenerator; ++t) {
    threads.emplace_back([&, t] {
      SnowflakeGenerator& generator = *generators[static_cast<std::size_t>(t % kGenerators)];
      auto& out = results[static_cast<std::size_t>(t)];
      out.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) out.push_back(generator.Next());
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<std::int64_t> all;
  for (std::size_t t = 0; t < results.size(); ++t) {
    // What one thread sees of a shared generator is strictly increasing.
    EXPECT_EQ(std::adjacent_find(results[t].begin(), results[t].end(), std::greater_equal<>()), results[t].end());
    for (std::int64_t id : results[t])
      ASSERT_EQ(DecodeSnowflake(id).worker_id, 100 + static_cast<int>(t) % kGenerators);
    all.insert(all.end(), results[t].begin(), results[t].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate Snowflake ID";
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kGenerators * kThreadsPerGenerator * kPerThread));
}

TEST(SnowflakeGenerator, ConcurrentCallersOnAFrozenClockShareTheSequence) {
  // Threads race on one millisecond: together they get exactly 4096
  // distinct IDs before anyone has to wait.
  auto clock = std::make_shared<ManualIdClock>(kStart);
  SnowflakeGenerator generator{9, WithClock(clock)};
  std::vector<std::vector<std::int64_t>> results(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1024; ++i) results[t].push_back(generator.Next());
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<int> sequences;
  for (const auto& r : results) {
    for (std::int64_t id : r) {
      const auto parts = DecodeSnowflake(id);
      ASSERT_EQ(parts.unix_ms, kStart);
      sequences.push_back(parts.sequence);
    }
  }
  std::sort(sequences.begin(), sequences.end());
  ASSERT_EQ(sequences.size(), 4096U);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(sequences[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(clock->WaitCount(), 0);
}

TEST(SnowflakeGenerator, RefusesToIssueInAForkedChild) {
  SnowflakeGenerator generator{11};
  (void)generator.Next();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      (void)generator.Next();
      _exit(1);  // issued: the child would duplicate the parent's IDs
    } catch (const IdGeneratorError&) {
      _exit(0);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the forked child issued an ID with the parent's worker id";
  EXPECT_NO_THROW((void)generator.Next());  // the parent carries on
}

TEST(ManualIdClock, WaitUntilJumpsForwardOnly) {
  ManualIdClock clock{1000};
  clock.WaitUntil(1'001'000'000);
  EXPECT_EQ(clock.NowUnixMs(), 1001);
  clock.WaitUntil(1'000'000'000);  // already past: no jump back
  EXPECT_EQ(clock.NowUnixMs(), 1001);
  EXPECT_EQ(clock.WaitCount(), 2);
  EXPECT_EQ(clock.WaitedNanos(), 1'000'000);
}

TEST(SystemIdClock, WaitUntilReturnsAtOrAfterTheTarget) {
  SystemIdClock clock;
  const std::int64_t target = clock.NowUnixNanos() + 3'000'000;
  clock.WaitUntil(target);
  EXPECT_GE(clock.NowUnixNanos(), target);
}

}  // namespace
}  // namespace shardkit
