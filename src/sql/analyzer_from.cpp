// The Analyzer's FROM items and column references: which table a customer_id means (analyzer.hpp).
#include "sql/analyzer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "sql/sql_error_text.hpp"

namespace shardkit::sql::detail {

// ---- FROM items ----

std::optional<std::string> Analyzer::SchemaOf(const json& range_var) {
  const json* schema = Field(range_var, "schemaname");
  return schema != nullptr ? std::optional<std::string>(schema->get<std::string>()) : std::nullopt;
}

std::unique_ptr<FromItem> Analyzer::Leaf(Entry* entry) {
  auto item = std::make_unique<FromItem>();
  item->entry = entry;
  item->location = entry->location;
  item->entries.push_back(entry);
  return item;
}

Entry* Analyzer::NewEntry(Level& level, Entry::Kind kind, std::string name, std::string display, int location) {
  level.entries.push_back(std::make_unique<Entry>());
  Entry* e = level.entries.back().get();
  e->kind = kind;
  e->name = std::move(name);
  e->display = std::move(display);
  e->location = location;
  e->level = &level;
  return e;
}

std::string Analyzer::AliasOf(const json& node) {
  const json* alias = Field(node, "alias");
  return alias == nullptr ? std::string() : alias->value("aliasname", "");
}

Entry* Analyzer::AddTable(const json& range_var, Level& level, const CteScope* ctes, bool write_target) {
  seen_.insert(&range_var);
  const std::optional<std::string> schema = SchemaOf(range_var);
  const std::string relname = range_var.value("relname", "");
  const std::string display = schema ? *schema + "." + relname : relname;
  const std::string alias = AliasOf(range_var);
  const int location = range_var.value("location", -1);
  if (!schema && ctes != nullptr && ctes->Has(relname) && !write_target) {
    return NewEntry(level, Entry::Kind::kOther, alias.empty() ? relname : alias, relname, location);
  }
  if (const SqlTable* other = catalog_.FindOtherKeyed(schema, relname); other != nullptr) {
    throw OtherKeyRefusal(Refusal(
        parsed_.text, location, fmt::format("the table {}", display),
        fmt::format("it is sharded by {} ({}), and plain SQL reads the cluster's tables by one shard key, {} ({})",
                    other->key_column, SqlTypeName(other->key_type), catalog_.KeyColumn(),
                    SqlTypeName(catalog_.KeyType())),
        "read it through Cluster::Transact with its own key, or give the application's tables one key column"));
  }
  if (const SqlTable* sharded = catalog_.FindSharded(schema, relname); sharded != nullptr) {
    Entry* e = NewEntry(level, Entry::Kind::kSharded, alias.empty() ? relname : alias, display, location);
    e->has_key = Tri::kYes;
    e->node = NewNode();
    e->write_target = write_target;
    if (!write_target || plan_.statement != "INSERT") sharded_.push_back(e);
    if (std::find(plan_.sharded_tables.begin(), plan_.sharded_tables.end(), display) == plan_.sharded_tables.end()) {
      plan_.sharded_tables.push_back(display);
    }
    return e;
  }
  if (const SqlTable* reference = catalog_.FindReference(schema, relname); reference != nullptr) {
    if (write_target) {
      Refuse(location, fmt::format("a write to the reference table {}", display),
             "reference tables are full copies on every shard, and one statement is atomic on one shard only",
             "change reference tables with a migration applied to every shard (shardctl migrate)");
    }
    Entry* e = NewEntry(level, Entry::Kind::kReference, alias.empty() ? relname : alias, display, location);
    if (reference->columns.empty()) {
      e->has_key = Tri::kUnknown;
    } else if (reference->HasColumn(catalog_.KeyColumn())) {
      e->has_key = Tri::kYes;
      e->node = NewNode();
    } else {
      e->has_key = Tri::kNo;
    }
    if (std::find(plan_.reference_tables.begin(), plan_.reference_tables.end(), display) ==
        plan_.reference_tables.end()) {
      plan_.reference_tables.push_back(display);
    }
    return e;
  }
  throw NotInCatalog(
      Refusal(parsed_.text, location, fmt::format("the table {}", display),
              "it is neither a sharded table nor a reference table",
              fmt::format("register a sharded table (its key and bucket columns) on the shards with SELECT "
                          "shardkit_shard_table('{0}') in a migration, or a reference table (a copy on every shard) "
                          "with SELECT shardkit_reference_table('{0}') (or [sql] reference_tables = [\"{0}\"] in "
                          "the configuration)",
                          display)));
}

std::unique_ptr<FromItem> Analyzer::AnalyzeFromItem(const json& node, Level& level, const CteScope* ctes) {
  const std::string type = node.begin().key();
  const json& item = node.begin().value();
  if (type == "RangeVar") return Leaf(AddTable(item, level, ctes, false));
  if (type == "RangeSubselect") {
    const bool lateral = item.value("lateral", false);
    AnalyzeSelectNode(item.at("subquery"), lateral ? &level : level.parent, ctes);
    return Leaf(NewEntry(level, Entry::Kind::kOther, AliasOf(item), "subquery", LocationOf(item.at("subquery"))));
  }
  if (type == "RangeFunction") {
    const json* functions = Field(item, "functions");
    if (functions != nullptr) Walk(*functions, level, ctes);
    // Unaliased, the item is named after its function, as PostgreSQL names it.
    std::string name = AliasOf(item);
    if (name.empty() && functions != nullptr) name = FunctionName(*functions);
    return Leaf(NewEntry(level, Entry::Kind::kOther, name, "function", LocationOf(item)));
  }
  if (type == "JoinExpr") {
    auto join = std::make_unique<FromItem>();
    join->join_type = item.value("jointype", "JOIN_INNER");
    join->natural = item.value("isNatural", false);
    join->left = AnalyzeFromItem(item.at("larg"), level, ctes);
    join->right = AnalyzeFromItem(item.at("rarg"), level, ctes);
    join->quals = Field(item, "quals");
    join->aliased = Field(item, "alias") != nullptr;
    join->alias = AliasOf(item);
    if (const json* using_clause = Field(item, "usingClause"); using_clause != nullptr) {
      for (const json& column : *using_clause) {
        if (StringValue(column) == std::optional<std::string>(catalog_.KeyColumn())) join->using_key = true;
      }
    }
    join->entries = join->left->entries;
    join->entries.insert(join->entries.end(), join->right->entries.begin(), join->right->entries.end());
    return join;
  }
  Refuse(LocationOf(node), fmt::format("this FROM item ({})", type), "the router does not know what it reads",
         "not supported yet");
}

std::string Analyzer::FunctionName(const json& functions) {
  if (functions.empty()) return {};
  const json* list = Field(functions.front(), "List");
  if (list == nullptr || !list->contains("items") || list->at("items").empty()) return {};
  const json* call = Field(list->at("items").front(), "FuncCall");
  if (call == nullptr || call->at("funcname").empty()) return {};
  return StringValue(call->at("funcname").back()).value_or("");
}

// ---- column references ----

Candidates Analyzer::UnqualifiedIn(const FromItem& item) const {
  Candidates out;
  if (item.entry != nullptr) {
    if (item.entry->has_key == Tri::kYes) out.found.push_back({item.entry, item.entry->node});
    if (item.entry->has_key == Tri::kUnknown) out.unknown = true;
    return out;
  }
  if (item.natural) {
    out.unknown = true;
    return out;
  }
  const Candidates left = UnqualifiedIn(*item.left);
  const Candidates right = UnqualifiedIn(*item.right);
  if (item.using_key) {
    // One merged column: USING requires it on exactly one table per side.
    if (left.found.size() != 1 || right.found.size() != 1) {
      out.unknown = true;
      return out;
    }
    if (item.join_type == "JOIN_FULL") {
      out.found.push_back({nullptr, -1});
    } else if (item.join_type == "JOIN_RIGHT") {
      out.found.push_back(right.found.front());
    } else {
      out.found.push_back(left.found.front());
    }
    return out;
  }
  out.found = left.found;
  out.found.insert(out.found.end(), right.found.begin(), right.found.end());
  out.unknown = left.unknown || right.unknown;
  return out;
}

Entry* Analyzer::ResolveKey(const json& column_ref, Level* level) const {
  const json& fields = column_ref.at("fields");
  const int location = column_ref.value("location", -1);
  if (fields.size() == 1) {
    if (StringValue(fields[0]) != std::optional<std::string>(catalog_.KeyColumn())) return nullptr;
    for (Level* l = level; l != nullptr; l = l->parent) {
      Candidates all;
      for (const auto& item : l->from) {
        Candidates c = UnqualifiedIn(*item);
        all.found.insert(all.found.end(), c.found.begin(), c.found.end());
        all.unknown = all.unknown || c.unknown;
      }
      if (all.found.size() > 1) {
        Refuse(location, "the unqualified column customer_id",
               fmt::format("it is ambiguous: {} and {} both have it", DisplayOf(all.found[0]), DisplayOf(all.found[1])),
               "qualify it with the table's name or alias");
      }
      if (all.found.size() == 1) return all.found.front().entry;
      if (all.unknown) return nullptr;
    }
    return nullptr;
  }
  if (fields.size() != 2) return nullptr;
  const std::optional<std::string> qualifier = StringValue(fields[0]);
  if (!qualifier || StringValue(fields[1]) != std::optional<std::string>(catalog_.KeyColumn())) return nullptr;
  for (Level* l = level; l != nullptr; l = l->parent) {
    Entry* match = nullptr;
    for (const auto& e : l->entries) {
      if (e->name == *qualifier) match = e.get();
    }
    if (HasAliasedJoin(*l, *qualifier)) return nullptr;
    if (match != nullptr) return match->has_key == Tri::kYes ? match : nullptr;
  }
  return nullptr;
}

bool Analyzer::HasAliasedJoin(const Level& level, const std::string& name) {
  const std::function<bool(const FromItem&)> has = [&](const FromItem& item) {
    if (item.entry != nullptr) return false;
    return (item.aliased && item.alias == name) || has(*item.left) || has(*item.right);
  };
  return std::any_of(level.from.begin(), level.from.end(), [&](const auto& item) { return has(*item); });
}

std::string Analyzer::DisplayOf(const Candidate& c) {
  return c.entry == nullptr ? std::string("a FULL JOIN") : c.entry->display;
}

}  // namespace shardkit::sql::detail
