// The plan of last resort for a SELECT: what neither routes to one shard
// nor merges from per-shard partials (joins off the shard key, subqueries
// and CTEs over every shard, window functions, aggregates the merge cannot
// combine, DISTINCT ON, grouping sets, outer joins that preserve a
// reference table) is answered exactly by gathering the rows of the
// sharded tables it reads onto one server and letting PostgreSQL run the
// statement there, as written.
//
// Each shard sends, in one statement (one snapshot), the rows it owns of
// every sharded table the statement names, each table as one array of its
// row type (at most max_gather_rows + 1 of them, so that a statement above
// the bound is refused having shipped little), filtered by the conjuncts
// of the WHERE that read that table alone:
//
//   SELECT _g1, pg_catalog.cardinality(_g1) FROM
//     (SELECT ARRAY(SELECT o FROM "public"."orders" AS o WHERE (o.status = $2) LIMIT $1) AS _g1 OFFSET 0) AS _g
//
// and one shard then runs the statement with each reference to a sharded
// table replaced by the gathered rows, the statement's own parameters
// first and one array of rows per table after them:
//
//   SELECT o.customer_id, rank() OVER (ORDER BY o.total DESC) FROM
//     (SELECT * FROM pg_catalog.unnest($1::"public"."orders"[])) o
//
// Reference tables are read where it runs (every shard has them whole).
// Not gathered (the refusal that led here stands): FOR UPDATE/SHARE, SELECT
// INTO, a data-modifying WITH, functions that are not built in (they may
// read sharded tables themselves) or whose value is each shard's own
// (nextval, set_config), tables the catalog does not know or that are
// sharded by another key, ONLY, TABLESAMPLE, and a CTE named like a table
// it may hide.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "sql/parse.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

struct SqlPlan;

struct GatherPlan {
  // Each sharded table the statement reads, once, schema-qualified and
  // quoted: "public"."orders".
  std::vector<std::string> tables;
  // What every shard runs: per table, its rows that can pass the filters
  // pushed down to it (at most $1 = max_gather_rows + 1) as an array of
  // the table's row type, and their number; one row.
  std::string shard_sql;
  // The statement's parameters the filters use: shard_sql's $2, $3, ...
  // are these numbers of the statement's.
  std::vector<int> shard_params;
  // The statement as one server runs it over the gathered rows: the
  // statement's parameters $1..$n keep their numbers, table i's rows are
  // parameter n + 1 + i.
  std::string finish_sql;
  int first_table_param = 1;
  // Why it is not routed or merged: the analysis' refusal ("the window
  // function rank: ...").
  std::string why;
};

// The plan of a SELECT that runs by gathering (kind scatter, `gather` set),
// or null when it cannot be gathered (see above) or reads no sharded table.
// Throws NotInCatalog for a function the catalog does not list (the engine
// reads the catalog again, then refuses).
[[nodiscard]] std::shared_ptr<const SqlPlan> PlanGather(const ParsedStatement& parsed, const SqlCatalog& catalog,
                                                        const SqlError& why);

}  // namespace shardkit::sql
