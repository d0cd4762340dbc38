#include "shardkit/routing/read_token.hpp"

#include <gtest/gtest.h>

#include "shardkit/errors.hpp"
#include "shardkit/routing/replica_monitor.hpp"

namespace shardkit {
namespace {

TEST(ReadToken, WalPositionsReadAndPrintAsPgLsnDoes) {
  EXPECT_EQ(FormatLsn(0), "0/0");
  EXPECT_EQ(FormatLsn(0x16B374D848ULL), "16/B374D848");
  EXPECT_EQ(ParseLsn("16/B374D848"), 0x16B374D848ULL);
  EXPECT_EQ(ParseLsn("0/1"), 1U);
  EXPECT_EQ(ParseLsn("FFFFFFFF/FFFFFFFF"), ~std::uint64_t{0});
  for (const char* bad : {"", "16", "/1", "1/", "1/2/3", "G/1", "1/100000000", " 1/1", "-1/1"}) {
    EXPECT_THROW((void)ParseLsn(bad), ReadTokenError) << bad;
  }
}

TEST(ReadToken, KeepsTheLaterPositionPerShard) {
  ReadToken token;
  EXPECT_TRUE(token.Empty());
  token.Add({ShardId{1}, 500});
  token.Add({ShardId{0}, 900});
  token.Add({ShardId{1}, 300});  // an earlier write of shard 1: nothing changes
  ASSERT_EQ(token.Entries().size(), 2U);
  EXPECT_EQ(token.Entries()[0].shard, ShardId{0});  // in shard order
  EXPECT_EQ(token.Find(ShardId{1})->lsn, 500U);
  EXPECT_EQ(token.Find(ShardId{2}), nullptr);
  // Another client's (or request's) writes: per shard the later position.
  ReadToken other = ReadToken::At(ShardId{1}, 700);
  other.Add({ShardId{3}, 5});
  token.Combine(other);
  EXPECT_EQ(token.Find(ShardId{0})->lsn, 900U);
  EXPECT_EQ(token.Find(ShardId{1})->lsn, 700U);
  EXPECT_EQ(token.Find(ShardId{3})->lsn, 5U);
}

TEST(ReadToken, TravelsAsTextFitForACookieOrAHeader) {
  ReadToken token = ReadToken::At(ShardId{0}, 0x16B374D848ULL);
  token.Add({ShardId{12}, 42});
  const std::string text = token.ToString();
  EXPECT_EQ(text, "v1_0.16B374D848_12.2A");
  EXPECT_EQ(text.find_first_of(" ,;\"\\="), std::string::npos);
  EXPECT_EQ(ReadToken::Parse(text), token);
  EXPECT_EQ(ReadToken().ToString(), "v1");
  EXPECT_TRUE(ReadToken::Parse("v1").Empty());
}

TEST(ReadToken, RefusesTextItDidNotWrite) {
  for (const char* bad :
       {"", "v3_0.1", "v1_", "v1x", "v1_0", "v1_0.1.1", "v1_a.1", "v1_0.", "v1_.1", "v1_64.1", "v1_-1.1", "v1_0.G",
        "v1_0.1_0.2", "v1_0.1__1.1", "v1_0.10000000000000000",
        // transactions: only in v2, with a horizon, not 0, the horizon not above it
        "v1_0.1.5.3", "v2_0.1.5", "v2_0.1.5.3.1", "v2_0.1.0.0", "v2_0.1.5.6", "v2_0.1.5.", "v2_0.1..3"}) {
    try {
      (void)ReadToken::Parse(bad);
      FAIL() << bad;
    } catch (const ReadTokenError& e) {
      EXPECT_EQ(e.input(), bad);
      EXPECT_NE(std::string(e.what()).find("read token"), std::string::npos) << e.what();
    }
  }
}

TEST(ReadToken, KeepsTheLatestTransactionAndWhetherItsCommitShowsTheEarlierOnes) {
  // Three writes of one client, each begun after the one before had
  // finished (older than the next one's horizon): the latest transaction's
  // commit shows them all.
  ReadToken session = ReadToken::Of(ShardId{0}, 1000, 50, 48);
  session.Combine(ReadToken::Of(ShardId{0}, 2000, 60, 56));
  session.Combine(ReadToken::Of(ShardId{0}, 1500, 55, 51));  // combined out of order: the same
  ASSERT_EQ(session.Entries().size(), 1U);
  EXPECT_EQ(session.Entries()[0], (ReadToken::Entry{ShardId{0}, 2000, 60, 56}));
  // A write that ran beside the latest one (55 was still running when 60
  // began, horizon 51 <= 55): only "everything up to 60 finished" shows both.
  ReadToken concurrent = ReadToken::Of(ShardId{0}, 1500, 55, 40);
  concurrent.Combine(ReadToken::Of(ShardId{0}, 1400, 60, 52));
  EXPECT_EQ(concurrent.Entries()[0], (ReadToken::Entry{ShardId{0}, 1500, 60, 0}));
  // ... and stays so when a later sequential write joins (60 < its horizon
  // covers 55 too).
  concurrent.Combine(ReadToken::Of(ShardId{0}, 1600, 70, 61));
  EXPECT_EQ(concurrent.Entries()[0], (ReadToken::Entry{ShardId{0}, 1600, 70, 61}));
  // The same write twice: the lower horizon (0 says more is needed).
  ReadToken twice = ReadToken::Of(ShardId{0}, 100, 9, 0);
  twice.Combine(ReadToken::Of(ShardId{0}, 100, 9, 7));
  EXPECT_EQ(twice.Entries()[0].horizon, 0U);
  // A position-only write (v1, cross-shard) joins by its position.
  ReadToken mixed = ReadToken::At(ShardId{0}, 5000);
  mixed.Combine(ReadToken::Of(ShardId{0}, 1000, 50, 48));
  EXPECT_EQ(mixed.Entries()[0], (ReadToken::Entry{ShardId{0}, 5000, 50, 48}));
  // As text: v2 with transactions, v1 without; both read back.
  mixed.Add({ShardId{3}, 7});
  EXPECT_EQ(mixed.ToString(), "v2_0.1388.32.30_3.7");
  EXPECT_EQ(ReadToken::Parse(mixed.ToString()), mixed);
  EXPECT_EQ(ReadToken::At(ShardId{3}, 7).ToString(), "v1_3.7");
  EXPECT_EQ(ReadToken::Parse("v2_0.1.5.0").Entries()[0], (ReadToken::Entry{ShardId{0}, 1, 5, 0}));
}

TEST(ReadToken, AnInsertPositionAfterAnEmptyPageHeaderCountsFromThePageStart) {
  EXPECT_EQ(InsertPositionFloor(8192 + 24), 8192U);
  EXPECT_EQ(InsertPositionFloor(8192 + 32), 8192U + 32);  // a record continued onto the page ends here
  EXPECT_EQ(InsertPositionFloor(8192), 8192U);
  EXPECT_EQ(InsertPositionFloor(1000), 1000U);
}

}  // namespace
}  // namespace shardkit
