#include "sql/sql_catalog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

namespace shardkit::sql {
namespace {

const SqlTable* Find(const std::vector<SqlTable>& tables, const std::optional<std::string>& schema,
                     const std::string& name) {
  for (const SqlTable& t : tables) {
    if (t.name != name) continue;
    if (schema ? t.schema == *schema : t.visible) return &t;
  }
  return nullptr;
}

// One row per column of the tables the query's WHERE selects (by c.oid).
std::vector<SqlTable> ReadTables(pqxx::transaction_base& tx, const std::string& where, const std::string& param) {
  const std::string sql =
      "SELECT n.nspname, c.relname, pg_table_is_visible(c.oid), a.attname, a.atttypid, a.attnotnull, c.oid "
      "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
      "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
      "WHERE " +
      where + " ORDER BY c.oid, a.attnum";
  const pqxx::result rows = param.empty() ? tx.exec(sql) : tx.exec_params(sql, param);
  std::vector<SqlTable> tables;
  for (const auto& row : rows) {
    const std::string schema = row[0].c_str();
    const std::string name = row[1].c_str();
    if (tables.empty() || tables.back().schema != schema || tables.back().name != name) {
      tables.push_back(SqlTable{schema, name, row[2].as<bool>(), {}});
      tables.back().oid = row[6].c_str();
    }
    tables.back().columns.emplace_back(row[3].c_str());
    tables.back().facts.push_back(SqlColumnFacts{row[4].as<unsigned>(), row[5].as<bool>()});
  }
  return tables;
}

std::optional<ShardKeyType> ShardKeyTypeOfOid(unsigned type) {
  switch (type) {
    case kInt4Oid:
      return ShardKeyType::kInt4;
    case kInt8Oid:
      return ShardKeyType::kInt8;
    case kUuidOid:
      return ShardKeyType::kUuid;
    case kTextOid:
    case kVarcharOid:
      return ShardKeyType::kText;
    default:
      return std::nullopt;
  }
}

}  // namespace

bool SqlTable::HasColumn(const std::string& column) const {
  return std::find(columns.begin(), columns.end(), column) != columns.end();
}

const SqlColumnFacts* SqlTable::Facts(const std::string& column) const {
  if (facts.size() != columns.size()) return nullptr;
  const auto it = std::find(columns.begin(), columns.end(), column);
  return it == columns.end() ? nullptr : &facts[static_cast<std::size_t>(it - columns.begin())];
}

const SqlTable* SqlCatalog::FindSharded(const std::optional<std::string>& schema, const std::string& name) const {
  return Find(sharded_, schema, name);
}

const SqlTable* SqlCatalog::FindOtherKeyed(const std::optional<std::string>& schema, const std::string& name) const {
  return Find(other_keyed_, schema, name);
}

namespace {
// integer and bigint keys hash alike in the integer range (shard_key.hpp).
bool SameKind(ShardKeyType a, ShardKeyType b) {
  const auto integer = [](ShardKeyType t) { return t == ShardKeyType::kInt4 || t == ShardKeyType::kInt8; };
  return a == b || (integer(a) && integer(b));
}
}  // namespace

void SqlCatalog::ChooseKey() {
  // The most common key among the application's tables (shardkit's own
  // count only when there are no others).
  std::map<std::string, int> votes;
  for (const SqlTable& t : sharded_) {
    if (!t.name.starts_with("shardkit_")) ++votes[t.key_column];
  }
  if (votes.empty()) {
    for (const SqlTable& t : sharded_) ++votes[t.key_column];
  }
  if (votes.empty()) return;
  key_column_ = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
                  return a.second < b.second;
                })->first;
  // Its type: bigint if any table's is (integer values read as bigint are
  // the same keys), else the first table's.
  bool chosen = false;
  for (const SqlTable& t : sharded_) {
    if (t.key_column != key_column_ || t.name.starts_with("shardkit_")) continue;
    if (!chosen || t.key_type == ShardKeyType::kInt8) key_type_ = t.key_type;
    chosen = true;
  }
  std::vector<SqlTable> kept;
  for (SqlTable& t : sharded_) {
    (t.key_column == key_column_ && SameKind(t.key_type, key_type_) ? kept : other_keyed_).push_back(std::move(t));
  }
  sharded_ = std::move(kept);
}

const SqlTable* SqlCatalog::FindReference(const std::optional<std::string>& schema, const std::string& name) const {
  return Find(reference_, schema, name);
}

std::string ReadSchemaVersion(pqxx::transaction_base& tx) {
  const pqxx::row row = tx.exec1(
      "SELECT to_regclass('shardkit_migrations') IS NOT NULL, (SELECT count(*) FROM shardkit_sharded_tables), "
      "(SELECT max(oid::int8) FROM pg_proc)");
  // A schema set up without shardctl migrate has no history: the rest still
  // counts. The successful rows, not the highest version: the application's
  // set numbers its files below shardkit's own.
  const std::string migrated =
      row[0].as<bool>() ? tx.exec1("SELECT count(*) FILTER (WHERE success) FROM shardkit_migrations")[0].c_str() : "-";
  return fmt::format("{}/{}/{}", migrated, row[1].c_str(), row[2].c_str());
}

SqlCatalog LoadSqlCatalog(pqxx::connection_base& connection, const std::vector<std::string>& reference_tables) {
  SqlCatalog catalog;
  pqxx::read_transaction tx{connection};
  // Each table's key (sql/038; before it, customer_id).
  std::map<std::string, std::string> keys;
  const bool key_recorded =
      tx.exec1(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'shardkit_sharded_tables'::regclass "
            "AND attname = 'key_column' AND NOT attisdropped)")[0]
          .as<bool>();
  if (key_recorded) {
    for (const auto& row : tx.exec("SELECT c.oid::text, s.key_column FROM shardkit_sharded_tables s "
                                   "JOIN pg_class c ON c.oid = s.table_name")) {
      keys[row[0].c_str()] = row[1].c_str();
    }
  }
  for (SqlTable& t : ReadTables(tx, "c.oid IN (SELECT table_name FROM shardkit_sharded_tables)", "")) {
    if (const auto key = keys.find(t.oid); key != keys.end()) t.key_column = key->second;
    const SqlColumnFacts* facts = t.Facts(t.key_column);
    const std::optional<ShardKeyType> type = facts == nullptr ? std::nullopt : ShardKeyTypeOfOid(facts->type);
    if (type) t.key_type = *type;
    catalog.AddSharded(std::move(t));
  }
  catalog.ChooseKey();
  // Declared in the schema (shardkit_reference_table, sql/038) and in the configuration.
  std::vector<std::string> declared_tables = reference_tables;
  if (tx.exec1("SELECT to_regclass('shardkit_reference_tables') IS NOT NULL")[0].as<bool>()) {
    for (const auto& row : tx.exec("SELECT table_name::text FROM shardkit_reference_tables ORDER BY 1")) {
      if (std::find(declared_tables.begin(), declared_tables.end(), row[0].c_str()) == declared_tables.end()) {
        declared_tables.emplace_back(row[0].c_str());
      }
    }
  }
  for (const std::string& declared : declared_tables) {
    std::vector<SqlTable> found = ReadTables(tx, "c.oid = to_regclass($1)", declared);
    if (!found.empty()) {
      catalog.AddReference(std::move(found.front()));
      continue;
    }
    const auto dot = declared.find('.');
    if (dot == std::string::npos) {
      catalog.AddReference(SqlTable{"", declared, true, {}});
    } else {
      catalog.AddReference(SqlTable{declared.substr(0, dot), declared.substr(dot + 1), false, {}});
    }
  }
  // Functions a statement may call that the router cannot look into
  // (FirstNormalObjectId: 16384); bucket_of is shardkit's own and pure.
  for (const auto& row :
       tx.exec("SELECT DISTINCT proname FROM pg_proc WHERE oid >= 16384 AND proname <> 'bucket_of'")) {
    catalog.AddUserFunction(row[0].c_str());
  }
  for (const auto& row : tx.exec("SELECT proname, bool_or(prokind = 'a'), bool_and(provolatile = 'i') FROM pg_proc "
                                 "GROUP BY proname")) {
    catalog.AddFunction(row[0].c_str());
    if (row[1].as<bool>()) catalog.AddAggregate(row[0].c_str());
    if (row[2].as<bool>()) catalog.AddImmutableFunction(row[0].c_str());
  }
  catalog.SetSchemaVersion(ReadSchemaVersion(tx));
  tx.commit();
  return catalog;
}

}  // namespace shardkit::sql
