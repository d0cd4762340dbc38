// Decimal against outputs copied from PostgreSQL 15 (psql, SELECT ...::numeric).
#include "shardkit/core/decimal.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

struct Case {
  const char* in;
  const char* out;
};

TEST(DecimalTest, ParsesAndPrintsLikeNumericInOut) {
  // SELECT a::numeric::text
  const std::vector<Case> cases = {
      {"1.50", "1.50"},
      {"-0.00", "0.00"},
      {"1.5e3", "1500"},
      {"1e-3", "0.001"},
      {" 12 ", "12"},
      {".5", "0.5"},
      {"5.", "5"},
      {"-1.23E+2", "-123"},
      {"0.000", "0.000"},
      {"+7", "7"},
      {"1.2e-5", "0.000012"},
      {"-0", "0"},
      {"000123.4500", "123.4500"},
      {"12e0", "12"},
      {"-.5e1", "-5"},
      {"1.000e2", "100.0"},
      {"1.23456789012345678901234567890", "1.23456789012345678901234567890"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Decimal::Parse(c.in).ToString(), c.out) << "input '" << c.in << "'";
  }
  EXPECT_EQ(Decimal::Parse("1.5e3").Scale(), 0);
  EXPECT_EQ(Decimal::Parse("1.000e2").Scale(), 1);
}

TEST(DecimalTest, RefusesNonFiniteAndGarbage) {
  for (const char* bad : {"NaN", "Infinity", "-Infinity", "", " ", "1.2.3", "e5", "1e", "12abc", "--1", "1e1001"}) {
    EXPECT_FALSE(Decimal::TryParse(bad).has_value()) << bad;
    EXPECT_THROW((void)Decimal::Parse(bad), Error) << bad;
  }
  try {
    (void)Decimal::Parse("NaN");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
}

TEST(DecimalTest, AddsExactlyWithTheLargerScale) {
  EXPECT_EQ((Decimal::Parse("1234.50") + Decimal::Parse("10.255")).ToString(), "1244.755");
  EXPECT_EQ((Decimal::Parse("0.10") + Decimal::Parse("-0.1")).ToString(), "0.00");
  EXPECT_EQ((Decimal::Parse("-5") + Decimal::Parse("2.000")).ToString(), "-3.000");
  EXPECT_EQ((Decimal::Parse("99999999999999999999.99") + Decimal::Parse("0.01")).ToString(),
            "100000000000000000000.00");
  // 0.1 added ten times is exactly 1.0 (no binary rounding)
  Decimal sum;
  for (int i = 0; i < 10; ++i) sum = sum + Decimal::Parse("0.1");
  EXPECT_EQ(sum.ToString(), "1.0");
}

TEST(DecimalTest, DividesLikeNumericDiv) {
  // SELECT a::numeric / b::numeric on PostgreSQL 15.
  struct Div {
    const char* a;
    const char* b;
    const char* q;
  };
  const std::vector<Div> cases = {
      {"10", "3", "3.3333333333333333"},
      {"1", "3", "0.33333333333333333333"},
      {"2", "3", "0.66666666666666666667"},
      {"1244.75", "7", "177.8214285714285714"},
      {"-7", "2", "-3.5000000000000000"},
      {"7", "-2", "-3.5000000000000000"},
      {"-2", "3", "-0.66666666666666666667"},
      {"0", "5", "0.00000000000000000000"},
      {"0.00", "3", "0.00000000000000000000"},
      {"123456789012345678", "3", "41152263004115226"},
      {"0.001", "3", "0.00033333333333333333"},
      {"1.00", "3", "0.33333333333333333333"},
      {"12345.67", "1000", "12.3456700000000000"},
      {"9999", "10000", "0.99990000000000000000"},
      {"1", "9999", "0.00010001000100010001"},
      {"10000", "9999", "1.0001000100010001"},
      {"1e-20", "3", "0.0000000000000000000033333333333333333333"},
      {"1e20", "7", "14285714285714285714"},
      {"5", "2", "2.5000000000000000"},
      {"2.5", "2", "1.25000000000000000000"},
      {"1", "1", "1.00000000000000000000"},
      {"100", "1", "100.0000000000000000"},
      {"1", "867361737988403547205962240695953369140625",
       "0.000000000000000000000000000000000000000001152921504606846976"},
      {"2", "4336808689942017736029811203479766845703125",
       "0.000000000000000000000000000000000000000000461168601842738790"},
      {"123.456", "0.001", "123456.000000000000"},
      {"-0.5", "3", "-0.16666666666666666667"},
      {"99999999999999999999", "0.3", "333333333333333333330.0"},
      {"1", "0.0001", "10000.0000000000000000"},
      {"0.0001", "10000", "0.0000000100000000000000000000"},
      {"12.34", "56.78", "0.21733004579077139838"},
      {"5678", "1234", "4.6012965964343598"},
      // Exactly half an ulp at the result scale: rounded away from zero.
      {"1", "33554432", "0.000000029802322387695313"},
      {"-1", "33554432", "-0.000000029802322387695313"},
      {"3", "33554432", "0.000000089406967163085938"},
      {"7", "536870912", "0.000000013038516044616699"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Decimal::Parse(c.a).DivideLikePostgres(Decimal::Parse(c.b)).ToString(), c.q) << c.a << " / " << c.b;
  }
  EXPECT_THROW((void)Decimal::FromInt(1).DivideLikePostgres(Decimal::Parse("0.00")), Error);
}

TEST(DecimalTest, AverageOfIntegersIsNumericDivision) {
  // SELECT avg(x) FROM (VALUES (1),(2),(2)) v(x)  ->  1.6666666666666667
  EXPECT_EQ(Decimal::FromInt(5).DivideLikePostgres(Decimal::FromInt(3)).ToString(), "1.6666666666666667");
  // SELECT avg(x) FROM (VALUES (2),(2)) v(x)  ->  2.0000000000000000
  EXPECT_EQ(Decimal::FromInt(4).DivideLikePostgres(Decimal::FromInt(2)).ToString(), "2.0000000000000000");
}

TEST(DecimalTest, RoundsHalfAwayFromZero) {
  // SELECT round(2.5), round(-2.5), round(1.2345, 3), round(-1.2345, 3), round(0.0005, 3), round(1.5, 3)
  EXPECT_EQ(Decimal::Parse("2.5").Rounded(0).ToString(), "3");
  EXPECT_EQ(Decimal::Parse("-2.5").Rounded(0).ToString(), "-3");
  EXPECT_EQ(Decimal::Parse("1.2345").Rounded(3).ToString(), "1.235");
  EXPECT_EQ(Decimal::Parse("-1.2345").Rounded(3).ToString(), "-1.235");
  EXPECT_EQ(Decimal::Parse("0.0005").Rounded(3).ToString(), "0.001");
  EXPECT_EQ(Decimal::Parse("1.5").Rounded(3).ToString(), "1.500");
}

TEST(DecimalTest, ComparesByValueAndIdentityByText) {
  EXPECT_EQ(Decimal::Parse("1.5"), Decimal::Parse("1.50"));
  EXPECT_FALSE(Decimal::Parse("1.5").IdenticalTo(Decimal::Parse("1.50")));
  EXPECT_LT(Decimal::Parse("-2"), Decimal::Parse("-1.999"));
  EXPECT_LT(Decimal::Parse("0.0001"), Decimal::Parse("0.001"));
  EXPECT_GT(Decimal::Parse("10"), Decimal::Parse("9.99999999999999999999"));
  EXPECT_EQ(Decimal::Parse("-0.00"), Decimal::Parse("0"));
}

TEST(DecimalTest, ConvertsToIntAndDouble) {
  EXPECT_EQ(Decimal::Parse("12.00").ToInt64(), 12);
  EXPECT_EQ(Decimal::Parse("12.50").ToInt64(), std::nullopt);
  EXPECT_EQ(Decimal::Parse("9223372036854775808").ToInt64(), std::nullopt);
  EXPECT_EQ(Decimal::Parse("-9223372036854775808").ToInt64(), INT64_MIN);
  EXPECT_DOUBLE_EQ(Decimal::Parse("0.1").ToDouble(), 0.1);
  EXPECT_EQ(Decimal::Parse("1e400").ToDouble(), std::numeric_limits<double>::infinity());
}

// Division scale: at least 16 significant digits, never below an input's scale.
TEST(DecimalTest, DivisionScaleProperties) {
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 2000; ++i) {
    const auto a = Decimal(Decimal::Mantissa(static_cast<std::int64_t>(rng() % 2000000000000ULL) - 1000000000000LL),
                           static_cast<int>(rng() % 8));
    auto b = Decimal(Decimal::Mantissa(static_cast<std::int64_t>(rng() % 100000) + 1), static_cast<int>(rng() % 5));
    const int scale = Decimal::DivisionScale(a, b);
    EXPECT_GE(scale, a.Scale());
    EXPECT_GE(scale, b.Scale());
    const Decimal q = a.DivideLikePostgres(b);
    EXPECT_EQ(q.Scale(), scale);
    // |q - a/b| <= half an ulp: |q*b - a| <= b * 10^-scale / 2
    const Decimal back = Decimal(q.Unscaled() * b.Unscaled(), q.Scale() + b.Scale());
    const Decimal err = back - a;
    const Decimal bound = Decimal(b.Unscaled() * 5, scale + b.Scale() + 1);
    EXPECT_LE(err.Sign() < 0 ? -err : err, bound) << a.ToString() << " / " << b.ToString();
  }
}

}  // namespace
}  // namespace shardkit
