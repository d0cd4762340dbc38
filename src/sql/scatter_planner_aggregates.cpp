#include "sql/scatter_planner.hpp"

#include <fmt/format.h>

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
#include "sql/sql_error_text.hpp"
#include "sql/topk_shape.hpp"

namespace shardkit::sql::detail {

namespace {

// PostgreSQL's FigureColnameInternal (parse_target.c): a name and its
// strength (2: a column or function name, 1: a type or "case", 0: none).
int FigureColname(const json& node, std::string& name) {
  if (!node.is_object() || node.empty()) return 0;
  const std::string type = node.begin().key();
  const json& body = node.begin().value();
  const auto last_string = [](const json& list) -> std::optional<std::string> {
    std::optional<std::string> found;
    for (const json& item : list) {
      if (item.contains("String")) found = item.at("String").value("sval", "");
    }
    return found;
  };
  if (type == "ColumnRef") {
    if (auto field = last_string(body.at("fields"))) {
      name = *field;
      return 2;
    }
  } else if (type == "A_Indirection") {
    if (auto field = last_string(body.at("indirection"))) {
      name = *field;
      return 2;
    }
    return FigureColname(body.at("arg"), name);
  } else if (type == "FuncCall") {
    name = FunctionName(body);
    return 2;
  } else if (type == "A_Expr") {
    if (body.value("kind", "") == "AEXPR_NULLIF") {
      name = "nullif";
      return 2;
    }
  } else if (type == "TypeCast") {
    const int strength = body.contains("arg") ? FigureColname(body.at("arg"), name) : 0;
    if (strength <= 1 && body.contains("typeName")) {
      if (auto last = last_string(body.at("typeName").value("names", json::array()))) {
        name = *last;
        return 1;
      }
    }
    return strength;
  } else if (type == "CollateClause") {
    return FigureColname(body.at("arg"), name);
  } else if (type == "GroupingFunc") {
    name = "grouping";
    return 2;
  } else if (type == "SubLink") {
    const std::string kind = body.value("subLinkType", "");
    if (kind == "EXISTS_SUBLINK" || kind == "ARRAY_SUBLINK") {
      name = kind == "EXISTS_SUBLINK" ? "exists" : "array";
      return 2;
    }
    if (kind == "EXPR_SUBLINK") {
      // The subquery's one output column's name, when it has one.
      const json* select = Field(body.at("subselect"), "SelectStmt");
      if (select != nullptr && select->contains("targetList") && !select->at("targetList").empty()) {
        const json& target = select->at("targetList").front().at("ResTarget");
        std::string inner;
        if (target.contains("name")) {
          name = target.at("name").get<std::string>();
          return 2;
        }
        if (target.contains("val") && FigureColname(target.at("val"), inner) > 0) {
          name = inner;
          return 2;
        }
      }
    }
  } else if (type == "CaseExpr") {
    const int strength = body.contains("defresult") ? FigureColname(body.at("defresult"), name) : 0;
    if (strength <= 1) {
      name = "case";
      return 1;
    }
    return strength;
  } else if (type == "A_ArrayExpr") {
    name = "array";
    return 2;
  } else if (type == "RowExpr") {
    name = "row";
    return 2;
  } else if (type == "CoalesceExpr") {
    name = "coalesce";
    return 2;
  } else if (type == "MinMaxExpr") {
    name = body.value("op", "") == "IS_GREATEST" ? "greatest" : "least";
    return 2;
  } else if (type == "SQLValueFunction") {
    static constexpr std::pair<const char*, const char*> kNames[] = {
        {"SVFOP_CURRENT_DATE", "current_date"},
        {"SVFOP_CURRENT_TIME", "current_time"},
        {"SVFOP_CURRENT_TIME_N", "current_time"},
        {"SVFOP_CURRENT_TIMESTAMP", "current_timestamp"},
        {"SVFOP_CURRENT_TIMESTAMP_N", "current_timestamp"},
        {"SVFOP_LOCALTIME", "localtime"},
        {"SVFOP_LOCALTIME_N", "localtime"},
        {"SVFOP_LOCALTIMESTAMP", "localtimestamp"},
        {"SVFOP_LOCALTIMESTAMP_N", "localtimestamp"},
        {"SVFOP_CURRENT_ROLE", "current_role"},
        {"SVFOP_CURRENT_USER", "current_user"},
        {"SVFOP_USER", "user"},
        {"SVFOP_SESSION_USER", "session_user"},
        {"SVFOP_CURRENT_CATALOG", "current_catalog"},
        {"SVFOP_CURRENT_SCHEMA", "current_schema"},
    };
    const std::string op = body.value("op", "");
    for (const auto& [svf, svf_name] : kNames) {
      if (op == svf) {
        name = svf_name;
        return 2;
      }
    }
  } else if (type == "XmlSerialize") {
    name = "xmlserialize";
    return 2;
  }
  return 0;
}

}  // namespace

std::string ScatterPlanner::DefaultName(const json& expression) {
  std::string name;
  return FigureColname(expression, name) > 0 ? name : "?column?";
}

Range ScatterPlanner::ItemRange(const Range& item, bool aliased) const {
  std::size_t end = item.end;
  if (aliased && end > item.begin) {
    --end;
    if (end > item.begin && Word(end - 1) == "AS") --end;
  }
  return Range{item.begin, end, true};
}

Range ScatterPlanner::CallRange(int location) const {
  std::size_t t = parsed_.TokenAt(location);
  const std::size_t begin = t;
  while (t < parsed_.tokens.size() && !IsChar(t, '(')) ++t;
  const auto close = [&](std::size_t open) {
    int depth = 0;
    for (std::size_t i = open; i < parsed_.tokens.size(); ++i) {
      if (IsChar(i, '(')) ++depth;
      if (IsChar(i, ')') && --depth == 0) return i + 1;
    }
    return parsed_.tokens.size();
  };
  std::size_t end = close(t);
  if (Word(end) == "FILTER" && IsChar(end + 1, '(')) end = close(end + 1);
  return Range{begin, end, true};
}

std::optional<std::size_t> ScatterPlanner::GroupKeys::Find(const json& tree) const {
  for (std::size_t g = 0; g < trees.size(); ++g) {
    if (trees[g] == tree) return g;
  }
  return std::nullopt;
}

ScatterPlanner::GroupKeys ScatterPlanner::ReadGroupKeys(const json& targets, const std::vector<Range>& items) const {
  GroupKeys keys;
  const json* group = Field(select_, "groupClause");
  if (group == nullptr) return keys;
  const std::vector<Range> group_items = Items(group_);
  for (std::size_t g = 0; g < group->size(); ++g) {
    const json& item = (*group)[g];
    if (const auto position = Integer(item, "GROUP BY"); position) {
      if (*position < 1 || static_cast<std::size_t>(*position) > targets.size()) {
        Refuse(LocationOf(item), fmt::format("GROUP BY {}", *position), "the select list has no such position",
               fmt::format("use 1 to {}", targets.size()));
      }
      const json& target = targets[static_cast<std::size_t>(*position - 1)].at("ResTarget");
      keys.trees.push_back(WithoutLocations(target.at("val")));
      keys.texts.push_back(ItemText(items[static_cast<std::size_t>(*position - 1)], target.contains("name")));
      continue;
    }
    if (ContainsAggregate(item)) {
      Refuse(LocationOf(item), "an aggregate in GROUP BY", "PostgreSQL does not allow it either",
             "group by columns or expressions of them");
    }
    const json& resolved = ResolveOutputAlias(item, targets);
    keys.trees.push_back(WithoutLocations(resolved));
    // An output alias stands for its select-list item's expression, which is what the shards group by.
    std::string text = g < group_items.size() ? Text(group_items[g]) : std::string();
    for (std::size_t i = 0; i < targets.size() && &resolved != &item; ++i) {
      if (&targets[i].at("ResTarget").at("val") == &resolved) text = ItemText(items[i], true);
    }
    keys.texts.push_back(std::move(text));
  }
  return keys;
}

AggregateQuery ScatterPlanner::FromAndWhere() const {
  AggregateQuery query = AggregateQuery::FromSql(Text(from_));
  query.ShardKey(catalog_.KeyColumn());
  if (where_.present) query.Where(Text(where_));
  return query;
}

std::vector<Range> ScatterPlanner::SelectItems() const {
  std::vector<Range> items = Items(select_list_);
  if (items.size() != select_.at("targetList").size()) {
    Refuse(-1, "the select list", "its items could not be told apart", "simplify the select list");
  }
  return items;
}

ScatterPlan ScatterPlanner::PlanAggregates() {
  AggregateQuery query = FromAndWhere();
  const json& targets = select_.at("targetList");
  const std::vector<Range> items = SelectItems();
  const GroupKeys group_keys = ReadGroupKeys(targets, items);
  const std::vector<json>& group_trees = group_keys.trees;
  const std::vector<std::string>& group_texts = group_keys.texts;
  const auto group_index = [&](const json& tree) { return group_keys.Find(tree); };

  std::vector<bool> group_selected(group_trees.size(), false);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const json& target = targets[i].at("ResTarget");
    const json& value = target.at("val");
    const bool aliased = target.contains("name");
    Output out{fmt::format("_c{}", i + 1), WithoutLocations(value), false, OutputName(target)};
    if (value.contains("ColumnRef") && value.at("ColumnRef").at("fields").back().contains("A_Star")) {
      Refuse(LocationOf(value), "* in an aggregate query",
             "it selects columns that are neither grouped nor "
             "aggregated",
             "name the grouped columns");
    }
    if (const auto g = group_index(out.tree); g) {
      out.key = true;
      group_selected[*g] = true;
      query.GroupByExpr(ItemText(items[i], aliased), out.name);
    } else if (value.contains("FuncCall") && catalog_.IsAggregate(FunctionName(value.at("FuncCall")))) {
      AddAggregate(query, value, ItemText(items[i], aliased), out.name);
    } else {
      // An expression over aggregates or group keys, a constant, or a
      // column neither grouped nor aggregated (which the finishing plan refuses).
      throw NeedsFinish{};
    }
    outputs_.push_back(std::move(out));
  }
  // Group keys not selected: merged, hidden.
  for (std::size_t g = 0; g < group_trees.size(); ++g) {
    if (group_selected[g]) continue;
    const std::string name = fmt::format("_group{}", g + 1);
    query.GroupByExpr(group_texts[g], name).Hide(name);
    outputs_.push_back(Output{name, group_trees[g], true, {}});
    hidden_columns_.push_back({name, group_texts[g], -1});
  }

  if (const json* having = Field(select_, "havingClause"); having != nullptr) AddHaving(query, *having);
  if (const json* sort = Field(select_, "sortClause"); sort != nullptr) {
    for (const json& item : *sort) AddOrderBy(query, item.at("SortBy"), targets);
  }
  ScatterPlan plan;
  if (const json* limit = Field(select_, "limitCount"); limit != nullptr) {
    plan.limit_param = LimitParam(*limit, "LIMIT");
    const auto n = plan.limit_param > 0 ? std::nullopt : LimitValue(*limit, "LIMIT");
    if (n) query.Limit(*n);
    limit_ = n;
  }
  if (const json* offset = Field(select_, "limitOffset"); offset != nullptr) {
    plan.offset_param = LimitParam(*offset, "OFFSET");
    const auto n = plan.offset_param > 0 ? std::nullopt : LimitValue(*offset, "OFFSET");
    if (n) query.Offset(*n);
    offset_ = n.value_or(0);
  }
  plan.merge = query.Plan();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    plan.column_names.push_back(outputs_[i].display);
    plan.column_locations.push_back(LocationOf(targets[i].at("ResTarget").at("val")));
  }
  plan.hidden_columns = hidden_columns_;
  if (having_.present) plan.having_location = KeywordLocation(having_);
  plan.shard_sql = plan.merge->ShardSql();
  // The merge applies LIMIT and OFFSET; the shards only keep their
  // parameters referenced (0 * x is 0, or NULL: OFFSET 0 either way).
  if (plan.limit_param > 0 || plan.offset_param > 0) {
    plan.shard_sql += " OFFSET 0";
    for (const int p : {plan.limit_param, plan.offset_param}) {
      if (p > 0) plan.shard_sql += fmt::format(" * ${}::bigint", p);
    }
  }
  TopKCandidate candidate{select_, catalog_, {}, {}, limit_, offset_, Text(from_), std::nullopt};
  for (const Output& o : outputs_) candidate.outputs.push_back({o.name, o.key});
  for (const OrderKey& k : order_keys_) candidate.order.push_back({k.column, k.direction, k.nulls});
  if (where_.present) candidate.where = Text(where_);
  plan.topk = FindTopKShape(candidate);
  return plan;
}

const json& ScatterPlanner::ResolveOutputAlias(const json& item, const json& targets) const {
  if (!item.contains("ColumnRef")) return item;
  const json& fields = item.at("ColumnRef").at("fields");
  if (fields.size() != 1 || !fields.front().contains("String")) return item;
  const std::string name = fields.front().at("String").value("sval", "");
  for (const json& t : targets) {
    const json& target = t.at("ResTarget");
    if (target.value("name", "") != name) continue;
    if (FromMayHaveColumn(name)) return item;
    return target.at("val");
  }
  return item;
}

bool ScatterPlanner::FromMayHaveColumn(const std::string& column) const {
  bool may = false;
  std::function<void(const json&)> visit = [&](const json& node) {
    if (node.is_object()) {
      if (const json* range = Field(node, "RangeVar"); range != nullptr) {
        const std::optional<std::string> schema =
            range->contains("schemaname") ? std::optional<std::string>(range->value("schemaname", "")) : std::nullopt;
        const std::string table = range->value("relname", "");
        const SqlTable* found = catalog_.FindSharded(schema, table);
        if (found == nullptr) found = catalog_.FindReference(schema, table);
        if (found == nullptr || found->columns.empty() || found->HasColumn(column)) may = true;
        return;
      }
      for (auto it = node.begin(); it != node.end(); ++it) visit(it.value());
    } else if (node.is_array()) {
      for (const json& n : node) visit(n);
    }
  };
  if (const json* from = Field(select_, "fromClause"); from != nullptr) visit(*from);
  return may;
}

void ScatterPlanner::AddAggregate(AggregateQuery& query, const json& value, const std::string& text,
                                  const std::string& name) {
  const json& call = value.at("FuncCall");
  if (!IsMergedAggregate(FunctionName(call))) {
    // AggregateQuery says why it cannot be merged (median, string_agg...).
    try {
      query.Select(text, name);
    } catch (const UnmergeableQuery& e) {
      Refuse(call.value("location", -1), fmt::format("the aggregate {}", text), e.what(),
             "compute it per customer (pin customer_id), or from mergeable aggregates");
    }
    Refuse(call.value("location", -1), fmt::format("the aggregate {}", text),
           "only count, sum, min, max and avg are merged across shards", "pin customer_id");
  }
  try {
    query.Select(text, name);
  } catch (const UnmergeableQuery& e) {
    Refuse(call.value("location", -1), fmt::format("the aggregate {}", text), e.what(),
           "pin customer_id so that it runs on one shard");
  }
}

std::string ScatterPlanner::ColumnFor(AggregateQuery& query, const json& expression) {
  const json tree = WithoutLocations(expression);
  for (const Output& o : outputs_) {
    if (o.tree == tree) return o.name;
  }
  const int location = LocationOf(expression);
  if (expression.contains("FuncCall") && catalog_.IsAggregate(FunctionName(expression.at("FuncCall")))) {
    std::string name = fmt::format("_hidden{}", outputs_.size() + 1);
    AddAggregate(query, expression, CallText(location), name);
    query.Hide(name);
    hidden_columns_.push_back({name, CallText(location), location});
    outputs_.push_back(Output{name, tree, false, {}});
    return name;
  }
  throw NeedsFinish{};
}

void ScatterPlanner::AddHaving(AggregateQuery& query, const json& having) {
  if (const json* both = Field(having, "BoolExpr"); both != nullptr && both->value("boolop", "") == "AND_EXPR") {
    for (const json& term : both->at("args")) AddHaving(query, term);
    return;
  }
  // Other shapes than `aggregate op constant` terms joined by AND (op one
  // of = <> < <= > >=, or IS [NOT] NULL): evaluated by the finishing step.
  const auto refuse = [] { throw NeedsFinish{}; };
  if (const json* test = Field(having, "NullTest"); test != nullptr) {
    const bool is_null = test->value("nulltesttype", "") == "IS_NULL";
    query.Having(ColumnFor(query, test->at("arg")), is_null ? CompareOp::kIsNull : CompareOp::kIsNotNull);
    return;
  }
  const json* expr = Field(having, "A_Expr");
  if (expr == nullptr || expr->value("kind", "") != "AEXPR_OP" || !expr->contains("lexpr") ||
      !expr->contains("rexpr")) {
    refuse();
  }
  const std::string op = expr->at("name").back().at("String").value("sval", "");
  bool flipped = false;
  const json* column = &expr->at("lexpr");
  const json* constant = &expr->at("rexpr");
  if (column->contains("A_Const")) {
    std::swap(column, constant);
    flipped = true;
  }
  const std::optional<Value> value = ConstantValue(*constant);
  // A quoted constant is read as the column's type (a date, a number...),
  // which the merge compares exactly only for text: the server does it.
  if (!value || value->kind() == Value::Kind::kText) refuse();
  CompareOp compare = CompareOp::kEq;
  if (op == "=") {
    compare = CompareOp::kEq;
  } else if (op == "<>" || op == "!=") {
    compare = CompareOp::kNe;
  } else if (op == "<") {
    compare = flipped ? CompareOp::kGt : CompareOp::kLt;
  } else if (op == "<=") {
    compare = flipped ? CompareOp::kGe : CompareOp::kLe;
  } else if (op == ">") {
    compare = flipped ? CompareOp::kLt : CompareOp::kGt;
  } else if (op == ">=") {
    compare = flipped ? CompareOp::kLe : CompareOp::kGe;
  } else {
    refuse();
  }
  query.Having(ColumnFor(query, *column), compare, *value);
}

std::optional<Value> ScatterPlanner::ConstantValue(const json& node) const {
  const json* constant = Field(node, "A_Const");
  if (constant == nullptr || constant->value("isnull", false)) return std::nullopt;
  std::size_t t = parsed_.TokenAt(constant->value("location", -1));
  const bool negative = IsChar(t, '-');
  if (negative) ++t;
  if (t >= parsed_.tokens.size()) return std::nullopt;
  const std::string text(parsed_.TokenText(parsed_.tokens[t]));
  if (constant->contains("sval")) {
    if (negative) return std::nullopt;
    return Value::Text(constant->at("sval").value("sval", ""));
  }
  if (constant->contains("ival")) return Value::Int(std::stoll((negative ? "-" : "") + text));
  if (constant->contains("fval")) return Value::Numeric((negative ? "-" : "") + text);
  return std::nullopt;
}

void ScatterPlanner::AddOrderBy(AggregateQuery& query, const json& sort, const json& targets) {
  const json& node = sort.at("node");
  const std::string dir = sort.value("sortby_dir", "SORTBY_DEFAULT");
  if (dir == "SORTBY_USING") {
    Refuse(sort.value("location", -1), "ORDER BY ... USING", "it is not merged across shards", "use ASC or DESC");
  }
  const std::string nulls = sort.value("sortby_nulls", "SORTBY_NULLS_DEFAULT");
  const SortDirection direction = dir == "SORTBY_DESC" ? SortDirection::kDesc : SortDirection::kAsc;
  const NullsOrder order = nulls == "SORTBY_NULLS_FIRST"  ? NullsOrder::kFirst
                           : nulls == "SORTBY_NULLS_LAST" ? NullsOrder::kLast
                                                          : NullsOrder::kDefault;
  std::string column;
  if (const auto position = Integer(node, "ORDER BY"); position) {
    if (*position < 1 || static_cast<std::size_t>(*position) > targets.size()) {
      Refuse(LocationOf(node), fmt::format("ORDER BY {}", *position), "the select list has no such position",
             fmt::format("use 1 to {}", targets.size()));
    }
    column = outputs_[static_cast<std::size_t>(*position - 1)].name;
  } else if (const auto name = BareName(node); name && SelectedAs(*name, LocationOf(node))) {
    // ORDER BY a bare name: an output column first, as PostgreSQL resolves it.
    column = *SelectedAs(*name, LocationOf(node));
  } else {
    column = ColumnFor(query, node);
  }
  query.OrderBy(column, direction, order);
  order_keys_.push_back(OrderKey{column, direction, order});
}

std::optional<std::string> ScatterPlanner::BareName(const json& node) {
  if (!node.contains("ColumnRef")) return std::nullopt;
  const json& fields = node.at("ColumnRef").at("fields");
  if (fields.size() != 1 || !fields.front().contains("String")) return std::nullopt;
  return fields.front().at("String").value("sval", "");
}

std::optional<std::string> ScatterPlanner::SelectedAs(const std::string& display, int location) const {
  const Output* found = nullptr;
  for (std::size_t i = 0; i < select_.at("targetList").size(); ++i) {
    if (outputs_[i].display != display) continue;
    if (found != nullptr && outputs_[i].tree != found->tree) {
      Refuse(location, fmt::format("ORDER BY {}", display), "it is ambiguous: the select list names two columns so",
             "order by position or give the columns distinct aliases");
    }
    if (found == nullptr) found = &outputs_[i];
  }
  return found == nullptr ? std::nullopt : std::optional<std::string>(found->name);
}

}  // namespace shardkit::sql::detail
