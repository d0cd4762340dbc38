// The order-statistics shape (percentile_shape.hpp): recognised from the
// parse tree, run by ExactPercentiles.
#include "sql/percentile_shape.hpp"

#include <fmt/format.h>

#include <charconv>
#include <set>
#include <utility>

#include "shardkit/errors.hpp"
#include "sql/extent.hpp"
#include "sql/scatter_planner.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

using detail::Field;
using detail::FunctionName;
using detail::LocationOf;
using json = nlohmann::json;

bool IsPercentile(const std::string& name) {
  return name == "percentile_cont" || name == "percentile_disc";
}

// Whether every column an expression reads is the shard key (at least one).
bool ReadsOnlyTheShardKey(const json& node, const std::string& key, bool& any) {
  if (node.is_object()) {
    if (const json* column = Field(node, "ColumnRef"); column != nullptr) {
      const json& last = column->at("fields").back();
      if (!(last.contains("String") && last.at("String").value("sval", "") == key)) return false;
      any = true;
      return true;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!ReadsOnlyTheShardKey(it.value(), key, any)) return false;
    }
  } else if (node.is_array()) {
    for (const json& item : node) {
      if (!ReadsOnlyTheShardKey(item, key, any)) return false;
    }
  }
  return true;
}

// count(DISTINCT x) whose x reads other columns than the shard key (a
// function of the key alone never spans shards: the ordinary merge answers
// it).
bool IsCountDistinctOffKey(const json& call, const std::string& key) {
  if (FunctionName(call) != "count" || !call.value("agg_distinct", false)) return false;
  const json* args = Field(call, "args");
  if (args == nullptr || args->size() != 1) return true;
  bool any = false;
  return !(ReadsOnlyTheShardKey(args->front(), key, any) && any);
}

bool IsOrderStatistic(const json& value, const std::string& key) {
  const json* call = Field(value, "FuncCall");
  return call != nullptr && (IsPercentile(FunctionName(*call)) || IsCountDistinctOffKey(*call, key));
}

bool ContainsParam(const json& node) {
  if (node.is_object()) {
    if (node.contains("ParamRef")) return true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (ContainsParam(it.value())) return true;
    }
  } else if (node.is_array()) {
    for (const json& item : node) {
      if (ContainsParam(item)) return true;
    }
  }
  return false;
}

void CollectParams(const json& node, std::set<int>& out) {
  if (node.is_object()) {
    if (const json* p = Field(node, "ParamRef"); p != nullptr) out.insert(p->value("number", 0));
    for (auto it = node.begin(); it != node.end(); ++it) CollectParams(it.value(), out);
  } else if (node.is_array()) {
    for (const json& item : node) CollectParams(item, out);
  }
}

class Recogniser {
 public:
  explicit Recogniser(const PercentileCandidate& c) : c_(c) {}

  std::optional<PercentileShape> Run();

 private:
  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const {
    throw Refusal(c_.parsed.text, location, construct, reason, advice);
  }
  // The text of a call's value: after DISTINCT in count(DISTINCT x), after
  // ORDER BY in WITHIN GROUP (ORDER BY x), up to the closing parenthesis.
  std::string ValueText(int call_location, bool within_group) const;
  void AddStatistic(const json& call, const std::string& name, int location);

  const PercentileCandidate& c_;
  PercentileShape shape_;
};

std::string Recogniser::ValueText(int call_location, bool within_group) const {
  const auto& tokens = c_.parsed.tokens;
  const auto word = [&](std::size_t t) { return detail::Upper(c_.parsed.TokenText(tokens[t])); };
  std::size_t t = c_.parsed.TokenAt(call_location);
  // To the call's "(" (count) or the WITHIN GROUP's, then past DISTINCT / ORDER BY.
  if (within_group) {
    while (t + 1 < tokens.size() && !(word(t) == "WITHIN" && word(t + 1) == "GROUP")) ++t;
    t += 2;
  } else {
    while (t < tokens.size() && tokens[t].kind != '(') ++t;
  }
  if (t >= tokens.size() || tokens[t].kind != '(') return {};
  ++t;
  if (within_group) {
    if (t + 1 < tokens.size() && word(t) == "ORDER" && word(t + 1) == "BY") t += 2;
  } else if (t < tokens.size() && word(t) == "DISTINCT") {
    ++t;
  }
  const std::size_t first = t;
  int depth = 0;
  for (; t < tokens.size(); ++t) {
    const int kind = tokens[t].kind;
    if (kind == '(' || kind == '[') ++depth;
    if (kind == ')' || kind == ']') {
      if (depth == 0) break;
      --depth;
    }
  }
  std::size_t last = t;  // exclusive
  // A trailing ASC or NULLS FIRST|LAST (NULLs are ignored anyway).
  if (within_group && last >= first + 2 && word(last - 2) == "NULLS") last -= 2;
  if (within_group && last > first + 1 && word(last - 1) == "ASC") last -= 1;
  if (first >= last) return {};
  return c_.parsed.text.substr(static_cast<std::size_t>(tokens[first].start),
                               static_cast<std::size_t>(tokens[last - 1].end - tokens[first].start));
}

void Recogniser::AddStatistic(const json& call, const std::string& name, int location) {
  const std::string function = FunctionName(call);
  const std::string construct = fmt::format("{}(...)", function);
  if (call.contains("agg_filter")) {
    Refuse(location, construct + " FILTER (...)", "a FILTER on an exact percentile or count(DISTINCT) is not supported",
           "move the condition into the WHERE clause");
  }
  if (call.contains("over")) {
    Refuse(location, construct + " OVER (...)", "window functions are not answered over shards", "pin customer_id");
  }
  OrderStatisticColumn column;
  column.name = name;
  const json* args = Field(call, "args");
  if (function == "count") {
    column.kind = OrderStatistic::kCountDistinct;
    if (args == nullptr || args->size() != 1) {
      Refuse(location, "count(DISTINCT a, b)", "one argument only is answered", "count the distinct rows of one value");
    }
    if (call.contains("agg_order")) {
      Refuse(location, "count(DISTINCT ... ORDER BY ...)", "an ORDER BY inside count() is not supported", "drop it");
    }
    if (args->front().contains("RowExpr")) {
      Refuse(LocationOf(args->front()), "count(DISTINCT (a, b, ...))",
             "distinct rows of several values are not counted over shards",
             "count the distinct values of one expression (e.g. a || '/' || b), or pin customer_id");
    }
    column.value = ValueText(location, false);
  } else {
    column.kind = function == "percentile_cont" ? OrderStatistic::kPercentileCont : OrderStatistic::kPercentileDisc;
    const json* order = Field(call, "agg_order");
    if (!call.value("agg_within_group", false) || order == nullptr || order->size() != 1 || args == nullptr ||
        args->size() != 1) {
      Refuse(location, construct, "only the form " + function + "(fraction) WITHIN GROUP (ORDER BY value) is answered",
             "write it so, one fraction and one value");
    }
    const json& sort = order->front().at("SortBy");
    if (sort.value("sortby_dir", "SORTBY_DEFAULT") != "SORTBY_DEFAULT" &&
        sort.value("sortby_dir", "") != "SORTBY_ASC") {
      Refuse(location, construct + " WITHIN GROUP (ORDER BY ... DESC)", "only the ascending order is answered exactly",
             "write percentile(1 - f) in ascending order instead");
    }
    if (ContainsParam(sort.at("node"))) {
      Refuse(location, construct, "a parameter inside the value is not supported", "use a column or an expression");
    }
    column.value = ValueText(location, true);
    const json& fraction = args->front();
    int param = 0;
    if (const json* p = Field(fraction, "ParamRef"); p != nullptr) {
      param = p->value("number", 0);
    } else if (const json* constant = Field(fraction, "A_Const"); constant != nullptr) {
      if (!constant->value("isnull", false)) {
        std::string text;
        if (const json* f = Field(*constant, "fval"); f != nullptr) text = f->value("fval", "");
        if (const json* i = Field(*constant, "ival"); i != nullptr) text = std::to_string(i->value("ival", 0));
        double v = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size()) {
          Refuse(LocationOf(fraction), construct, "its fraction is not a number", "write a number between 0 and 1");
        }
        column.fraction = v;
      }
    } else {
      Refuse(LocationOf(fraction), construct, "its fraction is neither a number nor a parameter",
             "write the fraction as a number or $n (an array of fractions is not answered)");
    }
    shape_.fraction_params.resize(shape_.query.columns.size() + 1, 0);
    shape_.fraction_params.back() = param;
  }
  if (column.value.empty()) Refuse(location, construct, "its value could not be read", "simplify it");
  if (column.kind == OrderStatistic::kCountDistinct && ContainsParam(args->front())) {
    Refuse(location, construct, "a parameter inside the value is not supported", "use a column or an expression");
  }
  shape_.fraction_params.resize(shape_.query.columns.size() + 1, 0);
  shape_.query.columns.push_back(std::move(column));
}

std::optional<PercentileShape> Recogniser::Run() {
  const json& select = c_.select;
  const json* targets = Field(select, "targetList");
  if (targets == nullptr) return std::nullopt;
  bool found = false;
  for (const json& t : *targets) found = found || IsOrderStatistic(t.at("ResTarget").at("val"), c_.catalog.KeyColumn());
  if (!found) return std::nullopt;

  const int at = LocationOf(targets->front());
  const auto refuse_clause = [&](const char* key, const char* construct, const char* advice) {
    if (const json* node = Field(select, key); node != nullptr) {
      Refuse(LocationOf(*node), construct, "it is not supported next to exact percentiles and count(DISTINCT)", advice);
    }
  };
  refuse_clause("havingClause", "HAVING", "filter the rows returned instead");
  refuse_clause("distinctClause", "DISTINCT", "drop DISTINCT: GROUP BY keys are distinct already");
  if (c_.item_texts.size() != targets->size()) {
    Refuse(at, "the select list", "its items could not be told apart", "simplify the select list");
  }

  PercentileQuery& q = shape_.query;
  q.from = c_.from;
  q.where = c_.where;

  // GROUP BY: expressions (positions and aliases resolved).
  std::vector<json> group_trees;
  if (const json* group = Field(select, "groupClause"); group != nullptr) {
    for (std::size_t g = 0; g < group->size(); ++g) {
      const json& item = (*group)[g];
      if (const json* constant = Field(item, "A_Const"); constant != nullptr && constant->contains("ival")) {
        const int position = constant->at("ival").value("ival", 0);
        if (position < 1 || static_cast<std::size_t>(position) > targets->size()) {
          Refuse(LocationOf(item), fmt::format("GROUP BY {}", position), "the select list has no such position",
                 fmt::format("use 1 to {}", targets->size()));
        }
        const auto p = static_cast<std::size_t>(position - 1);
        group_trees.push_back(WithoutLocations((*targets)[p].at("ResTarget").at("val")));
        q.group_by.push_back({c_.item_texts[p], fmt::format("_group{}", g + 1)});
        continue;
      }
      group_trees.push_back(WithoutLocations(c_.resolve_alias(item)));
      if (g >= c_.group_texts.size()) Refuse(LocationOf(item), "GROUP BY", "its items could not be told apart", "");
      q.group_by.push_back({c_.group_texts[g], fmt::format("_group{}", g + 1)});
    }
  }
  // The select list: keys and order statistics only.
  std::vector<json> output_trees;
  for (std::size_t i = 0; i < targets->size(); ++i) {
    const json& target = (*targets)[i].at("ResTarget");
    const json& value = target.at("val");
    const std::string display = target.contains("name") ? target.at("name").get<std::string>() : c_.default_name(value);
    shape_.column_names.push_back(display);
    output_trees.push_back(WithoutLocations(value));
    std::optional<std::size_t> key;
    for (std::size_t g = 0; g < group_trees.size(); ++g) {
      if (group_trees[g] == output_trees.back()) key = g;
    }
    if (key) {
      shape_.result_columns.push_back(q.group_by[*key].name);
    } else if (IsOrderStatistic(value, c_.catalog.KeyColumn()) ||
               (value.contains("FuncCall") && FunctionName(value.at("FuncCall")) == "count" &&
                value.at("FuncCall").value("agg_distinct", false))) {
      const std::string name = fmt::format("_c{}", i + 1);
      AddStatistic(value.at("FuncCall"), name, LocationOf(value));
      shape_.result_columns.push_back(name);
    } else {
      Refuse(LocationOf(value), fmt::format("{} next to exact percentiles or count(DISTINCT)", c_.item_texts[i]),
             "a select list with percentile_cont/percentile_disc or count(DISTINCT) off the shard key holds only "
             "GROUP BY keys and those (other aggregates are merged by another method)",
             "run the other aggregates as a statement of their own");
    }
  }
  for (const auto& k : q.group_by) {
    for (const json& tree : group_trees) {
      if (ContainsParam(tree)) Refuse(at, "GROUP BY " + k.expression, "a parameter in a key is not supported", "");
    }
  }
  // ORDER BY: output names, positions, or expressions of the select list.
  if (const json* sort = Field(select, "sortClause"); sort != nullptr) {
    for (const json& item : *sort) {
      const json& by = item.at("SortBy");
      const json& node = by.at("node");
      std::optional<std::size_t> output;
      if (const json* constant = Field(node, "A_Const"); constant != nullptr && constant->contains("ival")) {
        const int position = constant->at("ival").value("ival", 0);
        if (position >= 1 && static_cast<std::size_t>(position) <= targets->size()) {
          output = static_cast<std::size_t>(position - 1);
        }
      } else if (const json* column = Field(node, "ColumnRef"); column != nullptr && column->at("fields").size() == 1 &&
                                                                column->at("fields").front().contains("String")) {
        const std::string name = column->at("fields").front().at("String").value("sval", "");
        for (std::size_t i = 0; i < shape_.column_names.size() && !output; ++i) {
          if (shape_.column_names[i] == name) output = i;
        }
      }
      if (!output) {
        const json tree = WithoutLocations(node);
        for (std::size_t i = 0; i < output_trees.size() && !output; ++i) {
          if (output_trees[i] == tree) output = i;
        }
        for (std::size_t g = 0; g < group_trees.size() && !output; ++g) {
          if (group_trees[g] == tree) {
            q.order_by.push_back({q.group_by[g].name, SortDirection::kAsc, NullsOrder::kDefault});
            output = shape_.column_names.size();  // a key not selected: sorted by its own column
          }
        }
      }
      if (!output) {
        Refuse(LocationOf(node), "this ORDER BY item", "it is neither a select-list column nor a GROUP BY key",
               "order by an output column's name or position");
      }
      const std::string dir = by.value("sortby_dir", "SORTBY_DEFAULT");
      if (dir == "SORTBY_USING") Refuse(LocationOf(node), "ORDER BY ... USING", "not supported", "use ASC or DESC");
      const std::string nulls = by.value("sortby_nulls", "SORTBY_NULLS_DEFAULT");
      SortKey key;
      key.direction = dir == "SORTBY_DESC" ? SortDirection::kDesc : SortDirection::kAsc;
      key.nulls = nulls == "SORTBY_NULLS_FIRST"  ? NullsOrder::kFirst
                  : nulls == "SORTBY_NULLS_LAST" ? NullsOrder::kLast
                                                 : NullsOrder::kDefault;
      if (*output < shape_.result_columns.size()) {
        key.column = shape_.result_columns[*output];
        q.order_by.push_back(key);
      } else {
        q.order_by.back().direction = key.direction;
        q.order_by.back().nulls = key.nulls;
      }
    }
  }
  if (const json* limit = Field(select, "limitCount"); limit != nullptr) q.limit = c_.limit_value(*limit, "LIMIT");
  if (const json* offset = Field(select, "limitOffset"); offset != nullptr) {
    q.offset = c_.limit_value(*offset, "OFFSET").value_or(0);
  }
  // Parameters only fractions use: the fill must still mention them.
  std::set<int> used;
  for (const char* key : {"fromClause", "whereClause"}) {
    if (const json* node = Field(select, key); node != nullptr) CollectParams(*node, used);
  }
  std::set<int> all;
  CollectParams(select, all);
  for (const int p : all) {
    if (!used.contains(p)) shape_.unused_params.push_back(p);
  }
  return std::move(shape_);
}

}  // namespace

std::string PercentileShape::Describe() const {
  std::string out = "exact order statistics by distributed selection (one snapshot per shard):";
  for (std::size_t i = 0; i < query.columns.size(); ++i) {
    const OrderStatisticColumn& c = query.columns[i];
    const int param = i < fraction_params.size() ? fraction_params[i] : 0;
    const std::string fraction = param > 0    ? fmt::format("${}", param)
                                 : c.fraction ? fmt::format("{}", *c.fraction)
                                              : std::string("NULL");
    out += i == 0 ? " " : ", ";
    if (c.kind == OrderStatistic::kCountDistinct) {
      out += fmt::format("count(DISTINCT {})", c.value);
    } else {
      out +=
          fmt::format("{}({}) of {}", c.kind == OrderStatistic::kPercentileCont ? "percentile_cont" : "percentile_disc",
                      fraction, c.value);
    }
  }
  if (!query.group_by.empty()) {
    out += "; by";
    for (std::size_t k = 0; k < query.group_by.size(); ++k) out += (k == 0 ? " " : ", ") + query.group_by[k].expression;
  }
  return out;
}

std::optional<PercentileShape> FindPercentileShape(const PercentileCandidate& candidate) {
  return Recogniser(candidate).Run();
}

SqlResult RunPercentileShape(ScatterGather& scatter, const PercentileShape& shape, const SqlParams& params,
                             const ScatterOptions& options) {
  PercentileQuery q = shape.query;
  q.params = params;
  q.label = options.label;
  for (const int p : shape.unused_params) {
    // Typed here as text, since nothing else in the fill types it.
    q.where = fmt::format("{}(${}::text IS NULL OR true)", q.where.empty() ? "" : "(" + q.where + ") AND ", p);
  }
  for (std::size_t i = 0; i < q.columns.size(); ++i) {
    const int p = i < shape.fraction_params.size() ? shape.fraction_params[i] : 0;
    if (p <= 0) continue;
    if (static_cast<std::size_t>(p) > params.size()) {
      throw Error(fmt::format("there is no parameter ${} ({} given)", p, params.size()));
    }
    const std::optional<std::string>& text = params[static_cast<std::size_t>(p - 1)];
    q.columns[i].fraction.reset();
    if (!text) continue;
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc{} || ptr != text->data() + text->size()) {
      throw Error(fmt::format("invalid input syntax for type double precision: \"{}\"", *text));
    }
    q.columns[i].fraction = v;
  }
  const PercentileResult r = ExactPercentiles(scatter, q, options);
  SqlResult out;
  out.columns = shape.column_names;
  std::vector<std::size_t> index;
  for (const std::string& name : shape.result_columns) {
    const auto i = r.ColumnIndex(name);
    if (!i) throw Error("exact percentiles: the result lacks column " + name);
    index.push_back(*i);
    out.types.push_back(TypeOidNamed(r.column_types[*i]));
  }
  for (const auto& row : r.rows) {
    auto& o = out.rows.emplace_back();
    for (const std::size_t i : index) {
      o.push_back(row[i].IsNull() ? std::nullopt : std::optional<std::string>(row[i].ToString()));
    }
  }
  out.rows_received = r.rows_shipped;
  out.affected = out.rows.size();
  out.plan.merge = fmt::format("{}; {} rounds, {} rows received ({} bytes), against {} rows for every value",
                               shape.Describe(), r.rounds, r.rows_shipped, r.bytes_shipped, r.rows_all_values);
  return out;
}

}  // namespace shardkit::sql
