// shardkit/pg/result_values.hpp — a server's rows read as typed Values
// (core/value.hpp), each field by its column's type OID.
//
//   shardkit::ResultSet rows = shardkit::ReadResultSet(shard.rows);   // pg::Rows or pqxx::result
//   rows.column_types[2];             // "numeric"
//   rows.rows[0][2].AsDecimal();      // exact, as the server printed it
#pragma once

#include "shardkit/core/value.hpp"
#include "shardkit/pg/rows.hpp"

namespace pqxx {
class field;
class result;
}  // namespace pqxx

namespace shardkit {

// A field's value as its column's type says (see TypeInfoFor). Throws
// shardkit::Error for text that does not parse or for non-finite numerics.
[[nodiscard]] Value ReadValue(const pg::Field& field, TypeOid type);
[[nodiscard]] Value ReadValue(const pqxx::field& field, TypeOid type);

[[nodiscard]] ResultSet ReadResultSet(const pg::Rows& result);
[[nodiscard]] ResultSet ReadResultSet(const pqxx::result& result);

}  // namespace shardkit
