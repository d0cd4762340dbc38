#include "sql/scatter_plan.hpp"

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

namespace shardkit::sql {
namespace {

using json = nlohmann::json;

// The aggregates the merge engine combines exactly (aggregate_query.hpp).
bool IsMergedAggregate(const std::string& name) {
  return name == "count" || name == "sum" || name == "min" || name == "max" || name == "avg";
}

std::string Upper(std::string_view word) {
  std::string out(word);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

// A tree without its byte offsets: two expressions written alike compare equal.
json WithoutLocations(const json& node) {
  if (node.is_object()) {
    json out = json::object();
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() != "location") out[it.key()] = WithoutLocations(it.value());
    }
    return out;
  }
  if (node.is_array()) {
    json out = json::array();
    for (const json& item : node) out.push_back(WithoutLocations(item));
    return out;
  }
  return node;
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

// The last name of a qualified function name ("pg_catalog.sum" -> "sum").
std::string FunctionName(const json& call) {
  const json* names = Field(call, "funcname");
  if (names == nullptr || names->empty()) return {};
  const json& last = names->back();
  return last.contains("String") ? last.at("String").value("sval", "") : std::string();
}

// A clause of the top-level SELECT: tokens [begin, end), its keyword(s) excluded.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool present = false;
};

class ScatterPlanner {
 public:
  ScatterPlanner(const ParsedStatement& parsed, const SqlCatalog& catalog)
      : parsed_(parsed), catalog_(catalog), select_(parsed.tree.at("SelectStmt")) {}

  ScatterPlan Run() {
    RefuseUnsupportedShapes();
    SplitClauses();
    if (!HasAggregates()) return PlanConcatenation();
    if (Field(select_, "distinctClause") != nullptr) {
      Refuse(SelectKeywordLocation(), "DISTINCT over aggregates over every shard",
             "duplicates among merged groups would have to be removed after the merge, which is not supported yet",
             "drop DISTINCT (GROUP BY keys are distinct already), or pin customer_id");
    }
    try {
      return PlanAggregates();
    } catch (const UnmergeableQuery& e) {
      // What AggregateQuery refuses: the clock, volatile functions, subqueries...
      Refuse(SelectKeywordLocation(), "this statement over every shard", e.what(),
             "pin customer_id so that it runs on one customer's shard, or rewrite it as said");
    }
  }

 private:
  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const {
    throw Refusal(parsed_.text, location, construct, reason, advice);
  }

  // ---- what the scatter does not take (yet) ----

  // Whether `items` (select-list targets, or DISTINCT ON expressions) has a
  // sharded table's customer_id as a plain column (or *, t.*), with the
  // FROM clause only tables joined by inner joins (no NULL-extended key).
  bool HasShardKey(const json& items, bool targets) const {
    std::set<std::string> sharded;  // names the sharded tables' columns are qualified by
    bool plain = true;
    const std::function<void(const json&)> from = [&](const json& item) {
      if (const json* range = Field(item, "RangeVar"); range != nullptr) {
        const json* schema = Field(*range, "schemaname");
        const std::string name = range->value("relname", "");
        if (catalog_.FindSharded(schema ? std::optional<std::string>(schema->get<std::string>()) : std::nullopt,
                                 name) != nullptr) {
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
      if (!star && name_of(fields.back()) != kShardKeyColumn) continue;
      if (fields.size() == 1 && (!star || targets)) return true;
      if (fields.size() == 2) {
        if (sharded.contains(name_of(fields.front())) && (!star || targets)) return true;
      }
    }
    return false;
  }

  void RefuseUnsupportedShapes() {
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
      if (!on && (Field(select_, "groupClause") != nullptr || !HasShardKey(select_.at("targetList"), true))) {
        Refuse(SelectKeywordLocation(), "DISTINCT over every shard",
               "without customer_id among its columns (of a table that no outer join can make NULL), the same row "
               "may come from several shards, and removing duplicates across shards is not supported yet",
               "select customer_id too, or GROUP BY the selected columns instead (groups are merged across shards)");
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

  bool ContainsAggregate(const json& node) const {
    bool found = false;
    Walk(node, [&](const json& call) { found = found || catalog_.IsAggregate(FunctionName(call)); });
    return found;
  }

  bool HasAggregates() const {
    if (Field(select_, "groupClause") != nullptr || Field(select_, "havingClause") != nullptr) return true;
    for (const char* key : {"targetList", "sortClause"}) {
      if (const json* list = Field(select_, key); list != nullptr && ContainsAggregate(*list)) return true;
    }
    return false;
  }

  // ---- the text of the clauses ----

  [[nodiscard]] bool IsChar(std::size_t t, char c) const {
    return t < parsed_.tokens.size() && parsed_.tokens[t].kind == static_cast<unsigned char>(c);
  }
  [[nodiscard]] std::string Word(std::size_t t) const {
    return t < parsed_.tokens.size() ? Upper(parsed_.TokenText(parsed_.tokens[t])) : std::string();
  }

  void SplitClauses() {
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
        start(select_list_, t + 1);
      } else if (word == "FROM") {
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

  [[nodiscard]] std::string Text(std::size_t begin, std::size_t end) const {
    if (begin >= end) return {};
    const auto from = static_cast<std::size_t>(parsed_.tokens[begin].start);
    const auto to = static_cast<std::size_t>(parsed_.tokens[end - 1].end);
    return parsed_.text.substr(from, to - from);
  }
  [[nodiscard]] std::string Text(const Range& r) const { return Text(r.begin, r.end); }

  // A clause's items split at its top-level commas.
  [[nodiscard]] std::vector<Range> Items(const Range& clause) const {
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

  // ---- plain rows ----

  // Each shard returns its rows in the statement's order, at most
  // OFFSET + LIMIT of them; the merge sorts them all by the same keys (the
  // merge engine's type and collation rules), then applies OFFSET and LIMIT.
  ScatterPlan PlanConcatenation() const {
    ScatterPlan plan;
    const json* sort = Field(select_, "sortClause");
    const json* limit = Field(select_, "limitCount");
    const json* offset = Field(select_, "limitOffset");
    if (sort == nullptr && limit == nullptr && offset == nullptr) {
      plan.shard_sql = parsed_.text;
      return plan;
    }
    RowOrder order;
    if (limit != nullptr) plan.limit_param = LimitParam(*limit, "LIMIT");
    if (offset != nullptr) plan.offset_param = LimitParam(*offset, "OFFSET");
    if (limit != nullptr && plan.limit_param == 0) order.limit = LimitValue(*limit, "LIMIT");
    if (offset != nullptr && plan.offset_param == 0) order.offset = LimitValue(*offset, "OFFSET").value_or(0);
    const json& targets = select_.at("targetList");
    bool star = false;
    for (const json& t : targets) {
      const json& value = t.at("ResTarget").at("val");
      star = star || (value.contains("ColumnRef") && value.at("ColumnRef").at("fields").back().contains("A_Star"));
    }
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
            const std::string display =
                target.contains("name") ? target.at("name").get<std::string>() : DefaultName(target.at("val"));
            if ((bare && display == *bare) || WithoutLocations(target.at("val")) == tree) item = i;
          }
        }
        std::string expression;
        if (item) {
          key.column = *item;
          expression = ItemText(items[*item], targets[*item].at("ResTarget").contains("name"));
        } else {
          expression = SortItemText(sort_items.at(s));
          key.hidden = true;
          key.column = add_hidden(expression);
        }
        // The collation the shard sorted it in: C (bytewise) or refused.
        key.collation_column =
            add_hidden(fmt::format("NULLIF(pg_collation_for(({})::text), '\"default\"')", expression));
        order.keys.push_back(key);
      }
    }
    const std::size_t select_end = static_cast<std::size_t>(parsed_.tokens[select_list_.end - 1].end);
    const std::size_t body_end =
        tail_.present ? static_cast<std::size_t>(parsed_.tokens[tail_.begin].start) : parsed_.text.size();
    plan.shard_sql =
        parsed_.text.substr(0, select_end) + hidden + parsed_.text.substr(select_end, body_end - select_end);
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

  // An ORDER BY item's expression, without ASC/DESC and NULLS FIRST/LAST.
  [[nodiscard]] std::string SortItemText(const Range& item) const {
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

  // ---- aggregates ----

  struct Output {
    std::string name;  // the merged column's name: "_c1".. (output names may repeat in SQL)
    json tree;         // the expression without locations
    bool key = false;
    std::string display;  // the select list's name for it, as PostgreSQL names it
  };

  // PostgreSQL's name for an unaliased output column (FigureColname).
  static std::string DefaultName(const json& expression) {
    if (!expression.is_object() || expression.empty()) return "?column?";
    const std::string type = expression.begin().key();
    const json& body = expression.begin().value();
    if (type == "ColumnRef") {
      const json& fields = body.at("fields");
      if (!fields.empty() && fields.back().contains("String")) return fields.back().at("String").value("sval", "");
    } else if (type == "FuncCall") {
      return FunctionName(body);
    } else if (type == "TypeCast") {
      std::string inner = DefaultName(body.at("arg"));
      if (inner != "?column?") return inner;
      const json* names = Field(body.at("typeName"), "names");
      if (names != nullptr && !names->empty() && names->back().contains("String")) {
        return names->back().at("String").value("sval", "?column?");
      }
    } else if (type == "CaseExpr") {
      return "case";
    } else if (type == "CoalesceExpr") {
      return "coalesce";
    }
    return "?column?";
  }

  // The text of a select-list item without its alias.
  [[nodiscard]] std::string ItemText(const Range& item, bool aliased) const {
    std::size_t end = item.end;
    if (aliased && end > item.begin) {
      --end;
      if (end > item.begin && Word(end - 1) == "AS") --end;
    }
    return Text(item.begin, end);
  }

  std::optional<std::int64_t> Integer(const json& node, const char* what) const {
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

  [[nodiscard]] std::string TokenAt(int location) const {
    const std::size_t t = parsed_.TokenAt(location);
    return t < parsed_.tokens.size() ? std::string(parsed_.TokenText(parsed_.tokens[t])) : std::string();
  }

  // The text of a function call starting at `location`: its name, the
  // parenthesised arguments and a FILTER (...) after them.
  [[nodiscard]] std::string CallText(int location) const {
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
    return Text(begin, end);
  }

  ScatterPlan PlanAggregates() {
    AggregateQuery query = AggregateQuery::FromSql(Text(from_));
    if (where_.present) query.Where(Text(where_));

    const json& targets = select_.at("targetList");
    const std::vector<Range> items = Items(select_list_);
    if (items.size() != targets.size()) {
      Refuse(-1, "the select list", "its items could not be told apart", "simplify the select list");
    }
    // GROUP BY items as expressions: a position means that select-list item's.
    std::vector<json> group_trees;
    std::vector<std::string> group_texts;
    if (const json* group = Field(select_, "groupClause"); group != nullptr) {
      const std::vector<Range> group_items = Items(group_);
      for (std::size_t g = 0; g < group->size(); ++g) {
        const json& item = (*group)[g];
        if (const auto position = Integer(item, "GROUP BY"); position) {
          if (*position < 1 || static_cast<std::size_t>(*position) > targets.size()) {
            Refuse(LocationOf(item), fmt::format("GROUP BY {}", *position), "the select list has no such position",
                   fmt::format("use 1 to {}", targets.size()));
          }
          const json& target = targets[static_cast<std::size_t>(*position - 1)].at("ResTarget");
          group_trees.push_back(WithoutLocations(target.at("val")));
          group_texts.push_back(ItemText(items[static_cast<std::size_t>(*position - 1)], target.contains("name")));
          continue;
        }
        if (ContainsAggregate(item)) {
          Refuse(LocationOf(item), "an aggregate in GROUP BY", "PostgreSQL does not allow it either",
                 "group by columns or expressions of them");
        }
        group_trees.push_back(WithoutLocations(ResolveOutputAlias(item, targets)));
        group_texts.push_back(g < group_items.size() ? Text(group_items[g]) : std::string());
      }
    }
    const auto group_index = [&](const json& tree) -> std::optional<std::size_t> {
      for (std::size_t g = 0; g < group_trees.size(); ++g) {
        if (group_trees[g] == tree) return g;
      }
      return std::nullopt;
    };

    std::vector<bool> group_selected(group_trees.size(), false);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const json& target = targets[i].at("ResTarget");
      const json& value = target.at("val");
      const bool aliased = target.contains("name");
      Output out{fmt::format("_c{}", i + 1), WithoutLocations(value), false,
                 aliased ? target.at("name").get<std::string>() : DefaultName(value)};
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
      } else if (ContainsAggregate(value)) {
        Refuse(LocationOf(value), fmt::format("the expression {}", ItemText(items[i], aliased)),
               "expressions over aggregates are not merged across shards yet (a shard's value of the expression is "
               "not the whole table's)",
               "select the aggregates themselves and compute the expression from the merged values");
      } else {
        Refuse(LocationOf(value), fmt::format("the column {}", ItemText(items[i], aliased)),
               "it is neither in GROUP BY nor an aggregate", "add it to GROUP BY or aggregate it");
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

  // GROUP BY name: an input column first, as PostgreSQL resolves it; a
  // select-list alias only when no table of the FROM clause has the column.
  json ResolveOutputAlias(const json& item, const json& targets) const {
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

  // Whether a table of the FROM clause has (or may have: columns not known) the column.
  bool FromMayHaveColumn(const std::string& column) const {
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

  void AddAggregate(AggregateQuery& query, const json& value, const std::string& text, const std::string& name) {
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

  // The merged column holding an expression of HAVING or ORDER BY: a
  // selected one, or a new hidden one.
  std::string ColumnFor(AggregateQuery& query, const json& expression) {
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
    Refuse(location, fmt::format("the expression at \"{}\"", TokenAt(location)),
           ContainsAggregate(expression) ? "expressions over aggregates are not merged across shards yet"
                                         : "it is neither a selected column, a GROUP BY expression nor an aggregate",
           "order by or filter on selected columns, GROUP BY expressions or aggregates");
  }

  void AddHaving(AggregateQuery& query, const json& having) {
    if (const json* both = Field(having, "BoolExpr"); both != nullptr && both->value("boolop", "") == "AND_EXPR") {
      for (const json& term : both->at("args")) AddHaving(query, term);
      return;
    }
    const int location = LocationOf(having);
    const auto refuse = [&] {
      Refuse(location, "this HAVING condition",
             "HAVING is merged for `aggregate op constant` terms joined by AND (op one of = <> < <= > >=, or IS [NOT] "
             "NULL)",
             "write HAVING that way, or filter the merged rows yourself");
    };
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
    if (!value) refuse();
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

  // An integer, decimal or string constant, from its tokens.
  std::optional<Value> ConstantValue(const json& node) const {
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

  void AddOrderBy(AggregateQuery& query, const json& sort, const json& targets) {
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

  static std::optional<std::string> BareName(const json& node) {
    if (!node.contains("ColumnRef")) return std::nullopt;
    const json& fields = node.at("ColumnRef").at("fields");
    if (fields.size() != 1 || !fields.front().contains("String")) return std::nullopt;
    return fields.front().at("String").value("sval", "");
  }

  // The merged column of the select-list item named so; PostgreSQL's error
  // when two are.
  [[nodiscard]] std::optional<std::string> SelectedAs(const std::string& display, int location) const {
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

  // LIMIT $n / OFFSET $n: n (bound at execution), else 0. A parameter used
  // elsewhere in the statement too may have another type there: refused.
  int LimitParam(const json& node, const char* what) const {
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

  std::optional<std::int64_t> LimitValue(const json& node, const char* what) const {
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

  const ParsedStatement& parsed_;
  const SqlCatalog& catalog_;
  const json& select_;
  Range select_list_, from_, where_, group_, having_, order_, tail_;
  std::size_t first_keyword_ = 0;
  std::vector<Output> outputs_;  // the select list's, then hidden ones
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

}  // namespace

std::string ScatterPlan::DescribeMerge() const {
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
  if (offset_param > 0) out += fmt::format(", OFFSET ${}", offset_param);
  if (rows->offset > 0) out += fmt::format(", OFFSET {}", rows->offset);
  if (limit_param > 0) out += fmt::format(", LIMIT ${}", limit_param);
  if (rows->limit) out += fmt::format(", LIMIT {}", *rows->limit);
  return out;
}

ScatterPlan PlanScatter(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  return ScatterPlanner(parsed, catalog).Run();
}

}  // namespace shardkit::sql
