// What the SQL layer knows of the shards' schema: the sharded tables (those
// registered in shardkit_sharded_tables, sql/010 and sql/038: each with its
// shard key column, and the bucket column bucket), the reference tables the configuration declares
// ([sql] reference_tables) with their columns (names, type OIDs and NOT
// NULL), the names of every function, of those that are not built in (they
// may read tables the router cannot see) and of the aggregates (looked up,
// not guessed: a scatter must never return each shard's value of an
// aggregate it does not recognise, so a name the catalog does not list is
// never taken for a plain function), and the schema version it was read at.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/core/shard_key.hpp"
#include "shardkit/errors.hpp"

namespace pqxx {
class connection_base;
class transaction_base;
}  // namespace pqxx

namespace shardkit::sql {

inline constexpr const char* kDefaultKeyColumn = "customer_id";
inline constexpr const char* kBucketColumn = "bucket";

// Type OIDs the planner tells apart (pg_type.h).
inline constexpr unsigned kInt8Oid = 20;
inline constexpr unsigned kInt2Oid = 21;
inline constexpr unsigned kInt4Oid = 23;
inline constexpr unsigned kNumericOid = 1700;
inline constexpr unsigned kTextOid = 25;
inline constexpr unsigned kVarcharOid = 1043;
inline constexpr unsigned kUuidOid = 2950;

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
  std::string oid = {};  // pg_class's, as text, when read from a shard
  // A sharded table's shard key.
  std::string key_column = kDefaultKeyColumn;
  ShardKeyType key_type = ShardKeyType::kInt4;
  [[nodiscard]] bool HasColumn(const std::string& column) const;
  // The column's type and NOT NULL, or null when not known.
  [[nodiscard]] const SqlColumnFacts* Facts(const std::string& column) const;
};

// The SQL layer reads one shard key column name for the whole cluster (a
// statement's tables are joined and pinned on it): the name the
// application's sharded tables share. Tables sharded by another name
// (shardkit's own, customer_id, in a service keyed by tenant_id) are kept
// apart: a statement that reads them is refused, naming both keys.
class SqlCatalog {
 public:
  // Sets the cluster's key from the tables added so far (LoadSqlCatalog
  // calls it; a catalog made by hand without it keeps customer_id integer).
  void ChooseKey();
  void AddSharded(SqlTable table) { sharded_.push_back(std::move(table)); }
  void AddReference(SqlTable table) { reference_.push_back(std::move(table)); }
  void AddUserFunction(std::string name) { user_functions_.insert(std::move(name)); }
  void AddAggregate(std::string name) { aggregates_.insert(std::move(name)); }
  // Any function (aggregates too); once one is added, names not added are
  // unknown (a catalog made by hand without functions knows every name).
  void AddFunction(std::string name) { functions_.insert(std::move(name)); }
  // Every function of that name is IMMUTABLE: its value is the same on
  // every server, so a filter calling it may run on the shards.
  void AddImmutableFunction(std::string name) { immutable_functions_.insert(std::move(name)); }
  void SetSchemaVersion(std::string version) { schema_version_ = std::move(version); }

  [[nodiscard]] const std::string& KeyColumn() const { return key_column_; }
  [[nodiscard]] ShardKeyType KeyType() const { return key_type_; }
  // A registered table sharded by a key other than KeyColumn() (or of
  // another kind of type), or null.
  [[nodiscard]] const SqlTable* FindOtherKeyed(const std::optional<std::string>& schema, const std::string& name) const;
  // The table a FROM item names (schema-qualified or by search_path), or null.
  [[nodiscard]] const SqlTable* FindSharded(const std::optional<std::string>& schema, const std::string& name) const;
  [[nodiscard]] const SqlTable* FindReference(const std::optional<std::string>& schema, const std::string& name) const;
  [[nodiscard]] bool IsUserFunction(const std::string& name) const { return user_functions_.contains(name); }
  // An aggregate function of that name exists (pg_proc), whatever its arguments.
  [[nodiscard]] bool IsAggregate(const std::string& name) const { return aggregates_.contains(name); }
  // A function of that name exists (pg_proc) when the catalog was read.
  [[nodiscard]] bool IsKnownFunction(const std::string& name) const {
    return functions_.empty() || functions_.contains(name) || aggregates_.contains(name);
  }
  [[nodiscard]] bool IsImmutableFunction(const std::string& name) const { return immutable_functions_.contains(name); }
  // What ReadSchemaVersion said when the catalog was read.
  [[nodiscard]] const std::string& SchemaVersion() const { return schema_version_; }

 private:
  std::vector<SqlTable> sharded_;
  std::vector<SqlTable> other_keyed_;
  std::vector<SqlTable> reference_;
  std::string key_column_ = kDefaultKeyColumn;
  ShardKeyType key_type_ = ShardKeyType::kInt4;
  std::set<std::string> user_functions_;
  std::set<std::string> aggregates_;
  std::set<std::string> functions_;
  std::set<std::string> immutable_functions_;
  std::string schema_version_;
};

// A statement names a function or table the catalog does not list. The
// engine reads the catalog again (the name may be newer than its copy) and
// plans once more; a name still unknown is refused with this error.
class NotInCatalog : public SqlError {
 public:
  explicit NotInCatalog(SqlError refusal) : SqlError(std::move(refusal)) {}
};

// A table sharded by another key than the cluster's: its refusal names
// both keys as they are (not rewritten for the cluster's key).
class OtherKeyRefusal : public SqlError {
 public:
  explicit OtherKeyRefusal(SqlError refusal) : SqlError(std::move(refusal)) {}
};

// What changes when the schema does: the highest migration applied, the
// registered sharded tables, the newest function (CREATE FUNCTION or
// AGGREGATE by hand too). One round trip.
[[nodiscard]] std::string ReadSchemaVersion(pqxx::transaction_base& tx);

// Reads the catalog from one shard. A declared reference table the shard
// does not have is kept with its name only (no columns).
[[nodiscard]] SqlCatalog LoadSqlCatalog(pqxx::connection_base& connection,
                                        const std::vector<std::string>& reference_tables);

}  // namespace shardkit::sql
