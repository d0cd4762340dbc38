// Whether one SQL statement can run on one customer's shard with the answer
// one unsharded server would give, and how.
//
// A statement routes when every reference to a sharded table anywhere in it
// (FROM, JOINs, subqueries, CTEs) has its customer_id pinned to one value:
// `customer_id = <integer literal | $n | a cast of those>` in an AND-conjunct
// of its own query level's WHERE or of an inner JOIN's ON, or equated there
// to another pinned reference's customer_id (also `JOIN ... USING
// (customer_id)`). A LEFT (RIGHT) JOIN's ON pins only its nullable side,
// from the preserved side or a constant; a FULL JOIN's pins nothing. A
// correlated subquery's customer_id may be equated to an outer pinned one.
// INSERT ... VALUES routes when each row's customer_id is a literal or a
// parameter (all rows on one shard at execution); a column list without
// bucket gets it, with the bucket of each row's customer, spliced into the
// text. Statements reading no sharded table run on any one shard. A SELECT
// whose top level reads sharded tables joined on customer_id, none of them
// pinned, scatters (scatter_plan.hpp); `customer_id IN (...)` or `= ANY(...)`
// in its top-level WHERE restricts the scatter to those customers' shards
// (KeySet). An UPDATE or DELETE of one sharded table with such a list and no
// pin routes when all its customers are in one bucket. Anything else is
// refused with an SqlError saying why and what to do.
//
// Plans depend on the text and the catalog only, never on parameter values:
// BindRoute() evaluates them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/sql/sql_plan_info.hpp"
#include "sql/scatter_plan.hpp"
#include "sql/set_operation.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql {

struct GatherPlan;

// Where a shard key value comes from: a literal (read as the key's type), or parameter $n.
struct KeySource {
  std::optional<ShardKey> literal;
  int param = 0;      // 1-based, when not a literal
  int location = -1;  // byte offset of the value in the text
  friend bool operator==(const KeySource& a, const KeySource& b) {
    return a.literal == b.literal && a.param == b.param;
  }
};

// `customer_id IN (...)` or `customer_id = ANY(...)` in the WHERE of the
// statement's top level: every row it reads (or writes) has one of these
// customers. Elements: literals and parameters (NULLs, which match nothing,
// are dropped), or one integer array: the parameter $array_param or the
// literal array_text ('{1,2,3}').
struct KeySet {
  std::vector<KeySource> elements;
  int array_param = 0;
  std::optional<std::string> array_text;
  int location = -1;  // of the IN / ANY
};

struct InsertRow {
  KeySource key;
  int close_paren = -1;  // byte offset of the row's ')' (where ", <bucket>" goes)
};

struct SqlPlan {
  std::string text;
  // The shard key's column and type (the catalog's): how values are read.
  std::string key_column = "customer_id";
  ShardKeyType key_type = ShardKeyType::kInt4;
  SqlPlanInfo::Kind kind = SqlPlanInfo::Kind::kRouted;
  std::string statement;  // SELECT, INSERT, UPDATE, DELETE
  bool read_only = true;
  // The values every pinned sharded reference (and an INSERT's reads) are
  // pinned to: all must be one customer.
  std::vector<KeySource> keys;
  // INSERT ... VALUES: one per row.
  std::vector<InsertRow> rows;
  // INSERT whose column list omits bucket: the column list's ')'.
  int columns_close_paren = -1;
  // kScatter: the sets that bound its customers (empty: every shard). A
  // kRouted UPDATE or DELETE whose one sharded table has no pin: the sets
  // that route it (all their customers in one bucket at execution).
  std::vector<KeySet> key_sets;
  std::vector<std::string> sharded_tables;
  std::vector<std::string> reference_tables;
  // kScatter: how it runs on every shard.
  std::shared_ptr<const ScatterPlan> scatter;
  // kScatter: a UNION, INTERSECT or EXCEPT of arms planned one by one.
  std::shared_ptr<const SetOperationPlan> set_operation;
  // kScatter: what neither routes nor merges, gathered onto one server (gather_plan.hpp).
  std::shared_ptr<const GatherPlan> gather;
  // kRouted set operation whose arms are pinned by different parameters:
  // its arm-by-arm plan, for when their values name different customers.
  std::shared_ptr<const SqlPlan> arm_by_arm;
  // The highest $n the text uses (the values it must be given) and where.
  int parameter_count = 0;
  int last_parameter_location = -1;
  [[nodiscard]] bool AddsBucket() const noexcept { return columns_close_paren >= 0; }
  // In messages: "customer" (the Bookstore's integer keys), else "key".
  [[nodiscard]] const char* KeyNoun() const noexcept { return key_type == ShardKeyType::kInt4 ? "customer" : "key"; }
};

struct ParsedStatement;

// Whether a SELECT that neither routes nor merges is gathered (gather_plan.hpp)
// or refused with the analysis' reason (kNever: for tests of that reason).
enum class Gathering { kAllowed, kNever };

// Parses and analyses one statement; throws SqlError (syntax or refusal).
[[nodiscard]] std::shared_ptr<const SqlPlan> PlanStatement(const std::string& text, const SqlCatalog& catalog,
                                                           Gathering gathering = Gathering::kAllowed);
// Analyses a parsed statement (parse.hpp).
[[nodiscard]] std::shared_ptr<const SqlPlan> PlanStatement(const ParsedStatement& parsed, const SqlCatalog& catalog,
                                                           Gathering gathering = Gathering::kAllowed);

// Exactly one value per $n of the text, as the server requires: a refusal
// naming the highest $n otherwise (the server would end the statement with
// 08P01, a protocol violation, after a round trip).
void RequireParameterCount(const SqlPlan& plan, const SqlParams& params);

// The shard keys a plan runs for, with these parameters.
struct BoundRoute {
  std::optional<ShardKey> key;     // kRouted: the one key it routes by
  std::vector<ShardKey> row_keys;  // INSERT: each row's
  // A plan with key sets: the keys every set names (their intersection,
  // sorted, each once; NULLs matched nothing and are gone).
  std::optional<std::vector<ShardKey>> key_values;
  // Their buckets, each once, sorted: where a restricted scatter runs. At
  // least one: a set naming no customer still needs one shard to answer
  // (the columns, an aggregate's one row), and its condition matches no row.
  [[nodiscard]] std::vector<BucketId> Buckets() const;
};
// Throws SqlError: a key parameter missing, NULL, not an integer or out of
// range; pinned values that differ; an array parameter that is not a plain
// list of integers.
[[nodiscard]] BoundRoute BindRoute(const SqlPlan& plan, const SqlParams& params);

// An INSERT's rows must all be on one shard of `directory` (one statement is
// atomic on one shard only): SqlError naming two that are not. An UPDATE or
// DELETE routed by a key set: all its customers in one bucket (a routed
// statement sees its customer's bucket only), else SqlError saying whether
// they are on different shards (not atomic) or in different buckets.
void RequireOneShard(const SqlPlan& plan, const BoundRoute& route, const BucketDirectory& directory);

// The elements of an array of keys in PostgreSQL's text form ('{1,2,NULL}',
// nested braces flattened, as = ANY reads them), each read as `type`, NULLs
// as nullopt; nullopt for anything else (dimension decorations, quotes,
// escapes, values that are not of the type).
[[nodiscard]] std::optional<std::vector<std::optional<ShardKey>>> ParseKeyArray(std::string_view text,
                                                                                ShardKeyType type);

// The text to run: the plan's, with ", bucket" and each row's bucket added
// when the INSERT's column list omits it.
[[nodiscard]] std::string StatementText(const SqlPlan& plan, const BoundRoute& route);

}  // namespace shardkit::sql
