// Merge plans on hand-made per-shard partial rows (no server needed).
#include "shardkit/queries/merge.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/aggregate_query.hpp"

namespace shardkit {
namespace {

constexpr TypeOid kInt4 = 23;
constexpr TypeOid kInt8 = 20;
constexpr TypeOid kFloat8 = 701;
constexpr TypeOid kFloat4 = 700;
constexpr TypeOid kNumeric = 1700;
constexpr TypeOid kText = 25;
constexpr TypeOid kTimestamptz = 1184;

using Row = std::vector<std::optional<std::string>>;
const std::optional<std::string> kNull;

PartialRows Shard(int shard, std::vector<std::string> names, std::vector<TypeOid> types, std::vector<Row> rows) {
  return PartialRows{ShardId{shard}, std::move(names), std::move(types), std::move(rows)};
}

// The merged rows as text, "|"-separated, for compact expectations.
std::vector<std::string> Lines(const ResultSet& r) {
  std::vector<std::string> out;
  for (const auto& row : r.rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) line += (i ? "|" : "") + row[i].ToString();
    out.push_back(line);
  }
  return out;
}

template <class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const UnmergeableQuery& e) {
    return e.what();
  }
  return "<no UnmergeableQuery>";
}

// --- Values -------------------------------------------------------------

TEST(ValueTest, ReadsByTypeOid) {
  EXPECT_EQ(ReadValue(std::string_view("42"), kInt8), Value::Int(42));
  EXPECT_EQ(ReadValue(std::string_view("1.50"), kNumeric).ToString(), "1.50");
  EXPECT_EQ(ReadValue(std::string_view("abc"), kText), Value::Text("abc"));
  EXPECT_TRUE(ReadValue(std::nullopt, kInt8).IsNull());
  EXPECT_TRUE(std::isnan(ReadValue(std::string_view("NaN"), kFloat8).AsDouble()));
  EXPECT_EQ(ReadValue(std::string_view("t"), 16), Value::Bool(true));
  EXPECT_THROW((void)ReadValue(std::string_view("NaN"), kNumeric), Error);
  EXPECT_THROW((void)ReadValue(std::string_view("12x"), kInt4), Error);
  EXPECT_EQ(TypeInfoFor(kFloat8).name, "double precision");
  EXPECT_TRUE(TypeInfoFor(kTimestamptz).orderable);
  EXPECT_FALSE(TypeInfoFor(1266).orderable);  // time with time zone
  EXPECT_FALSE(TypeInfoFor(999999).known);
}

TEST(ValueTest, PrintsDoublesLikeFloat8Out) {
  // SELECT 1e15::float8, 123456789012345::float8, 0.0001::float8, 0.00001::float8, ...
  EXPECT_EQ(Value::Double(1e15).ToString(), "1e+15");
  EXPECT_EQ(Value::Double(123456789012345.0).ToString(), "123456789012345");
  EXPECT_EQ(Value::Double(0.0001).ToString(), "0.0001");
  EXPECT_EQ(Value::Double(0.00001).ToString(), "1e-05");
  EXPECT_EQ(Value::Double(1.5e300).ToString(), "1.5e+300");
  EXPECT_EQ(Value::Double(-2.5).ToString(), "-2.5");
  EXPECT_EQ(Value::Double(100).ToString(), "100");
  EXPECT_EQ(Value::Double(0.1 + 0.2).ToString(), "0.30000000000000004");
  EXPECT_EQ(Value::Double(1e-300).ToString(), "1e-300");
  EXPECT_EQ(Value::Double(1234567.125).ToString(), "1234567.125");
  EXPECT_EQ(Value::Double(-0.0).ToString(), "-0");
}

TEST(ValueTest, PrintsRealsLikeFloat4Out) {
  // SELECT 1e6::real, 123456::real, 0.0001::real, 0.00001::real, ... on PostgreSQL 15
  EXPECT_EQ(Value::Real(5.859F).ToString(), "5.859");
  EXPECT_EQ(ReadValue(std::string_view("5.859"), kFloat4).ToString(), "5.859");
  EXPECT_EQ(Value::Real(1e6F).ToString(), "1e+06");
  EXPECT_EQ(Value::Real(123456.0F).ToString(), "123456");
  EXPECT_EQ(Value::Real(999999.9F).ToString(), "999999.9");
  EXPECT_EQ(Value::Real(1234567.0F).ToString(), "1.234567e+06");
  EXPECT_EQ(Value::Real(0.0001F).ToString(), "0.0001");
  EXPECT_EQ(Value::Real(0.00001F).ToString(), "1e-05");
  EXPECT_EQ(Value::Real(0.1F).ToString(), "0.1");
  EXPECT_EQ(Value::Real(1.0F / 3.0F).ToString(), "0.33333334");
  EXPECT_EQ(Value::Real(16777217.0F).ToString(), "1.6777216e+07");
  EXPECT_EQ(Value::Real(3.4028235e38F).ToString(), "3.4028235e+38");
  EXPECT_EQ(Value::Real(1.17549435e-38F).ToString(), "1.1754944e-38");
  EXPECT_EQ(Value::Real(-0.0F).ToString(), "-0");
  EXPECT_EQ(ReadValue(std::string_view("NaN"), kFloat4).ToString(), "NaN");
  // A real is a double to compute with, but not the same value as the double it widens to.
  const Value real = ReadValue(std::string_view("5.859"), kFloat4);
  EXPECT_EQ(real.kind(), Value::Kind::kDouble);
  EXPECT_TRUE(real.IsReal());
  EXPECT_DOUBLE_EQ(real.AsDouble(), static_cast<double>(5.859F));
  EXPECT_FALSE(real == Value::Double(static_cast<double>(5.859F)));
  EXPECT_EQ(real, Value::Real(5.859F));
  EXPECT_EQ(CompareValues(real, Value::Double(static_cast<double>(5.859F))), 0);
  EXPECT_LT(CompareValues(real, Value::Real(6.0F)), 0);
}

TEST(ValueTest, OrdersLikePostgres) {
  EXPECT_LT(CompareValues(Value::Text("B"), Value::Text("a")), 0);         // C collation: bytes
  EXPECT_LT(CompareValues(Value::Text("a"), Value::Text("\xc3\xa4")), 0);  // 'a' < 'ä' (0xC3...)
  EXPECT_LT(CompareValues(Value::Text("ab"), Value::Text("abc")), 0);
  EXPECT_EQ(CompareValues(Value::Int(2), Value::Numeric("2.00")), 0);
  EXPECT_LT(CompareValues(Value::Numeric("1.999"), Value::Int(2)), 0);
  EXPECT_GT(CompareValues(Value::Double(std::nan("")), Value::Double(1e308)), 0);  // NaN above all
  EXPECT_EQ(CompareValues(Value::Double(std::nan("")), Value::Double(std::nan(""))), 0);
  EXPECT_EQ(CompareValues(Value::Double(-0.0), Value::Double(0.0)), 0);
  EXPECT_LT(CompareValues(Value::Bool(false), Value::Bool(true)), 0);
  EXPECT_THROW((void)CompareValues(Value::Text("1"), Value::Int(1)), Error);
  EXPECT_THROW((void)CompareValues(Value::Null(), Value::Int(1)), Error);
  EXPECT_FALSE(Value::Numeric("1.5") == Value::Numeric("1.50"));  // same value, different text
}

// --- Merging ------------------------------------------------------------

TEST(ValueTest, ComparisonFormsOrderAndEqualLikeTheServer) {
  constexpr TypeOid kDate = 1082;
  constexpr TypeOid kTimestamp = 1114;
  constexpr TypeOid kBpchar = 1042;
  // In the server's order; their text is not.
  const std::vector<std::string> dates = {"-infinity",  "0044-03-15 BC", "0044-03-16 BC", "0001-12-31 BC", "0001-01-01",
                                          "0999-01-01", "9999-12-31",    "10000-01-01",   "infinity"};
  for (std::size_t i = 0; i + 1 < dates.size(); ++i) {
    EXPECT_LT(
        CompareValues(ComparisonForm(Value::Text(dates[i]), kDate), ComparisonForm(Value::Text(dates[i + 1]), kDate)),
        0)
        << dates[i] << " < " << dates[i + 1];
  }
  EXPECT_LT(CompareValues(ComparisonForm(Value::Text("0044-03-15 10:00:00 BC"), kTimestamp),
                          ComparisonForm(Value::Text("0044-03-15 10:00:00.5 BC"), kTimestamp)),
            0);
  EXPECT_EQ(ComparisonForm(Value::Text("a  "), kBpchar), ComparisonForm(Value::Text("a"), kBpchar));
  EXPECT_LT(CompareValues(ComparisonForm(Value::Text("a "), kBpchar), ComparisonForm(Value::Text("a\x01"), kBpchar)),
            0);  // bytewise after the blanks go: "a" < "a\x01"
  EXPECT_EQ(ComparisonForm(Value::Text("a "), kText), Value::Text("a "));  // text keeps its blanks
  EXPECT_THROW((void)ComparisonForm(Value::Text("03/04/2020"), kDate), Error);
}

TEST(MergeTest, KeysMatchByTheirTypesEquality) {
  constexpr TypeOid kBpchar = 1042;
  MergePlan plan;
  plan.Key("k").Count("n", "n").OrderBy("k");
  // numeric 1.5 = 1.50; the first shard's text stands for the group.
  auto merged =
      Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "n"}, {kNumeric, kInt8}, {{"1.5", "1"}, {"0.00", "1"}}),
                                           Shard(1, {"k", "n"}, {kNumeric, kInt8}, {{"1.50", "2"}, {"0", "3"}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"0.00|4", "1.5|3"}));
  // double precision -0 = 0, NaN = NaN (above everything).
  merged = Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "n"}, {kFloat8, kInt8}, {{"-0", "1"}, {"NaN", "1"}}),
                                                Shard(1, {"k", "n"}, {kFloat8, kInt8}, {{"0", "2"}, {"NaN", "1"}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"-0|3", "NaN|2"}));
  // bpchar without trailing blanks.
  merged = Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "n"}, {kBpchar, kInt8}, {{"a ", "1"}, {"b", "1"}}),
                                                Shard(1, {"k", "n"}, {kBpchar, kInt8}, {{"a  ", "2"}, {" b", "1"}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{" b|1", "a |3", "b|1"}));
}

TEST(MergeTest, KeysOfTypesWithoutOneTextPerValueAreRefusedByType) {
  MergePlan plan;
  plan.Key("k", "since").Count("n", "n");
  for (const auto& [oid, type, advice] : std::vector<std::tuple<TypeOid, std::string, std::string>>{
           {1186, "interval", "justify_interval"},
           {3802, "jsonb", "->>'k'"},
           {114, "json", "no equality"},
           {1231, "numeric[]", "element"},
           {2249, "record", "field"},
           {99999, "type oid 99999", "shardkit does not list"}}) {
    try {
      // The shards' rows look alike; the type decides.
      (void)Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "n"}, {oid, kInt8}, {{"x", "1"}})});
      ADD_FAILURE() << type << " merged";
    } catch (const UnmergeableQuery& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("merged column \"since\""), std::string::npos) << m;
      EXPECT_NE(m.find(type + " values"), std::string::npos) << m;
      EXPECT_NE(m.find(advice), std::string::npos) << m;
    }
  }
}

TEST(MergeTest, ScalarCountSumAvgWithAnEmptyShard) {
  // SELECT count(*), count(x), sum(x), sum(x), avg(x) per shard; shard 1 has no matching rows.
  const std::vector<std::string> names = {"n", "nx", "s", "s2", "c2"};
  const std::vector<TypeOid> types = {kInt8, kInt8, kInt8, kNumeric, kInt8};
  MergePlan plan;
  plan.Count("n").Count("nx").Sum("s").Avg("s", "nx", "avg_x").Avg("s2", "c2", "avg_y");
  const auto merged = Merge(plan, std::vector<PartialRows>{
                                      Shard(0, names, types, {{"3", "3", "5", "10.50", "2"}}),
                                      Shard(1, names, types, {{"0", "0", kNull, kNull, "0"}}),
                                  });
  EXPECT_EQ(merged.column_names, (std::vector<std::string>{"n", "nx", "s", "avg_x", "avg_y"}));
  EXPECT_EQ(merged.column_types, (std::vector<std::string>{"bigint", "bigint", "bigint", "numeric", "numeric"}));
  // avg of integers 5/3 as numeric; avg of numeric(…,2) 10.50/2 keeps 16 significant digits
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"3|3|5|1.6666666666666667|5.2500000000000000"}));
  EXPECT_EQ(merged.rows_in, 2U);
  EXPECT_EQ(merged.rows_out, 1U);
}

TEST(MergeTest, AllShardsEmptyGiveCountZeroAndNulls) {
  const std::vector<std::string> names = {"n", "s", "lo", "sx", "cx"};
  const std::vector<TypeOid> types = {kInt8, kNumeric, kText, kNumeric, kInt8};
  MergePlan plan;
  plan.Count("n").Sum("s").Min("lo").Avg("sx", "cx", "a");
  const Row empty = {"0", kNull, kNull, kNull, "0"};
  const auto merged =
      Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {empty}), Shard(1, names, types, {empty})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"0|NULL|NULL|NULL"}));
  EXPECT_EQ(merged.column_types, (std::vector<std::string>{"bigint", "numeric", "text", "numeric"}));
  // Not even one shard answered with rows: still one row, COUNT 0 (never NULL).
  const auto none = Merge(plan, std::vector<PartialRows>{});
  EXPECT_EQ(Lines(none), (std::vector<std::string>{"0|NULL|NULL|NULL"}));
}

TEST(MergeTest, GroupsOnOneShardOnlyAndCountsNeverNull) {
  const std::vector<std::string> names = {"k", "n", "s", "lo", "hi"};
  const std::vector<TypeOid> types = {kText, kInt8, kNumeric, kNumeric, kNumeric};
  MergePlan plan;
  plan.Key("k").Count("n").Sum("s").Min("lo").Max("hi");
  const auto merged =
      Merge(plan, std::vector<PartialRows>{
                      Shard(0, names, types, {{"a", "2", "1.10", "0.10", "1.00"}, {"b", "1", kNull, kNull, kNull}}),
                      Shard(1, names, types, {{"a", "1", "2.255", "-3.000", "2.255"}, {"c", "4", "8", "1", "5"}}),
                  });
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"a|3|3.355|-3.000|2.255", "b|1|NULL|NULL|NULL", "c|4|8|1|5"}));
  EXPECT_EQ(merged.groups, 3U);
}

TEST(MergeTest, NullGroupKeyIsOneGroup) {
  const std::vector<std::string> names = {"k", "n"};
  const std::vector<TypeOid> types = {kInt4, kInt8};
  MergePlan plan;
  plan.Key("k").Count("n").OrderBy("k");
  const auto merged = Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{kNull, "2"}, {"1", "1"}}),
                                                           Shard(1, names, types, {{kNull, "5"}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"1|1", "NULL|7"}));  // ASC: NULLS LAST
}

TEST(MergeTest, SumAndAvgTypesFollowPostgres) {
  const std::vector<std::string> names = {"si", "sb", "ci"};
  // sum(int4) -> bigint, sum(int8) -> numeric
  const std::vector<TypeOid> types = {kInt8, kNumeric, kInt8};
  MergePlan plan;
  plan.Sum("si").Sum("sb").Avg("si", "ci", "ai").Avg("sb", "ci", "ab");
  const auto merged =
      Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"7", "9000000000000000000", "2"}}),
                                           Shard(1, names, types, {{"-1", "9000000000000000000", "1"}})});
  EXPECT_EQ(merged.column_types, (std::vector<std::string>{"bigint", "numeric", "numeric", "numeric"}));
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"6|18000000000000000000|2.0000000000000000|6000000000000000000"}));
}

// Floats are added rounding after every row: partial sums added in another
// order differ in the last bits (0.1 + 0.2 + 0.3 is not 0.1 + (0.2 + 0.3)).
TEST(MergeTest, AvgAndSumOverFloatsAreRefusedWithTheFix) {
  for (const TypeOid type : {kFloat4, kFloat8}) {
    SCOPED_TRACE(type);
    MergePlan plan;
    plan.Avg("s", "n", "a");
    auto message = ErrorOf([&] {
      (void)Merge(plan, std::vector<PartialRows>{Shard(0, {"s", "n"}, {type, kInt8}, {{"1.5", "1"}})});
    });
    EXPECT_NE(message.find("avg(x::numeric)"), std::string::npos) << message;
    EXPECT_NE(message.find("rounding after every row"), std::string::npos) << message;
    MergePlan sum;
    sum.Sum("s");
    message = ErrorOf([&] {
      (void)Merge(sum, std::vector<PartialRows>{Shard(0, {"s"}, {type}, {{"1.5"}}), Shard(1, {"s"}, {type}, {{"2"}})});
    });
    EXPECT_NE(message.find("sum(x::numeric)"), std::string::npos) << message;
    EXPECT_NE(message.find("rounding after every row"), std::string::npos) << message;
  }
}

TEST(MergeTest, MinMaxAndKeysOfRealPrintAsTheServerPrintsThem) {
  // min(real) came back as 5.859000205993652 where the server says 5.859.
  const std::vector<std::string> names = {"k", "lo", "hi"};
  const std::vector<TypeOid> types = {kFloat4, kFloat4, kFloat4};
  MergePlan plan;
  plan.Key("k").Min("lo").Max("hi").OrderBy("k");
  const auto merged = Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"0.1", "5.859", "7.25"}}),
                                                           Shard(1, names, types, {{"0.1", "6", "1e+06"}})});
  EXPECT_EQ(merged.column_types, (std::vector<std::string>{"real", "real", "real"}));
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"0.1|5.859|1e+06"}));
}

TEST(MergeTest, ACollationOtherThanCReportedByAShardIsRefused) {
  const std::vector<std::string> names = {"k", "m", "m_collation"};
  const std::vector<TypeOid> types = {kInt8, kText, kText};
  MergePlan plan;
  plan.Key("k").Max("m").Collation("m", "m_collation");
  // NULL (the database default, checked per pool), "C" and "POSIX" merge bytewise like the server.
  const auto merged = Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"1", "\xce\xa9", kNull}}),
                                                           Shard(1, names, types, {{"1", "z", "\"C\""}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"1|\xce\xa9"}));
  const auto message = ErrorOf([&] {
    (void)Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"1", "a", "\"POSIX\""}}),
                                               Shard(1, names, types, {{"1", "b", "\"en-US-x-icu\""}})});
  });
  EXPECT_NE(message.find("shard 1 compared merged column \"m\""), std::string::npos) << message;
  EXPECT_NE(message.find("\"en-US-x-icu\""), std::string::npos) << message;
  EXPECT_NE(message.find("COLLATE \"C\""), std::string::npos) << message;
  EXPECT_THROW(MergePlan().Sum("a").Collation("b", "c"), UnmergeableQuery);
}

TEST(MergeTest, OrderByLimitAfterTheMergeNotPerShard) {
  // The seed-001 trap: per-shard top-1 would pick a (10) and c (9); the merged answer is b (18).
  const std::vector<std::string> names = {"book", "sold"};
  const std::vector<TypeOid> types = {kInt8, kInt8};
  MergePlan plan;
  plan.Key("book").Sum("sold").OrderBy("sold", SortDirection::kDesc).OrderBy("book").Limit(2);
  const auto merged = Merge(plan, std::vector<PartialRows>{
                                      Shard(0, names, types, {{"1", "10"}, {"2", "9"}, {"4", "1"}}),
                                      Shard(1, names, types, {{"2", "9"}, {"3", "9"}, {"4", "9"}}),
                                  });
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"2|18", "1|10"}));
  plan.Offset(1);
  const auto page2 = Merge(plan, std::vector<PartialRows>{
                                     Shard(0, names, types, {{"1", "10"}, {"2", "9"}, {"4", "1"}}),
                                     Shard(1, names, types, {{"2", "9"}, {"3", "9"}, {"4", "9"}}),
                                 });
  EXPECT_EQ(Lines(page2), (std::vector<std::string>{"1|10", "4|10"}));  // tie 1/4 broken by key
}

TEST(MergeTest, NullsFirstForDescLastForAscAndExplicit) {
  const std::vector<std::string> names = {"k", "v"};
  const std::vector<TypeOid> types = {kInt8, kNumeric};
  auto run = [&](SortDirection d, NullsOrder n) {
    MergePlan plan;
    plan.Key("k").Max("v").OrderBy("v", d, n).OrderBy("k");
    return Lines(Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"1", "2.5"}, {"2", kNull}}),
                                                      Shard(1, names, types, {{"3", "-1"}, {"4", kNull}})}));
  };
  EXPECT_EQ(run(SortDirection::kAsc, NullsOrder::kDefault),
            (std::vector<std::string>{"3|-1", "1|2.5", "2|NULL", "4|NULL"}));
  EXPECT_EQ(run(SortDirection::kDesc, NullsOrder::kDefault),
            (std::vector<std::string>{"2|NULL", "4|NULL", "1|2.5", "3|-1"}));
  EXPECT_EQ(run(SortDirection::kAsc, NullsOrder::kFirst),
            (std::vector<std::string>{"2|NULL", "4|NULL", "3|-1", "1|2.5"}));
  EXPECT_EQ(run(SortDirection::kDesc, NullsOrder::kLast),
            (std::vector<std::string>{"1|2.5", "3|-1", "2|NULL", "4|NULL"}));
}

TEST(MergeTest, TextKeysOrderBytewise) {
  const std::vector<std::string> names = {"k", "n"};
  const std::vector<TypeOid> types = {kText, kInt8};
  MergePlan plan;
  plan.Key("k").Count("n").OrderBy("k");
  const auto merged =
      Merge(plan, std::vector<PartialRows>{Shard(0, names, types, {{"a", "1"}, {"\xc3\xa4", "1"}}),
                                           Shard(1, names, types, {{"B", "1"}, {"a", "1"}, {"", "1"}})});
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"|1", "B|1", "a|2", "\xc3\xa4|1"}));
}

TEST(MergeTest, HavingOnMergedValuesAndHiddenColumns) {
  const std::vector<std::string> names = {"k", "n", "s"};
  const std::vector<TypeOid> types = {kInt8, kInt8, kNumeric};
  MergePlan plan;
  plan.Key("k")
      .Count("n")
      .Sum("s", "total")
      .Hide("n")
      .Having("n", CompareOp::kGe, Value::Int(2))
      .Having("total", CompareOp::kGt, Value::Numeric("1.5"));
  const auto merged = Merge(
      plan, std::vector<PartialRows>{
                Shard(0, names, types, {{"1", "1", "1.00"}, {"2", "1", "5"}, {"3", "1", kNull}, {"4", "3", "1.5"}}),
                Shard(1, names, types, {{"1", "1", "1.00"}, {"2", "1", "-1"}, {"3", "1", kNull}}),
            });
  // k=1: total 2.00 > 1.5; k=2: 4 > 1.5; k=3: NULL > 1.5 is not true; k=4: only 1.5, not > 1.5.
  EXPECT_EQ(merged.column_names, (std::vector<std::string>{"k", "total"}));
  EXPECT_EQ(Lines(merged), (std::vector<std::string>{"1|2.00", "2|4"}));
  EXPECT_EQ(merged.groups, 4U);

  MergePlan nulls;
  nulls.Key("k").Sum("s").Having("s", CompareOp::kIsNull);
  EXPECT_EQ(Lines(Merge(nulls, std::vector<PartialRows>{Shard(0, names, types, {{"1", "1", kNull}, {"2", "1", "3"}})})),
            (std::vector<std::string>{"1|NULL"}));
}

TEST(MergeTest, HavingATextConstantOnlyOnCharacterStrings) {
  constexpr TypeOid kTimestamp = 1114;
  const std::vector<std::string> names = {"k", "m"};
  const auto shard = [&](TypeOid type, const char* value) {
    return std::vector<PartialRows>{Shard(0, names, {kInt8, type}, {{"1", value}})};
  };
  MergePlan text;
  text.Key("k").Max("m").Having("m", CompareOp::kEq, Value::Text("shipped"));
  EXPECT_EQ(Lines(Merge(text, shard(kText, "shipped"))), (std::vector<std::string>{"1|shipped"}));
  // The server reads '2026-1-5 5:00' as the timestamp 2026-01-05 05:00:00:
  // equal, though the texts differ. Refused rather than compared as text.
  MergePlan stamp;
  stamp.Key("k").Max("m").Having("m", CompareOp::kEq, Value::Text("2026-1-5 5:00"));
  const std::string msg = ErrorOf([&] { (void)Merge(stamp, shard(kTimestamp, "2026-01-05 05:00:00")); });
  EXPECT_NE(msg.find("timestamp without time zone"), std::string::npos) << msg;
}

TEST(MergeTest, RefusesRowsThatDoNotFitThePlan) {
  MergePlan plan;
  plan.Key("k").Sum("s");
  auto msg = ErrorOf([&] { (void)Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "x"}, {kInt8, kInt8}, {})}); });
  EXPECT_NE(msg.find("shard 0 returned no column \"s\""), std::string::npos) << msg;

  msg = ErrorOf([&] {
    (void)Merge(plan, std::vector<PartialRows>{Shard(0, {"k", "s"}, {kInt8, kInt8}, {}),
                                               Shard(1, {"k", "s"}, {kInt8, kNumeric}, {})});
  });
  EXPECT_NE(msg.find("schemas differ"), std::string::npos) << msg;

  msg = ErrorOf([&] {
    (void)Merge(plan, std::vector<PartialRows>{Shard(3, {"k", "s"}, {kInt8, kInt8}, {{"1", "1"}, {"1", "2"}})});
  });
  EXPECT_NE(msg.find("shard 3 returned the group (1) twice"), std::string::npos) << msg;

  MergePlan scalar;
  scalar.Sum("s");
  msg = ErrorOf([&] { (void)Merge(scalar, std::vector<PartialRows>{Shard(1, {"s"}, {kInt8}, {{"1"}, {"2"}})}); });
  EXPECT_NE(msg.find("without group keys"), std::string::npos) << msg;

  // timestamptz orders by the instant, not by its text: 03:00+05 is
  // 22:00 UTC the day before, earlier than 00:00+00.
  MergePlan latest;
  latest.Max("t", "latest").Min("t", "earliest");
  const MergedResult instants =
      Merge(latest, std::vector<PartialRows>{Shard(0, {"t"}, {kTimestamptz}, {{"2024-01-01 00:00:00+00"}}),
                                             Shard(1, {"t"}, {kTimestamptz}, {{"2024-01-01 03:00:00.5+05"}}),
                                             Shard(2, {"t"}, {kTimestamptz}, {{"0044-03-15 12:00:00+00 BC"}})});
  ASSERT_EQ(instants.rows.size(), 1U);
  EXPECT_EQ(instants.rows[0][0].AsText(), "2024-01-01 00:00:00+00");
  EXPECT_EQ(instants.rows[0][1].AsText(), "0044-03-15 12:00:00+00 BC");

  MergePlan sum;
  sum.Sum("s");
  EXPECT_THROW((void)Merge(sum, std::vector<PartialRows>{Shard(0, {"s"}, {kInt8}, {{"9223372036854775807"}}),
                                                         Shard(1, {"s"}, {kInt8}, {{"1"}})}),
               Error);
  msg = ErrorOf([&] { (void)Merge(sum, std::vector<PartialRows>{Shard(0, {"s"}, {kNumeric}, {{"NaN"}})}); });
  EXPECT_NE(msg.find("not finite"), std::string::npos) << msg;
}

TEST(MergeTest, ValidatesThePlan) {
  EXPECT_THROW(MergePlan().Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Sum("b", "a").Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").OrderBy("zz").Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Having("zz", CompareOp::kEq, Value::Int(1)).Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Having("a", CompareOp::kEq).Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Limit(-1).Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Hide("a").Validate(), UnmergeableQuery);
  EXPECT_THROW(MergePlan().Sum("a").Hide("b"), UnmergeableQuery);
  EXPECT_NO_THROW(MergePlan().Key("k").Sum("a").Having("a", CompareOp::kIsNull).OrderBy("k").Limit(0).Validate());
}

// --- Building per-shard SQL and refusing --------------------------------

TEST(AggregateQueryTest, BuildsTheDecomposition) {
  const MergePlan plan = AggregateQuery::From("order_items", "shop")
                             .Where("created_at >= $1")
                             .GroupBy("book_id")
                             .Select("sum(quantity)", "sold")
                             .Select("AVG(price) FILTER (WHERE price > 0)", "avg_price")
                             .Count("n")
                             .GroupByExpr("date_trunc('day', created_at)", "day")
                             .Select("count(DISTINCT o.customer_id)", "customers")
                             .OrderBy("sold", SortDirection::kDesc)
                             .Limit(10)
                             .Plan();
  // Each key and MIN/MAX also reports the collation its shard compared it in.
  EXPECT_EQ(plan.ShardSql(),
            "SELECT \"book_id\" AS \"_k0\", sum(quantity) AS \"_p1\", "
            "sum(price) FILTER (WHERE price > 0) AS \"_p2\", count(price) FILTER (WHERE price > 0) AS \"_p2_n\", "
            "count(*) AS \"_p3\", date_trunc('day', created_at) AS \"_k4\", "
            "count(DISTINCT o.customer_id) AS \"_p5\", "
            "NULLIF(pg_collation_for((\"book_id\")::text), '\"default\"') AS \"_k0_collation\", "
            "NULLIF(pg_collation_for((date_trunc('day', created_at))::text), '\"default\"') AS \"_k4_collation\" "
            "FROM \"shop\".\"order_items\" WHERE (created_at >= $1) GROUP BY 1, 6");
  ASSERT_EQ(plan.Columns().size(), 6U);
  EXPECT_EQ(plan.Columns()[2].role, MergeColumn::Role::kAvg);
  EXPECT_EQ(plan.Columns()[2].partial_count, "_p2_n");
  EXPECT_FALSE(plan.IsScalar());
  EXPECT_EQ(plan.Columns()[0].partial_collation, "_k0_collation");
  const MergePlan scalar = AggregateQuery::From("t").Count("n").Plan();
  EXPECT_EQ(scalar.ShardSql(), "SELECT count(*) AS \"_p0\" FROM \"t\"");
  EXPECT_TRUE(scalar.IsScalar());
  const MergePlan lowest = AggregateQuery::From("t").Min("x", "lo").Plan();
  EXPECT_EQ(lowest.ShardSql(),
            "SELECT min(\"x\") AS \"_p0\", NULLIF(pg_collation_for((min(\"x\"))::text), "
            "'\"default\"') AS \"_p0_collation\" FROM \"t\"");
  EXPECT_EQ(QuoteIdentifier("we\"ird"), "\"we\"\"ird\"");
}

TEST(AggregateQueryTest, RefusesWhatCannotBeMergedAndSaysWhy) {
  auto refusal = [](const std::string& call) {
    return ErrorOf([&] { (void)AggregateQuery::From("t").Select(call, "x"); });
  };
  struct Expect {
    std::string call;
    std::string says;
  };
  const std::vector<Expect> cases = {
      {"median(x)", "the median of the shards' medians is not the median"},
      {"percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", "no combination of per-shard percentiles"},
      {"percentile_disc(0.9) within group (order by x)", "approximate quantile sketch"},
      {"mode() WITHIN GROUP (ORDER BY x)", "most common value on each shard"},
      {"count(DISTINCT book_id)", "per-shard DISTINCT results over-count"},
      {"sum(DISTINCT price)", "Only the shard key (customer_id)"},
      {"string_agg(title, ',' ORDER BY title)", "build the list in the application"},
      {"array_agg(x)", "element order"},
      {"sum(a) - sum(b)", "Select each aggregate as its own column"},
      {"coalesce(sum(x), 0)", "aggregates inside an expression"},
      {"round(avg(x), 2)", "aggregates inside an expression"},
      {"sum(x)::int", "aggregates inside an expression"},
      {"avg(x) OVER ()", "window function"},
      {"stddev(x)", "sum(x*x)"},
      {"bool_and(flag)", "min(x::int)"},
      {"my_agg(x)", "not an aggregate shardkit can merge"},
      {"lower(title)", "GroupByExpr"},
      {"x + 1", "contains no aggregate"},
      {"sum(x ORDER BY y)", "drop the ORDER BY"},
      {"sum(count(x))", "nests aggregate calls"},
      // Not a function of the current row alone: each shard would decide on its own.
      {"count(*) FILTER (WHERE sku IN (SELECT sku FROM hot LIMIT 3))", "contains a subquery"},
      {"sum(x) FILTER (WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id))", "contains a subquery"},
      {"max((SELECT max(y) FROM u))", "contains a subquery"},
      {"count(*) FILTER (WHERE x IN (VALUES (1), (2)))", "contains a subquery"},
      {"sum(random())", "calls random()"},
      {"count(*) FILTER (WHERE random() < 0.5)", "calls random()"},
      {"sum(nextval('s'))", "calls nextval()"},
      {"count(*) FILTER (WHERE ordered_at > now() - interval '1 day')", "uses now()"},
      {"count(*) FILTER (WHERE day = current_date)", "uses current_date"},
      {"count(*) FILTER (WHERE ts > 'now'::timestamptz)", "uses 'now'"},
      {"count(*) FILTER (WHERE d < date 'today')", "uses 'today'"},
      {"max(clock_timestamp())", "uses clock_timestamp()"},
      {"count(*) FILTER (WHERE age(born) > interval '18 years')", "uses age()"},
      // Merged text in another collation than C.
      {"max(note COLLATE \"en-US-x-icu\")", "COLLATE \"en-US-x-icu\""},
      {"min(note COLLATE pg_catalog.\"de-DE-x-icu\")", "COLLATE \"de-DE-x-icu\""},
  };
  for (const auto& c : cases) {
    const std::string message = refusal(c.call);
    EXPECT_NE(message.find(c.says), std::string::npos) << c.call << " -> " << message;
  }
  // Things that only look like refusals are accepted.
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note <> 'median(x)')", "n"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("sum(\"median\")", "s"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(DISTINCT customer_id)", "c"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").ShardKey("tenant").Select("sum(DISTINCT t.tenant)", "s"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("max(DISTINCT price)", "m"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("sum(price * quantity) /* revenue */", "r"));
  EXPECT_THROW((void)AggregateQuery::From("t").CountDistinct("book_id", "b"), UnmergeableQuery);
  EXPECT_NO_THROW((void)AggregateQuery::From("t").CountDistinct("customer_id", "c"));
  // Row-local after all: strings, quoted names, parameters, COLLATE deciding which rows count.
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("max(note COLLATE \"C\")", "m"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("max(note COLLATE \"POSIX\")", "m"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note = 'now')", "n"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note = 'select 1')", "n"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE \"select\" > 0)", "n"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("sum(x) FILTER (WHERE created_at >= $1::timestamptz)", "s"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("max(x::timestamp with time zone)", "m"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("max(age($1::date, born))", "m"));
  EXPECT_NO_THROW(
      (void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note COLLATE \"en-US-x-icu\" > 'a')", "n"));
}

TEST(AggregateQueryTest, KeysAndConditionsMustBeRowLocalToo) {
  auto refusal = [](auto&& build) { return ErrorOf([&] { (void)build(AggregateQuery::From("t")); }); };
  EXPECT_NE(refusal([](AggregateQuery q) { return q.GroupByExpr("date_trunc('day', now())", "d"); }).find("uses now()"),
            std::string::npos);
  EXPECT_NE(
      refusal([](AggregateQuery q) { return q.GroupByExpr("(SELECT max(x) FROM u)", "m"); }).find("group key \"m\""),
      std::string::npos);
  EXPECT_NE(refusal([](AggregateQuery q) {
              return q.GroupByExpr("region COLLATE \"en-US-x-icu\"", "r");
            }).find("COLLATE \"en-US-x-icu\""),
            std::string::npos);
  EXPECT_NE(refusal([](AggregateQuery q) {
              return q.Where("ordered_at > now() - interval '30 days'");
            }).find("Pass the instant as a parameter"),
            std::string::npos);
  EXPECT_NE(refusal([](AggregateQuery q) {
              return q.Where("sku IN (SELECT sku FROM hot LIMIT 3)");
            }).find("contains a subquery"),
            std::string::npos);
  EXPECT_NE(refusal([](AggregateQuery q) { return q.Where("  "); }).find("empty WHERE"), std::string::npos);
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Where("note COLLATE \"en-US-x-icu\" > 'a'"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").GroupByExpr("region COLLATE \"C\"", "r"));
}

TEST(AggregateQueryTest, WhereConditionsAreAnded) {
  const MergePlan plan = AggregateQuery::From("t").Where("a > $1").Count("n").Where("b OR c").Plan();
  EXPECT_EQ(plan.ShardSql(), "SELECT count(*) AS \"_p0\" FROM \"t\" WHERE (a > $1) AND (b OR c)");
}

TEST(AggregateQueryTest, OrderStatisticsBuildTheExactPercentileQueryNotAMergePlan) {
  const auto query = AggregateQuery::From("orders")
                         .Where("status <> $1")
                         .GroupBy("status")
                         .Median("total", "median")
                         .PercentileDisc(0.95, "total", "p95")
                         .CountDistinctValues("book_id", "books")
                         .OrderBy("median", SortDirection::kDesc)
                         .Limit(3);
  const PercentileQuery q = query.Percentiles();
  EXPECT_EQ(q.from, "\"orders\"");
  EXPECT_EQ(q.where, "(status <> $1)");
  ASSERT_EQ(q.group_by.size(), 1U);
  EXPECT_EQ(q.group_by[0].expression, "\"status\"");
  ASSERT_EQ(q.columns.size(), 3U);
  EXPECT_EQ(q.columns[0].kind, OrderStatistic::kPercentileCont);
  EXPECT_EQ(q.columns[0].fraction, 0.5);
  EXPECT_EQ(q.columns[1].kind, OrderStatistic::kPercentileDisc);
  EXPECT_EQ(q.columns[2].kind, OrderStatistic::kCountDistinct);
  EXPECT_EQ(q.columns[2].value, "\"book_id\"");
  ASSERT_EQ(q.order_by.size(), 1U);
  EXPECT_EQ(q.limit, 3);
  // Partials cannot answer them: Plan() says where to go instead.
  try {
    (void)query.Plan();
    ADD_FAILURE() << "Plan() accepted a median";
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("Percentiles()"), std::string::npos) << e.what();
  }
  // Other aggregates do not mix with them.
  EXPECT_THROW((void)AggregateQuery::From("t").Median("x", "m").Sum("y", "s").Percentiles(), UnmergeableQuery);
}

TEST(PercentileRanksTest, PostgresRowsAndInterpolation) {
  EXPECT_EQ(PercentileDiscRow(0, 10), 1);
  EXPECT_EQ(PercentileDiscRow(1, 10), 10);
  EXPECT_EQ(PercentileDiscRow(0.5, 10), 5);
  EXPECT_EQ(PercentileDiscRow(0.51, 10), 6);
  const PercentileContRows half = PercentileContRowsFor(0.5, 4);
  EXPECT_EQ(half.first, 2);
  EXPECT_EQ(half.second, 3);
  EXPECT_DOUBLE_EQ(half.proportion, 0.5);
  const PercentileContRows one = PercentileContRowsFor(1, 1);
  EXPECT_EQ(one.first, 1);
  EXPECT_EQ(one.second, 1);
  EXPECT_EQ(PercentileInterpolate(1, 3, 0.5), 2);
}

}  // namespace
}  // namespace shardkit
