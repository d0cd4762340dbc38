// The Analyzer's statements, the walk of their expressions and the decision (analyzer.hpp).
#include "sql/analyzer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

#include "core/sql_text.hpp"
#include "shardkit/core/shard_key_format.hpp"
#include "shardkit/errors.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql::detail {

std::shared_ptr<const SqlPlan> Analyzer::Run() {
  plan_.text = parsed_.text;
  plan_.key_column = catalog_.KeyColumn();
  plan_.key_type = catalog_.KeyType();
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
    const std::string word =
        shardkit::detail::Upper(parsed_.tokens.empty() ? type : parsed_.TokenText(parsed_.tokens.front()));
    Refuse(parsed_.tokens.empty() ? -1 : parsed_.tokens.front().start, fmt::format("a {} statement", word),
           "only SELECT, INSERT, UPDATE and DELETE are routed to a customer's shard",
           "run schema changes as migrations (shardctl migrate), and session or transaction commands through "
           "Cluster::Run");
  }
  CheckEverythingSeen(parsed_.tree);
  CountParameters(parsed_.tree, plan_);
  Finish();
  if (plan_.kind == SqlPlanInfo::Kind::kScatter) {
    plan_.scatter = std::make_shared<const ScatterPlan>(PlanScatter(parsed_, catalog_));
  }
  return std::make_shared<const SqlPlan>(std::move(plan_));
}

void Analyzer::Refuse(int location, const std::string& construct, const std::string& reason,
                      const std::string& advice) const {
  throw Refusal(parsed_.text, location, construct, reason, advice);
}

Level& Analyzer::NewLevel(Level* parent) {
  levels_.push_back(std::make_unique<Level>());
  levels_.back()->parent = parent;
  return *levels_.back();
}

// ---- statements ----

const CteScope* Analyzer::AnalyzeWith(const json* with, Level* column_parent, const CteScope* outer) {
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

void Analyzer::AnalyzeSelectNode(const json& node, Level* column_parent, const CteScope* ctes) {
  AnalyzeSelect(node.at("SelectStmt"), column_parent, ctes);
}

void Analyzer::AnalyzeSelect(const json& select, Level* column_parent, const CteScope* ctes) {
  seen_.insert(&select);
  if (Field(select, "intoClause") != nullptr) {
    Refuse(LocationOf(select.at("intoClause")), "SELECT INTO", "it creates a table", "create tables with a migration");
  }
  if (const json* locking = Field(select, "lockingClause"); locking != nullptr) {
    // Routed, a locking read takes its locks in a read-write transaction
    // on the customer's primary; over several shards it is refused (Finish).
    locking_ = true;
    plan_.read_only = false;
    // FOR UPDATE OF o: names of this level's FROM items, not tables.
    for (const json& clause : *locking) {
      const json* rels = Field(clause.at("LockingClause"), "lockedRels");
      if (rels == nullptr) continue;
      for (const json& rel : *rels) {
        if (const json* range = Field(rel, "RangeVar"); range != nullptr) seen_.insert(range);
      }
    }
  }
  ctes = AnalyzeWith(Field(select, "withClause"), column_parent, ctes);
  CheckLockedReferences(select, ctes);
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

void Analyzer::AnalyzeInsert(const json& insert) {
  const CteScope* ctes = AnalyzeWith(Field(insert, "withClause"), nullptr, nullptr);
  Level& target_level = NewLevel(nullptr);
  Entry* target = AddTable(insert.at("relation"), target_level, ctes, true);
  target_level.from.push_back(Leaf(target));
  const SqlTable* table =
      catalog_.FindSharded(SchemaOf(insert.at("relation")), insert.at("relation").value("relname", ""));
  if (const json* conflict = Field(insert, "onConflictClause"); conflict != nullptr) {
    AnalyzeOnConflict(*conflict, target_level, ctes);
  }
  const json* select_node = Field(insert, "selectStmt");
  if (select_node == nullptr) {
    Refuse(target->location, "INSERT ... DEFAULT VALUES", "it gives no customer_id to route by",
           "name the columns and give customer_id");
  }
  const json& select = select_node->at("SelectStmt");
  const json* values = Field(select, "valuesLists");
  if (values == nullptr) {
    AnalyzeInsertSelect(insert, select, target_level, *target, ctes);
    return;
  }
  seen_.insert(&select);
  if (Field(select, "fromClause") != nullptr || Field(select, "targetList") != nullptr ||
      Field(select, "withClause") != nullptr || select.value("op", "SETOP_NONE") != "SETOP_NONE") {
    Refuse(target->location, "INSERT ... VALUES", "a VALUES list of this shape is not read by the router",
           "write INSERT INTO t (customer_id, ...) VALUES (...), (...)");
  }
  std::vector<std::string> columns;
  bool named = false;
  if (const json* cols = Field(insert, "cols"); cols != nullptr) {
    named = true;
    for (const json& col : *cols) {
      const json& target_column = col.at("ResTarget");
      const std::string name = target_column.value("name", "");
      if ((name == catalog_.KeyColumn() || name == kBucketColumn) && Field(target_column, "indirection") != nullptr) {
        Refuse(LocationOf(col), fmt::format("the column {} with a subscript or field", name),
               "the shard key must be given whole", "give customer_id as a plain column");
      }
      columns.push_back(name);
    }
  } else {
    columns = table->columns;
  }
  const auto key_at = std::find(columns.begin(), columns.end(), catalog_.KeyColumn());
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

// INSERT ... SELECT of one customer's rows: the customer_id it inserts is
// a literal or parameter, and every sharded table the SELECT reads is
// pinned to that same customer (Finish and the binding check), so the
// rows it reads and writes are on that customer's shard.
void Analyzer::AnalyzeInsertSelect(const json& insert, const json& select, Level& target_level, const Entry& target,
                                   const CteScope* ctes) {
  const std::string& key = catalog_.KeyColumn();
  const auto refuse = [&](int location, const std::string& reason) {
    Refuse(location, "INSERT ... SELECT", reason,
           fmt::format("name the columns and give {0} as the literal or $n the SELECT's tables are pinned to: INSERT "
                       "INTO t ({0}, ...) SELECT $1, ... FROM ... WHERE {0} = $1",
                       key));
  };
  const json* cols = Field(insert, "cols");
  const json* targets = Field(select, "targetList");
  if (select.value("op", "SETOP_NONE") != "SETOP_NONE") {
    refuse(target.location, "the rows come from a set operation (UNION, INTERSECT, EXCEPT)");
  }
  if (cols == nullptr || targets == nullptr) refuse(target.location, "its column list is not named");
  std::size_t key_index = cols->size();
  bool has_bucket = false;
  for (std::size_t i = 0; i < cols->size(); ++i) {
    const json& column = cols->at(i).at("ResTarget");
    const std::string name = column.value("name", "");
    if ((name == key || name == kBucketColumn) && Field(column, "indirection") != nullptr) {
      refuse(LocationOf(cols->at(i)), fmt::format("{} is given with a subscript or field", name));
    }
    if (name == key) key_index = i;
    has_bucket = has_bucket || name == kBucketColumn;
  }
  if (key_index == cols->size()) {
    Refuse(target.location, fmt::format("INSERT INTO {}", target.display), fmt::format("its column list lacks {}", key),
           fmt::format("give {}: it says which shard the row belongs on", key));
  }
  for (const json& item : *targets) {
    const json* column = Field(item.at("ResTarget").at("val"), "ColumnRef");
    if (column != nullptr && Field(column->at("fields").back(), "A_Star") != nullptr) {
      refuse(LocationOf(item), "its select list has *, so where customer_id comes from is not known");
    }
  }
  if (targets->size() != cols->size()) {
    refuse(LocationOf(targets->front()), "its select list does not give one value per named column");
  }
  const json& key_value = targets->at(key_index).at("ResTarget").at("val");
  const std::optional<KeySource> source = KeyConstant(key_value);
  if (!source) {
    refuse(LocationOf(key_value), fmt::format("the {} it inserts is neither a literal nor a parameter, so its shard is "
                                              "not known before it runs",
                                              key));
  }
  plan_.rows.push_back(InsertRow{*source, -1});
  AnalyzeSelect(select, nullptr, ctes);
  if (!has_bucket) FindSelectSplicePlaces(insert, select);
  if (const json* returning = Field(insert, "returningList"); returning != nullptr) {
    Walk(*returning, target_level, ctes);
  }
}

// ON CONFLICT on a unique key that includes the shard key: a conflicting
// row is then the same customer's, on the row's own shard, so the shard
// decides exactly as one server would. Any other arbiter (no columns named,
// ON CONSTRAINT, a key without customer_id) may conflict with another
// customer's row on another shard.
void Analyzer::AnalyzeOnConflict(const json& conflict, Level& level, const CteScope* ctes) {
  const std::string& key = catalog_.KeyColumn();
  const json* infer = Field(conflict, "infer");
  if (infer != nullptr && Field(*infer, "InferClause") != nullptr) infer = Field(*infer, "InferClause");
  bool keyed = false;
  if (infer != nullptr) {
    if (const json* elements = Field(*infer, "indexElems"); elements != nullptr) {
      for (const json& element : *elements) {
        const json* index_element = Field(element, "IndexElem");
        keyed = keyed || (index_element != nullptr && index_element->value("name", "") == key);
      }
    }
  }
  if (!keyed) {
    Refuse(LocationOf(conflict),
           infer != nullptr && Field(*infer, "conname") != nullptr ? "ON CONFLICT ON CONSTRAINT" : "ON CONFLICT",
           fmt::format("only a conflict on a unique key that includes {0} is sure to be with the row's own "
                       "shard's rows; another customer's row it conflicts with may be on another shard",
                       key),
           fmt::format("name the unique key's columns, {} among them: ON CONFLICT ({}, ...)", key, key));
  }
  if (const json* sets = Field(conflict, "targetList"); sets != nullptr) {
    for (const json& set : *sets) {
      const std::string name = set.at("ResTarget").value("name", "");
      if (name == key || name == kBucketColumn) {
        Refuse(LocationOf(set), fmt::format("DO UPDATE SET {}", name),
               "changing the shard key or the bucket would move the row to another customer's shard",
               "delete the row and insert it for the new customer");
      }
    }
  }
  Walk(conflict, level, ctes);
}

void Analyzer::AnalyzeUpdateOrDelete(const json& statement, bool update) {
  const CteScope* ctes = AnalyzeWith(Field(statement, "withClause"), nullptr, nullptr);
  Level& level = NewLevel(nullptr);
  Entry* target = AddTable(statement.at("relation"), level, ctes, true);
  level.from.push_back(Leaf(target));
  if (update) {
    for (const json& set : statement.at("targetList")) {
      const std::string name = set.at("ResTarget").value("name", "");
      if (name == catalog_.KeyColumn() || name == kBucketColumn) {
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

// ---- expressions: subqueries and functions anywhere ----

void Analyzer::WalkExcept(const json& object, Level& level, const CteScope* ctes,
                          std::initializer_list<const char*> skip) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::any_of(skip.begin(), skip.end(), [&](const char* s) { return it.key() == s; })) continue;
    Walk(it.value(), level, ctes);
  }
}

void Analyzer::Walk(const json& node, Level& level, const CteScope* ctes) {
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

void Analyzer::CheckFunction(const json& call) const {
  const json& names = call.at("funcname");
  const std::optional<std::string> name = names.empty() ? std::nullopt : StringValue(names.back());
  if (!name) return;
  static const std::set<std::string> kRefused = {"set_config", "nextval", "setval", "currval", "lastval"};
  if (kRefused.contains(*name)) {
    Refuse(call.value("location", -1), fmt::format("the function {}", *name),
           "its effect or value differs per shard (sequences and settings are each shard's own)",
           "use shardkit's ID generators for keys, and Cluster::Run for settings");
  }
  if (!catalog_.IsKnownFunction(*name)) {
    // Never taken for a plain function: it may be an aggregate, whose
    // shards' values a scatter would return one per shard.
    throw NotInCatalog(Refusal(parsed_.text, call.value("location", -1), fmt::format("the function {}", *name),
                               "the shards have no function of that name",
                               "create it on every shard with a migration (shardctl migrate), or check its name"));
  }
  if (catalog_.IsUserFunction(*name)) {
    Refuse(call.value("location", -1), fmt::format("the function {}", *name),
           "it is not built in, so it may read sharded tables the router cannot see",
           "write its query into the statement, or call it inside Cluster::Run");
  }
}

int Analyzer::LockingLocation() const {
  const auto& tokens = parsed_.tokens;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (shardkit::detail::Upper(parsed_.TokenText(tokens[i])) != "FOR") continue;
    const std::string next = shardkit::detail::Upper(parsed_.TokenText(tokens[i + 1]));
    if (next == "UPDATE" || next == "SHARE" || next == "NO" || next == "KEY") return tokens[i].start;
  }
  return -1;
}

void CountParameters(const json& node, SqlPlan& plan) {
  if (node.is_array()) {
    for (const json& element : node) CountParameters(element, plan);
    return;
  }
  if (!node.is_object()) return;
  if (const json* param = Field(node, "ParamRef"); param != nullptr) {
    if (const int number = param->value("number", 0); number > plan.parameter_count) {
      plan.parameter_count = number;
      plan.last_parameter_location = param->value("location", -1);
    }
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) CountParameters(it.value(), plan);
}

void Analyzer::CheckEverythingSeen(const json& node) const {
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

void Analyzer::FindSplicePlaces(const json& insert, int rows) {
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

// Where `, bucket` goes in the column list and `, <bucket>` after the
// SELECT's last output column (before its FROM, WHERE, ... at depth 0).
void Analyzer::FindSelectSplicePlaces(const json& insert, const json& select) {
  const auto& tokens = parsed_.tokens;
  const auto fail = [&]() {
    Refuse(LocationOf(insert.at("relation")), "INSERT without bucket",
           "the places to add the bucket column and value were not found",
           "give bucket = bucket_of(customer_id) yourself");
  };
  std::size_t i = parsed_.TokenAt(insert.at("relation").value("location", 0));
  while (i < tokens.size() && tokens[i].kind != '(') ++i;
  int depth = 0;
  std::size_t close = i;
  for (; close < tokens.size(); ++close) {
    if (tokens[close].kind == '(') ++depth;
    if (tokens[close].kind == ')' && --depth == 0) break;
  }
  if (close >= tokens.size() || tokens[close].start < LocationOf(insert.at("cols").back())) fail();
  plan_.columns_close_paren = tokens[close].start;
  static const std::set<std::string> kAfterTargets = {"FROM",      "WHERE",  "GROUP",     "HAVING", "WINDOW", "ORDER",
                                                      "LIMIT",     "OFFSET", "FETCH",     "FOR",    "INTO",   "ON",
                                                      "RETURNING", "UNION",  "INTERSECT", "EXCEPT"};
  std::size_t t = parsed_.TokenAt(LocationOf(select.at("targetList").back()));
  if (t == 0 || t >= tokens.size()) fail();
  depth = 0;
  for (; t < tokens.size(); ++t) {
    if (tokens[t].kind == '(' || tokens[t].kind == '[') ++depth;
    if (tokens[t].kind == ')' || tokens[t].kind == ']') --depth;
    if (depth < 0 || tokens[t].kind == ';' ||
        (depth == 0 && kAfterTargets.contains(shardkit::detail::Upper(parsed_.TokenText(tokens[t]))))) {
      break;
    }
  }
  plan_.rows.back().close_paren = tokens[t - 1].end;
}

void Analyzer::Finish() {
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
  std::sort(sharded_.begin(), sharded_.end(), [](const Entry* a, const Entry* b) { return a->location < b->location; });
  std::vector<const Entry*> unpinned;
  for (const Entry* e : sharded_) {
    const auto& pins = pins_[static_cast<std::size_t>(Find(e->node))];
    if (pins.empty() && !e->write_target && plan_.statement == "SELECT") {
      unpinned.push_back(e);
      continue;
    }
    if (pins.empty() && e->write_target && sharded_.size() == 1) {
      // UPDATE/DELETE ... WHERE customer_id IN (...): routed when its
      // customers share a bucket (RequireOneShard checks at execution).
      for (const auto& [entry, set] : key_sets_) {
        if (entry == e) plan_.key_sets.push_back(set);
      }
      if (!plan_.key_sets.empty()) continue;
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
  if (locking_ && (!unpinned.empty() || sharded_.empty())) {
    Refuse(LockingLocation(), "a locking clause (FOR UPDATE/SHARE) over every shard",
           sharded_.empty() ? "reference tables are copies on every shard: locking one copy locks none of the others"
                            : "rows locked on several shards are not locked together in one transaction",
           "pin customer_id to one customer to lock its rows (Cluster::Execute, or inside Cluster::Transact)");
  }
  if (locked_reference_) {
    // Pinned to one customer, a lock on a reference table's rows would
    // lock the copy on that customer's shard only.
    const LockedReference& locked = *locked_reference_;
    Refuse(locked.location, fmt::format("the locking clause {} on the reference table {}", locked.clause, locked.table),
           fmt::format("{} is a reference table, a copy on every shard: only the copy on this customer's shard would "
                       "be locked, and transactions on the other shards would not wait for it",
                       locked.table),
           fmt::format("lock the sharded rows with FOR UPDATE OF {} (name only sharded tables in OF); to make "
                       "transactions of customers on different shards wait for one another, have them all lock one "
                       "thing in one place (an advisory lock, or a row of a table, on one server)",
                       locked.sharded_alias.empty() ? "<sharded alias>" : locked.sharded_alias));
  }
  if (!unpinned.empty()) {
    RequireScatterable(unpinned);
    plan_.kind = SqlPlanInfo::Kind::kScatter;
    plan_.keys.clear();
    // A top-level WHERE's `customer_id IN (...)` on any of the tables
    // (joined on customer_id, so one customer per joined row) bounds every
    // row to those customers, whose rows are on their buckets' shards only.
    for (const auto& [entry, set] : key_sets_) {
      if (entry->level == top_level_) plan_.key_sets.push_back(set);
    }
    return;
  }
  std::optional<KeySource> literal;
  for (const KeySource& k : plan_.keys) {
    if (!k.literal) continue;
    if (literal && !(*literal->literal == *k.literal)) {
      Refuse(k.location, fmt::format("{} = {}", plan_.key_column, *k.literal),
             fmt::format("the statement reads {}s {} and {}, whose rows may be on different shards", plan_.KeyNoun(),
                         *literal->literal, *k.literal),
             fmt::format("run one statement per {}", plan_.key_column));
    }
    literal = k;
  }
  for (const InsertRow& row : plan_.rows) {
    if (!plan_.keys.empty() && row.key.literal && literal && !(*row.key.literal == *literal->literal)) {
      Refuse(row.key.location, fmt::format("{} = {}", plan_.key_column, *row.key.literal),
             fmt::format("the INSERT reads {0} {1}'s rows and writes {0} {2}'s", plan_.KeyNoun(), *literal->literal,
                         *row.key.literal),
             fmt::format("read and write one {} per statement", plan_.key_column));
    }
  }
  if (plan_.statement == "SELECT" && sharded_.empty()) plan_.kind = SqlPlanInfo::Kind::kAnyShard;
}

void Analyzer::RequireScatterable(const std::vector<const Entry*>& unpinned) {
  if (parsed_.tree.begin().value().value("op", "SETOP_NONE") != "SETOP_NONE") {
    Refuse(unpinned.front()->location, "a set operation (UNION, INTERSECT, EXCEPT) over sharded tables",
           "combining set operations across shards is not supported yet",
           "run each arm as a statement of its own and combine the answers, or pin customer_id in every arm");
  }
  for (const Entry* e : unpinned) {
    if (e->level != top_level_) {
      Refuse(
          e->location, fmt::format("the table {}", e->display),
          "its customer_id is not pinned in a subquery or CTE, which in a statement over every shard would read "
          "each shard's rows only",
          fmt::format("pin {}.customer_id, or move the table into the top-level FROM joined on customer_id", e->name));
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
  for (const auto& item : top_level_->from) RequirePartitionedPreservedSides(*item);
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

void Analyzer::RequirePartitionedPreservedSides(const FromItem& item) {
  if (item.entry != nullptr) return;
  RequirePartitionedPreservedSides(*item.left);
  RequirePartitionedPreservedSides(*item.right);
  const auto has_sharded = [](const FromItem& side) {
    return std::any_of(side.entries.begin(), side.entries.end(),
                       [](const Entry* e) { return e->kind == Entry::Kind::kSharded; });
  };
  const bool left = has_sharded(*item.left);
  const bool right = has_sharded(*item.right);
  const bool left_preserved = item.join_type == "JOIN_LEFT" || item.join_type == "JOIN_FULL";
  const bool right_preserved = item.join_type == "JOIN_RIGHT" || item.join_type == "JOIN_FULL";
  const FromItem* replicated = nullptr;
  if (left_preserved && !left && right) replicated = item.left.get();
  if (right_preserved && !right && left) replicated = item.right.get();
  if (replicated == nullptr) return;
  // Every shard holds the whole preserved side (a reference table, a
  // subquery or function over them): each would add its own NULL-extended
  // row for a row matched on another shard, or on none.
  const Entry* first = replicated->entries.empty() ? nullptr : replicated->entries.front();
  const std::string side = first == nullptr ? std::string("its preserved side") : first->display;
  const std::string type = item.join_type == "JOIN_LEFT" ? "LEFT" : item.join_type == "JOIN_RIGHT" ? "RIGHT" : "FULL";
  const int location = replicated->location >= 0 ? replicated->location : first != nullptr ? first->location : -1;
  Refuse(location, fmt::format("the {} JOIN that preserves {}", type, side),
         fmt::format("{} is on every shard while the joined sharded rows are spread over them, so each shard would "
                     "add its own unmatched (NULL-extended) rows and the shards' answers cannot be combined exactly",
                     side),
         "pin customer_id to one customer, or preserve the sharded table's side (e.g. orders LEFT JOIN books), or "
         "use an inner join");
}

}  // namespace shardkit::sql::detail
