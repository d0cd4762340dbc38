// Session settings for pooled connections, and the facts a pool reads once.
#include "shardkit/pg/session.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <cctype>
#include <memory>
#include <pqxx/except>
#include <pqxx/nontransaction>
#include <vector>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// A value inside libpq's `options`: spaces and backslashes are escaped with
// a backslash (libpq splits the options at unescaped spaces).
std::string OptionsValue(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == ' ' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// A value in a key=value connection string: single-quoted, ' and \ escaped.
std::string ConninfoValue(std::string_view value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

std::string Normalized(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c != ' ') out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// The names PinnedSettings returns, in its order: what ReadSessionFacts asks for.
std::vector<std::string> PinnedNames() {
  std::vector<std::string> names;
  for (auto& s : PinnedSettings({})) names.push_back(std::move(s.name));
  return names;
}

}  // namespace

std::vector<PinnedSetting> PinnedSettings(const SessionChoices& choices) {
  return {
      {"DateStyle", "ISO, MDY"},
      {"IntervalStyle", "postgres"},
      {"TimeZone", choices.time_zone},
      {"extra_float_digits", "3"},
      {"bytea_output", "hex"},
      {"standard_conforming_strings", "on"},
      {"backslash_quote", "safe_encoding"},
      {"array_nulls", "on"},
      {"transform_null_equals", "off"},
      {"search_path", choices.search_path},
      {"lc_monetary", "C"},
      {"lc_numeric", "C"},
      {"lc_time", "C"},
      {"default_text_search_config", "pg_catalog.english"},
      {"xmloption", "content"},
      {"xmlbinary", "base64"},
      {"timezone_abbreviations", "Default"},
      {"gin_fuzzy_search_limit", "0"},
      {"client_encoding", "UTF8"},
  };
}

bool SameSettingValue(std::string_view a, std::string_view b) {
  return Normalized(a) == Normalized(b);
}

std::string SessionFacts::Setting(std::string_view name) const {
  for (const auto& [n, v] : settings) {
    if (n == name) return v;
  }
  return {};
}

Dsn WithSessionSettings(const Dsn& dsn, const SessionChoices& choices) {
  if (choices.time_zone.empty()) throw ConfigError("pool.time_zone", "is empty: name a time zone such as \"UTC\"");
  if (choices.search_path.empty()) {
    throw ConfigError("pool.search_path", "is empty: name the schemas, e.g. \"public\"");
  }
  std::string settings;
  for (const auto& [name, value] : PinnedSettings(choices)) {
    if (name == "client_encoding") continue;  // a keyword of its own, below
    settings += fmt::format("{}-c {}={}", settings.empty() ? "" : " ", name, OptionsValue(value));
  }
  char* error = nullptr;
  const std::string& text = dsn.Reveal();
  // PQconninfoParse reads both forms (key=value and URI) exactly as libpq
  // will, and keeps only what the string sets: no defaults slip in.
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(PQconninfoParse(text.c_str(), &error),
                                                                      &PQconninfoFree);
  if (!parsed) {
    // Never echo libpq's message: it may quote part of a password.
    PQfreemem(error);
    return dsn;
  }
  std::string out;
  std::string options;
  for (const PQconninfoOption* o = parsed.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view keyword = o->keyword;
    if (keyword == "options") {
      options = o->val;
      continue;
    }
    // The startup packet's client_encoding would win over a -c switch.
    if (keyword == "client_encoding") continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", keyword, ConninfoValue(o->val));
  }
  options += (options.empty() ? "" : " ") + settings;
  out += fmt::format("{}client_encoding='UTF8' options={}", out.empty() ? "" : " ", ConninfoValue(options));
  return Dsn(std::move(out));
}

void VerifyPinnedSettings(const SessionFacts& facts, const SessionChoices& choices, ShardId shard) {
  for (const auto& [name, wanted] : PinnedSettings(choices)) {
    const std::string actual = facts.Setting(name);
    if (SameSettingValue(actual, wanted)) continue;
    throw ShardError(shard, fmt::format("shard {}: the server runs this connection with {} = '{}', but shardkit "
                                        "pinned '{}' in its startup packet, so the same statement could mean "
                                        "something else on this shard. Something between shardkit and the server "
                                        "(a connection pooler such as PgBouncer) drops the startup options: "
                                        "connect to the server directly, or let the pooler pass `options`",
                                        shard, name, actual, wanted));
  }
}

SessionFacts ReadSessionFacts(pqxx::connection_base& connection, ShardId shard) {
  try {
    SessionFacts facts;
    facts.server_version = connection.server_version();
    // The locale provider exists from PostgreSQL 15 on (datlocprovider 'c'
    // libc, 'i' ICU); before, every database used libc.
    const bool has_provider = facts.server_version >= 150000;
    const std::string provider =
        has_provider ? "CASE d.datlocprovider WHEN 'c' THEN 'libc' WHEN 'i' THEN 'icu' ELSE d.datlocprovider::text END"
                     : "'libc'";
    const std::string icu_locale = facts.server_version >= 170000 ? "coalesce(d.datlocale, '')"
                                   : has_provider                 ? "coalesce(d.daticulocale, '')"
                                                                  : "''";
    static const std::vector<std::string> names = PinnedNames();
    std::string settings;
    for (const auto& name : names) settings += fmt::format(", current_setting('{}')", name);
    pqxx::nontransaction tx{connection};
    const pqxx::result r =
        tx.exec(fmt::format("SELECT d.datcollate, d.datctype, {}, {}, current_setting('server_encoding'){} "
                            "FROM pg_database d WHERE d.datname = current_database()",
                            provider, icu_locale, settings));
    if (r.size() != 1) {
      throw ShardQueryError(shard, fmt::format("shard {}: its database is missing from pg_database", shard));
    }
    facts.collate = r[0][0].c_str();
    facts.ctype = r[0][1].c_str();
    facts.locale_provider = r[0][2].c_str();
    facts.icu_locale = r[0][3].c_str();
    facts.server_encoding = r[0][4].c_str();
    for (std::size_t i = 0; i < names.size(); ++i) {
      facts.settings.emplace_back(names[i], r[0][static_cast<pqxx::row::size_type>(5 + i)].c_str());
    }
    return facts;
  } catch (const Error&) {
    throw;
  } catch (const pqxx::broken_connection& e) {
    throw ShardUnavailable(shard, fmt::format("shard {}: the connection broke while reading its collation and "
                                              "session settings: {}",
                                              shard, e.what()));
  } catch (const std::exception& e) {
    throw ShardQueryError(shard,
                          fmt::format("shard {}: cannot read its collation and session settings: {}", shard, e.what()));
  }
}

}  // namespace shardkit
