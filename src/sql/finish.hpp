// The last step of a statement over every shard that the shards' answers
// cannot finish by themselves: expressions over merged aggregates
// (`sum(a) - sum(b)`, `round(avg(x), 2)`, CASE), HAVING conditions of any
// shape, DISTINCT across shards, UNION / INTERSECT / EXCEPT. PostgreSQL
// itself evaluates it over the combined rows, on one shard, so that every
// final expression, comparison, duplicate, ORDER BY and LIMIT follows the
// server's own rules (types, rounding, NULLs, collation, errors) instead of
// a copy of them.
//
// The combined rows travel as one text array per column, parameters after
// the statement's own, unnested and cast back to their types in a CTE per
// input:
//
//   WITH _m1(_g1, _a1, _a2) AS (SELECT u.c1::pg_catalog.text, u.c2::pg_catalog.int8, u.c3::pg_catalog.int8
//                                 FROM unnest($2::text[], $3::text[], $4::text[]) AS u(c1, c2, c3))
//   SELECT _m1._g1 AS "status", _m1._a1 - _m1._a2 AS "?column?" FROM _m1 WHERE _m1._a1 > $1 ORDER BY 2
//
// The statement's parameters keep their numbers; one the finishing SELECT
// does not use is still typed (as text) by an unused CTE, since PostgreSQL
// refuses parameters whose type it cannot tell.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/sql_params.hpp"

namespace shardkit::sql {

// What the plan says of the finishing step.
struct FinishStep {
  // The columns of each input (_m1, _m2, ...), as the finishing SELECT names them.
  std::vector<std::vector<std::string>> inputs;
  // The finishing SELECT, reading the inputs by those names.
  std::string select;
  // The statement's parameters `select` uses (1-based); the others are typed as text.
  std::vector<int> params_used;
};

// One input's rows at execution.
struct FinishInput {
  // Each column's type as a name the server casts text to exactly (a
  // qualified pg_type name such as pg_catalog.bpchar: never `character`,
  // which would mean character(1)).
  std::vector<std::string> types;
  std::vector<std::vector<std::optional<std::string>>> rows;  // text as the server prints it; nullopt is NULL
};

struct FinishStatement {
  std::string sql;
  SqlParams params;  // the statement's, then one text array per input column
};

// The statement that runs the step over these inputs (one per step.inputs,
// with as many types as it has columns).
[[nodiscard]] FinishStatement BuildFinishStatement(const FinishStep& step, const std::vector<FinishInput>& inputs,
                                                   const SqlParams& params);

// "c1", "c2"...: the columns of an input of rows that arrived as they are.
[[nodiscard]] std::vector<std::string> NumberedColumns(std::size_t count);
// SELECT [DISTINCT] c1 AS "<names[0]>", ... FROM <input>: such an input's
// columns under the result's names.
[[nodiscard]] std::string SelectNamed(const std::vector<std::string>& names, const std::string& input,
                                      bool distinct = false);

// A PostgreSQL array literal of text elements: {"a","b\"c",NULL}.
[[nodiscard]] std::string TextArrayLiteral(const std::vector<std::vector<std::optional<std::string>>>& rows,
                                           std::size_t column);

// The parameter numbers ($n) in a piece of SQL text, each once, sorted.
[[nodiscard]] std::vector<int> ParamsIn(const std::string& sql);

}  // namespace shardkit::sql
