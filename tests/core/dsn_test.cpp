#include "shardkit/core/dsn.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardkit/core/dsn_format.hpp"

namespace shardkit {
namespace {

// A Dsn reaches text only through Redacted(), operator<<, fmt or Reveal().
static_assert(!std::is_convertible_v<std::string, Dsn>);
static_assert(!std::is_convertible_v<const char*, Dsn>);
static_assert(!std::is_convertible_v<Dsn, std::string>);
static_assert(!std::is_convertible_v<Dsn, std::string_view>);
static_assert(fmt::is_formattable<Dsn>::value);

constexpr const char* kKeyValue = "host=db1 port=5433 dbname=shop user=app password='s3 cr\\'et' sslmode=require";
constexpr const char* kUri = "postgresql://app:s3cret@db1:5433,db2:5434/shop?sslmode=require&sslpassword=k3y";

bool Shows(const std::string& text, std::string_view secret) {
  return text.find(secret) != std::string::npos;
}

std::string Streamed(const Dsn& dsn) {
  std::ostringstream out;
  out << dsn;
  return out.str();
}

TEST(Dsn, KeyValueFormsShowNoPassword) {
  const Dsn dsn{kKeyValue};
  const std::string expected = "host=db1 port=5433 dbname=shop user=app password=*** sslmode=require";
  EXPECT_EQ(dsn.Redacted(), expected);
  EXPECT_EQ(Streamed(dsn), expected);
  EXPECT_EQ(fmt::format("{}", dsn), expected);
  EXPECT_EQ(fmt::format("cannot reach {} now", dsn), "cannot reach " + expected + " now");
  EXPECT_EQ(::testing::PrintToString(dsn), expected);  // what a failed EXPECT_EQ prints
  for (const std::string& shown : {dsn.Redacted(), Streamed(dsn), fmt::format("{:>120}", dsn)}) {
    EXPECT_FALSE(Shows(shown, "s3")) << shown;
    EXPECT_FALSE(Shows(shown, "cr")) << shown;
  }
}

TEST(Dsn, UriFormsShowNoPassword) {
  const Dsn dsn{kUri};
  const std::string expected = "postgresql://app:***@db1:5433,db2:5434/shop?sslmode=require&sslpassword=***";
  EXPECT_EQ(dsn.Redacted(), expected);
  EXPECT_EQ(Streamed(dsn), expected);
  EXPECT_EQ(fmt::format("{}", dsn), expected);
  EXPECT_FALSE(Shows(fmt::format("{}", dsn), "s3cret"));
  EXPECT_FALSE(Shows(fmt::format("{}", dsn), "k3y"));
}

TEST(Dsn, FormatSpecsApplyToTheRedactedText) {
  const Dsn dsn{"host=h password=pw"};
  EXPECT_EQ(fmt::format("[{:>22}]", dsn), "[   host=h password=***]");
  EXPECT_EQ(fmt::format("[{:.6}]", dsn), "[host=h]");
}

TEST(Dsn, RevealGivesTheTextAsWritten) {
  EXPECT_EQ(Dsn(kKeyValue).Reveal(), kKeyValue);
  EXPECT_EQ(Dsn(kUri).Reveal(), kUri);
  EXPECT_EQ(Dsn("dbname=bookstore").Redacted(), "dbname=bookstore");  // nothing secret: shown whole
}

TEST(Dsn, EmptyOnlyWithoutText) {
  EXPECT_TRUE(Dsn().empty());
  EXPECT_TRUE(Dsn("").empty());
  EXPECT_FALSE(Dsn("host=h").empty());
  EXPECT_EQ(Dsn().Redacted(), "");
}

TEST(Dsn, EqualWhenTheTextIsEqual) {
  EXPECT_EQ(Dsn(kKeyValue), Dsn(std::string(kKeyValue)));
  EXPECT_EQ(Dsn(), Dsn(""));
  EXPECT_NE(Dsn("host=h password=a"), Dsn("host=h password=b"));  // the same redacted text, other servers' secrets
  EXPECT_EQ(Dsn("host=h password=a").Redacted(), Dsn("host=h password=b").Redacted());
  EXPECT_NE(Dsn("host=h port=1"), Dsn("host=h  port=1"));  // one server spelt twice is two strings
}

TEST(RedactDsn, HidesPasswordsInBothForms) {
  EXPECT_EQ(RedactDsn("host=h password=s3cret user=u"), "host=h password=*** user=u");
  EXPECT_EQ(RedactDsn("host=h password = 'a b\\' c' user=u"), "host=h password = *** user=u");
  EXPECT_EQ(RedactDsn("postgresql://bob:s3cret@h:5432/db"), "postgresql://bob:***@h:5432/db");
  EXPECT_EQ(RedactDsn("postgres://h/db?user=bob&password=s3cret&sslmode=require"),
            "postgres://h/db?user=bob&password=***&sslmode=require");
  EXPECT_EQ(RedactDsn("postgresql://bob@h/db"), "postgresql://bob@h/db");
}

TEST(RedactDsn, HidesConnectionStringsQuotedInMessages) {
  EXPECT_EQ(RedactDsn("cannot parse \"host=h password=s3cret\""), "cannot parse \"host=h password=***\"");
  EXPECT_EQ(RedactDsn("connecting to postgresql://bob:s3cret@h/db failed"),
            "connecting to postgresql://bob:***@h/db failed");
}

TEST(WithConnectTimeout, AddsWholeSecondsOnlyWhenAbsent) {
  using std::chrono::milliseconds;
  EXPECT_EQ(WithConnectTimeout(Dsn("host=h"), milliseconds(2500)), Dsn("host=h connect_timeout=3"));
  EXPECT_EQ(WithConnectTimeout(Dsn("host=h"), milliseconds(100)), Dsn("host=h connect_timeout=2"));
  EXPECT_EQ(WithConnectTimeout(Dsn("host=h connect_timeout=9"), milliseconds(100)), Dsn("host=h connect_timeout=9"));
  EXPECT_EQ(WithConnectTimeout(Dsn("postgresql://h/db"), milliseconds(4000)),
            Dsn("postgresql://h/db?connect_timeout=4"));
  EXPECT_EQ(WithConnectTimeout(Dsn("postgresql://h/db?sslmode=disable"), milliseconds(4000)),
            Dsn("postgresql://h/db?sslmode=disable&connect_timeout=4"));
  EXPECT_EQ(WithConnectTimeout(Dsn("host=h password=s3cret"), milliseconds(2000)).Reveal(),
            "host=h password=s3cret connect_timeout=2");
}

}  // namespace
}  // namespace shardkit
