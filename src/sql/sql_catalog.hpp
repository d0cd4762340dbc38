// What the SQL layer knows of the shards' schema: the sharded tables (those
// registered in shardkit_sharded_tables, sql/010: shard key customer_id,
// bucket column bucket), the reference tables the configuration declares
// ([sql] reference_tables) with their columns (names, type OIDs and NOT
// NULL), and the names of functions
// that are not built in (they may read tables the router cannot see), and
// the names of the aggregates (looked up, not guessed: a scatter must never
// return each shard's value of an aggregate it does not recognise).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pqxx {
class connection_base;
}

namespace shardkit::sql {

inline constexpr const char* kShardKeyColumn = "customer_id";
inline constexpr const char* kBucketColumn = "bucket";

// Type OIDs the planner tells apart (pg_type.h).
inline constexpr unsigned kInt8Oid = 20;
inline constexpr unsigned kInt2Oid = 21;
inline constexpr unsigned kInt4Oid = 23;
inline constexpr unsigned kNumericOid = 1700;

// What pg_attribute says of a column.
struct SqlColumnFacts {
  unsigned type = 0;  // atttypid (a domain's own OID, not its base type's)
  bool not_null = false;
};

struct SqlTable {
  std::string schema;  // "public"
  std::string name;    // "orders"
  // Found by its unqualified name through the connection's search_path.
  bool visible = true;
  std::vector<std::string> columns;  // in table order; empty: not known
  // Parallel to columns when read from a shard; empty when not known (a
  // catalog made by hand).
  std::vector<SqlColumnFacts> facts = {};
  [[nodiscard]] bool HasColumn(const std::string& column) const;
  // The column's type and NOT NULL, or null when not known.
  [[nodiscard]] const SqlColumnFacts* Facts(const std::string& column) const;
};

class SqlCatalog {
 public:
  void AddSharded(SqlTable table) { sharded_.push_back(std::move(table)); }
  void AddReference(SqlTable table) { reference_.push_back(std::move(table)); }
  void AddUserFunction(std::string name) { user_functions_.insert(std::move(name)); }
  void AddAggregate(std::string name) { aggregates_.insert(std::move(name)); }

  // The table a FROM item names (schema-qualified or by search_path), or null.
  [[nodiscard]] const SqlTable* FindSharded(const std::optional<std::string>& schema, const std::string& name) const;
  [[nodiscard]] const SqlTable* FindReference(const std::optional<std::string>& schema, const std::string& name) const;
  [[nodiscard]] bool IsUserFunction(const std::string& name) const { return user_functions_.contains(name); }
  // An aggregate function of that name exists (pg_proc), whatever its arguments.
  [[nodiscard]] bool IsAggregate(const std::string& name) const { return aggregates_.contains(name); }

 private:
  std::vector<SqlTable> sharded_;
  std::vector<SqlTable> reference_;
  std::set<std::string> user_functions_;
  std::set<std::string> aggregates_;
};

// Reads the catalog from one shard. A declared reference table the shard
// does not have is kept with its name only (no columns).
[[nodiscard]] SqlCatalog LoadSqlCatalog(pqxx::connection_base& connection,
                                        const std::vector<std::string>& reference_tables);

}  // namespace shardkit::sql
