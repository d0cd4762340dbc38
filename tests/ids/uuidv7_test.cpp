// UUIDs and the UUIDv7 generator: RFC 9562 vectors, text and byte forms,
// monotonicity, uniqueness across generators and threads, fork safety.
#include "shardkit/ids/uuidv7.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <unordered_set>
#include <vector>

#include "ids/chacha.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// RFC 9562 appendix A.6: unix_ts_ms 0x017F22E279B0 (Tuesday, February 22,
// 2022 2:22:22.00 PM GMT-05:00), rand_a 0xCC3, rand_b 0x18C4DC0C0C07398F.
TEST(Uuidv7, Rfc9562AppendixA6Example) {
  const Uuid id = Uuid::FromUuidv7Fields(0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F);
  EXPECT_EQ(id.ToString(), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  EXPECT_EQ(id.Version(), 7);
  EXPECT_EQ(id.Variant(), UuidVariant::kRfc9562);
  EXPECT_EQ(id.Uuidv7UnixMs(), std::optional<std::int64_t>(0x017F22E279B0));
  EXPECT_EQ(id.Uuidv7UnixMs(), std::optional<std::int64_t>(1645557742000));
  EXPECT_EQ(FormatUnixMsUtc(*id.Uuidv7UnixMs()), "2022-02-22T19:22:22.000Z");
  EXPECT_EQ(id.RandA(), 0xCC3);
  EXPECT_EQ(Uuid::Parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"), id);
  const UuidBytes expected{0x01, 0x7f, 0x22, 0xe2, 0x79, 0xb0, 0x7c, 0xc3,
                           0x98, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39, 0x8f};
  EXPECT_EQ(id.Bytes(), expected);
}

TEST(Uuid, TextAndBytesRoundTrip) {
  Uuidv7Generator generator;
  for (int i = 0; i < 1000; ++i) {
    const Uuid id = generator.Next();
    const std::string text = id.ToString();
    ASSERT_EQ(text.size(), 36U);
    EXPECT_EQ(text[8], '-');
    EXPECT_EQ(text[13], '-');
    EXPECT_EQ(text[14], '7');  // the version digit
    EXPECT_EQ(text[18], '-');
    EXPECT_EQ(text[23], '-');
    EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return c == '-' || std::isxdigit(c) != 0; }));
    EXPECT_TRUE(std::none_of(text.begin(), text.end(), [](char c) { return std::isupper(c) != 0; }));
    EXPECT_EQ(Uuid::Parse(text), id);
    EXPECT_EQ(Uuid::FromBytes(id.Bytes()), id);
  }
}

TEST(Uuid, ParsesTheFormsPeoplePaste) {
  const Uuid id = Uuid::Parse("017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
  EXPECT_EQ(Uuid::Parse("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"), id);
  EXPECT_EQ(Uuid::Parse("017f22e279b07cc398c4dc0c0c07398f"), id);
  EXPECT_EQ(Uuid::Parse("{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}"), id);
  EXPECT_EQ(Uuid::Parse("urn:uuid:017f22e2-79b0-7cc3-98c4-dc0c0c07398f"), id);
  EXPECT_EQ(Uuid::Parse("00000000-0000-0000-0000-000000000000"), Uuid{});
  EXPECT_TRUE(Uuid{}.IsNil());
  EXPECT_FALSE(Uuid{}.Uuidv7UnixMs().has_value());
}

TEST(Uuid, ParseErrorsSayWhatIsWrong) {
  auto message_of = [](std::string_view text) {
    try {
      (void)Uuid::Parse(text);
    } catch (const IdFormatError& e) {
      EXPECT_EQ(e.input(), std::string(text));
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error for " << text;
    return std::string();
  };
  EXPECT_NE(message_of("017f22e2-79b0-7cc3-98c4-dc0c0c07398").find("has 35 characters"), std::string::npos);
  EXPECT_NE(message_of("").find("has 0 characters"), std::string::npos);
  EXPECT_NE(message_of("017f22e2-79b0-7cc3-98c4-dc0c0c07398g").find("'g'"), std::string::npos);
  EXPECT_NE(message_of("017f22e2-79b0-7cc3-98c4-dc0c0c07398g").find("position 36"), std::string::npos);
  EXPECT_NE(message_of("017f22e2x79b0-7cc3-98c4-dc0c0c07398f").find("expected '-' at position 9"), std::string::npos);
  EXPECT_NE(message_of("017f22e2-79b0-7cc3-98c4-dc0c0c07398f0").find("characters"), std::string::npos);
  EXPECT_FALSE(Uuid::TryParse("not a uuid").has_value());
  EXPECT_THROW((void)Uuid::FromBytes(std::vector<std::uint8_t>(15)), IdFormatError);
}

TEST(Uuid, VariantsAndVersions) {
  UuidBytes b{};
  b[6] = 0x40;  // version 4
  b[8] = 0x80;
  EXPECT_EQ(Uuid{b}.Version(), 4);
  EXPECT_EQ(Uuid{b}.Variant(), UuidVariant::kRfc9562);
  EXPECT_FALSE(Uuid{b}.Uuidv7UnixMs().has_value());
  b[8] = 0x00;
  EXPECT_EQ(Uuid{b}.Variant(), UuidVariant::kNcs);
  b[8] = 0xC0;
  EXPECT_EQ(Uuid{b}.Variant(), UuidVariant::kMicrosoft);
  b[8] = 0xE0;
  EXPECT_EQ(Uuid{b}.Variant(), UuidVariant::kFuture);
}

TEST(Uuidv7Generator, TimestampAndSubMillisecondFractionComeFromTheClock) {
  auto clock = std::make_shared<ManualIdClock>(1'700'000'000'123);
  clock->AdvanceNanos(500'000);  // half a millisecond: fraction 2048/4096
  Uuidv7Generator generator{clock};
  const Uuid id = generator.Next();
  EXPECT_EQ(id.Version(), 7);
  EXPECT_EQ(id.Variant(), UuidVariant::kRfc9562);
  EXPECT_EQ(id.Uuidv7UnixMs(), std::optional<std::int64_t>(1'700'000'000'123));
  EXPECT_EQ(id.RandA(), 2048);
}

TEST(Uuidv7Generator, SystemClockTimestampIsNow) {
  Uuidv7Generator generator;
  const auto before =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::int64_t last = 0;
  for (int i = 0; i < 100'000; ++i) last = *generator.Next().Uuidv7UnixMs();
  const auto after =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  // Interpolated between kernel clock reads: within a millisecond of them.
  EXPECT_GE(last, before - 1);
  EXPECT_LE(last, after + 1);
}

TEST(Uuidv7Generator, StrictlyIncreasingWithTheSystemClock) {
  Uuidv7Generator generator;
  Uuid previous = generator.Next();
  for (int i = 0; i < 1'000'000; ++i) {
    const Uuid id = generator.Next();
    ASSERT_LT(previous, id) << "at " << i << ": " << previous.ToString() << " then " << id.ToString();
    previous = id;
  }
}

TEST(Uuidv7Generator, StrictlyIncreasingWithAFrozenClock) {
  // 100,000 IDs in one 1/4096 ms: the counter overflows several times and
  // borrows the next tick.
  auto clock = std::make_shared<ManualIdClock>(1'700'000'000'000);
  Uuidv7Generator generator{clock};
  Uuid previous = generator.Next();
  for (int i = 0; i < 100'000; ++i) {
    const Uuid id = generator.Next();
    ASSERT_LT(previous, id) << "at " << i;
    previous = id;
  }
  // 100,000 IDs at >= 8192 per tick: at most ~13 ticks (~3 us) ahead of the clock.
  EXPECT_EQ(previous.Uuidv7UnixMs(), std::optional<std::int64_t>(1'700'000'000'000));
}

TEST(Uuidv7Generator, StrictlyIncreasingAcrossClockStepsBack) {
  auto clock = std::make_shared<ManualIdClock>(1'700'000'000'000);
  Uuidv7Generator generator{clock};
  Uuid previous = generator.Next();
  for (const std::int64_t step_ms : {-5, 1, -1, -10'000, 3, -2}) {
    clock->AdvanceMs(step_ms);
    for (int i = 0; i < 1000; ++i) {
      const Uuid id = generator.Next();
      ASSERT_LT(previous, id) << "after a step of " << step_ms << " ms";
      previous = id;
    }
  }
  EXPECT_EQ(clock->WaitCount(), 0);  // UUIDv7 never waits: the counter carries on
  // Once the clock passes the last value, timestamps follow it again.
  clock->AdvanceMs(20'000);
  EXPECT_EQ(generator.Next().Uuidv7UnixMs(), std::optional<std::int64_t>(clock->NowUnixMs()));
}

TEST(Uuidv7Generator, FillIsIncreasingAndContinuesTheSequence) {
  Uuidv7Generator generator;
  std::vector<Uuid> batch(10'000);
  const Uuid before = generator.Next();
  generator.Fill(batch);
  const Uuid after = generator.Next();
  EXPECT_LT(before, batch.front());
  EXPECT_TRUE(std::is_sorted(batch.begin(), batch.end()));
  EXPECT_EQ(std::adjacent_find(batch.begin(), batch.end()), batch.end());
  EXPECT_LT(batch.back(), after);
  for (const Uuid& id : batch) EXPECT_EQ(id.Version(), 7);
}

TEST(Uuidv7Generator, UniqueAcrossThreadsAndGenerators) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500'000;
  std::vector<std::vector<Uuid>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&results, t] {
      Uuidv7Generator generator;  // one per thread, as documented
      results[t].reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) results[t].push_back(generator.Next());
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<Uuid> all;
  for (auto& r : results) {
    EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
    all.insert(all.end(), r.begin(), r.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate UUIDv7";
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads) * kPerThread);
}

TEST(Uuidv7Generator, UniqueWhenGeneratorsShareEveryTick) {
  // The worst case for cross-generator collisions: the same frozen clock, so
  // the same timestamps and counters; only the random bits tell them apart.
  auto clock = std::make_shared<ManualIdClock>(1'700'000'000'000);
  std::vector<Uuidv7Generator> generators(8);
  for (auto& g : generators) g = Uuidv7Generator{clock};
  std::unordered_set<Uuid> seen;
  seen.reserve(800'000);
  for (int i = 0; i < 100'000; ++i) {
    for (auto& g : generators) ASSERT_TRUE(seen.insert(g.Next()).second) << "duplicate at " << i;
  }
}

TEST(Uuidv7Generator, ThreadLocalGeneratorIsIncreasingPerThread) {
  Uuid previous = NewUuidv7();
  for (int i = 0; i < 10'000; ++i) {
    const Uuid id = NewUuidv7();
    ASSERT_LT(previous, id);
    previous = id;
  }
}

TEST(Uuidv7Generator, ForkedChildDrawsOtherRandomBits) {
  auto clock = std::make_shared<ManualIdClock>(1'700'000'000'000);
  Uuidv7Generator generator{clock};
  (void)generator.Next();  // the random buffer now holds words the child inherits
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const Uuid id = generator.Next();
    const auto written = write(pipe_fds[1], id.Bytes().data(), 16);
    _exit(written == 16 ? 0 : 1);
  }
  const Uuid mine = generator.Next();
  UuidBytes theirs{};
  ASSERT_EQ(read(pipe_fds[0], theirs.data(), 16), 16);
  int status = 0;
  waitpid(child, &status, 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_EQ(status, 0);
  // Same clock, same tick, same counter: only a fresh key makes them differ.
  EXPECT_NE(Uuid{theirs}, mine);
}

TEST(Uuid, HashAndOrder) {
  const Uuid a = Uuid::FromUuidv7Fields(1000, 0, 5);
  const Uuid b = Uuid::FromUuidv7Fields(1001, 0, 0);
  EXPECT_LT(a, b);  // time first, like PostgreSQL's uuid ordering
  EXPECT_NE(std::hash<Uuid>{}(a), std::hash<Uuid>{}(b));
}

// RFC 8439 section 2.3.2: the ChaCha20 block function.
TEST(ChaCha20, Rfc8439BlockFunctionVector) {
  detail::ChaChaBlockState input{0x61707865, 0x3320646e, 0x79622d32, 0x6b206574, 0x03020100, 0x07060504,
                                 0x0b0a0908, 0x0f0e0d0c, 0x13121110, 0x17161514, 0x1b1a1918, 0x1f1e1d1c,
                                 0x00000001, 0x09000000, 0x4a000000, 0x00000000};
  const std::array<std::uint32_t, 16> expected{0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033,
                                               0x9aaa2204, 0x4e6cd4c3, 0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9,
                                               0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2};
  EXPECT_EQ(detail::ChaChaBlock<20>(input), expected);
  // The 4-way version (word-major output): lane 0 is the same block, lanes
  // 1-3 the next counters.
  std::uint32_t four[64];
  detail::ChaChaFourBlocks<20>(input, four);
  for (std::size_t lane = 0; lane < 4; ++lane) {
    detail::ChaChaBlockState lane_input = input;
    lane_input[12] += static_cast<std::uint32_t>(lane);
    const auto block = detail::ChaChaBlock<20>(lane_input);
    for (std::size_t i = 0; i < 16; ++i) ASSERT_EQ(four[i * 4 + lane], block[i]) << "lane " << lane;
  }
  EXPECT_EQ(four[0], expected[0]);
#if defined(__x86_64__)
  if (detail::CpuHasAvx2()) {
    std::uint32_t eight[128];
    detail::ChaChaEightBlocksAvx2<20>(input, eight);
    for (std::size_t lane = 0; lane < 8; ++lane) {
      detail::ChaChaBlockState lane_input = input;
      lane_input[12] += static_cast<std::uint32_t>(lane);
      const auto block = detail::ChaChaBlock<20>(lane_input);
      for (std::size_t i = 0; i < 16; ++i) ASSERT_EQ(eight[i * 8 + lane], block[i]) << "AVX2 lane " << lane;
    }
  }
#endif
  // The generator's 12-round variant: the lanes agree with the block function.
  detail::ChaChaFourBlocks<12>(input, four);
  const auto block12 = detail::ChaChaBlock<12>(input);
  for (std::size_t i = 0; i < 16; ++i) ASSERT_EQ(four[i * 4], block12[i]);
  EXPECT_NE(block12, expected);
}

}  // namespace
}  // namespace shardkit
