// Typed parameters: their text, their type, and the statement as sent.
#include "shardkit/core/sql_params.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace shardkit {
namespace {

TEST(SqlParams, ValuesCarryTheirTextAndType) {
  const SqlParams params{"abc",
                         std::nullopt,
                         7,
                         std::int64_t{-9'000'000'000},
                         true,
                         0.1,
                         2.5e-300,
                         std::vector<std::int64_t>{1, -2, 3},
                         std::vector<std::string>{"a b", "q\"uote", "back\\slash"},
                         SqlParam::Typed(std::nullopt, "jsonb")};
  EXPECT_EQ(params[0], "abc");
  EXPECT_EQ(params[0].type(), "");
  EXPECT_FALSE(params[1].has_value());
  EXPECT_EQ(params[1].type(), "");
  EXPECT_EQ(params[2], "7");
  EXPECT_EQ(params[2].type(), "int4");
  EXPECT_EQ(params[3], "-9000000000");
  EXPECT_EQ(params[3].type(), "int8");
  EXPECT_EQ(params[4], "true");
  EXPECT_EQ(params[4].type(), "boolean");
  EXPECT_EQ(params[5], "0.1");  // the shortest text that reads back as the same double
  EXPECT_EQ(params[5].type(), "float8");
  EXPECT_EQ(params[6], "2.5e-300");
  EXPECT_EQ(params[7], "{1,-2,3}");
  EXPECT_EQ(params[7].type(), "int8[]");
  EXPECT_EQ(params[8], R"({"a b","q\"uote","back\\slash"})");
  EXPECT_EQ(params[8].type(), "text[]");
  EXPECT_FALSE(params[9].has_value());
  EXPECT_EQ(params[9].type(), "jsonb");
  EXPECT_EQ(SqlParam(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(SqlParam(std::numeric_limits<double>::quiet_NaN()), "NaN");
  // An instant: UTC, microseconds.
  const auto at = std::chrono::sys_days{std::chrono::year{2026} / 1 / 5} + std::chrono::hours{5} +
                  std::chrono::microseconds{250'001};
  const SqlParam instant{std::chrono::time_point_cast<std::chrono::system_clock::duration>(at)};
  EXPECT_EQ(instant, "2026-01-05 05:00:00.250001+00");
  EXPECT_EQ(instant.type(), "timestamptz");
}

TEST(SqlParams, TypedParametersAreCastWhereTheyStandAndNowhereElse) {
  EXPECT_EQ(WithParameterTypes("SELECT $1, $2", {"a", "b"}), "SELECT $1, $2");
  EXPECT_EQ(WithParameterTypes("SELECT CONCAT('%', $1, '%'), sum($2), '$2', \"$2\" /* $2 */ -- $2\n, $2 IS NULL",
                               {SqlParam::Typed("x", "text"), 5}),
            "SELECT CONCAT('%', ($1::text), '%'), sum(($2::int4)), '$2', \"$2\" /* $2 */ -- $2\n, ($2::int4) IS NULL");
  SqlParams eleven(11, SqlParam("x"));
  eleven[10] = std::int64_t{1};
  EXPECT_EQ(WithParameterTypes("SELECT $1 || $11, $1[1], $11[1]", eleven),
            "SELECT $1 || ($11::int8), $1[1], ($11::int8)[1]");
  // A text the scanner rejects is left to the parser to report.
  EXPECT_EQ(WithParameterTypes("SELECT 'open", {1}), "SELECT 'open");
}

}  // namespace
}  // namespace shardkit
