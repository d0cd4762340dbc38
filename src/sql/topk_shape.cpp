// FindTopKShape: every condition or nothing; and TopKShape's query.
#include "sql/topk_shape.hpp"

#include <fmt/format.h>

#include <functional>
#include <limits>
#include <set>

#include "sql/analyzer.hpp"

namespace shardkit::sql {
namespace {

using json = nlohmann::json;
using detail::Field;

// A table of an inner-joined FROM clause and the name its columns are
// qualified by (the alias, else the relation's name).
struct FromTable {
  std::string name;
  const SqlTable* table = nullptr;
};

// The tables of a FROM clause made of table names, inner joins and
// commas, each with its columns' facts known; nullopt for anything else
// (outer joins make columns nullable, subqueries and functions have
// columns the catalog does not know, column aliases rename them).
std::optional<std::vector<FromTable>> InnerJoinedTables(const TopKCandidate& c) {
  const json* from = Field(c.select, "fromClause");
  if (from == nullptr) return std::nullopt;
  std::vector<FromTable> tables;
  bool ok = true;
  std::function<void(const json&)> visit = [&](const json& node) {
    if (const json* range = Field(node, "RangeVar"); range != nullptr) {
      const json* alias = Field(*range, "alias");
      if (alias != nullptr && alias->contains("colnames")) {
        ok = false;
        return;
      }
      const std::optional<std::string> schema =
          range->contains("schemaname") ? std::optional<std::string>(range->value("schemaname", "")) : std::nullopt;
      const std::string relname = range->value("relname", "");
      const SqlTable* table = c.catalog.FindSharded(schema, relname);
      if (table == nullptr) table = c.catalog.FindReference(schema, relname);
      if (table == nullptr || table->columns.empty() || table->facts.size() != table->columns.size()) {
        ok = false;
        return;
      }
      tables.push_back(FromTable{alias != nullptr ? alias->value("aliasname", "") : relname, table});
      return;
    }
    const json* join = Field(node, "JoinExpr");
    if (join == nullptr || join->value("jointype", "") != "JOIN_INNER" || join->contains("alias")) {
      ok = false;
      return;
    }
    visit(join->at("larg"));
    visit(join->at("rarg"));
  };
  for (const json& item : *from) {
    if (ok) visit(item);
  }
  if (!ok) return std::nullopt;
  return tables;
}

std::string QuotedName(const std::string& name) {
  std::string out = "\"";
  for (const char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + '"';
}

// A column reference (`col` or `t.col`) of one of `tables`, resolved as
// PostgreSQL resolves it, and its text quoted; nullopt when it is not
// exactly one known column.
struct ResolvedColumn {
  const SqlColumnFacts* facts = nullptr;
  std::string text;
};
std::optional<ResolvedColumn> ResolveColumn(const json& node, const std::vector<FromTable>& tables) {
  const json* ref = Field(node, "ColumnRef");
  if (ref == nullptr) return std::nullopt;
  std::vector<std::string> names;
  for (const json& f : ref->at("fields")) {
    if (!f.contains("String")) return std::nullopt;  // *
    names.push_back(f.at("String").value("sval", ""));
  }
  const SqlTable* found = nullptr;
  int matches = 0;
  if (names.size() == 1) {
    // Unqualified: the one table that has the column (a USING column is
    // in two: not taken).
    for (const FromTable& t : tables) {
      if (t.table->HasColumn(names[0])) {
        found = t.table;
        ++matches;
      }
    }
  } else if (names.size() == 2) {
    for (const FromTable& t : tables) {
      if (t.name == names[0]) {
        found = t.table;
        ++matches;
      }
    }
  } else {
    return std::nullopt;
  }
  if (matches != 1) return std::nullopt;
  const SqlColumnFacts* facts = found->Facts(names.back());
  if (facts == nullptr) return std::nullopt;
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ".") + QuotedName(n);
  return ResolvedColumn{facts, text};
}

bool IsIntegerType(unsigned type) {
  return type == kInt2Oid || type == kInt4Oid || type == kInt8Oid;
}

}  // namespace

std::optional<TopKShape> FindTopKShape(const TopKCandidate& c) {
  // Only these clauses (no HAVING, DISTINCT, WINDOW, WITH, FOR UPDATE,
  // INTO, GROUP BY DISTINCT...).
  static const std::set<std::string> kClauses = {"targetList",  "fromClause",  "whereClause",
                                                 "groupClause", "sortClause",  "limitCount",
                                                 "limitOffset", "limitOption", "op"};
  for (auto it = c.select.begin(); it != c.select.end(); ++it) {
    if (!kClauses.contains(it.key())) return std::nullopt;
  }
  if (c.select.value("op", "") != "SETOP_NONE" || c.select.value("limitOption", "") != "LIMIT_OPTION_COUNT") {
    return std::nullopt;
  }
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (!c.limit || *c.limit < 1 || c.offset < 0 || c.offset > kMax - *c.limit) return std::nullopt;
  const json& targets = c.select.at("targetList");
  const json* group = Field(c.select, "groupClause");
  // Two outputs, no hidden ones (a GROUP BY key not selected, an ORDER BY aggregate).
  if (targets.size() != 2 || c.outputs.size() != 2 || group == nullptr || group->size() != 1) return std::nullopt;
  const std::size_t key_at = c.outputs[0].key ? 0 : 1;
  const std::size_t sum_at = 1 - key_at;
  if (!c.outputs[key_at].key || c.outputs[sum_at].key) return std::nullopt;

  // ORDER BY the sum DESC, then the key ASC NULLS LAST: the order top-k ranks in.
  if (c.order.size() != 2) return std::nullopt;
  const TopKCandidate::Order& by_sum = c.order[0];
  const TopKCandidate::Order& by_key = c.order[1];
  if (by_sum.column != c.outputs[sum_at].name || by_sum.direction != SortDirection::kDesc) return std::nullopt;
  if (by_key.column != c.outputs[key_at].name || by_key.direction != SortDirection::kAsc ||
      by_key.nulls == NullsOrder::kFirst) {
    return std::nullopt;
  }

  // sum(column): PostgreSQL's sum, nothing around or inside the call.
  const json* call = Field(targets[sum_at].at("ResTarget").at("val"), "FuncCall");
  if (call == nullptr || c.catalog.IsUserFunction("sum")) return std::nullopt;
  for (auto it = call->begin(); it != call->end(); ++it) {
    if (it.key() != "funcname" && it.key() != "args" && it.key() != "funcformat" && it.key() != "location") {
      return std::nullopt;  // DISTINCT, FILTER, ORDER BY, *, VARIADIC, OVER
    }
  }
  std::vector<std::string> function;
  for (const json& n : call->at("funcname")) {
    function.push_back(n.contains("String") ? n.at("String").value("sval", "") : "");
  }
  if (function != std::vector<std::string>{"sum"} && function != std::vector<std::string>{"pg_catalog", "sum"}) {
    return std::nullopt;
  }
  const json* args = Field(*call, "args");
  if (args == nullptr || args->size() != 1) return std::nullopt;

  const std::optional<std::vector<FromTable>> tables = InnerJoinedTables(c);
  if (!tables) return std::nullopt;
  const auto key = ResolveColumn(targets[key_at].at("ResTarget").at("val"), *tables);
  const auto measure = ResolveColumn(args->front(), *tables);
  if (!key || !measure || !IsIntegerType(key->facts->type) || !IsIntegerType(measure->facts->type) ||
      !measure->facts->not_null) {
    return std::nullopt;
  }
  TopKShape shape;
  shape.from = c.from;
  if (c.where) shape.where = *c.where;
  shape.key = key->text;
  shape.measure = measure->text;
  shape.key_position = key_at;
  shape.key_type = key->facts->type;
  shape.sum_type = measure->facts->type == kInt8Oid ? kNumericOid : kInt8Oid;
  shape.limit = *c.limit;
  shape.offset = c.offset;
  shape.shard_sql = BuildTopKStatements(shape.Query({}, {}), true).all_partials;
  return shape;
}

TopKQuery TopKShape::Query(const SqlParams& params, const std::string& label) const {
  TopKQuery query;
  query.from = from;
  query.key = key;
  query.key_type = TopKKeyType::kBigint;
  query.measure = measure;
  query.where = where;
  query.params = params;
  query.k = K();
  query.label = label;
  return query;
}

std::string TopKShape::Describe() const {
  return fmt::format("exact top-k (auto) by sum({}) of {}, k = {}{}", measure, key, K(),
                     offset > 0 ? fmt::format(" (OFFSET {} LIMIT {})", offset, limit) : std::string());
}

}  // namespace shardkit::sql
