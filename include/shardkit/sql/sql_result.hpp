// shardkit/sql/sql_result.hpp — what Cluster::Execute returns: the columns,
// their types and the rows, values as the server prints them.
//
//   shardkit::SqlResult r = cluster->Execute("SELECT order_id, total FROM orders WHERE customer_id = $1", {"4242"});
//   for (const auto& row : r.rows) use(*row[0], row[1].value_or("NULL"));
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardkit/routing/read_token.hpp"
#include "shardkit/sql/sql_plan_info.hpp"

namespace shardkit {

struct SqlResult {
  std::vector<std::string> columns;
  std::vector<unsigned> types;  // each column's type Oid
  // Text as the server prints it; nullopt is NULL.
  std::vector<std::vector<std::optional<std::string>>> rows;
  // INSERT/UPDATE/DELETE: the rows the statement affected (also without
  // RETURNING); SELECT: the rows returned.
  std::size_t affected = 0;
  // Rows the shards sent: the rows themselves when routed or concatenated;
  // over every shard, the partial rows (groups per shard) or each shard's
  // first OFFSET + LIMIT rows that were merged; by exact top-k, the
  // partials its phases received (plan.merge names them; phase 1's one
  // statistics row per shard is not counted).
  std::size_t rows_received = 0;
  SqlPlanInfo plan;
  // A routed INSERT/UPDATE/DELETE's read token (read_token.hpp): pass it to
  // the reads that must see the write. Empty for reads.
  ReadToken token;
  // Reads: how many shards' answers came from replicas (SqlOptions::read).
  int from_replicas = 0;
};

}  // namespace shardkit
