// Merging a scatter's answers, and the checks of what merging relies on.
#include "shardkit/scatter_merge.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "detail/merge_internal.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pool.hpp"
#include "shardkit/resolver.hpp"

namespace shardkit {
namespace {

using ShardFacts = std::vector<std::pair<ShardId, std::shared_ptr<const SessionFacts>>>;

// timestamptz values print in the session's zone: two zones, two texts for
// one instant, and a group key split in two.
void RequireOneTimeZone(const ShardFacts& facts) {
  const auto& [first_shard, first] = facts.front();
  for (const auto& [shard, f] : facts) {
    if (f->time_zone != first->time_zone) {
      throw ShardError(shard, fmt::format("shard {} runs with TimeZone \"{}\" but shard {} with \"{}\": merged "
                                          "timestamptz values are compared as text, which differs between zones. "
                                          "Give every shard's pool the same pool.time_zone",
                                          shard, f->time_zone, first_shard, first->time_zone));
    }
  }
}

}  // namespace

void CheckMergeAssumptions(const SessionFacts& facts, ShardId shard) {
  const std::string bytewise =
      "shardkit orders merged text bytewise, as the C collation does, so ORDER BY, MIN and MAX on text would "
      "differ from the server's";
  if (facts.locale_provider != "libc") {
    // An ICU database reports datcollate 'C' yet sorts by its ICU locale.
    throw ShardError(shard, fmt::format("shard {}: the database uses the {} locale provider (locale \"{}\"), not "
                                        "libc with the C collation: {}. Create it with CREATE DATABASE ... "
                                        "LOCALE_PROVIDER libc LOCALE 'C' TEMPLATE template0",
                                        shard, facts.locale_provider, facts.icu_locale, bytewise));
  }
  if (facts.collate != "C" && facts.collate != "POSIX") {
    throw ShardError(shard, fmt::format("shard {}: the database's collation is \"{}\", not C: {}. Create the "
                                        "database with LC_COLLATE 'C' (initdb --locale=C, or CREATE DATABASE ... "
                                        "LC_COLLATE 'C' TEMPLATE template0)",
                                        shard, facts.collate, bytewise));
  }
  const std::string pooled =
      "shardkit's pools set it on every connection they open, so this connection is not a pool's, or "
      "something between (a connection pooler) dropped the startup options";
  if (!facts.date_style.starts_with("ISO")) {
    throw ShardError(shard, fmt::format("shard {}: DateStyle is \"{}\", not ISO: merged dates and timestamps are "
                                        "ordered by their ISO text. {}",
                                        shard, facts.date_style, pooled));
  }
  if (facts.interval_style != "postgres") {
    throw ShardError(shard, fmt::format("shard {}: IntervalStyle is \"{}\", not postgres: merged intervals are "
                                        "grouped by their text. {}",
                                        shard, facts.interval_style, pooled));
  }
  if (facts.extra_float_digits < 1) {
    throw ShardError(shard, fmt::format("shard {}: extra_float_digits is {}: doubles arrive rounded to 15 "
                                        "significant digits, so merged MIN/MAX and sums differ from the "
                                        "server's. Set it to 3; {}",
                                        shard, facts.extra_float_digits, pooled));
  }
}

void CheckMergeAssumptions(pqxx::connection_base& connection, ShardId shard) {
  CheckMergeAssumptions(ReadSessionFacts(connection, shard), shard);
}

void CheckMergeAssumptions(BucketShardResolver& resolver) {
  ShardFacts facts;
  for (ConnectionPool& pool : resolver.AllShards()) {
    auto f = pool.Facts();
    if (!f) {
      auto lease = pool.Acquire();  // the pool's first connection reads them
      f = pool.Facts();
    }
    if (!f) throw ShardError(pool.Shard(), fmt::format("shard {}: its pool has no session facts", pool.Shard()));
    CheckMergeAssumptions(*f, pool.Shard());
    facts.emplace_back(pool.Shard(), std::move(f));
  }
  if (!facts.empty()) RequireOneTimeZone(facts);
}

MergedResult Merge(const MergePlan& plan, const ScatterResult& scatter, const MergeOptions& options) {
  std::string missing;
  for (const auto& f : scatter.failures) {
    missing += (missing.empty() ? "" : "; ") + ("shard " + std::to_string(ToInt(f.shard)) + ": " + f.cause);
  }
  if (!scatter.failures.empty() && !options.allow_missing_shards) {
    throw ScatterError("cannot merge: the answer needs every shard's partials, but " + missing +
                       " (retry, or set MergeOptions::allow_missing_shards for an incomplete answer)",
                       scatter.failures);
  }
  ShardFacts facts;
  std::vector<std::pair<ShardId, const pqxx::result*>> results;
  results.reserve(scatter.shards.size());
  for (const auto& s : scatter.shards) {
    if (s.session) {
      CheckMergeAssumptions(*s.session, s.shard);
      facts.emplace_back(s.shard, s.session);
    }
    results.emplace_back(s.shard, &s.rows);
  }
  if (!facts.empty()) RequireOneTimeZone(facts);
  MergedResult out = detail::MergeTagged(plan, results);
  if (!scatter.failures.empty()) {
    out.warning = "incomplete answer: merged without " + missing;
  }
  return out;
}

MergedResult ScatterMerge(ScatterGather& scatter, const MergePlan& plan, const SqlParams& params,
                          const ScatterOptions& options, const MergeOptions& merge_options) {
  plan.Validate();
  if (plan.ShardSql().empty()) throw UnmergeableQuery("the merge plan has no per-shard SQL");
  const ScatterResult result = scatter.Run(plan.ShardSql(), params, options);
  return Merge(plan, result, merge_options);
}

}  // namespace shardkit
