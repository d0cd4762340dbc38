// shardkit/pg/session.hpp — the session every pooled connection runs with, and
// what a pool verifies about its server.
//
// The same statement text must mean the same on every shard, and every shard
// must print values the same way: merges compare the shards' text output and
// a literal such as '03/04/2020' or 'back\slash' must be read alike. A pool
// therefore pins, in the startup packet of every connection it opens (libpq
// `options`, `-c name=value`: zero round trips, and they win over the
// server's, the database's, the role's and the DSN's own settings), each
// setting that changes how a statement's literals and parameters are read,
// how values print or how they compare:
//
//   DateStyle = ISO, MDY                both parts: output, and the order of input fields
//   IntervalStyle = postgres            interval input and output
//   TimeZone = PoolOptions::time_zone   timestamptz input and output (default UTC)
//   extra_float_digits = 3              doubles print exactly (shortest round trip)
//   bytea_output = hex                  one text per bytea value
//   standard_conforming_strings = on    backslashes in '...' are plain characters
//   backslash_quote = safe_encoding     \' in E'...' strings
//   array_nulls = on                    NULL in array literals is NULL
//   transform_null_equals = off         x = NULL is never true
//   search_path = PoolOptions::search_path  which schema a name means (default public)
//   lc_monetary, lc_numeric, lc_time = C    to_char's currency, separators, month names
//   default_text_search_config = pg_catalog.english   to_tsvector(text) and friends
//   xmloption = content, xmlbinary = base64            XML parsing and output
//   timezone_abbreviations = Default    what 'EST' in a timestamp literal means
//   gin_fuzzy_search_limit = 0          GIN index scans return every match
//   client_encoding = UTF8              (a connection keyword, over PGCLIENTENCODING)
//
// Every new connection is then verified with one query (ReadSessionFacts):
// a server that runs with anything else (a connection pooler in between that
// drops the startup options, say) fails the connection with a ShardError
// naming the shard, the setting, both values and what to do; connections
// already verified are handed out with no round trip. The pool keeps the
// facts of its first connection (collation, locale provider, encoding, the
// settings) for the merge's checks (scatter_merge.hpp).
//
// A caller that changes one of these with SET on a leased connection must
// RESET it before giving the connection back (RESET returns to the pinned
// value).
//
//   auto lease = pool.Acquire();
//   std::shared_ptr<const shardkit::SessionFacts> facts = pool.Facts();
//   facts->locale_provider;   // "libc"; "icu" fails the merge check
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/dsn.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

// The parts of the pinned session a deployment chooses (PoolOptions carries them).
struct SessionChoices {
  std::string time_zone = "UTC";
  std::string search_path = "public";
};

struct PinnedSetting {
  std::string name;   // as SHOW knows it, e.g. "DateStyle"
  std::string value;  // as the server reports it once set, e.g. "ISO, MDY"
};
// Every setting above with its value, in a fixed order.
[[nodiscard]] std::vector<PinnedSetting> PinnedSettings(const SessionChoices& choices);

struct SessionFacts {
  int server_version = 0;       // e.g. 150004
  std::string collate;          // pg_database.datcollate
  std::string ctype;            // pg_database.datctype
  std::string locale_provider;  // "libc", "icu" (datlocprovider, PostgreSQL 15+; "libc" before)
  std::string icu_locale;       // daticulocale, empty unless ICU
  std::string server_encoding;  // e.g. "UTF8"
  // Each pinned setting's name (PinnedSettings order) and current_setting().
  std::vector<std::pair<std::string, std::string>> settings;

  // The current value of setting `name` (as PinnedSettings names it), or "".
  [[nodiscard]] std::string Setting(std::string_view name) const;
};

// The connection string with the pinned settings appended to its `options`
// (any options already there are kept; ours come last and win) and
// client_encoding set. Returned in key=value form; a string libpq cannot
// parse is returned as is, so that connecting reports the error. Throws
// ConfigError for an empty time zone or search path.
[[nodiscard]] Dsn WithSessionSettings(const Dsn& dsn, const SessionChoices& choices = {});

// One query on `connection`. Throws ShardQueryError naming `shard` if it
// fails.
[[nodiscard]] SessionFacts ReadSessionFacts(pqxx::connection_base& connection, ShardId shard);

// Throws ShardError naming the shard, the first setting that differs from
// its pinned value, both values and what to do.
void VerifyPinnedSettings(const SessionFacts& facts, const SessionChoices& choices, ShardId shard);

// Settings compare as the server treats their names: case and blanks do
// not matter ("utc" is "UTC", "ISO,MDY" is "ISO, MDY").
[[nodiscard]] bool SameSettingValue(std::string_view a, std::string_view b);

}  // namespace shardkit
