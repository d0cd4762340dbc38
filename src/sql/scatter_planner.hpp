// How a SELECT over every shard is planned (scatter_plan.hpp): its clauses
// split from the statement's tokens, what the scatter refuses, and then
// either plain rows (concatenated, or merge-sorted by ORDER BY with OFFSET
// and LIMIT after the merge) or aggregates (an AggregateQuery's merge plan,
// or exact top-k for the best-sellers shape).
//
// PlanScatter (scatter_plan.cpp) runs it. The ScatterPlanner's members are
// defined by what they plan: the shapes refused, the clauses and LIMIT/OFFSET
// in scatter_plan.cpp; plain rows in scatter_planner_rows.cpp; aggregates in
// scatter_planner_aggregates.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sql_text.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "sql/extent.hpp"
#include "sql/parse.hpp"
#include "sql/scatter_plan.hpp"
#include "sql/sql_catalog.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql::detail {

using json = nlohmann::json;

// The aggregates the merge engine combines exactly (aggregate_query.hpp).
bool IsMergedAggregate(const std::string& name);

using shardkit::detail::Upper;  // core/sql_text.hpp

const json* Field(const json& object, const char* key);

int LocationOf(const json& node);

// The last name of a qualified function name ("pg_catalog.sum" -> "sum").
std::string FunctionName(const json& call);

// A clause of the top-level SELECT: tokens [begin, end), its keyword(s) excluded.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool present = false;
};

// Plans one top-level SELECT over every shard (PlanScatter); refuses with
// the construct's location what the merge cannot answer exactly.
class ScatterPlanner {
 public:
  ScatterPlanner(const ParsedStatement& parsed, const SqlCatalog& catalog)
      : parsed_(parsed), catalog_(catalog), select_(parsed.tree.at("SelectStmt")) {}

  ScatterPlan Run();

 private:
  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const {
    throw Refusal(parsed_.text, location, construct, reason, advice);
  }

  // ---- what the scatter does not take (yet) ----

  // Whether `items` (select-list targets, or DISTINCT ON expressions) has a
  // sharded table's customer_id as a plain column (or *, t.*), with the
  // FROM clause only tables joined by inner joins (no NULL-extended key).
  bool HasShardKey(const json& items, bool targets) const;

  void RefuseUnsupportedShapes();

  // Where a clause's keyword starts (ORDER BY: two tokens before its items).
  int KeywordLocation(const Range& clause) const {
    const std::size_t back = &clause == &order_ || &clause == &group_ ? 2 : 1;
    return clause.begin >= back ? parsed_.tokens[clause.begin - back].start : -1;
  }
  int SelectKeywordLocation() const { return parsed_.tokens.empty() ? -1 : parsed_.tokens.front().start; }

  // fn(FuncCall body) for every function call of this query level (not
  // inside subqueries: they read reference tables only).
  template <class Fn>
  void Walk(const json& node, const Fn& fn) const {
    if (node.is_object()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (it.key() == "SubLink" || it.key() == "RangeSubselect") continue;
        if (it.key() == "FuncCall") fn(it.value());
        Walk(it.value(), fn);
      }
    } else if (node.is_array()) {
      for (const json& item : node) Walk(item, fn);
    }
  }

  bool ContainsAggregate(const json& node) const;

  bool HasAggregates() const;

  // ---- the text of the clauses ----

  [[nodiscard]] bool IsChar(std::size_t t, char c) const {
    return t < parsed_.tokens.size() && parsed_.tokens[t].kind == static_cast<unsigned char>(c);
  }
  [[nodiscard]] std::string Word(std::size_t t) const {
    return t < parsed_.tokens.size() ? Upper(parsed_.TokenText(parsed_.tokens[t])) : std::string();
  }

  void SplitClauses();

  [[nodiscard]] std::string Text(std::size_t begin, std::size_t end) const;
  [[nodiscard]] std::string Text(const Range& r) const { return Text(r.begin, r.end); }

  // A clause's items split at its top-level commas.
  [[nodiscard]] std::vector<Range> Items(const Range& clause) const;

  // ---- plain rows ----

  // Each shard returns its rows in the statement's order, at most
  // OFFSET + LIMIT of them; the merge sorts them all by the same keys (the
  // merge engine's type and collation rules), then applies OFFSET and LIMIT.
  ScatterPlan PlanConcatenation() const;

  // A select-list item that is * or t.*.
  static bool IsStar(const json& value);
  // The name of the table whose `column` a * or t.* of the select list
  // outputs first, or nullopt (none does, or the FROM clause's columns are
  // not all known).
  [[nodiscard]] std::optional<std::string> StarColumnQualifier(const std::string& column) const;

  // An ORDER BY item's expression, without ASC/DESC and NULLS FIRST/LAST.
  [[nodiscard]] std::string SortItemText(const Range& item) const;

  // ---- aggregates ----

  struct Output {
    std::string name;  // the merged column's name: "_c1".. (output names may repeat in SQL)
    json tree;         // the expression without locations
    bool key = false;
    std::string display;  // the select list's name for it, as PostgreSQL names it
  };

  // PostgreSQL's name for an unaliased output column (FigureColname).
  static std::string DefaultName(const json& expression);
  // A select-list item's (ResTarget's) output name: its alias, else DefaultName.
  static std::string OutputName(const json& target) {
    return target.contains("name") ? target.at("name").get<std::string>() : DefaultName(target.at("val"));
  }

  // A select-list item without its alias, and its text.
  [[nodiscard]] Range ItemRange(const Range& item, bool aliased) const;
  [[nodiscard]] std::string ItemText(const Range& item, bool aliased) const { return Text(ItemRange(item, aliased)); }

  std::optional<std::int64_t> Integer(const json& node, const char* what) const;

  [[nodiscard]] std::string TokenAt(int location) const {
    const std::size_t t = parsed_.TokenAt(location);
    return t < parsed_.tokens.size() ? std::string(parsed_.TokenText(parsed_.tokens[t])) : std::string();
  }

  // The tokens of a function call starting at `location`: its name, the
  // parenthesised arguments and a FILTER (...) after them; and their text.
  [[nodiscard]] Range CallRange(int location) const;
  [[nodiscard]] std::string CallText(int location) const { return Text(CallRange(location)); }

  // GROUP BY items as expressions (a position: that select-list item's)
  // and their texts.
  struct GroupKeys {
    std::vector<json> trees;  // without locations
    std::vector<std::string> texts;
    [[nodiscard]] std::optional<std::size_t> Find(const json& tree) const;
  };
  GroupKeys ReadGroupKeys(const json& targets, const std::vector<Range>& items) const;

  // Thrown by PlanAggregates where the merge engine alone cannot finish the
  // statement (an expression over aggregates, HAVING of another shape,
  // DISTINCT): PlanFinishedAggregates plans it again with the finishing step.
  struct NeedsFinish {};

  ScatterPlan PlanAggregates();
  // The aggregate query of the statement's FROM and WHERE.
  [[nodiscard]] AggregateQuery FromAndWhere() const;
  // The select list's items (refused when they cannot be told apart).
  [[nodiscard]] std::vector<Range> SelectItems() const;

  // ---- aggregates finished by PostgreSQL (finish.hpp) ----

  // Per-shard partials merged into groups and aggregates, then the select
  // list, HAVING, DISTINCT, ORDER BY and LIMIT evaluated by the server over
  // the merged rows, with the aggregates and group keys in them replaced
  // by the merged columns.
  ScatterPlan PlanFinishedAggregates();

  // A piece of the statement replaced: tokens [range) by `text`.
  struct Replacement {
    Range range;
    std::string text;
  };
  // The text of tokens [clause) with the replacements inside it applied.
  [[nodiscard]] std::string Splice(const Range& clause, const std::vector<Replacement>& replacements) const;

  // The shards' SQL referring to every parameter the statement refers to
  // (PostgreSQL refuses a parameter whose type it cannot tell): those only
  // the finishing step uses are typed as text in a clause that changes nothing.
  [[nodiscard]] std::string KeepParamsTyped(std::string sql) const;

  // GROUP BY name: an input column first, as PostgreSQL resolves it; a
  // select-list alias only when no table of the FROM clause has the column.
  const json& ResolveOutputAlias(const json& item, const json& targets) const;

  // Whether a table of the FROM clause has (or may have: columns not known) the column.
  bool FromMayHaveColumn(const std::string& column) const;

  void AddAggregate(AggregateQuery& query, const json& value, const std::string& text, const std::string& name);

  // The merged column holding an expression of HAVING or ORDER BY: a
  // selected one, or a new hidden one.
  std::string ColumnFor(AggregateQuery& query, const json& expression);

  void AddHaving(AggregateQuery& query, const json& having);

  // An integer, decimal or string constant, from its tokens.
  std::optional<Value> ConstantValue(const json& node) const;

  void AddOrderBy(AggregateQuery& query, const json& sort, const json& targets);

  static std::optional<std::string> BareName(const json& node);

  // The merged column of the select-list item named so; PostgreSQL's error
  // when two are.
  [[nodiscard]] std::optional<std::string> SelectedAs(const std::string& display, int location) const;

  // LIMIT $n / OFFSET $n: n (bound at execution), else 0. A parameter used
  // elsewhere in the statement too may have another type there: refused.
  int LimitParam(const json& node, const char* what) const;

  std::optional<std::int64_t> LimitValue(const json& node, const char* what) const;

  const ParsedStatement& parsed_;
  const SqlCatalog& catalog_;
  const json& select_;
  Range select_list_, from_, where_, group_, having_, order_, tail_;
  std::size_t first_keyword_ = 0;
  std::size_t select_keyword_ = 0;  // the top level's SELECT
  std::vector<Output> outputs_;     // the select list's, then hidden ones
  std::vector<ScatterPlan::HiddenColumn> hidden_columns_;
  // ORDER BY as the merge sorts: merged columns, directions, NULLS.
  struct OrderKey {
    std::string column;
    SortDirection direction = SortDirection::kAsc;
    NullsOrder nulls = NullsOrder::kDefault;
  };
  std::vector<OrderKey> order_keys_;
  std::optional<std::int64_t> limit_;  // LIMIT n (unset: none, or ALL)
  std::int64_t offset_ = 0;
};

}  // namespace shardkit::sql::detail
