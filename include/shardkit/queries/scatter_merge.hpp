// shardkit/queries/scatter_merge.hpp — run a merge plan's per-shard SQL through
// ScatterGather and merge the answers, checking what the merge relies on.
//
//   auto plan = shardkit::AggregateQuery::From("order_items").GroupBy("book_id")
//                   .Select("sum(quantity)", "sold").Plan();
//   shardkit::MergedResult sold = shardkit::ScatterMerge(scatter, plan);
//
// Every merge of a scatter's answers checks, for each shard that answered,
// the facts its pool read from the server (session.hpp): the database
// orders text bytewise (collation C or POSIX, libc provider: an ICU database
// reports datcollate 'C' but sorts by its ICU locale) in the UTF8 encoding,
// every pinned setting has its pinned value, and every shard has the same
// TimeZone and search_path. Pools pin and verify the settings on every
// connection they open, so only the database's collation and encoding can
// fail on a healthy setup; the check costs no round trip.
#pragma once

#include "shardkit/pg/session.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/scatter.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

class BucketShardResolver;

struct MergeOptions {
  // Merge what the shards that answered returned when a partial scatter
  // lost some (the answer is then NOT the unsharded one; the warning says so).
  bool allow_missing_shards = false;
};

// From a scatter; a scatter with failed shards throws ScatterError unless
// options.allow_missing_shards. Throws ShardError naming the shard when its
// facts fail the check above (shards without facts, as in a hand-built
// ScatterResult, are not checked).
[[nodiscard]] MergedResult Merge(const MergePlan& plan, const ScatterResult& scatter, const MergeOptions& options = {});

// Runs plan.ShardSql() on the shards (options.shards, default all) and merges.
[[nodiscard]] MergedResult ScatterMerge(ScatterGather& scatter, const MergePlan& plan, const SqlParams& params = {},
                                        const ScatterOptions& options = {}, const MergeOptions& merge_options = {});

// The check on one shard's facts; throws ShardError naming the shard and the
// fix. (The TimeZone is compared across shards by the callers above.)
void CheckMergeAssumptions(const SessionFacts& facts, ShardId shard);
// The same on any connection (one query): for connections not from a pool.
void CheckMergeAssumptions(pqxx::connection_base& connection, ShardId shard);
// Every shard's pool (a connection is acquired where none was opened yet),
// and the same TimeZone everywhere.
void CheckMergeAssumptions(BucketShardResolver& resolver);

}  // namespace shardkit
