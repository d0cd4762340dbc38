// Merging a scatter's answers: missing shards, and the checks of each
// shard's session facts (no server needed: facts and results are built here).
#include "shardkit/queries/scatter_merge.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
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
  f.server_encoding = "UTF8";
  for (const auto& [name, value] : PinnedSettings({})) f.settings.emplace_back(name, value);
  return f;
}

SessionFacts With(std::string_view name, std::string value) {
  SessionFacts f = Good();
  for (auto& [n, v] : f.settings) {
    if (n == name) v = std::move(value);
  }
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
  SessionFacts posix = With("TimeZone", "utc");  // names compare as the server treats them
  posix.collate = "POSIX";
  EXPECT_NO_THROW(CheckMergeAssumptions(posix, ShardId{0}));
  EXPECT_NO_THROW(CheckMergeAssumptions(With("DateStyle", "iso,mdy"), ShardId{0}));
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

  SessionFacts latin1 = Good();
  latin1.server_encoding = "LATIN1";
  m = ShardErrorOf([&] { CheckMergeAssumptions(latin1, ShardId{1}); }, ShardId{1});
  EXPECT_NE(m.find("encoding is LATIN1, not UTF8"), std::string::npos) << m;

  // Every pinned setting, one at a time: named with both values.
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"DateStyle", "ISO, DMY"},
                                                        {"IntervalStyle", "iso_8601"},
                                                        {"extra_float_digits", "0"},
                                                        {"bytea_output", "escape"},
                                                        {"standard_conforming_strings", "off"},
                                                        {"backslash_quote", "on"},
                                                        {"array_nulls", "off"},
                                                        {"transform_null_equals", "on"},
                                                        {"lc_numeric", "de_DE.UTF-8"},
                                                        {"default_text_search_config", "pg_catalog.simple"},
                                                        {"timezone_abbreviations", "India"},
                                                        {"gin_fuzzy_search_limit", "100"},
                                                        {"client_encoding", "LATIN1"}}) {
    m = ShardErrorOf([&] { CheckMergeAssumptions(With(name, value), ShardId{0}); }, ShardId{0});
    EXPECT_NE(m.find(name + " = '" + value + "'"), std::string::npos) << m;
  }
  // A setting the deployment chooses only has to be the same on every shard.
  EXPECT_NO_THROW(CheckMergeAssumptions(With("search_path", "shop, public"), ShardId{0}));
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
  scatter.shards[1].session = std::make_shared<const SessionFacts>(With("TimeZone", "Asia/Tokyo"));
  m = ShardErrorOf([&] { (void)Merge(plan, scatter); }, ShardId{1});
  EXPECT_NE(m.find("TimeZone 'Asia/Tokyo' but shard 0 with 'UTC'"), std::string::npos) << m;
  // One name, one table: the same search_path everywhere.
  scatter.shards[1].session = std::make_shared<const SessionFacts>(With("search_path", "shop"));
  m = ShardErrorOf([&] { (void)Merge(plan, scatter); }, ShardId{1});
  EXPECT_NE(m.find("search_path 'shop' but shard 0 with 'public'"), std::string::npos) << m;

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
