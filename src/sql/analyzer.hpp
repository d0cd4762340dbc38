// The routing analysis: every FROM item of every query level becomes an
// entry; each sharded entry's customer_id is a node, and the equalities
// found in AND-conjuncts join nodes (symmetric: WHERE, inner JOIN ON),
// direct a value from one node to another (preserved -> nullable side of an
// outer join, outer query level -> correlated subquery) or pin a node to a
// constant or parameter. A statement routes when every sharded entry ends
// up pinned, all to one value. Whatever the analysis does not understand
// pins nothing, so it is refused, never routed on a guess.
//
// PlanStatement (router.cpp) runs it. The Analyzer's members are defined by
// what they analyse: the statements, the walk of their expressions and the
// decision in analyzer_statements.cpp; FROM items and column references in
// analyzer_from.cpp; the customer_id nodes, constants and facts in
// analyzer_keys.cpp; locking clauses on reference tables in
// analyzer_locking.cpp.
#pragma once

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/integer_text.hpp"
#include "sql/parse.hpp"
#include "sql/router.hpp"
#include "sql/sql_catalog.hpp"

namespace shardkit::sql::detail {

using shardkit::detail::ParseIntegerDigits;
using shardkit::detail::ParseIntegerText;

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

inline const json* Field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

inline int LocationOf(const json& node) {
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
inline std::optional<std::string> StringValue(const json& node) {
  const json* s = Field(node, "String");
  if (s == nullptr) return std::nullopt;
  const json* v = Field(*s, "sval");
  return v != nullptr && v->is_string() ? std::optional<std::string>(v->get<std::string>())
                                        : std::optional<std::string>("");
}

inline std::string StatementName(const std::string& node_type) {
  if (node_type == "SelectStmt") return "SELECT";
  if (node_type == "InsertStmt") return "INSERT";
  if (node_type == "UpdateStmt") return "UPDATE";
  if (node_type == "DeleteStmt") return "DELETE";
  return node_type;
}

// plan.parameter_count and its location: the highest $n anywhere in the tree.
void CountParameters(const json& node, SqlPlan& plan);

class Analyzer {
 public:
  Analyzer(const ParsedStatement& parsed, const SqlCatalog& catalog) : parsed_(parsed), catalog_(catalog) {}

  std::shared_ptr<const SqlPlan> Run();

 private:
  // analyzer_statements.cpp
  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const;
  Level& NewLevel(Level* parent);

  // The customer_id nodes: a union-find whose classes hold their pins (analyzer_keys.cpp).
  int NewNode();
  int Find(int node);
  void Union(int a, int b);
  void Pin(int node, const KeySource& key);

  // ---- statements (analyzer_statements.cpp) ----

  const CteScope* AnalyzeWith(const json* with, Level* column_parent, const CteScope* outer);
  void AnalyzeSelectNode(const json& node, Level* column_parent, const CteScope* ctes);

  // A SelectStmt's fields (set operations hold their arms so, unwrapped).
  void AnalyzeSelect(const json& select, Level* column_parent, const CteScope* ctes);

  void AnalyzeInsert(const json& insert);
  void AnalyzeInsertSelect(const json& insert, const json& select, Level& target_level, const Entry& target,
                           const CteScope* ctes);
  void AnalyzeOnConflict(const json& conflict, Level& level, const CteScope* ctes);
  void AnalyzeUpdateOrDelete(const json& statement, bool update);

  // ---- FROM items (analyzer_from.cpp) ----

  static std::optional<std::string> SchemaOf(const json& range_var);
  std::unique_ptr<FromItem> Leaf(Entry* entry);
  Entry* NewEntry(Level& level, Entry::Kind kind, std::string name, std::string display, int location);
  static std::string AliasOf(const json& node);
  Entry* AddTable(const json& range_var, Level& level, const CteScope* ctes, bool write_target);
  std::unique_ptr<FromItem> AnalyzeFromItem(const json& node, Level& level, const CteScope* ctes);
  static std::string FunctionName(const json& functions);

  // ---- column references (analyzer_from.cpp) ----

  // The customer_id columns an unqualified reference may mean in an item.
  Candidates UnqualifiedIn(const FromItem& item) const;

  // The entry a customer_id reference means, or null (another column, or
  // one the analysis cannot attribute to a table: it pins nothing).
  Entry* ResolveKey(const json& column_ref, Level* level) const;

  static bool HasAliasedJoin(const Level& level, const std::string& name);
  static std::string DisplayOf(const Candidate& c);

  // ---- constants (analyzer_keys.cpp) ----

  // An integer literal, $n, or a cast of those (or of a quoted integer) to an integer type.
  std::optional<KeySource> KeyConstant(const json& node) const;

  // ---- facts (analyzer_keys.cpp) ----

  enum class Role { kRestricted, kFixed };
  static void Conjuncts(const json& expr, std::vector<const json*>& out);
  Side SideOf(const json& expr, Level& level) const;
  template <class RoleOf>
  void Facts(const json& expr, Level& level, const RoleOf& role_of);

  // One direction of an equality: what `a` tells about `b`.
  template <class RoleOf>
  void Equate(const Side& a, const Side& b, const RoleOf& role_of);

  void WhereFacts(const json& where, Level& level);
  // `customer_id IN (...)` / `= ANY(...)` conjuncts of a WHERE on its own
  // level's tables (whatever the analysis cannot read is no set).
  void KeySetFacts(const json& where, Level& level);
  std::optional<KeySet> KeySetOf(const json& op) const;
  void JoinFacts(const FromItem& item, Level& level, const CteScope* ctes);

  // ---- expressions: subqueries and functions anywhere (analyzer_statements.cpp) ----

  void WalkExcept(const json& object, Level& level, const CteScope* ctes, std::initializer_list<const char*> skip);
  void Walk(const json& node, Level& level, const CteScope* ctes);
  void CheckFunction(const json& call) const;

  // Every table and subquery of the tree was analysed: one missed would be
  // read unpinned.
  void CheckEverythingSeen(const json& node) const;

  // ---- the decision (analyzer_statements.cpp) ----

  void FindSplicePlaces(const json& insert, int rows);
  void FindSelectSplicePlaces(const json& insert, const json& select);
  void Finish();

  // A SELECT over every shard: its unpinned sharded tables are all at the
  // top level, joined to each other on customer_id (co-located: joined rows
  // are on one shard), and no other sharded table is pinned.
  void RequireScatterable(const std::vector<const Entry*>& unpinned);
  // An outer join over every shard must preserve partitioned rows only: a
  // preserved side that is all reference tables (or subqueries, functions)
  // is refused.
  void RequirePartitionedPreservedSides(const FromItem& item);
  // Where the statement's first FOR UPDATE/SHARE is (the parse tree keeps no location).
  int LockingLocation() const;

  // ---- locking clauses on reference tables (analyzer_locking.cpp) ----

  // A SELECT level's FOR UPDATE/SHARE clauses: the first that locks rows of
  // a reference table (named in OF, or in its FROM when it names none,
  // subqueries in FROM included, WITH queries not, as PostgreSQL applies
  // it) is kept in locked_reference_, refused by Finish.
  void CheckLockedReferences(const json& select, const CteScope* ctes);
  // The reference table (its RangeVar) a lock applied to a FROM item, or to
  // a subquery's every FROM item, reaches; null when none.
  const json* LockedReferenceIn(const json& from_item, const CteScope* ctes) const;
  const json* LockedReferenceInSelect(const json& select, const CteScope* ctes) const;
  // The FROM item of a level (joins searched) that a FOR ... OF name means.
  static const json* FromItemNamed(const json& from_item, const std::string& name);
  // Where the index-th locking clause of a SELECT begins: before its OF
  // name's location when it has one, else counted after the SELECT's body.
  int LockingClauseLocation(const json& select, std::size_t index, const json* of_rel) const;

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
  std::vector<std::pair<const Entry*, KeySet>> key_sets_;
  bool locking_ = false;  // FOR UPDATE/SHARE at some level
  struct LockedReference {
    int location = -1;
    std::string clause;         // "FOR UPDATE OF b"
    std::string table;          // "books"
    std::string sharded_alias;  // a sharded table's name at the clause's level, or empty
  };
  std::optional<LockedReference> locked_reference_;
};

}  // namespace shardkit::sql::detail
