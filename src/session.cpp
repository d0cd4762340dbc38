// Session settings for pooled connections, and the facts a pool reads once.
#include "shardkit/session.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <memory>
#include <pqxx/except>
#include <pqxx/nontransaction>

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

}  // namespace

std::string WithSessionSettings(std::string_view dsn, std::string_view time_zone) {
  if (time_zone.empty()) throw ConfigError("pool.time_zone", "is empty: name a time zone such as \"UTC\"");
  const std::string settings = "-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=" +
                               OptionsValue(time_zone);
  char* error = nullptr;
  const std::string text(dsn);
  // PQconninfoParse reads both forms (key=value and URI) exactly as libpq
  // will, and keeps only what the string sets: no defaults slip in.
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(PQconninfoParse(text.c_str(), &error),
                                                                       &PQconninfoFree);
  if (!parsed) {
    // Never echo libpq's message: it may quote part of a password.
    PQfreemem(error);
    return text;
  }
  std::string out;
  std::string options;
  for (const PQconninfoOption* o = parsed.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    if (std::string_view(o->keyword) == "options") {
      options = o->val;
      continue;
    }
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", o->keyword, ConninfoValue(o->val));
  }
  options += (options.empty() ? "" : " ") + settings;
  out += fmt::format("{}options={}", out.empty() ? "" : " ", ConninfoValue(options));
  return out;
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
    const std::string icu_locale =
        facts.server_version >= 170000 ? "coalesce(d.datlocale, '')"
        : has_provider                 ? "coalesce(d.daticulocale, '')"
                                       : "''";
    pqxx::nontransaction tx{connection};
    const pqxx::result r = tx.exec(fmt::format(
        "SELECT d.datcollate, d.datctype, {}, {}, current_setting('DateStyle'), current_setting('TimeZone'), "
        "current_setting('IntervalStyle'), current_setting('extra_float_digits') "
        "FROM pg_database d WHERE d.datname = current_database()",
        provider, icu_locale));
    if (r.size() != 1) {
      throw ShardQueryError(shard, fmt::format("shard {}: its database is missing from pg_database", shard));
    }
    facts.collate = r[0][0].c_str();
    facts.ctype = r[0][1].c_str();
    facts.locale_provider = r[0][2].c_str();
    facts.icu_locale = r[0][3].c_str();
    facts.date_style = r[0][4].c_str();
    facts.time_zone = r[0][5].c_str();
    facts.interval_style = r[0][6].c_str();
    facts.extra_float_digits = r[0][7].as<int>();
    return facts;
  } catch (const Error&) {
    throw;
  } catch (const pqxx::broken_connection& e) {
    throw ShardUnavailable(shard, fmt::format("shard {}: the connection broke while reading its collation and "
                                              "session settings: {}",
                                              shard, e.what()));
  } catch (const std::exception& e) {
    throw ShardQueryError(shard, fmt::format("shard {}: cannot read its collation and session settings: {}", shard,
                                             e.what()));
  }
}

}  // namespace shardkit
