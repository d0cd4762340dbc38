// shardkit/sql/sql_plan_info.hpp — where a statement given as SQL text runs,
// in data and in words (Cluster::Explain, SqlResult::plan).
//
//   shardkit::SqlPlanInfo plan = cluster->Explain("SELECT * FROM orders WHERE customer_id = $1", {"4242"});
//   plan.Describe();  // "routed: shard 1 (bucket 44, customer 4242)"
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

struct SqlPlanInfo {
  enum class Kind {
    kRouted,    // every sharded table pinned to one customer: that customer's shard
    kAnyShard,  // no sharded table (reference tables only, or none): any one shard answers
  };
  Kind kind = Kind::kRouted;
  // The shard it runs on (for kAnyShard the one chosen), and for kRouted
  // the customer every sharded table is pinned to and its bucket.
  ShardId shard{};
  std::optional<CustomerId> customer;
  std::optional<BucketId> bucket;
  // "SELECT", "INSERT", "UPDATE", "DELETE".
  std::string statement;
  bool read_only = true;
  // The tables it reads or writes, as written (sharded and reference).
  std::vector<std::string> sharded_tables;
  std::vector<std::string> reference_tables;
  // The plan came from the plan cache (no parse).
  bool cached = false;

  // "routed: shard 1 (bucket 44, customer 4242)", or
  // "any shard: shard 0 (reference tables only: books)".
  [[nodiscard]] std::string Describe() const;
};

}  // namespace shardkit
