// The routing analysis: every FROM item of every query level becomes an
// entry; each sharded entry's customer_id is a node, and the equalities
// found in AND-conjuncts join nodes (symmetric: WHERE, inner JOIN ON),
// direct a value from one node to another (preserved -> nullable side of an
// outer join, outer query level -> correlated subquery) or pin a node to a
// constant or parameter. A statement routes when every sharded entry ends
// up pinned, all to one value. Whatever the analysis does not understand
// pins nothing, so it is refused, never routed on a guess.
#include "sql/router.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "shardkit/errors.hpp"
#include "sql/parse.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

using json = nlohmann::json;

enum class Tri { kNo, kYes, kUnknown };

struct Level;

struct Entry {
  enum class Kind { kSharded, kReference, kOther };
  Kind kind = Kind::kOther;
  std::string name;     // how its columns are qualified: the alias, else the relation's name
  std::string display;  // as written: "orders", "public.orders"
  int location = -1;
  Tri has_key = Tri::kUnknown;
  int node = -1;  // its customer_id's node
  Level* level = nullptr;
  bool write_target = false;
};

// A FROM item: an entry, or a join of two items.
struct FromItem {
  Entry* entry = nullptr;
  std::string join_type;
  bool natural = false;
  bool using_key = false;
  bool aliased = false;
  std::string alias;
  std::unique_ptr<FromItem> left;
  std::unique_ptr<FromItem> right;
  const json* quals = nullptr;
  int location = -1;
  std::vector<Entry*> entries;  // every entry under it
};

struct CteScope {
  std::set<std::string> names;
  const CteScope* parent = nullptr;
  [[nodiscard]] bool Has(const std::string& name) const {
    for (const CteScope* s = this; s != nullptr; s = s->parent) {
      if (s->names.contains(name)) return true;
    }
    return false;
  }
};

struct Level {
  Level* parent = nullptr;  // the outer query level columns may refer to
  std::vector<std::unique_ptr<Entry>> entries;
  std::vector<std::unique_ptr<FromItem>> from;
};

struct Candidate {
  Entry* entry = nullptr;
  int node = -1;  // -1: a FULL JOIN's merged column (no single table's)
};
struct Candidates {
  std::vector<Candidate> found;
  bool unknown = false;  // an item whose columns are not known may have customer_id
};

// One side of an equality.
struct Side {
  enum class Kind { kNone, kConstant, kColumn };
  Kind kind = Kind::kNone;
  KeySource constant;
  Entry* entry = nullptr;
};

const json* Field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

int LocationOf(const json& node) {
  if (node.is_object()) {
    if (const json* l = Field(node, "location"); l != nullptr && l->is_number_integer()) return l->get<int>();
    if (node.size() == 1) {
      const json& inner = node.begin().value();
      if (inner.is_object()) {
        if (const json* l = Field(inner, "location"); l != nullptr && l->is_number_integer()) return l->get<int>();
      }
    }
  }
  return -1;
}

// The sval of a {"String": {"sval": ...}} node, or nullopt.
std::optional<std::string> StringValue(const json& node) {
  const json* s = Field(node, "String");
  if (s == nullptr) return std::nullopt;
  const json* v = Field(*s, "sval");
  return v != nullptr && v->is_string() ? std::optional<std::string>(v->get<std::string>())
                                        : std::optional<std::string>("");
}

std::optional<std::int64_t> ParseInteger(std::string_view digits, bool negative) {
  if (digits.empty()) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
  return negative ? -static_cast<std::int64_t>(value) : static_cast<std::int64_t>(value);
}

std::string StatementName(const std::string& node_type) {
  if (node_type == "SelectStmt") return "SELECT";
  if (node_type == "InsertStmt") return "INSERT";
  if (node_type == "UpdateStmt") return "UPDATE";
  if (node_type == "DeleteStmt") return "DELETE";
  return node_type;
}

class Analyzer {
 public:
  Analyzer(const ParsedStatement& parsed, const SqlCatalog& catalog) : parsed_(parsed), catalog_(catalog) {}

  std::shared_ptr<const SqlPlan> Run() {
    plan_.text = parsed_.text;
    const std::string type = parsed_.tree.begin().key();
    const json& body = parsed_.tree.begin().value();
    plan_.statement = StatementName(type);
    if (type == "SelectStmt") {
      AnalyzeSelectNode(parsed_.tree, nullptr, nullptr);
    } else if (type == "InsertStmt") {
      plan_.read_only = false;
      AnalyzeInsert(body);
    } else if (type == "UpdateStmt" || type == "DeleteStmt") {
      plan_.read_only = false;
      AnalyzeUpdateOrDelete(body, type == "UpdateStmt");
    } else {
      const std::string first = parsed_.tokens.empty() ? type : std::string(parsed_.TokenText(parsed_.tokens.front()));
      std::string word = first;
      std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::toupper(c); });
      Refuse(parsed_.tokens.empty() ? -1 : parsed_.tokens.front().start, fmt::format("a {} statement", word),
             "only SELECT, INSERT, UPDATE and DELETE are routed to a customer's shard",
             "run schema changes as migrations (shardctl migrate), and session or transaction commands through "
             "Cluster::Run");
    }
    CheckEverythingSeen(parsed_.tree);
    Finish();
    if (plan_.kind == SqlPlanInfo::Kind::kScatter) {
      plan_.scatter = std::make_shared<const ScatterPlan>(PlanScatter(parsed_, catalog_));
    }
    return std::make_shared<const SqlPlan>(std::move(plan_));
  }

 private:
  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const {
    throw Refusal(parsed_.text, location, construct, reason, advice);
  }

  Level& NewLevel(Level* parent) {
    levels_.push_back(std::make_unique<Level>());
    levels_.back()->parent = parent;
    return *levels_.back();
  }

  int NewNode() {
    parent_.push_back(static_cast<int>(parent_.size()));
    pins_.emplace_back();
    return static_cast<int>(parent_.size()) - 1;
  }
  int Find(int node) {
    while (parent_[static_cast<std::size_t>(node)] != node) {
      parent_[static_cast<std::size_t>(node)] =
          parent_[static_cast<std::size_t>(parent_[static_cast<std::size_t>(node)])];
      node = parent_[static_cast<std::size_t>(node)];
    }
    return node;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    parent_[static_cast<std::size_t>(b)] = a;
    auto& into = pins_[static_cast<std::size_t>(a)];
    for (const KeySource& k : pins_[static_cast<std::size_t>(b)]) {
      if (std::find(into.begin(), into.end(), k) == into.end()) into.push_back(k);
    }
  }
  void Pin(int node, const KeySource& key) {
    auto& pins = pins_[static_cast<std::size_t>(Find(node))];
    if (std::find(pins.begin(), pins.end(), key) == pins.end()) pins.push_back(key);
  }

  // ---- statements ----

  const CteScope* AnalyzeWith(const json* with, Level* column_parent, const CteScope* outer) {
    if (with == nullptr) return outer;
    const json& clause = with->contains("WithClause") ? with->at("WithClause") : *with;
    const bool recursive = clause.value("recursive", false);
    scopes_.push_back(std::make_unique<CteScope>());
    CteScope* scope = scopes_.back().get();
    scope->parent = outer;
    const json* ctes = Field(clause, "ctes");
    if (ctes == nullptr) return scope;
    if (recursive) {
      for (const json& cte : *ctes) scope->names.insert(cte.at("CommonTableExpr").value("ctename", ""));
    }
    for (const json& cte_node : *ctes) {
      const json& cte = cte_node.at("CommonTableExpr");
      const json& query = cte.at("ctequery");
      if (!query.contains("SelectStmt")) {
        Refuse(LocationOf(cte_node), fmt::format("the WITH query {}", cte.value("ctename", "")),
               "a data-modifying WITH query is not supported yet", "run the write as a statement of its own");
      }
      AnalyzeSelectNode(query, column_parent, scope);
      scope->names.insert(cte.value("ctename", ""));
    }
    return scope;
  }

  void AnalyzeSelectNode(const json& node, Level* column_parent, const CteScope* ctes) {
    AnalyzeSelect(node.at("SelectStmt"), column_parent, ctes);
  }

  // A SelectStmt's fields (set operations hold their arms so, unwrapped).
  void AnalyzeSelect(const json& select, Level* column_parent, const CteScope* ctes) {
    seen_.insert(&select);
    if (Field(select, "intoClause") != nullptr) {
      Refuse(LocationOf(select.at("intoClause")), "SELECT INTO", "it creates a table",
             "create tables with a migration");
    }
    if (const json* locking = Field(select, "lockingClause"); locking != nullptr) {
      Refuse(locking->empty() ? -1 : LocationOf(locking->front()), "a locking clause (FOR UPDATE/SHARE)",
             "locking reads are not supported yet", "lock rows inside Cluster::Run");
    }
    ctes = AnalyzeWith(Field(select, "withClause"), column_parent, ctes);
    if (select.value("op", "SETOP_NONE") != "SETOP_NONE") {
      AnalyzeSelect(select.at("larg"), column_parent, ctes);
      AnalyzeSelect(select.at("rarg"), column_parent, ctes);
      Level& level = NewLevel(column_parent);
      WalkExcept(select, level, ctes, {"larg", "rarg", "withClause"});
      return;
    }
    Level& level = NewLevel(column_parent);
    if (&select == &parsed_.tree.begin().value()) top_level_ = &level;
    if (const json* from = Field(select, "fromClause"); from != nullptr) {
      for (const json& item : *from) level.from.push_back(AnalyzeFromItem(item, level, ctes));
    }
    for (const auto& item : level.from) JoinFacts(*item, level, ctes);
    if (const json* where = Field(select, "whereClause"); where != nullptr) WhereFacts(*where, level);
    WalkExcept(select, level, ctes, {"fromClause", "withClause"});
  }

  void AnalyzeInsert(const json& insert) {
    const CteScope* ctes = AnalyzeWith(Field(insert, "withClause"), nullptr, nullptr);
    Level& target_level = NewLevel(nullptr);
    Entry* target = AddTable(insert.at("relation"), target_level, ctes, true);
    target_level.from.push_back(Leaf(target));
    const SqlTable* table =
        catalog_.FindSharded(SchemaOf(insert.at("relation")), insert.at("relation").value("relname", ""));
    if (const json* conflict = Field(insert, "onConflictClause"); conflict != nullptr) {
      Refuse(LocationOf(*conflict), "INSERT ... ON CONFLICT",
             "the conflicting row may be another customer's, on another shard, when the unique key lacks customer_id",
             "not supported yet: insert, and update in a statement of its own");
    }
    const json* select_node = Field(insert, "selectStmt");
    if (select_node == nullptr) {
      Refuse(target->location, "INSERT ... DEFAULT VALUES", "it gives no customer_id to route by",
             "name the columns and give customer_id");
    }
    const json& select = select_node->at("SelectStmt");
    seen_.insert(&select);
    const json* values = Field(select, "valuesLists");
    if (values == nullptr || Field(select, "fromClause") != nullptr || Field(select, "targetList") != nullptr ||
        Field(select, "withClause") != nullptr || select.value("op", "SETOP_NONE") != "SETOP_NONE") {
      Refuse(target->location, "INSERT ... SELECT",
             "the rows it inserts are known only once the SELECT has run, so their shards are not known before",
             "not supported yet: SELECT the rows, then INSERT ... VALUES them per customer");
    }
    std::vector<std::string> columns;
    bool named = false;
    if (const json* cols = Field(insert, "cols"); cols != nullptr) {
      named = true;
      for (const json& col : *cols) {
        const json& target_column = col.at("ResTarget");
        const std::string name = target_column.value("name", "");
        if ((name == kShardKeyColumn || name == kBucketColumn) && Field(target_column, "indirection") != nullptr) {
          Refuse(LocationOf(col), fmt::format("the column {} with a subscript or field", name),
                 "the shard key must be given whole", "give customer_id as a plain column");
        }
        columns.push_back(name);
      }
    } else {
      columns = table->columns;
    }
    const auto key_at = std::find(columns.begin(), columns.end(), kShardKeyColumn);
    if (key_at == columns.end()) {
      Refuse(target->location, fmt::format("INSERT INTO {}", target->display), "its column list lacks customer_id",
             "give customer_id: it says which shard the row belongs on");
    }
    const auto key_index = static_cast<std::size_t>(key_at - columns.begin());
    const auto bucket_at = std::find(columns.begin(), columns.end(), kBucketColumn);
    const auto bucket_index = static_cast<std::size_t>(bucket_at - columns.begin());
    Level& values_level = NewLevel(nullptr);
    int row_number = 0;
    for (const json& row_node : *values) {
      ++row_number;
      const json& items = row_node.at("List").at("items");
      if (items.size() <= key_index || (!named && items.size() <= bucket_index)) {
        Refuse(items.empty() ? target->location : LocationOf(items.back()),
               fmt::format("row {} of the VALUES", row_number),
               fmt::format("it gives no {}", items.size() <= key_index ? "customer_id" : "bucket"),
               "name the columns: INSERT INTO t (customer_id, ...) VALUES (...)");
      }
      const json& key = items.at(key_index);
      const std::optional<KeySource> source = KeyConstant(key);
      if (!source) {
        Refuse(LocationOf(key), fmt::format("the customer_id of row {}", row_number),
               "it is neither an integer literal nor a parameter, so its shard is not known before it runs",
               "give customer_id as a literal or as $n");
      }
      plan_.rows.push_back(InsertRow{*source, -1});
      Walk(items, values_level, ctes);
    }
    if (named && bucket_at == columns.end()) FindSplicePlaces(insert, static_cast<int>(plan_.rows.size()));
    if (const json* returning = Field(insert, "returningList"); returning != nullptr)
      Walk(*returning, target_level, ctes);
  }

  void AnalyzeUpdateOrDelete(const json& statement, bool update) {
    const CteScope* ctes = AnalyzeWith(Field(statement, "withClause"), nullptr, nullptr);
    Level& level = NewLevel(nullptr);
    Entry* target = AddTable(statement.at("relation"), level, ctes, true);
    level.from.push_back(Leaf(target));
    if (update) {
      for (const json& set : statement.at("targetList")) {
        const std::string name = set.at("ResTarget").value("name", "");
        if (name == kShardKeyColumn || name == kBucketColumn) {
          Refuse(LocationOf(set), fmt::format("SET {}", name),
                 "changing the shard key or the bucket would move the row to another customer's shard",
                 "delete the row and insert it for the new customer");
        }
      }
    }
    if (const json* from = Field(statement, update ? "fromClause" : "usingClause"); from != nullptr) {
      for (const json& item : *from) level.from.push_back(AnalyzeFromItem(item, level, ctes));
    }
    for (const auto& item : level.from) JoinFacts(*item, level, ctes);
    if (const json* where = Field(statement, "whereClause"); where != nullptr) WhereFacts(*where, level);
    WalkExcept(statement, level, ctes, {"relation", "fromClause", "usingClause", "withClause"});
  }

  // ---- FROM items ----

  static std::optional<std::string> SchemaOf(const json& range_var) {
    const json* schema = Field(range_var, "schemaname");
    return schema != nullptr ? std::optional<std::string>(schema->get<std::string>()) : std::nullopt;
  }

  std::unique_ptr<FromItem> Leaf(Entry* entry) {
    auto item = std::make_unique<FromItem>();
    item->entry = entry;
    item->location = entry->location;
    item->entries.push_back(entry);
    return item;
  }

  Entry* NewEntry(Level& level, Entry::Kind kind, std::string name, std::string display, int location) {
    level.entries.push_back(std::make_unique<Entry>());
    Entry* e = level.entries.back().get();
    e->kind = kind;
    e->name = std::move(name);
    e->display = std::move(display);
    e->location = location;
    e->level = &level;
    return e;
  }

  static std::string AliasOf(const json& node) {
    const json* alias = Field(node, "alias");
    return alias == nullptr ? std::string() : alias->value("aliasname", "");
  }

  Entry* AddTable(const json& range_var, Level& level, const CteScope* ctes, bool write_target) {
    seen_.insert(&range_var);
    const std::optional<std::string> schema = SchemaOf(range_var);
    const std::string relname = range_var.value("relname", "");
    const std::string display = schema ? *schema + "." + relname : relname;
    const std::string alias = AliasOf(range_var);
    const int location = range_var.value("location", -1);
    if (!schema && ctes != nullptr && ctes->Has(relname) && !write_target) {
      return NewEntry(level, Entry::Kind::kOther, alias.empty() ? relname : alias, relname, location);
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
      } else if (reference->HasColumn(kShardKeyColumn)) {
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
    Refuse(location, fmt::format("the table {}", display), "it is neither a sharded table nor a reference table",
           fmt::format("register a sharded table (customer_id and bucket columns) on the shards with SELECT "
                       "shardkit_shard_table('{0}') in a migration, or declare a reference table (a copy on every "
                       "shard) in the configuration: [sql] reference_tables = [\"{0}\"]",
                       display));
  }

  std::unique_ptr<FromItem> AnalyzeFromItem(const json& node, Level& level, const CteScope* ctes) {
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
          if (StringValue(column) == std::optional<std::string>(kShardKeyColumn)) join->using_key = true;
        }
      }
      join->entries = join->left->entries;
      join->entries.insert(join->entries.end(), join->right->entries.begin(), join->right->entries.end());
      return join;
    }
    Refuse(LocationOf(node), fmt::format("this FROM item ({})", type), "the router does not know what it reads",
           "not supported yet");
  }

  static std::string FunctionName(const json& functions) {
    if (functions.empty()) return {};
    const json* list = Field(functions.front(), "List");
    if (list == nullptr || !list->contains("items") || list->at("items").empty()) return {};
    const json* call = Field(list->at("items").front(), "FuncCall");
    if (call == nullptr || call->at("funcname").empty()) return {};
    return StringValue(call->at("funcname").back()).value_or("");
  }

  // ---- column references ----

  // The customer_id columns an unqualified reference may mean in an item.
  Candidates UnqualifiedIn(const FromItem& item) const {
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

  // The entry a customer_id reference means, or null (another column, or
  // one the analysis cannot attribute to a table: it pins nothing).
  Entry* ResolveKey(const json& column_ref, Level* level) const {
    const json& fields = column_ref.at("fields");
    const int location = column_ref.value("location", -1);
    if (fields.size() == 1) {
      if (StringValue(fields[0]) != std::optional<std::string>(kShardKeyColumn)) return nullptr;
      for (Level* l = level; l != nullptr; l = l->parent) {
        Candidates all;
        for (const auto& item : l->from) {
          Candidates c = UnqualifiedIn(*item);
          all.found.insert(all.found.end(), c.found.begin(), c.found.end());
          all.unknown = all.unknown || c.unknown;
        }
        if (all.found.size() > 1) {
          Refuse(
              location, "the unqualified column customer_id",
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
    if (!qualifier || StringValue(fields[1]) != std::optional<std::string>(kShardKeyColumn)) return nullptr;
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

  static bool HasAliasedJoin(const Level& level, const std::string& name) {
    const std::function<bool(const FromItem&)> has = [&](const FromItem& item) {
      if (item.entry != nullptr) return false;
      return (item.aliased && item.alias == name) || has(*item.left) || has(*item.right);
    };
    return std::any_of(level.from.begin(), level.from.end(), [&](const auto& item) { return has(*item); });
  }

  static std::string DisplayOf(const Candidate& c) {
    return c.entry == nullptr ? std::string("a FULL JOIN") : c.entry->display;
  }

  // ---- constants ----

  // An integer literal, $n, or a cast of those (or of a quoted integer) to an integer type.
  std::optional<KeySource> KeyConstant(const json& node) const {
    if (const json* param = Field(node, "ParamRef"); param != nullptr) {
      const int number = param->value("number", 0);
      if (number < 1) return std::nullopt;
      return KeySource{std::nullopt, number, param->value("location", -1)};
    }
    if (const json* constant = Field(node, "A_Const"); constant != nullptr) {
      if (Field(*constant, "ival") == nullptr) return std::nullopt;
      // The value from the text: the parse tree's JSON drops negative integers.
      const int location = constant->value("location", -1);
      std::size_t at = parsed_.TokenAt(location);
      if (at >= parsed_.tokens.size() || parsed_.tokens[at].start != location) return std::nullopt;
      bool negative = false;
      if (parsed_.tokens[at].kind == '-') {
        negative = true;
        ++at;
      }
      if (at >= parsed_.tokens.size() || parsed_.tokens[at].kind != kTokenIconst) return std::nullopt;
      const std::optional<std::int64_t> value = ParseInteger(parsed_.TokenText(parsed_.tokens[at]), negative);
      if (!value) return std::nullopt;
      return KeySource{value, 0, location};
    }
    if (const json* cast = Field(node, "TypeCast"); cast != nullptr) {
      const json& type = cast->at("typeName");
      if (Field(type, "arrayBounds") != nullptr) return std::nullopt;
      const json& names = type.at("names");
      const std::optional<std::string> name = names.empty() ? std::nullopt : StringValue(names.back());
      static const std::set<std::string> kIntegerTypes = {"int2",    "int4",   "int8", "smallint",
                                                          "integer", "bigint", "int"};
      if (!name || !kIntegerTypes.contains(*name)) return std::nullopt;
      if (names.size() == 2 && StringValue(names.front()) != std::optional<std::string>("pg_catalog"))
        return std::nullopt;
      if (names.size() > 2) return std::nullopt;
      const json& arg = cast->at("arg");
      if (const json* constant = Field(arg, "A_Const"); constant != nullptr && Field(*constant, "sval") != nullptr) {
        const std::string text = constant->at("sval").value("sval", "");
        const bool negative = !text.empty() && text[0] == '-';
        const std::optional<std::int64_t> value =
            ParseInteger(std::string_view(text).substr(negative ? 1 : 0), negative);
        if (!value) return std::nullopt;
        return KeySource{value, 0, constant->value("location", -1)};
      }
      return KeyConstant(arg);
    }
    return std::nullopt;
  }

  // ---- facts ----

  enum class Role { kRestricted, kFixed };

  static void Conjuncts(const json& expr, std::vector<const json*>& out) {
    if (const json* boolean = Field(expr, "BoolExpr");
        boolean != nullptr && boolean->value("boolop", "") == "AND_EXPR") {
      for (const json& arg : boolean->at("args")) Conjuncts(arg, out);
      return;
    }
    out.push_back(&expr);
  }

  Side SideOf(const json& expr, Level& level) const {
    Side side;
    if (const json* column = Field(expr, "ColumnRef"); column != nullptr) {
      if (Entry* e = ResolveKey(*column, &level); e != nullptr) {
        side.kind = Side::Kind::kColumn;
        side.entry = e;
      }
      return side;
    }
    if (const std::optional<KeySource> constant = KeyConstant(expr); constant) {
      side.kind = Side::Kind::kConstant;
      side.constant = *constant;
    }
    return side;
  }

  template <class RoleOf>
  void Facts(const json& expr, Level& level, const RoleOf& role_of) {
    std::vector<const json*> conjuncts;
    Conjuncts(expr, conjuncts);
    for (const json* conjunct : conjuncts) {
      const json* op = Field(*conjunct, "A_Expr");
      if (op == nullptr || op->value("kind", "") != "AEXPR_OP") continue;
      const json* name = Field(*op, "name");
      if (name == nullptr || name->size() != 1 || StringValue(name->front()) != std::optional<std::string>("="))
        continue;
      const json* lexpr = Field(*op, "lexpr");
      const json* rexpr = Field(*op, "rexpr");
      if (lexpr == nullptr || rexpr == nullptr) continue;
      const Side a = SideOf(*lexpr, level);
      const Side b = SideOf(*rexpr, level);
      Equate(a, b, role_of);
      Equate(b, a, role_of);
    }
  }

  // One direction of an equality: what `a` tells about `b`.
  template <class RoleOf>
  void Equate(const Side& a, const Side& b, const RoleOf& role_of) {
    if (b.kind != Side::Kind::kColumn || role_of(b.entry) != Role::kRestricted) return;
    if (a.kind == Side::Kind::kConstant) {
      Pin(b.entry->node, a.constant);
    } else if (a.kind == Side::Kind::kColumn) {
      if (role_of(a.entry) == Role::kRestricted) {
        Union(a.entry->node, b.entry->node);
      } else {
        directed_.emplace_back(a.entry->node, b.entry->node);
      }
    }
  }

  void WhereFacts(const json& where, Level& level) {
    Facts(where, level, [&](const Entry* e) { return e->level == &level ? Role::kRestricted : Role::kFixed; });
  }

  void JoinFacts(const FromItem& item, Level& level, const CteScope* ctes) {
    if (item.entry != nullptr) return;
    JoinFacts(*item.left, level, ctes);
    JoinFacts(*item.right, level, ctes);
    const std::vector<Entry*>* restricted = nullptr;
    if (item.join_type == "JOIN_INNER") {
      restricted = &item.entries;
    } else if (item.join_type == "JOIN_LEFT") {
      restricted = &item.right->entries;
    } else if (item.join_type == "JOIN_RIGHT") {
      restricted = &item.left->entries;
    }
    if (item.quals != nullptr) {
      if (restricted != nullptr) {
        Facts(*item.quals, level, [&](const Entry* e) {
          return std::find(restricted->begin(), restricted->end(), e) != restricted->end() ? Role::kRestricted
                                                                                           : Role::kFixed;
        });
      }
      Walk(*item.quals, level, ctes);
    }
    if (item.using_key && restricted != nullptr) {
      const Candidates left = UnqualifiedIn(*item.left);
      const Candidates right = UnqualifiedIn(*item.right);
      if (left.found.size() == 1 && right.found.size() == 1 && left.found[0].node >= 0 && right.found[0].node >= 0) {
        const int l = left.found[0].node;
        const int r = right.found[0].node;
        if (item.join_type == "JOIN_INNER") {
          Union(l, r);
        } else if (item.join_type == "JOIN_LEFT") {
          directed_.emplace_back(l, r);
        } else {
          directed_.emplace_back(r, l);
        }
      }
    }
  }

  // ---- expressions: subqueries and functions anywhere ----

  void WalkExcept(const json& object, Level& level, const CteScope* ctes, std::initializer_list<const char*> skip) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (std::any_of(skip.begin(), skip.end(), [&](const char* s) { return it.key() == s; })) continue;
      Walk(it.value(), level, ctes);
    }
  }

  void Walk(const json& node, Level& level, const CteScope* ctes) {
    if (node.is_array()) {
      for (const json& element : node) Walk(element, level, ctes);
      return;
    }
    if (!node.is_object()) return;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string& key = it.key();
      const json& value = it.value();
      if (key == "SubLink") {
        if (const json* test = Field(value, "testexpr"); test != nullptr) Walk(*test, level, ctes);
        AnalyzeSelectNode(value.at("subselect"), &level, ctes);
        continue;
      }
      if (key == "FuncCall") CheckFunction(value);
      if (key == "CurrentOfExpr") {
        Refuse(-1, "WHERE CURRENT OF", "cursors are not routed", "name the row by its key");
      }
      Walk(value, level, ctes);
    }
  }

  void CheckFunction(const json& call) const {
    const json& names = call.at("funcname");
    const std::optional<std::string> name = names.empty() ? std::nullopt : StringValue(names.back());
    if (!name) return;
    static const std::set<std::string> kRefused = {"set_config", "nextval", "setval", "currval", "lastval"};
    if (kRefused.contains(*name)) {
      Refuse(call.value("location", -1), fmt::format("the function {}", *name),
             "its effect or value differs per shard (sequences and settings are each shard's own)",
             "use shardkit's ID generators for keys, and Cluster::Run for settings");
    }
    if (catalog_.IsUserFunction(*name)) {
      Refuse(call.value("location", -1), fmt::format("the function {}", *name),
             "it is not built in, so it may read sharded tables the router cannot see",
             "write its query into the statement, or call it inside Cluster::Run");
    }
  }

  // Every table and subquery of the tree was analysed: one missed would be
  // read unpinned.
  void CheckEverythingSeen(const json& node) const {
    if (node.is_array()) {
      for (const json& element : node) CheckEverythingSeen(element);
      return;
    }
    if (!node.is_object()) return;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if ((it.key() == "RangeVar" || it.key() == "SelectStmt") && !seen_.contains(&it.value())) {
        Refuse(LocationOf(it.value()), it.key() == "RangeVar" ? "this table reference" : "this subquery",
               "it sits where the router does not look for tables", "not supported yet");
      }
      CheckEverythingSeen(it.value());
    }
  }

  // ---- the decision ----

  void FindSplicePlaces(const json& insert, int rows) {
    const auto& tokens = parsed_.tokens;
    const auto fail = [&]() {
      Refuse(LocationOf(insert.at("relation")), "INSERT without bucket",
             "the places to add the bucket column and values were not found",
             "give bucket = bucket_of(customer_id) yourself");
    };
    const auto match = [&](std::size_t open) -> std::size_t {
      int depth = 0;
      for (std::size_t i = open; i < tokens.size(); ++i) {
        if (tokens[i].kind == '(') ++depth;
        if (tokens[i].kind == ')' && --depth == 0) return i;
      }
      fail();
      return 0;
    };
    std::size_t i = parsed_.TokenAt(insert.at("relation").value("location", 0));
    while (i < tokens.size() && tokens[i].kind != '(' && tokens[i].kind != kTokenValues) ++i;
    if (i >= tokens.size() || tokens[i].kind != '(') fail();
    const std::size_t columns_close = match(i);
    const int last_column = LocationOf(insert.at("cols").back());
    if (tokens[columns_close].start < last_column) fail();
    plan_.columns_close_paren = tokens[columns_close].start;
    i = columns_close + 1;
    while (i < tokens.size() && tokens[i].kind != kTokenValues) ++i;
    ++i;
    for (int row = 0; row < rows; ++row) {
      if (row > 0) {
        if (i >= tokens.size() || tokens[i].kind != ',') fail();
        ++i;
      }
      if (i >= tokens.size() || tokens[i].kind != '(') fail();
      const std::size_t close = match(i);
      plan_.rows[static_cast<std::size_t>(row)].close_paren = tokens[close].start;
      i = close + 1;
    }
  }

  void Finish() {
    // Values flow along directed equalities until nothing changes.
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& [from, to] : directed_) {
        const int f = Find(from);
        const int t = Find(to);
        if (f == t) continue;
        const std::vector<KeySource> source = pins_[static_cast<std::size_t>(f)];
        for (const KeySource& k : source) {
          auto& target = pins_[static_cast<std::size_t>(t)];
          if (std::find(target.begin(), target.end(), k) == target.end()) {
            target.push_back(k);
            changed = true;
          }
        }
      }
    }
    std::sort(sharded_.begin(), sharded_.end(),
              [](const Entry* a, const Entry* b) { return a->location < b->location; });
    std::vector<const Entry*> unpinned;
    for (const Entry* e : sharded_) {
      const auto& pins = pins_[static_cast<std::size_t>(Find(e->node))];
      if (pins.empty() && !e->write_target && plan_.statement == "SELECT") {
        unpinned.push_back(e);
        continue;
      }
      if (pins.empty()) {
        if (e->write_target) {
          Refuse(e->location, fmt::format("{} {}", plan_.statement, e->display),
                 fmt::format("its WHERE does not pin customer_id to one value, so it may change rows on every shard, "
                             "and a statement is atomic on one shard only"),
                 fmt::format("add customer_id = <customer> (or = $n) to the WHERE, joined by AND; for several "
                             "customers, one statement per customer"));
        }
        Refuse(e->location, fmt::format("the table {}", e->display),
               "its customer_id is not pinned to one value at its query level, so its rows may be on every shard",
               fmt::format("add {}.customer_id = <customer> (or = $n) to that level's WHERE or inner JOIN ... ON, "
                           "joined by AND, or equate it to a pinned table's customer_id",
                           e->name));
      }
      for (const KeySource& k : pins) {
        if (std::find(plan_.keys.begin(), plan_.keys.end(), k) == plan_.keys.end()) plan_.keys.push_back(k);
      }
    }
    if (!unpinned.empty()) {
      RequireScatterable(unpinned);
      plan_.kind = SqlPlanInfo::Kind::kScatter;
      plan_.keys.clear();
      return;
    }
    std::optional<KeySource> literal;
    for (const KeySource& k : plan_.keys) {
      if (!k.literal) continue;
      if (literal && *literal->literal != *k.literal) {
        Refuse(k.location, fmt::format("customer_id = {}", *k.literal),
               fmt::format("the statement reads customers {} and {}, whose rows may be on different shards",
                           *literal->literal, *k.literal),
               "run one statement per customer");
      }
      literal = k;
    }
    for (const InsertRow& row : plan_.rows) {
      if (!plan_.keys.empty() && row.key.literal && literal && *row.key.literal != *literal->literal) {
        Refuse(row.key.location, fmt::format("customer_id = {}", *row.key.literal),
               fmt::format("the INSERT reads customer {}'s rows and writes customer {}'s", *literal->literal,
                           *row.key.literal),
               "read and write one customer per statement");
      }
    }
    if (plan_.statement == "SELECT" && sharded_.empty()) plan_.kind = SqlPlanInfo::Kind::kAnyShard;
  }

  // A SELECT over every shard: its unpinned sharded tables are all at the
  // top level, joined to each other on customer_id (co-located: joined rows
  // are on one shard), and no other sharded table is pinned.
  void RequireScatterable(const std::vector<const Entry*>& unpinned) {
    if (parsed_.tree.begin().value().value("op", "SETOP_NONE") != "SETOP_NONE") {
      Refuse(unpinned.front()->location, "a set operation (UNION, INTERSECT, EXCEPT) over sharded tables",
             "combining set operations across shards is not supported yet",
             "run each arm as a statement of its own and combine the answers, or pin customer_id in every arm");
    }
    for (const Entry* e : unpinned) {
      if (e->level != top_level_) {
        Refuse(e->location, fmt::format("the table {}", e->display),
               "its customer_id is not pinned in a subquery or CTE, which in a statement over every shard would read "
               "each shard's rows only",
               fmt::format("pin {}.customer_id, or move the table into the top-level FROM joined on customer_id",
                           e->name));
      }
    }
    if (unpinned.size() != sharded_.size()) {
      const Entry* pinned = nullptr;
      for (const Entry* e : sharded_) {
        if (std::find(unpinned.begin(), unpinned.end(), e) == unpinned.end()) pinned = e;
      }
      Refuse(unpinned.front()->location, fmt::format("the table {}", unpinned.front()->display),
             fmt::format("its customer_id is not pinned while {}'s is, so matching rows may be on different shards "
                         "(it would need repartitioning)",
                         pinned->display),
             fmt::format("pin {}.customer_id too, or join it on customer_id", unpinned.front()->name));
    }
    // Joined on customer_id: one class once equalities in either direction count.
    std::map<int, int> joined;
    const std::function<int(int)> root = [&](int n) {
      n = Find(n);
      const auto it = joined.find(n);
      return it == joined.end() || it->second == n ? n : root(it->second);
    };
    for (const auto& [from, to] : directed_) {
      const int a = root(from);
      const int b = root(to);
      if (a != b) joined[b] = a;
    }
    const int first = root(unpinned.front()->node);
    for (const Entry* e : unpinned) {
      if (root(e->node) != first) {
        Refuse(e->location, fmt::format("the table {}", e->display),
               fmt::format("it is not joined to {} on customer_id, so matching rows may be on different shards "
                           "(it would need repartitioning)",
                           unpinned.front()->display),
               fmt::format("join the sharded tables on customer_id (e.g. USING (customer_id)), or pin "
                           "customer_id"));
      }
    }
  }

  const ParsedStatement& parsed_;
  const SqlCatalog& catalog_;
  SqlPlan plan_;
  const Level* top_level_ = nullptr;
  std::vector<std::unique_ptr<Level>> levels_;
  std::vector<std::unique_ptr<CteScope>> scopes_;
  std::set<const json*> seen_;
  std::vector<int> parent_;
  std::vector<std::vector<KeySource>> pins_;
  std::vector<std::pair<int, int>> directed_;
  std::vector<Entry*> sharded_;
};

std::int32_t KeyValue(const SqlPlan& plan, const KeySource& key, const SqlParams& params) {
  const auto refuse = [&](const std::string& construct, const std::string& reason) {
    throw Refusal(plan.text, key.location, construct, reason, "pass the customer's id as an integer");
  };
  std::int64_t value = 0;
  if (key.literal) {
    value = *key.literal;
  } else {
    const std::string construct = fmt::format("the parameter ${}", key.param);
    if (static_cast<std::size_t>(key.param) > params.size()) {
      refuse(construct, fmt::format("it has no value ({} parameter(s) given)", params.size()));
    }
    const std::optional<std::string>& text = params[static_cast<std::size_t>(key.param - 1)];
    if (!text) refuse(construct, "it is NULL, so the statement names no customer");
    const bool negative = !text->empty() && (*text)[0] == '-';
    const std::optional<std::int64_t> parsed = ParseInteger(std::string_view(*text).substr(negative ? 1 : 0), negative);
    if (!parsed) refuse(construct, fmt::format("\"{}\" is not an integer customer_id", *text));
    value = *parsed;
  }
  if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max()) {
    refuse(fmt::format("customer_id {}", value), "it is out of range for a customer_id (integer)");
  }
  return static_cast<std::int32_t>(value);
}

}  // namespace

std::shared_ptr<const SqlPlan> PlanStatement(const std::string& text, const SqlCatalog& catalog) {
  return PlanStatement(ParseStatement(text), catalog);
}

std::shared_ptr<const SqlPlan> PlanStatement(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  return Analyzer(parsed, catalog).Run();
}

BoundRoute BindRoute(const SqlPlan& plan, const SqlParams& params) {
  BoundRoute route;
  std::optional<std::pair<std::int32_t, const KeySource*>> first;
  const auto agree = [&](const KeySource& key, std::int32_t value) {
    if (!first) {
      first.emplace(value, &key);
      return;
    }
    if (first->first != value) {
      throw Refusal(
          plan.text, key.location, fmt::format("customer_id {}", value),
          fmt::format("the statement also names customer {}, and their rows may be on different shards", first->first),
          "run one statement per customer");
    }
  };
  for (const KeySource& key : plan.keys) agree(key, KeyValue(plan, key, params));
  for (const InsertRow& row : plan.rows) {
    const std::int32_t value = KeyValue(plan, row.key, params);
    route.row_customers.push_back(CustomerId{value});
    if (!plan.keys.empty()) agree(row.key, value);
  }
  if (first) {
    route.customer = CustomerId{first->first};
  } else if (!route.row_customers.empty()) {
    route.customer = route.row_customers.front();
  }
  return route;
}

void RequireOneShard(const SqlPlan& plan, const BoundRoute& route, const BucketDirectory& directory) {
  const auto& rows = route.row_customers;
  if (rows.size() < 2) return;
  const ShardId first = directory.ShardOf(BucketOf(rows.front()));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const ShardId shard = directory.ShardOf(BucketOf(rows[i]));
    if (shard == first) continue;
    throw Refusal(plan.text, plan.rows.at(i).key.location, fmt::format("row {} of the VALUES", i + 1),
                  fmt::format("customer {} is on shard {} and customer {} on shard {}, and one INSERT is atomic on "
                              "one shard only",
                              ToInt(rows.front()), ToInt(first), ToInt(rows[i]), ToInt(shard)),
                  "insert each customer's rows with a statement of its own");
  }
}

std::string StatementText(const SqlPlan& plan, const BoundRoute& route) {
  if (!plan.AddsBucket()) return plan.text;
  std::vector<std::pair<int, std::string>> inserts;
  inserts.emplace_back(plan.columns_close_paren, std::string(", ") + kBucketColumn);
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    inserts.emplace_back(plan.rows[i].close_paren, fmt::format(", {}", ToInt(BucketOf(route.row_customers.at(i)))));
  }
  std::sort(inserts.begin(), inserts.end());
  std::string text;
  text.reserve(plan.text.size() + inserts.size() * 5);
  std::size_t at = 0;
  for (const auto& [offset, piece] : inserts) {
    text.append(plan.text, at, static_cast<std::size_t>(offset) - at);
    text += piece;
    at = static_cast<std::size_t>(offset);
  }
  text.append(plan.text, at, std::string::npos);
  return text;
}

}  // namespace shardkit::sql
