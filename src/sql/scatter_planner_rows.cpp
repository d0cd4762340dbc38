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

ScatterPlan ScatterPlanner::PlanConcatenation() const {
  ScatterPlan plan;
  const json* sort = Field(select_, "sortClause");
  const json* limit = Field(select_, "limitCount");
  const json* offset = Field(select_, "limitOffset");
  const json* distinct = Field(select_, "distinctClause");
  // DISTINCT ON without the key was refused; with it, or with the key among
  // the columns, equal rows are on one shard.
  const bool distinct_across_shards = distinct != nullptr && (distinct->empty() || distinct->front().empty()) &&
                                      !HasShardKey(select_.at("targetList"), true);
  if (sort == nullptr && limit == nullptr && offset == nullptr && !distinct_across_shards) {
    plan.shard_sql = parsed_.text;
    return plan;
  }
  RowOrder order;
  order.distinct = distinct_across_shards;
  if (limit != nullptr) plan.limit_param = LimitParam(*limit, "LIMIT");
  if (offset != nullptr) plan.offset_param = LimitParam(*offset, "OFFSET");
  if (limit != nullptr && plan.limit_param == 0) order.limit = LimitValue(*limit, "LIMIT");
  if (offset != nullptr && plan.offset_param == 0) order.offset = LimitValue(*offset, "OFFSET").value_or(0);
  const json& targets = select_.at("targetList");
  bool star = false;
  for (const json& t : targets) star = star || IsStar(t.at("ResTarget").at("val"));
  const std::vector<Range> items = Items(select_list_);
  std::string hidden;  // appended to the select list
  const auto add_hidden = [&](const std::string& expression) {
    hidden += fmt::format(", {} AS \"_sort{}\"", expression, order.hidden_columns + 1);
    return order.hidden_columns++;
  };
  if (sort != nullptr) {
    const std::vector<Range> sort_items = Items(order_);
    for (std::size_t s = 0; s < sort->size(); ++s) {
      const json& by = (*sort)[s].at("SortBy");
      const json& node = by.at("node");
      SortColumn key;
      key.direction =
          by.value("sortby_dir", "SORTBY_DEFAULT") == "SORTBY_DESC" ? SortDirection::kDesc : SortDirection::kAsc;
      const std::string nulls = by.value("sortby_nulls", "SORTBY_NULLS_DEFAULT");
      key.nulls = nulls == "SORTBY_NULLS_FIRST"  ? NullsOrder::kFirst
                  : nulls == "SORTBY_NULLS_LAST" ? NullsOrder::kLast
                                                 : NullsOrder::kDefault;
      if (by.value("sortby_dir", "") == "SORTBY_USING") {
        Refuse(LocationOf(node), "ORDER BY ... USING", "it is not merged across shards", "use ASC or DESC");
      }
      // Which select-list item it is, if one is (not with *: positions shift).
      std::optional<std::size_t> item;
      if (const auto position = Integer(node, "ORDER BY"); position) {
        if (star || *position < 1 || static_cast<std::size_t>(*position) > targets.size()) {
          Refuse(LocationOf(node), fmt::format("ORDER BY {}", *position),
                 star ? "a position in a select list with * is not merged across shards"
                      : "the select list has no such position",
                 "order by the column's name or expression");
        }
        item = static_cast<std::size_t>(*position - 1);
      } else if (!star) {
        const json tree = WithoutLocations(node);
        const std::optional<std::string> bare = BareName(node);
        for (std::size_t i = 0; i < targets.size() && !item; ++i) {
          const json& target = targets[i].at("ResTarget");
          const std::string display = OutputName(target);
          if ((bare && display == *bare) || WithoutLocations(target.at("val")) == tree) item = i;
        }
      }
      std::string expression;
      if (!item && star) {
        // PostgreSQL resolves a bare ORDER BY name among the output columns
        // first: an alias, else a column * outputs, written here as what
        // it stands for (unqualified, it may mean another table's column,
        // or be ambiguous, in the select list).
        if (const std::optional<std::string> bare = BareName(node); bare) {
          for (std::size_t i = 0; i < targets.size() && expression.empty(); ++i) {
            const json& target = targets[i].at("ResTarget");
            if (!IsStar(target.at("val")) && OutputName(target) == *bare) {
              expression = ItemText(items[i], target.contains("name"));
            }
          }
          if (const auto qualifier = StarColumnQualifier(*bare); expression.empty() && qualifier) {
            expression = shardkit::detail::QuoteIdentifier(*qualifier) + "." + shardkit::detail::QuoteIdentifier(*bare);
          }
        }
      }
      if (!item && distinct_across_shards) {
        Refuse(LocationOf(node), "this ORDER BY item of a SELECT DISTINCT over every shard",
               star ? "with * in the select list, its place among the columns is not known before the rows arrive"
                    : "it is not one of the selected columns (PostgreSQL requires that for SELECT DISTINCT)",
               star ? "name the selected columns instead of *" : "select it, or order by a selected column");
      }
      if (item) {
        key.column = *item;
        expression = ItemText(items[*item], targets[*item].at("ResTarget").contains("name"));
      } else {
        if (expression.empty()) expression = SortItemText(sort_items.at(s));
        key.hidden = true;
        key.column = add_hidden(expression);
      }
      // The collation the shard sorted it in: C (bytewise) or refused.
      key.collation_column = add_hidden(fmt::format("NULLIF(pg_collation_for(({})::text), '\"default\"')", expression));
      order.keys.push_back(key);
    }
  }
  const std::size_t select_end = static_cast<std::size_t>(parsed_.tokens[select_list_.end - 1].end);
  const std::size_t body_end =
      tail_.present ? static_cast<std::size_t>(parsed_.tokens[tail_.begin].start) : parsed_.text.size();
  plan.shard_sql = parsed_.text.substr(0, select_end) + hidden + parsed_.text.substr(select_end, body_end - select_end);
  while (!plan.shard_sql.empty() && (plan.shard_sql.back() == ' ' || plan.shard_sql.back() == '\n')) {
    plan.shard_sql.pop_back();
  }
  if (plan.limit_param > 0 || plan.offset_param > 0) {
    // At most OFFSET + LIMIT rows from each shard (NULL: all of them).
    const std::string l = plan.limit_param > 0 ? fmt::format("${}::bigint", plan.limit_param)
                          : order.limit        ? std::to_string(*order.limit)
                                               : std::string("NULL::bigint");
    const std::string o =
        plan.offset_param > 0 ? fmt::format("${}::bigint", plan.offset_param) : std::to_string(order.offset);
    plan.shard_sql += fmt::format(" LIMIT {} + {}", l, o);
  } else if (order.limit) {
    plan.shard_sql += fmt::format(" LIMIT {}", *order.limit + order.offset);
  }
  plan.rows = order;
  return plan;
}

bool ScatterPlanner::IsStar(const json& value) {
  return value.contains("ColumnRef") && value.at("ColumnRef").at("fields").back().contains("A_Star");
}

std::optional<std::string> ScatterPlanner::StarColumnQualifier(const std::string& column) const {
  // The top-level FROM's tables in order, by the name their columns are
  // qualified with; unknown when an item is not a table (its columns are
  // not known here) or a join merges columns (USING, NATURAL) or hides its
  // tables' names (an aliased join).
  std::vector<std::pair<std::string, const SqlTable*>> tables;
  bool complete = true;
  const std::function<void(const json&)> add = [&](const json& node) {
    if (const json* range = Field(node, "RangeVar"); range != nullptr) {
      const json* schema = Field(*range, "schemaname");
      const std::string relname = range->value("relname", "");
      const std::optional<std::string> in =
          schema ? std::optional<std::string>(schema->get<std::string>()) : std::nullopt;
      const SqlTable* table = catalog_.FindSharded(in, relname);
      if (table == nullptr) table = catalog_.FindReference(in, relname);
      const json* alias = Field(*range, "alias");
      const std::string name = alias != nullptr ? alias->value("aliasname", relname) : relname;
      if (table == nullptr || table->columns.empty()) complete = false;
      tables.emplace_back(name, table);
    } else if (const json* join = Field(node, "JoinExpr"); join != nullptr && Field(*join, "usingClause") == nullptr &&
                                                           !join->value("isNatural", false) &&
                                                           Field(*join, "alias") == nullptr) {
      add(join->at("larg"));
      add(join->at("rarg"));
    } else {
      complete = false;
    }
  };
  if (const json* from = Field(select_, "fromClause"); from != nullptr) {
    for (const json& item : *from) add(item);
  }
  const auto has = [&](const std::pair<std::string, const SqlTable*>& t) {
    return t.second != nullptr && t.second->HasColumn(column);
  };
  for (const json& target : select_.at("targetList")) {
    const json& value = target.at("ResTarget").at("val");
    if (!IsStar(value)) continue;
    const json& fields = value.at("ColumnRef").at("fields");
    if (fields.size() == 1) {
      if (!complete) return std::nullopt;
      for (const auto& t : tables) {
        if (has(t)) return t.first;
      }
      continue;
    }
    const json* name = fields.size() == 2 ? Field(fields[0], "String") : nullptr;
    const std::optional<std::string> qualifier =
        name != nullptr ? std::optional<std::string>(name->value("sval", "")) : std::nullopt;
    const auto t = std::find_if(tables.begin(), tables.end(), [&](const auto& x) { return qualifier == x.first; });
    if (!qualifier || t == tables.end() || t->second == nullptr || t->second->columns.empty()) return std::nullopt;
    if (has(*t)) return t->first;
  }
  return std::nullopt;
}

std::string ScatterPlanner::SortItemText(const Range& item) const {
  std::size_t end = item.end;
  while (end > item.begin + 1) {
    const std::string last = Word(end - 1);
    if (last == "ASC" || last == "DESC") {
      --end;
    } else if ((last == "FIRST" || last == "LAST") && Word(end - 2) == "NULLS") {
      end -= 2;
    } else {
      break;
    }
  }
  return Text(item.begin, end);
}

}  // namespace shardkit::sql::detail
