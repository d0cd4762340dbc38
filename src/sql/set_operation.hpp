// UNION, INTERSECT and EXCEPT whose arms do not all run on one customer's
// shard. Each arm is a statement of its own (routed to its customer, on any
// shard, or over every shard and merged, as Cluster::Execute runs any
// SELECT); then PostgreSQL combines the arms' rows on one shard with the
// statement's own set operations, ORDER BY and LIMIT (finish.hpp), so that
// duplicates, the result's types and its order are the server's:
//
//   SELECT customer_id FROM orders WHERE status = 'placed'
//   EXCEPT SELECT customer_id FROM customers WHERE customer_id = $1
//
//   arm 1: over every shard (plain rows); arm 2: routed to customer $1;
//   then: (SELECT c1 AS "customer_id" FROM _m1) EXCEPT (SELECT * FROM _m2)
//
// UNION ALL of arms whose columns have the same types, without ORDER BY or
// LIMIT, is a concatenation and needs no finishing step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sql/parse.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

struct SqlPlan;

struct SetOperationArm {
  std::string text;         // the arm alone, its parameters renumbered $1, $2...
  std::vector<int> params;  // the statement's parameter behind each of the arm's, in order
  std::shared_ptr<const SqlPlan> plan;
};

struct SetOperationPlan {
  std::vector<SetOperationArm> arms;
  // The arms combined, arm i read as `SELECT * FROM _m<i>` and the first
  // arm as kFirstArm (replaced at execution by a SELECT that gives its
  // columns the first arm's names, which name the result's columns).
  std::string combination;
  std::string tail;  // the statement's ORDER BY / LIMIT / OFFSET text, parameters as numbered there
  // Only UNION ALL and no tail: a concatenation when the arms' types agree.
  bool union_all_only = false;
  static constexpr const char* kFirstArm = "<first arm>";
  // "UNION over 2 arms: arm 1 over every shard, arm 2 routed; then on one shard: ..."
  [[nodiscard]] std::string Describe() const;
};

// Whether the statement is a set operation (a SELECT with UNION, INTERSECT or EXCEPT).
[[nodiscard]] bool IsSetOperation(const ParsedStatement& parsed);

// Plans each arm with PlanStatement; a refusal of an arm is rethrown with
// its place in the whole statement. Throws SqlError for what it cannot
// combine exactly (WITH on the set operation, an inner set operation with
// its own ORDER BY or LIMIT, locking).
[[nodiscard]] SetOperationPlan PlanSetOperation(const ParsedStatement& parsed, const SqlCatalog& catalog);

}  // namespace shardkit::sql
