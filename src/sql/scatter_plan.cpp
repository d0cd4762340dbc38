#include "sql/scatter_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "sql/percentile_shape.hpp"
#include "sql/scatter_planner.hpp"
#include "sql/sql_error_text.hpp"
#include "sql/topk_shape.hpp"

namespace shardkit::sql::detail {

bool IsMergedAggregate(const std::string& name) {
  return name == "count" || name == "sum" || name == "min" || name == "max" || name == "avg";
}

const json* Field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

int LocationOf(const json& node) {
  if (!node.is_object() || node.empty()) return -1;
  const json& body = node.begin().value();
  return body.is_object() ? body.value("location", -1) : -1;
}

std::string FunctionName(const json& call) {
  const json* names = Field(call, "funcname");
  if (names == nullptr || names->empty()) return {};
  const json& last = names->back();
  return last.contains("String") ? last.at("String").value("sval", "") : std::string();
}

ScatterPlan ScatterPlanner::Run() {
  RefuseUnsupportedShapes();
  SplitClauses();
  if (!HasAggregates()) return PlanConcatenation();
  // Percentiles and count(DISTINCT) off the shard key: exact distributed
  // selection (percentile_shape.hpp) instead of a merge of partials.
  {
    const json* targets = Field(select_, "targetList");
    std::vector<std::string> item_texts;
    for (std::size_t i = 0; const Range& item : Items(select_list_)) {
      const bool aliased = targets != nullptr && i < targets->size() && (*targets)[i].at("ResTarget").contains("name");
      item_texts.push_back(ItemText(item, aliased));
      ++i;
    }
    std::vector<std::string> group_texts;
    for (const Range& item : Items(group_)) group_texts.push_back(Text(item));
    const PercentileCandidate candidate{
        parsed_,
        select_,
        catalog_,
        Text(from_),
        where_.present ? Text(where_) : std::string(),
        std::move(item_texts),
        std::move(group_texts),
        [](const json& e) { return DefaultName(e); },
        [&](const json& item) { return targets != nullptr ? ResolveOutputAlias(item, *targets) : item; },
        [&](const json& node, const char* what) { return LimitValue(node, what); }};
    if (std::optional<PercentileShape> shape = FindPercentileShape(candidate)) {
      ScatterPlan plan;
      plan.column_names = shape->column_names;
      plan.shard_sql = "exact percentiles: per-shard rounds in one snapshot (see the merge)";
      plan.percentile = std::move(shape);
      return plan;
    }
  }
  try {
    // DISTINCT over merged groups: removed by the finishing step.
    if (Field(select_, "distinctClause") == nullptr) {
      try {
        return PlanAggregates();
      } catch (const NeedsFinish&) {
      }
    }
    outputs_.clear();
    hidden_columns_.clear();
    order_keys_.clear();
    limit_.reset();
    offset_ = 0;
    return PlanFinishedAggregates();
  } catch (const UnmergeableQuery& e) {
    // What AggregateQuery refuses: the clock, volatile functions, subqueries...
    Refuse(SelectKeywordLocation(), "this statement over every shard", e.what(),
           "pin customer_id so that it runs on one customer's shard, or rewrite it as said");
  }
}

bool ScatterPlanner::HasShardKey(const json& items, bool targets) const {
  std::set<std::string> sharded;  // names the sharded tables' columns are qualified by
  bool plain = true;
  const std::function<void(const json&)> from = [&](const json& item) {
    if (const json* range = Field(item, "RangeVar"); range != nullptr) {
      const json* schema = Field(*range, "schemaname");
      const std::string name = range->value("relname", "");
      if (catalog_.FindSharded(schema ? std::optional<std::string>(schema->get<std::string>()) : std::nullopt, name) !=
          nullptr) {
        const json* alias = Field(*range, "alias");
        sharded.insert(alias != nullptr ? alias->value("aliasname", name) : name);
      }
    } else if (const json* join = Field(item, "JoinExpr"); join != nullptr) {
      if (join->value("jointype", "") != "JOIN_INNER" || Field(*join, "alias") != nullptr) plain = false;
      from(join->at("larg"));
      from(join->at("rarg"));
    } else {
      plain = false;
    }
  };
  if (const json* items_from = Field(select_, "fromClause"); items_from != nullptr) {
    for (const json& item : *items_from) from(item);
  }
  if (!plain || sharded.empty()) return false;
  const auto name_of = [](const json& field) {
    return field.contains("String") ? field.at("String").value("sval", "") : std::string();
  };
  for (const json& item : items) {
    const json* value = targets ? Field(item.at("ResTarget"), "val") : &item;
    const json* column = value == nullptr ? nullptr : Field(*value, "ColumnRef");
    if (column == nullptr) continue;
    const json& fields = column->at("fields");
    const bool star = fields.back().contains("A_Star");
    if (!star && name_of(fields.back()) != catalog_.KeyColumn()) continue;
    if (fields.size() == 1 && (!star || targets)) return true;
    if (fields.size() == 2) {
      if (sharded.contains(name_of(fields.front())) && (!star || targets)) return true;
    }
  }
  return false;
}

void ScatterPlanner::RefuseUnsupportedShapes() {
  if (select_.value("op", "SETOP_NONE") != "SETOP_NONE") {
    Refuse(-1, "a set operation (UNION, INTERSECT, EXCEPT) over sharded tables",
           "combining set operations across shards is not supported yet",
           "run each arm as a statement of its own and combine the answers, or pin customer_id");
  }
  if (const json* with = Field(select_, "withClause"); with != nullptr) {
    Refuse(LocationOf(*with), "WITH in a statement over every shard",
           "a CTE's rows would be each shard's own, not the whole table's",
           "inline the query, or pin customer_id so that the statement runs on one shard");
  }
  if (const json* distinct = Field(select_, "distinctClause"); distinct != nullptr) {
    // With the shard key among its columns (DISTINCT ON: its
    // expressions), equal rows are one customer's, so on one shard: each
    // shard's distinct rows are the answer's, merged as plain rows.
    const bool on = !distinct->empty() && !distinct->front().empty();
    if (on && !HasShardKey(*distinct, false)) {
      Refuse(LocationOf(distinct->front()), "DISTINCT ON over every shard",
             "without customer_id among its expressions, the rows of one group may come from several shards",
             "add customer_id to DISTINCT ON, or pin customer_id");
    }
  }
  if (const json* window = Field(select_, "windowClause"); window != nullptr) {
    Refuse(window->empty() ? -1 : LocationOf(window->front()), "a WINDOW clause over every shard",
           "window functions across shards would see each shard's rows only",
           "pin customer_id, or PARTITION BY customer_id in a statement for one customer");
  }
  if (select_.value("limitOption", "LIMIT_OPTION_DEFAULT") == "LIMIT_OPTION_WITH_TIES") {
    Refuse(LocationOf(select_.at("limitCount")), "FETCH ... WITH TIES over every shard",
           "it is not supported across shards yet", "use LIMIT");
  }
  if (const json* group = Field(select_, "groupClause"); group != nullptr) {
    for (const json& item : *group) {
      if (item.contains("GroupingSet")) {
        Refuse(LocationOf(item), "GROUPING SETS, ROLLUP or CUBE over every shard",
               "grouping sets are not merged across shards", "run one GROUP BY per grouping set");
      }
    }
  }
  // Window calls anywhere at this level.
  Walk(select_, [&](const json& call) {
    if (Field(call, "over") != nullptr) {
      Refuse(call.value("location", -1), fmt::format("the window function {}", FunctionName(call)),
             "a window function over every shard sees each shard's rows only",
             "pin customer_id (and PARTITION BY customer_id) so that it runs on one customer's shard");
    }
  });
}

bool ScatterPlanner::ContainsAggregate(const json& node) const {
  bool found = false;
  Walk(node, [&](const json& call) { found = found || catalog_.IsAggregate(FunctionName(call)); });
  return found;
}

bool ScatterPlanner::HasAggregates() const {
  if (Field(select_, "groupClause") != nullptr || Field(select_, "havingClause") != nullptr) return true;
  for (const char* key : {"targetList", "sortClause"}) {
    if (const json* list = Field(select_, key); list != nullptr && ContainsAggregate(*list)) return true;
  }
  return false;
}

void ScatterPlanner::SplitClauses() {
  Range* current = nullptr;
  int depth = 0;
  const auto start = [&](Range& r, std::size_t first) {
    if (current != nullptr) current->end = first_keyword_;
    r.present = true;
    r.begin = first;
    current = &r;
  };
  for (std::size_t t = 0; t < parsed_.tokens.size(); ++t) {
    if (IsChar(t, '(') || IsChar(t, '[')) ++depth;
    if (IsChar(t, ')') || IsChar(t, ']')) --depth;
    if (depth != 0) continue;
    const std::string word = Word(t);
    first_keyword_ = t;
    if (word == "SELECT" && !select_list_.present) {
      select_keyword_ = t;
      start(select_list_, t + 1);
    } else if (word == "FROM" && (t == 0 || Word(t - 1) != "DISTINCT")) {  // not IS [NOT] DISTINCT FROM
      start(from_, t + 1);
    } else if (word == "WHERE") {
      start(where_, t + 1);
    } else if (word == "GROUP" && Word(t + 1) == "BY") {
      start(group_, t + 2);
    } else if (word == "HAVING") {
      start(having_, t + 1);
    } else if (word == "ORDER" && Word(t + 1) == "BY") {
      start(order_, t + 2);
    } else if (!tail_.present && (word == "LIMIT" || word == "OFFSET" || word == "FETCH" || IsChar(t, ';'))) {
      // LIMIT, OFFSET and FETCH in any order: one tail, rewritten whole.
      start(tail_, t);
    }
  }
  if (current != nullptr) current->end = parsed_.tokens.size();
  // The select list's items start after DISTINCT [ON (...)].
  if (select_list_.present && select_list_.begin < select_list_.end && Word(select_list_.begin) == "DISTINCT") {
    std::size_t t = select_list_.begin + 1;
    if (t < select_list_.end && Word(t) == "ON") {
      int open = 0;
      for (++t; t < select_list_.end; ++t) {
        if (IsChar(t, '(')) ++open;
        if (IsChar(t, ')') && --open == 0) break;
      }
      ++t;
    }
    select_list_.begin = std::min(t, select_list_.end);
  }
}

std::string ScatterPlanner::Text(std::size_t begin, std::size_t end) const {
  if (begin >= end) return {};
  const auto from = static_cast<std::size_t>(parsed_.tokens[begin].start);
  const auto to = static_cast<std::size_t>(parsed_.tokens[end - 1].end);
  return parsed_.text.substr(from, to - from);
}

std::vector<Range> ScatterPlanner::Items(const Range& clause) const {
  std::vector<Range> items;
  int depth = 0;
  std::size_t begin = clause.begin;
  for (std::size_t t = clause.begin; t < clause.end; ++t) {
    if (IsChar(t, '(') || IsChar(t, '[')) ++depth;
    if (IsChar(t, ')') || IsChar(t, ']')) --depth;
    if (depth == 0 && IsChar(t, ',')) {
      items.push_back(Range{begin, t, true});
      begin = t + 1;
    }
  }
  if (begin < clause.end) items.push_back(Range{begin, clause.end, true});
  return items;
}

std::optional<std::int64_t> ScatterPlanner::Integer(const json& node, const char* what) const {
  if (!node.contains("A_Const")) return std::nullopt;
  const json& constant = node.at("A_Const");
  if (constant.value("isnull", false)) return std::nullopt;
  if (!constant.contains("ival")) {
    Refuse(LocationOf(node), fmt::format("{} {}", what, TokenAt(LocationOf(node))), "it is not an integer",
           "write a whole number");
  }
  // The token's text: the JSON form drops negative constants.
  const std::size_t t = parsed_.TokenAt(constant.value("location", -1));
  const bool negative = IsChar(t, '-');
  const std::string digits(parsed_.TokenText(parsed_.tokens[negative ? t + 1 : t]));
  std::int64_t value = 0;
  for (const char c : digits) value = value * 10 + (c - '0');
  return negative ? -value : value;
}

int ScatterPlanner::LimitParam(const json& node, const char* what) const {
  const json* param = Field(node, "ParamRef");
  if (param == nullptr) return 0;
  const int number = param->value("number", 0);
  const std::function<int(const json&)> uses = [&](const json& n) {
    int count = 0;
    if (n.is_object()) {
      if (const json* p = Field(n, "ParamRef"); p != nullptr && p->value("number", 0) == number) ++count;
      for (const json& value : n) count += uses(value);
    } else if (n.is_array()) {
      for (const json& e : n) count += uses(e);
    }
    return count;
  };
  if (number < 1 || uses(parsed_.tree) != 1) {
    Refuse(LocationOf(node), fmt::format("{} ${}", what, number),
           "the parameter is used elsewhere in the statement too, where its type may not be bigint",
           fmt::format("give the {} a parameter of its own", what));
  }
  return number;
}

std::optional<std::int64_t> ScatterPlanner::LimitValue(const json& node, const char* what) const {
  if (node.contains("A_Const") && node.at("A_Const").value("isnull", false)) return std::nullopt;  // LIMIT ALL
  const auto n = Integer(node, what);
  if (!n) {
    Refuse(LocationOf(node), fmt::format("{} {}", what, TokenAt(LocationOf(node))),
           "a merged query's LIMIT and OFFSET are applied after the merge and must be known when it is planned",
           "write the number in the statement");
  }
  if (*n < 0) {
    Refuse(LocationOf(node), fmt::format("{} {}", what, *n), "it must not be negative", "write 0 or more");
  }
  return n;
}

}  // namespace shardkit::sql::detail

namespace shardkit::sql {

std::string ScatterPlan::DescribeMerge() const {
  if (percentile) return percentile->Describe();
  if (finish) {
    return fmt::format("{}; then on one shard, over the merged rows (_m1: {}): {}", merge->Describe(),
                       fmt::join(finish->inputs.front(), ", "), finish->select);
  }
  if (merge) {
    std::string out = merge->Describe();
    if (offset_param > 0) out += fmt::format("; OFFSET ${}", offset_param);
    if (limit_param > 0) out += fmt::format("; LIMIT ${}", limit_param);
    return out;
  }
  if (!rows) return "concatenation";
  std::string keys;
  for (const SortColumn& k : rows->keys) {
    keys += fmt::format("{}{}{} {}", keys.empty() ? "" : ", ", k.hidden ? "hidden " : "", k.column + 1,
                        k.direction == SortDirection::kDesc ? "DESC" : "ASC");
  }
  std::string out = keys.empty() ? "concatenation" : "merge-sorted by " + keys;
  if (rows->distinct) out += ", then DISTINCT on one shard (the ordering, OFFSET and LIMIT there too)";
  if (offset_param > 0) out += fmt::format(", OFFSET ${}", offset_param);
  if (rows->offset > 0) out += fmt::format(", OFFSET {}", rows->offset);
  if (limit_param > 0) out += fmt::format(", LIMIT ${}", limit_param);
  if (rows->limit) out += fmt::format(", LIMIT {}", *rows->limit);
  return out;
}

ScatterPlan PlanScatter(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  return detail::ScatterPlanner(parsed, catalog).Run();
}

}  // namespace shardkit::sql
