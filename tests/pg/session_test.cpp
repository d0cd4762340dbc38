// The session settings a pool puts into every connection string.
#include "shardkit/pg/session.hpp"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// What libpq itself reads from the string: the proof that the settings arrive.
std::map<std::string, std::string> Parsed(const Dsn& dsn) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(PQconninfoParse(dsn.Reveal().c_str(), &error),
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

// The options every connection gets: each pinned setting as a -c switch.
std::string Pinned(const SessionChoices& choices = {}) {
  std::string out;
  for (const auto& [name, value] : PinnedSettings(choices)) {
    if (name == "client_encoding") continue;  // a connection keyword
    std::string escaped;
    for (const char c : value) {
      if (c == ' ' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    out += (out.empty() ? "-c " : " -c ") + name + "=" + escaped;
  }
  return out;
}

TEST(SessionSettings, EverySettingThatChangesAStatementsMeaningIsPinned) {
  std::vector<std::string> names;
  for (const auto& s : PinnedSettings({})) names.push_back(s.name);
  for (const char* name :
       {"DateStyle", "IntervalStyle", "TimeZone", "extra_float_digits", "bytea_output", "standard_conforming_strings",
        "backslash_quote", "array_nulls", "transform_null_equals", "search_path", "lc_monetary", "lc_numeric",
        "lc_time", "default_text_search_config", "xmloption", "timezone_abbreviations", "client_encoding"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  const auto out = Parsed(WithSessionSettings(Dsn("dbname=x")));
  // Both parts of DateStyle: a DSN's DMY must not survive.
  EXPECT_NE(out.at("options").find("-c DateStyle=ISO,\\ MDY"), std::string::npos) << out.at("options");
  EXPECT_NE(out.at("options").find("-c bytea_output=hex"), std::string::npos) << out.at("options");
}

TEST(SessionSettings, AddedToKeyValueStringsKeepingEverythingElse) {
  const auto out = Parsed(WithSessionSettings(Dsn("host=db1 port=5433 dbname=shop user=app password='p w\\'d'")));
  EXPECT_EQ(out.at("host"), "db1");
  EXPECT_EQ(out.at("port"), "5433");
  EXPECT_EQ(out.at("dbname"), "shop");
  EXPECT_EQ(out.at("password"), "p w'd");
  EXPECT_EQ(out.at("options"), Pinned());
  EXPECT_EQ(out.at("client_encoding"), "UTF8");
}

TEST(SessionSettings, AddedToUrisAndAfterTheCallersOwnOptions) {
  const auto out = Parsed(
      WithSessionSettings(Dsn("postgresql://app:secret@db1:5433,db2:5434/shop?sslmode=prefer&client_encoding=LATIN1&"
                              "options=-c%20search_path%3Dshop%20-c%20DateStyle%3DSQL,DMY")));
  EXPECT_EQ(out.at("host"), "db1,db2");
  EXPECT_EQ(out.at("port"), "5433,5434");
  EXPECT_EQ(out.at("password"), "secret");
  EXPECT_EQ(out.at("sslmode"), "prefer");
  // Later -c switches win, so the caller's search_path and DateStyle are overridden.
  EXPECT_EQ(out.at("options"), "-c search_path=shop -c DateStyle=SQL,DMY " + Pinned());
  EXPECT_EQ(out.at("client_encoding"), "UTF8");
}

TEST(SessionSettings, ChosenValuesAreEscapedForLibpqOptions) {
  SessionChoices york;
  york.time_zone = "America/New_York";
  york.search_path = "\"$user\", shop";
  EXPECT_EQ(Parsed(WithSessionSettings(Dsn("dbname=x"), york)).at("options"), Pinned(york));
  EXPECT_NE(Pinned(york).find("-c TimeZone=America/New_York"), std::string::npos);
  EXPECT_NE(Pinned(york).find("-c search_path=\"$user\",\\ shop"), std::string::npos) << Pinned(york);
  // libpq splits options at unescaped spaces.
  SessionChoices odd;
  odd.time_zone = "odd zone\\name";
  EXPECT_NE(Parsed(WithSessionSettings(Dsn("dbname=x"), odd)).at("options").find("-c TimeZone=odd\\ zone\\\\name"),
            std::string::npos);
  EXPECT_THROW((void)WithSessionSettings(Dsn("dbname=x"), SessionChoices{"", "public"}), ConfigError);
  EXPECT_THROW((void)WithSessionSettings(Dsn("dbname=x"), SessionChoices{"UTC", ""}), ConfigError);
}

TEST(SessionSettings, AStringLibpqCannotReadIsLeftForConnectToReport) {
  EXPECT_EQ(WithSessionSettings(Dsn("host=db1 password")).Reveal(), "host=db1 password");
  EXPECT_EQ(WithSessionSettings(Dsn("")).Reveal().find("client_encoding='UTF8' options="), 0U);
}

}  // namespace
}  // namespace shardkit
