// Merging a scatter's answers, and the checks of what merging relies on.
#include "shardkit/queries/scatter_merge.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "queries/merge_internal.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using ShardFacts = std::vector<std::pair<ShardId, std::shared_ptr<const SessionFacts>>>;

// The settings a deployment chooses must still be one for all shards:
// timestamptz values print in the session's zone (two zones, two texts for
// one instant, a group key split in two), and one name must mean one table.
void RequireSameSession(const ShardFacts& facts) {
  const auto& [first_shard, first] = facts.front();
  for (const auto& [shard, f] : facts) {
    for (const char* name : {"TimeZone", "search_path"}) {
      if (!SameSettingValue(f->Setting(name), first->Setting(name))) {
        throw ShardError(shard, fmt::format("shard {} runs with {} '{}' but shard {} with '{}': the merge would "
                                            "compare values (or read tables) that differ between them. Give "
                                            "every shard's pool the same pool.{}",
                                            shard, name, f->Setting(name), first_shard, first->Setting(name),
                                            name == std::string_view("TimeZone") ? "time_zone" : "search_path"));
      }
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
  if (facts.server_encoding != "UTF8") {
    throw ShardError(shard, fmt::format("shard {}: the database's encoding is {}, not UTF8: the C collation "
                                        "orders the bytes of the server's encoding, which differ from the UTF-8 "
                                        "bytes shardkit compares. Create the database with ENCODING 'UTF8'",
                                        shard, facts.server_encoding));
  }
  // The settings every pool pins (session.hpp); the ones a deployment
  // chooses are compared across shards by the callers.
  VerifyPinnedSettings(facts, SessionChoices{facts.Setting("TimeZone"), facts.Setting("search_path")}, shard);
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
  if (!facts.empty()) RequireSameSession(facts);
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
  std::vector<std::pair<ShardId, const pg::Rows*>> results;
  results.reserve(scatter.shards.size());
  for (const auto& s : scatter.shards) {
    if (s.session) {
      CheckMergeAssumptions(*s.session, s.shard);
      facts.emplace_back(s.shard, s.session);
    }
    results.emplace_back(s.shard, &s.rows);
  }
  if (!facts.empty()) RequireSameSession(facts);
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
