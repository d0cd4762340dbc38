#include "sql/gather_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/sql_text.hpp"
#include "sql/analyzer.hpp"
#include "sql/extent.hpp"
#include "sql/router.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

using detail::Field;
using detail::StringValue;
using json = nlohmann::json;

// A sharded table's reference in the text: the bytes of its (qualified)
// name, replaced by the gathered rows.
struct TableReference {
  int start = 0;
  int end = 0;
  std::size_t table = 0;  // index in GatherPlan::tables
  bool aliased = false;
  std::string relname;
  std::string display;  // as written: "orders", "public.orders"
  const SqlTable* sharded = nullptr;
};

// Node types a filter may hold and still mean the same on every shard (a
// column, a function call and a parameter are checked on their own).
const std::set<std::string> kFilterNodes = {
    "A_Expr",   "BoolExpr",     "A_Const",    "TypeCast",      "TypeName",  "NullTest",   "BooleanTest",   "CaseExpr",
    "CaseWhen", "CoalesceExpr", "MinMaxExpr", "A_ArrayExpr",   "RowExpr",   "String",     "Integer",       "Float",
    "Boolean",  "BitString",    "List",       "A_Indirection", "A_Indices", "NullIfExpr", "CollateClause", "ParamRef"};

void CountParameters(const json& node, std::map<int, int>& uses) {
  if (node.is_array()) {
    for (const json& element : node) CountParameters(element, uses);
    return;
  }
  if (!node.is_object()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it.key() == "ParamRef") ++uses[it.value().value("number", 0)];
    CountParameters(it.value(), uses);
  }
}

// The top-level WHERE's conjuncts.
void Conjuncts(const json& node, std::vector<const json*>& out) {
  if (const json* b = Field(node, "BoolExpr"); b != nullptr && b->value("boolop", "") == "AND_EXPR") {
    for (const json& arg : b->at("args")) Conjuncts(arg, out);
    return;
  }
  out.push_back(&node);
}

class GatherPlanner {
 public:
  GatherPlanner(const ParsedStatement& parsed, const SqlCatalog& catalog) : parsed_(parsed), catalog_(catalog) {}

  // False: not gathered.
  bool Collect() {
    if (parsed_.tree.begin().key() != "SelectStmt") return false;
    CollectCteNames(parsed_.tree);
    if (!Walk(parsed_.tree) || references_.empty()) return false;
    OrderByText();
    PushFilters();
    return true;
  }

  GatherPlan Build(int parameter_count) const {
    GatherPlan plan;
    plan.tables = tables_;
    plan.first_table_param = parameter_count + 1;
    std::string arrays;
    std::string columns;
    plan.shard_params = shard_params_;
    for (std::size_t i = 0; i < tables_.size(); ++i) {
      const std::vector<std::string>& filters = filters_[i];
      const std::string row = filters.empty() ? "_t" : row_names_[i];
      std::string where;
      for (const std::string& filter : filters)
        where += fmt::format("{}({})", where.empty() ? " WHERE " : " AND ", filter);
      arrays += fmt::format("{}ARRAY(SELECT {} FROM {} AS {}{} LIMIT $1) AS _g{}", i == 0 ? "" : ", ", row, tables_[i],
                            row, where, i + 1);
      columns += fmt::format("{}_g{}, pg_catalog.cardinality(_g{})", i == 0 ? "" : ", ", i + 1, i + 1);
    }
    // OFFSET 0 keeps the subquery from being flattened: flattened, each use
    // of _gN (the array and its cardinality) would build the array again.
    plan.shard_sql = fmt::format("SELECT {} FROM (SELECT {} OFFSET 0) AS _g", columns, arrays);
    // Replaced from the end, so that earlier offsets stay true.
    std::vector<TableReference> references = references_;
    std::sort(references.begin(), references.end(),
              [](const TableReference& a, const TableReference& b) { return a.start > b.start; });
    std::string text = parsed_.text;
    for (const TableReference& r : references) {
      std::string rows = fmt::format("(SELECT * FROM pg_catalog.unnest(${}::{}[]))",
                                     plan.first_table_param + static_cast<int>(r.table), tables_[r.table]);
      // A FROM subquery needs an alias: the table's name, which its columns are qualified by.
      if (!r.aliased) rows += " AS " + shardkit::detail::QuoteIdentifier(r.relname);
      text.replace(static_cast<std::size_t>(r.start), static_cast<std::size_t>(r.end - r.start), rows);
    }
    plan.finish_sql = std::move(text);
    return plan;
  }

  [[nodiscard]] const std::vector<std::string>& ShardedDisplays() const { return displays_; }
  [[nodiscard]] const std::vector<std::string>& ReferenceDisplays() const { return reference_displays_; }

 private:
  void CollectCteNames(const json& node) {
    if (node.is_array()) {
      for (const json& element : node) CollectCteNames(element);
      return;
    }
    if (!node.is_object()) return;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == "CommonTableExpr") cte_names_.insert(it.value().value("ctename", ""));
      CollectCteNames(it.value());
    }
  }

  bool Walk(const json& node) {
    if (node.is_array()) {
      return std::all_of(node.begin(), node.end(), [&](const json& element) { return Walk(element); });
    }
    if (!node.is_object()) return true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string& key = it.key();
      const json& value = it.value();
      // Locks rows of several shards; creates a table; writes.
      if (key == "lockingClause" || key == "intoClause") return false;
      if (key == "InsertStmt" || key == "UpdateStmt" || key == "DeleteStmt" || key == "RangeTableSample") {
        return false;
      }
      if (key == "FuncCall" && !FunctionGathers(value)) return false;
      if (key == "RangeVar") {
        if (!AddTable(value)) return false;
        continue;
      }
      if (!Walk(value)) return false;
    }
    return true;
  }

  // The tree's objects are walked in key order: the tables renumbered in
  // the order the text first names them.
  void OrderByText() {
    std::vector<std::size_t> order(tables_.size());
    std::vector<int> first(tables_.size(), std::numeric_limits<int>::max());
    for (const TableReference& r : references_) first[r.table] = std::min(first[r.table], r.start);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first[a] < first[b]; });
    std::vector<std::size_t> renumbered(order.size());
    std::vector<std::string> tables;
    std::vector<std::string> displays;
    for (std::size_t i = 0; i < order.size(); ++i) {
      renumbered[order[i]] = i;
      tables.push_back(tables_[order[i]]);
      displays.push_back(displays_[order[i]]);
    }
    for (TableReference& r : references_) {
      r.table = renumbered[r.table];
      if (r.start == first[order[r.table]]) displays[r.table] = r.display;
    }
    tables_ = std::move(tables);
    displays_ = std::move(displays);
  }

  bool FunctionGathers(const json& call) const {
    const json& names = call.at("funcname");
    const std::optional<std::string> name = names.empty() ? std::nullopt : StringValue(names.back());
    if (!name) return true;
    // Each shard's own value (sequences, settings): not the one server's.
    static const std::set<std::string> kPerServer = {"set_config", "nextval", "setval", "currval", "lastval"};
    if (kPerServer.contains(*name)) return false;
    if (!catalog_.IsKnownFunction(*name)) {
      throw NotInCatalog(Refusal(parsed_.text, call.value("location", -1), fmt::format("the function {}", *name),
                                 "the shards have no function of that name",
                                 "create it on every shard with a migration (shardctl migrate), or check its name"));
    }
    // It may read sharded tables where the statement runs: one shard's rows.
    return !catalog_.IsUserFunction(*name);
  }

  bool AddTable(const json& range_var) {
    const json* schema_node = Field(range_var, "schemaname");
    const std::optional<std::string> schema =
        schema_node != nullptr ? std::optional<std::string>(schema_node->get<std::string>()) : std::nullopt;
    const std::string relname = range_var.value("relname", "");
    const bool names_cte = !schema && cte_names_.contains(relname);
    const SqlTable* sharded = catalog_.FindSharded(schema, relname);
    if (names_cte) return sharded == nullptr && catalog_.FindReference(schema, relname) == nullptr;
    const std::string display = schema ? *schema + "." + relname : relname;
    if (sharded == nullptr) {
      if (catalog_.FindReference(schema, relname) == nullptr) return false;
      if (std::find(reference_displays_.begin(), reference_displays_.end(), display) == reference_displays_.end()) {
        reference_displays_.push_back(display);
      }
      return true;
    }
    // ONLY leaves the name's place unchanged but the rows would not be.
    if (!range_var.value("inh", false)) return false;  // the JSON leaves out a false inh
    TableReference reference;
    reference.relname = relname;
    reference.display = display;
    reference.aliased = Field(range_var, "alias") != nullptr;
    reference.sharded = sharded;
    // The name's tokens: name, or schema.name (a catalog.schema.name is refused by the server).
    const int location = range_var.value("location", -1);
    std::size_t i = parsed_.TokenAt(location);
    if (location < 0 || i >= parsed_.tokens.size() || parsed_.tokens[i].start != location) return false;
    while (i + 2 < parsed_.tokens.size() && parsed_.TokenText(parsed_.tokens[i + 1]) == ".") i += 2;
    reference.start = location;
    reference.end = parsed_.tokens[i].end;
    // `orders *` (inheritance spelled out) would follow the subquery.
    if (i + 1 < parsed_.tokens.size() && parsed_.TokenText(parsed_.tokens[i + 1]) == "*") return false;
    const std::string qualified = fmt::format("{}.{}", shardkit::detail::QuoteIdentifier(sharded->schema),
                                              shardkit::detail::QuoteIdentifier(sharded->name));
    const auto found = std::find(tables_.begin(), tables_.end(), qualified);
    reference.table = static_cast<std::size_t>(found - tables_.begin());
    if (found == tables_.end()) {
      tables_.push_back(qualified);
      displays_.push_back(display);
    }
    references_.push_back(std::move(reference));
    return true;
  }

  // A top-level WHERE conjunct that reads only one sharded table's columns
  // runs on the shards too, so that only the rows that can pass it are
  // shipped: the table is named once, in the statement's own FROM and on
  // no side an outer join fills with NULLs, and the conjunct holds columns
  // of it, constants, parameters used nowhere else and IMMUTABLE functions
  // (its value is then the same on every server). The statement still
  // applies the whole WHERE where it runs.
  void PushFilters() {
    filters_.assign(tables_.size(), {});
    row_names_.assign(tables_.size(), {});
    const json& select = parsed_.tree.begin().value();
    if (select.value("op", "SETOP_NONE") != "SETOP_NONE") return;
    const json* from = Field(select, "fromClause");
    const json* where = Field(select, "whereClause");
    if (from == nullptr || where == nullptr) return;
    std::map<int, std::string> visible;  // a RangeVar's location -> the name its columns are qualified by
    for (const json& item : *from) CollectFilterable(item, false, visible);
    const bool only_item = from->size() == 1 && Field(from->at(0), "RangeVar") != nullptr;
    std::vector<int> references(tables_.size(), 0);
    for (const TableReference& r : references_) ++references[r.table];
    std::map<int, int> parameter_uses;
    CountParameters(parsed_.tree, parameter_uses);
    std::vector<const json*> conjuncts;
    Conjuncts(*where, conjuncts);
    for (const TableReference& r : references_) {
      const auto name = visible.find(r.start);
      if (references[r.table] != 1 || name == visible.end()) continue;
      // `SELECT o FROM orders AS o` must name the row, not a column.
      if (r.sharded->columns.empty() || r.sharded->HasColumn(name->second)) continue;
      for (const json* conjunct : conjuncts) {
        if (!Filters(*conjunct, name->second, only_item)) continue;
        std::map<int, int> uses;
        CountParameters(*conjunct, uses);
        const bool own_parameters = std::all_of(
            uses.begin(), uses.end(), [&](const auto& use) { return parameter_uses[use.first] == use.second; });
        const std::optional<TokenRange> extent = ExpressionExtent(parsed_, *conjunct);
        if (!own_parameters || !extent) continue;
        filters_[r.table].push_back(FilterText(*extent));
      }
      if (!filters_[r.table].empty()) row_names_[r.table] = shardkit::detail::QuoteIdentifier(name->second);
    }
  }

  // The tables of a FROM item whose rows no outer join fills with NULLs,
  // by the name their columns are qualified with.
  static void CollectFilterable(const json& item, bool nullable, std::map<int, std::string>& visible) {
    if (const json* range_var = Field(item, "RangeVar"); range_var != nullptr) {
      const json* alias = Field(*range_var, "alias");
      if (nullable || (alias != nullptr && Field(*alias, "colnames") != nullptr)) return;
      visible[range_var->value("location", -1)] =
          alias != nullptr ? alias->value("aliasname", "") : range_var->value("relname", "");
      return;
    }
    const json* join = Field(item, "JoinExpr");
    // An aliased join hides its tables' names.
    if (join == nullptr || Field(*join, "alias") != nullptr) return;
    const std::string type = join->value("jointype", "");
    CollectFilterable(join->at("larg"), nullable || type == "JOIN_RIGHT" || type == "JOIN_FULL", visible);
    CollectFilterable(join->at("rarg"), nullable || type == "JOIN_LEFT" || type == "JOIN_FULL", visible);
  }

  // The node reads only `name`'s columns (unqualified ones too when it is
  // the only FROM item) and means the same on every server.
  bool Filters(const json& node, const std::string& name, bool only_item) const {
    if (node.is_array()) {
      return std::all_of(node.begin(), node.end(), [&](const json& e) { return Filters(e, name, only_item); });
    }
    if (!node.is_object()) return true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string& key = it.key();
      if (key == "ColumnRef") {
        const json& fields = it.value().at("fields");
        const bool named = std::all_of(fields.begin(), fields.end(), [](const json& f) { return StringValue(f); });
        if (!named || fields.empty() || fields.size() > 2) return false;
        if (fields.size() == 1 ? !only_item : *StringValue(fields.front()) != name) return false;
        continue;
      }
      if (key == "FuncCall") {
        const json& call = it.value();
        const json& names = call.at("funcname");
        const std::optional<std::string> function = names.empty() ? std::nullopt : StringValue(names.back());
        const bool built_in =
            names.size() == 1 || StringValue(names.front()) == std::optional<std::string>("pg_catalog");
        if (!function || !built_in || !catalog_.IsImmutableFunction(*function) || catalog_.IsAggregate(*function) ||
            Field(call, "over") != nullptr) {
          return false;
        }
      } else if (!key.empty() && std::isupper(static_cast<unsigned char>(key.front())) != 0 &&
                 !kFilterNodes.contains(key)) {
        return false;
      }
      if (!Filters(it.value(), name, only_item)) return false;
    }
    return true;
  }

  // A conjunct's text with its parameters renumbered for the shards'
  // statement: $1 is the bound, the statement's own follow.
  std::string FilterText(TokenRange extent) {
    const int begin = parsed_.tokens[extent.begin].start;
    std::string text;
    int copied = begin;
    for (std::size_t i = extent.begin; i < extent.end; ++i) {
      const std::string_view token = parsed_.TokenText(parsed_.tokens[i]);
      if (token.size() < 2 || token.front() != '$' ||
          !std::all_of(token.begin() + 1, token.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        continue;
      }
      const int number = std::stoi(std::string(token.substr(1)));
      auto at = std::find(shard_params_.begin(), shard_params_.end(), number);
      if (at == shard_params_.end()) at = shard_params_.insert(shard_params_.end(), number);
      text.append(parsed_.text, static_cast<std::size_t>(copied),
                  static_cast<std::size_t>(parsed_.tokens[i].start - copied));
      text += fmt::format("${}", 2 + (at - shard_params_.begin()));
      copied = parsed_.tokens[i].end;
    }
    const int end = parsed_.tokens[extent.end - 1].end;
    text.append(parsed_.text, static_cast<std::size_t>(copied), static_cast<std::size_t>(end - copied));
    return text;
  }

  const ParsedStatement& parsed_;
  const SqlCatalog& catalog_;
  std::set<std::string> cte_names_;
  std::vector<std::string> tables_;
  std::vector<std::string> displays_;
  std::vector<std::string> reference_displays_;
  std::vector<TableReference> references_;
  // Per table: the conjuncts its shards apply, and the name they qualify its columns by.
  std::vector<std::vector<std::string>> filters_;
  std::vector<std::string> row_names_;
  std::vector<int> shard_params_;  // the statement's parameters the filters use, in the shards' order
};

}  // namespace

std::shared_ptr<const SqlPlan> PlanGather(const ParsedStatement& parsed, const SqlCatalog& catalog,
                                          const SqlError& why) {
  auto plan = std::make_shared<SqlPlan>();
  plan->text = parsed.text;
  plan->key_column = catalog.KeyColumn();
  plan->key_type = catalog.KeyType();
  plan->kind = SqlPlanInfo::Kind::kScatter;
  plan->statement = "SELECT";
  detail::CountParameters(parsed.tree, *plan);
  GatherPlanner planner(parsed, catalog);
  if (!planner.Collect()) return nullptr;
  plan->sharded_tables = planner.ShardedDisplays();
  plan->reference_tables = planner.ReferenceDisplays();
  GatherPlan gather = planner.Build(plan->parameter_count);
  gather.why = why.construct().empty() ? why.reason() : fmt::format("{}: {}", why.construct(), why.reason());
  plan->gather = std::make_shared<const GatherPlan>(std::move(gather));
  return plan;
}

}  // namespace shardkit::sql
