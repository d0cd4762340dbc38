// shardkit/session.hpp — the session every pooled connection runs with, and
// what a pool learns about its server once.
//
// Merged answers compare the shards' text output, so every shard must print
// values the same way. A pool opens each connection with
//
//   DateStyle = ISO            dates and timestamps order as their text
//   IntervalStyle = postgres   one text per interval
//   TimeZone = PoolOptions::time_zone (default UTC): one text per timestamptz,
//                              so a timestamptz group key never splits across shards
//   extra_float_digits = 3     doubles arrive exact (shortest round-trip), not
//                              rounded to 15 digits
//
// sent as libpq `options` in the startup packet, so they cost no round trip
// and win over the server's, database's and role's defaults. On the first
// connection it opens, a pool reads SessionFacts (one query, once): the
// database's collation and locale provider and the settings as the session
// sees them. Merges of scatter results check them (scatter_merge.hpp).
//
//   auto lease = pool.Acquire();
//   std::shared_ptr<const shardkit::SessionFacts> facts = pool.Facts();
//   facts->locale_provider;   // "libc"; "icu" fails the merge check
#pragma once

#include <string>
#include <string_view>

#include "shardkit/bucket.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

struct SessionFacts {
  int server_version = 0;        // e.g. 150004
  std::string collate;           // pg_database.datcollate
  std::string ctype;             // pg_database.datctype
  std::string locale_provider;   // "libc", "icu" (datlocprovider, PostgreSQL 15+; "libc" before)
  std::string icu_locale;        // daticulocale, empty unless ICU
  std::string date_style;        // current_setting('DateStyle'), e.g. "ISO, MDY"
  std::string time_zone;         // current_setting('TimeZone')
  std::string interval_style;    // current_setting('IntervalStyle')
  int extra_float_digits = 0;    // current_setting('extra_float_digits')
};

// The connection string with the session settings above appended to its
// `options` (any options already there are kept; ours come last and win).
// Returned in key=value form; a string libpq cannot parse is returned as is,
// so that connecting reports the error. Throws ConfigError for an empty
// time zone.
[[nodiscard]] std::string WithSessionSettings(std::string_view dsn, std::string_view time_zone);

// One query on `connection`. Throws ShardQueryError naming `shard` if it
// fails.
[[nodiscard]] SessionFacts ReadSessionFacts(pqxx::connection_base& connection, ShardId shard);

}  // namespace shardkit
