// shardkit/sql/sql_plan_info.hpp — where a statement given as SQL text runs,
// in data and in words (Cluster::Explain, SqlResult::plan).
//
//   shardkit::SqlPlanInfo plan = cluster->Explain("SELECT * FROM orders WHERE customer_id = $1", {"4242"});
//   plan.Describe();  // "routed: shard 1 (bucket 44, customer 4242)"
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/shard_key.hpp"

namespace shardkit {

struct SqlPlanInfo {
  enum class Kind {
    kRouted,    // every sharded table pinned to one customer: that customer's shard
    kAnyShard,  // no sharded table (reference tables only, or none): any one shard answers
    kScatter,   // a SELECT over every shard, combined into the unsharded answer
  };
  Kind kind = Kind::kRouted;
  // The shard it runs on (for kAnyShard the one chosen), and for kRouted
  // the customer every sharded table is pinned to and its bucket.
  ShardId shard{};
  std::optional<ShardKey> key;
  std::string key_column;  // the shard key's column (customer_id in the Bookstore)
  std::optional<BucketId> bucket;
  // "SELECT", "INSERT", "UPDATE", "DELETE".
  std::string statement;
  bool read_only = true;
  // The tables it reads or writes, as written (sharded and reference).
  std::vector<std::string> sharded_tables;
  std::vector<std::string> reference_tables;
  // kScatter: how many shards it runs on (of total_shards), what each runs
  // and how the answers are combined ("concatenation", the merge's columns,
  // or for the best-sellers shape "exact top-k (auto) by sum(...) of ...,
  // k = 10: ..." with the method that ran and its rows per phase; after a
  // merge that top-k left to it, "(exact top-k did not answer: why)"). A
  // scatter restricted by `customer_id IN (...)` or `= ANY(...)` runs only on
  // the shards owning those customers' buckets: `shards` lists them (empty:
  // every shard). After Execute, the shards it ran on, by the directory
  // snapshot it ran with; from Explain, by the current directory. When the
  // server finishes the merged rows (expressions over aggregates, HAVING,
  // DISTINCT), `merge` ends with the finishing SELECT; a set operation has
  // no shard_sql, and `merge` names how each arm runs and how they combine.
  int shard_count = 0;
  int total_shards = 0;
  std::vector<ShardId> shards;
  std::string shard_sql;
  std::string merge;
  // The plan came from the plan cache (no parse).
  bool cached = false;

  // "routed: shard 1 (bucket 44, customer 4242)", or
  // "any shard: shard 0 (reference tables only: books)", or
  // "scatter over 2 shards, per-shard SQL: SELECT ...; merge: sold = SUM(_p1)", or
  // "scatter over 1 of 2 shards (shard 1), per-shard SQL: ...".
  [[nodiscard]] std::string Describe() const;
};

}  // namespace shardkit
