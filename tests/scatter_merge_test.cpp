// Merging a scatter's answers: missing shards, and the checks of each
// shard's session facts (no server needed: facts and results are built here).
#include "shardkit/scatter_merge.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

SessionFacts Good() {
  SessionFacts f;
  f.server_version = 150004;
  f.collate = "C";
  f.ctype = "C";
  f.locale_provider = "libc";
  f.date_style = "ISO, MDY";
  f.time_zone = "UTC";
  f.interval_style = "postgres";
  f.extra_float_digits = 3;
  return f;
}

template <class F>
std::string ShardErrorOf(F&& f, ShardId want_shard) {
  try {
    f();
  } catch (const ShardError& e) {
    EXPECT_EQ(e.shard(), want_shard) << e.what();
    return e.what();
  }
  return "<no ShardError>";
}

TEST(CheckMergeAssumptions, AcceptsTheSettingsPoolsSet) {
  EXPECT_NO_THROW(CheckMergeAssumptions(Good(), ShardId{0}));
  SessionFacts posix = Good();
  posix.collate = "POSIX";
  posix.extra_float_digits = 1;  // the server default: still exact output
  EXPECT_NO_THROW(CheckMergeAssumptions(posix, ShardId{0}));
}

TEST(CheckMergeAssumptions, RefusesWhatChangesTextOrNumbers) {
  SessionFacts icu = Good();  // datcollate says C, ICU sorts
  icu.locale_provider = "icu";
  icu.icu_locale = "en-US";
  std::string m = ShardErrorOf([&] { CheckMergeAssumptions(icu, ShardId{2}); }, ShardId{2});
  EXPECT_NE(m.find("shard 2: the database uses the icu locale provider (locale \"en-US\")"), std::string::npos) << m;
  EXPECT_NE(m.find("LOCALE_PROVIDER libc"), std::string::npos) << m;

  SessionFacts utf8 = Good();
  utf8.collate = "en_US.UTF-8";
  m = ShardErrorOf([&] { CheckMergeAssumptions(utf8, ShardId{1}); }, ShardId{1});
  EXPECT_NE(m.find("collation is \"en_US.UTF-8\", not C"), std::string::npos) << m;

  SessionFacts german = Good();
  german.date_style = "German, DMY";
  m = ShardErrorOf([&] { CheckMergeAssumptions(german, ShardId{0}); }, ShardId{0});
  EXPECT_NE(m.find("DateStyle is \"German, DMY\""), std::string::npos) << m;

  SessionFacts iso8601 = Good();
  iso8601.interval_style = "iso_8601";
  m = ShardErrorOf([&] { CheckMergeAssumptions(iso8601, ShardId{0}); }, ShardId{0});
  EXPECT_NE(m.find("IntervalStyle is \"iso_8601\""), std::string::npos) << m;

  SessionFacts rounded = Good();
  rounded.extra_float_digits = 0;
  m = ShardErrorOf([&] { CheckMergeAssumptions(rounded, ShardId{1}); }, ShardId{1});
  EXPECT_NE(m.find("extra_float_digits is 0"), std::string::npos) << m;
  EXPECT_NE(m.find("Set it to 3"), std::string::npos) << m;
}

TEST(ScatterMergeTest, MergeChecksEveryAnsweringShardsFacts) {
  MergePlan plan;
  plan.Count("n");
  ScatterResult scatter;
  scatter.shards.resize(2);
  scatter.shards[0].shard = ShardId{0};
  scatter.shards[0].session = std::make_shared<const SessionFacts>(Good());
  scatter.shards[1].shard = ShardId{1};
  SessionFacts icu = Good();
  icu.locale_provider = "icu";
  icu.icu_locale = "en-US";
  scatter.shards[1].session = std::make_shared<const SessionFacts>(icu);
  // Refused although no shard sent a row: the answer's text order is not bytewise.
  std::string m = ShardErrorOf([&] { (void)Merge(plan, scatter); }, ShardId{1});
  EXPECT_NE(m.find("icu"), std::string::npos) << m;

  // Two time zones: the same instant has two texts, so timestamptz groups split.
  SessionFacts tokyo = Good();
  tokyo.time_zone = "Asia/Tokyo";
  scatter.shards[1].session = std::make_shared<const SessionFacts>(tokyo);
  m = ShardErrorOf([&] { (void)Merge(plan, scatter); }, ShardId{1});
  EXPECT_NE(m.find("TimeZone \"Asia/Tokyo\" but shard 0 with \"UTC\""), std::string::npos) << m;

  scatter.shards[1].session = std::make_shared<const SessionFacts>(Good());
  EXPECT_NO_THROW((void)Merge(plan, scatter));
}

TEST(ScatterMergeTest, ScatterResultWithFailedShards) {
  MergePlan plan;
  plan.Count("n");
  ScatterResult scatter;
  scatter.shards.push_back(ShardResult{});  // shard 0 answered with no rows (no columns)
  scatter.failures.push_back({ShardId{1}, "connection refused"});
  try {
    (void)Merge(plan, scatter);
    FAIL() << "merged without shard 1";
  } catch (const ScatterError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 1: connection refused"), std::string::npos) << e.what();
    ASSERT_EQ(e.failures().size(), 1U);
  }
  MergeOptions partial;
  partial.allow_missing_shards = true;
  const auto merged = Merge(plan, scatter, partial);
  ASSERT_TRUE(merged.warning.has_value());
  EXPECT_NE(merged.warning->find("shard 1"), std::string::npos);
  ASSERT_EQ(merged.rows.size(), 1U);
  EXPECT_EQ(merged.rows[0][0].ToString(), "0");
}

}  // namespace
}  // namespace shardkit
