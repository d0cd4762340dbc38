// Aggregates that the merge engine alone cannot finish: every shard's
// partials are merged into groups (the group keys and each aggregate once),
// then PostgreSQL evaluates the statement's own select list, HAVING,
// DISTINCT, ORDER BY and LIMIT over the merged rows (finish.hpp), with each
// aggregate call and group key in them replaced by its merged column.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/sql_text.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "sql/extent.hpp"
#include "sql/finish.hpp"
#include "sql/scatter_planner.hpp"

namespace shardkit::sql::detail {

std::string ScatterPlanner::Splice(const Range& clause, const std::vector<Replacement>& replacements) const {
  if (!clause.present || clause.begin >= clause.end) return {};
  std::string out;
  auto at = static_cast<std::size_t>(parsed_.tokens[clause.begin].start);
  const auto end = static_cast<std::size_t>(parsed_.tokens[clause.end - 1].end);
  for (const Replacement& r : replacements) {  // sorted, not overlapping
    if (r.range.begin < clause.begin || r.range.end > clause.end) continue;
    const auto from = static_cast<std::size_t>(parsed_.tokens[r.range.begin].start);
    out += parsed_.text.substr(at, from - at);
    out += r.text;
    at = static_cast<std::size_t>(parsed_.tokens[r.range.end - 1].end);
  }
  out += parsed_.text.substr(at, end - at);
  return out;
}

std::string ScatterPlanner::KeepParamsTyped(std::string sql) const {
  const std::vector<int> used = ParamsIn(sql);
  std::string missing;
  for (const int p : ParamsIn(parsed_.text)) {
    if (!std::binary_search(used.begin(), used.end(), p))
      missing += fmt::format("{}${}::text", missing.empty() ? "" : ", ", p);
  }
  // 0 rows skipped whatever the values (NULLs included: length('') is 0).
  if (!missing.empty()) sql += fmt::format(" OFFSET 0 * length(concat({}))", missing);
  return sql;
}

ScatterPlan ScatterPlanner::PlanFinishedAggregates() {
  AggregateQuery query = FromAndWhere();
  const json& targets = select_.at("targetList");
  const std::vector<Range> items = SelectItems();
  const GroupKeys groups = ReadGroupKeys(targets, items);
  std::vector<std::string> merged_columns;
  for (std::size_t g = 0; g < groups.trees.size(); ++g) {
    merged_columns.push_back(fmt::format("_g{}", g + 1));
    query.GroupByExpr(groups.texts[g], merged_columns.back());
  }

  std::vector<Replacement> replacements;
  std::vector<json> aggregates;  // without locations; merged as _a1, _a2...
  const auto replace = [&](const Range& range, std::string text) {
    replacements.push_back(Replacement{range, std::move(text)});
  };
  // Every aggregate call and group key of an expression replaced by its
  // merged column; a column outside both is what PostgreSQL refuses too.
  const std::function<void(const json&)> visit = [&](const json& node) {
    if (node.is_array()) {
      for (const json& item : node) visit(item);
      return;
    }
    if (!node.is_object()) return;
    const json tree = WithoutLocations(node);
    if (const auto g = groups.Find(tree); g) {
      const std::optional<TokenRange> at = ExpressionExtent(parsed_, node);
      if (!at) {
        Refuse(LocationOf(node), fmt::format("the GROUP BY expression {}", groups.texts[*g]),
               "its place inside an expression over aggregates could not be told exactly",
               "select it as a column of its own");
      }
      replace(Range{at->begin, at->end, true}, fmt::format("_m1._g{}", *g + 1));
      return;
    }
    if (const json* call = Field(node, "FuncCall"); call != nullptr && catalog_.IsAggregate(FunctionName(*call))) {
      std::size_t index = 0;
      while (index < aggregates.size() && aggregates[index] != tree) ++index;
      const int location = call->value("location", -1);
      if (index == aggregates.size()) {
        aggregates.push_back(tree);
        merged_columns.push_back(fmt::format("_a{}", index + 1));
        AddAggregate(query, node, CallText(location), merged_columns.back());
      }
      replace(CallRange(location), fmt::format("_m1._a{}", index + 1));
      return;
    }
    if (const json* column = Field(node, "ColumnRef"); column != nullptr) {
      const std::optional<TokenRange> at = ExpressionExtent(parsed_, node);
      Refuse(LocationOf(node), fmt::format("the column {}", at ? RangeText(parsed_, *at) : TokenAt(LocationOf(node))),
             "it is neither in GROUP BY nor inside an aggregate (PostgreSQL refuses it too)",
             "add it to GROUP BY or aggregate it");
    }
    if (const json* sublink = Field(node, "SubLink"); sublink != nullptr) {
      Refuse(sublink->value("location", -1), "a subquery over merged aggregates",
             "the subquery would be evaluated once per merged group, where only the merged columns exist",
             "join the reference table in FROM instead, or pin customer_id");
    }
    for (auto it = node.begin(); it != node.end(); ++it) visit(it.value());
  };

  const json* distinct = Field(select_, "distinctClause");
  const bool distinct_on = distinct != nullptr && !distinct->empty() && !distinct->front().empty();
  if (distinct_on) visit(*distinct);
  for (const json& target : targets) visit(target.at("ResTarget").at("val"));
  const json* having = Field(select_, "havingClause");
  if (having != nullptr) visit(*having);
  if (const json* sort = Field(select_, "sortClause"); sort != nullptr) {
    for (const json& item : *sort) {
      const json& node = item.at("SortBy").at("node");
      // A position, or an output column's name: the finishing SELECT has
      // the same select list, so PostgreSQL resolves it there alike.
      if (Integer(node, "ORDER BY")) continue;
      if (const auto name = BareName(node); name) {
        if (std::any_of(targets.begin(), targets.end(),
                        [&](const json& t) { return OutputName(t.at("ResTarget")) == *name; })) {
          continue;
        }
      }
      visit(node);
    }
  }
  std::sort(replacements.begin(), replacements.end(),
            [](const Replacement& a, const Replacement& b) { return a.range.begin < b.range.begin; });

  // The finishing SELECT: the statement's own clauses over _m1.
  std::string select = "SELECT ";
  if (distinct != nullptr) {
    // DISTINCT [ON (...)]: the tokens between SELECT and the first item.
    select += Splice(Range{select_keyword_ + 1, select_list_.begin, true}, replacements) + " ";
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const json& target = targets[i].at("ResTarget");
    select += fmt::format("{}{} AS {}", i == 0 ? "" : ", ",
                          Splice(ItemRange(items[i], target.contains("name")), replacements),
                          shardkit::detail::QuoteIdentifier(OutputName(target)));
  }
  select += " FROM _m1";
  if (having != nullptr) select += " WHERE " + Splice(having_, replacements);
  if (order_.present) select += " ORDER BY " + Splice(order_, replacements);
  if (tail_.present) {
    Range tail = tail_;
    while (tail.end > tail.begin && IsChar(tail.end - 1, ';')) --tail.end;
    select += " " + Text(tail);
  }

  ScatterPlan plan;
  plan.merge = query.Plan();
  plan.shard_sql = KeepParamsTyped(plan.merge->ShardSql());
  FinishStep finish;
  finish.inputs.push_back(merged_columns);
  finish.select = std::move(select);
  finish.params_used = ParamsIn(finish.select);
  plan.finish = std::move(finish);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const json& target = targets[i].at("ResTarget");
    plan.column_names.push_back(OutputName(target));
    plan.column_locations.push_back(LocationOf(target.at("val")));
  }
  return plan;
}

}  // namespace shardkit::sql::detail
