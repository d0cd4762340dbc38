// The session settings a pool puts into every connection string.
#include "shardkit/session.hpp"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <map>
#include <memory>
#include <string>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// What libpq itself reads from the string: the proof that the settings arrive.
std::map<std::string, std::string> Parsed(const std::string& dsn) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(PQconninfoParse(dsn.c_str(), &error),
                                                                        &PQconninfoFree);
  if (!options) {
    std::string message = error != nullptr ? error : "?";
    PQfreemem(error);
    ADD_FAILURE() << "libpq cannot parse " << dsn << ": " << message;
    return {};
  }
  std::map<std::string, std::string> out;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr) out[o->keyword] = o->val;
  }
  return out;
}

constexpr const char* kSettings = "-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=";

TEST(SessionSettings, AddedToKeyValueStringsKeepingEverythingElse) {
  const auto out = Parsed(WithSessionSettings("host=db1 port=5433 dbname=shop user=app password='p w\\'d'", "UTC"));
  EXPECT_EQ(out.at("host"), "db1");
  EXPECT_EQ(out.at("port"), "5433");
  EXPECT_EQ(out.at("dbname"), "shop");
  EXPECT_EQ(out.at("password"), "p w'd");
  EXPECT_EQ(out.at("options"), std::string(kSettings) + "UTC");
}

TEST(SessionSettings, AddedToUrisAndAfterTheCallersOwnOptions) {
  const auto out = Parsed(WithSessionSettings(
      "postgresql://app:secret@db1:5433,db2:5434/shop?sslmode=prefer&options=-c%20search_path%3Dshop", "UTC"));
  EXPECT_EQ(out.at("host"), "db1,db2");
  EXPECT_EQ(out.at("port"), "5433,5434");
  EXPECT_EQ(out.at("password"), "secret");
  EXPECT_EQ(out.at("sslmode"), "prefer");
  // Later -c switches win, so a TimeZone of the caller's is overridden.
  EXPECT_EQ(out.at("options"), std::string("-c search_path=shop ") + kSettings + "UTC");
}

TEST(SessionSettings, TimeZonesAreEscapedForLibpqOptions) {
  EXPECT_EQ(Parsed(WithSessionSettings("dbname=x", "America/New_York")).at("options"),
            std::string(kSettings) + "America/New_York");
  // libpq splits options at unescaped spaces.
  EXPECT_EQ(Parsed(WithSessionSettings("dbname=x", "odd zone\\name")).at("options"),
            std::string(kSettings) + "odd\\ zone\\\\name");
  EXPECT_THROW((void)WithSessionSettings("dbname=x", ""), ConfigError);
}

TEST(SessionSettings, AStringLibpqCannotReadIsLeftForConnectToReport) {
  EXPECT_EQ(WithSessionSettings("host=db1 password", "UTC"), "host=db1 password");
  EXPECT_EQ(WithSessionSettings("", "UTC").find("options="), 0U);
}

}  // namespace
}  // namespace shardkit
