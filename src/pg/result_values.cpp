// A server's rows as Values (result_values.hpp).
#include "shardkit/pg/result_values.hpp"

#include <pqxx/pqxx>
#include <string_view>
#include <utility>
#include <vector>

namespace shardkit {

Value ReadValue(const pg::Field& field, TypeOid type) {
  if (field.is_null()) return Value::Null();
  return ReadValue(field.view(), type);
}

Value ReadValue(const pqxx::field& field, TypeOid type) {
  if (field.is_null()) return Value::Null();
  return ReadValue(std::string_view(field.c_str(), field.size()), type);
}

namespace {

// pg::Rows or pqxx::result (the same spellings).
template <class Result>
ResultSet ReadResults(const Result& result) {
  ResultSet set;
  const auto columns = result.columns();
  std::vector<TypeOid> types;
  for (pqxx::row_size_type c = 0; c < columns; ++c) {
    set.column_names.emplace_back(result.column_name(c));
    types.push_back(result.column_type(c));
    set.column_types.push_back(TypeInfoFor(types.back()).name);
  }
  set.rows.reserve(result.size());
  for (const auto& row : result) {
    std::vector<Value> values;
    values.reserve(columns);
    for (pqxx::row_size_type c = 0; c < columns; ++c) {
      values.push_back(ReadValue(row[c], types[c]));
    }
    set.rows.push_back(std::move(values));
  }
  return set;
}

}  // namespace

ResultSet ReadResultSet(const pg::Rows& result) {
  return ReadResults(result);
}

ResultSet ReadResultSet(const pqxx::result& result) {
  return ReadResults(result);
}

}  // namespace shardkit
