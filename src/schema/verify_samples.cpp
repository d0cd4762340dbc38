// Sample rows for the findings (verify_samples.hpp).
#include "schema/verify_samples.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

namespace shardkit::detail {

// "(customer_id, order_id) = (4242, 17)"
std::string DescribeKey(const std::vector<std::string>& columns, const std::vector<std::string>& values) {
  std::string names, text;
  for (const auto& c : columns) names += (names.empty() ? "" : ", ") + c;
  for (const auto& v : values) text += (text.empty() ? "" : ", ") + v;
  return fmt::format("({}) = ({})", names, text);
}

// Up to `limit` primary keys (as text) of `table` rows matching `where`.
std::vector<std::vector<std::string>> SampleKeys(pqxx::connection_base& c, const std::string& table,
                                                 const std::vector<std::string>& key, const std::string& where,
                                                 int limit, const std::vector<int>& params) {
  pqxx::read_transaction tx{c, "verify sample"};
  std::string columns;
  for (const auto& k : key) columns += (columns.empty() ? "" : ", ") + tx.quote_name(k) + "::text";
  if (columns.empty()) columns = "t::text";
  pqxx::result rows;
  const std::string sql =
      fmt::format("SELECT {} FROM {} AS t WHERE {} LIMIT {}", columns, tx.quote_name(table), where, limit);
  if (params.size() == 1) {
    rows = tx.exec_params(sql, params[0]);
  } else {
    rows = tx.exec(sql);
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& row : rows) {
    std::vector<std::string> values;
    for (const auto& field : row) values.push_back(field.is_null() ? "NULL" : field.as<std::string>());
    out.push_back(std::move(values));
  }
  return out;
}

bool HasKey(pqxx::connection_base& c, const std::string& table, const std::vector<std::string>& key,
            const std::vector<std::string>& values) {
  pqxx::read_transaction tx{c, "verify owner"};
  std::string where;
  for (std::size_t i = 0; i < key.size(); ++i) {
    where += fmt::format("{}{}::text = {}", i ? " AND " : "", tx.quote_name(key[i]), tx.quote(values[i]));
  }
  // The key's columns as text: exact for the integer keys of sharded tables;
  // customer_id first lets the primary key index find the customer's rows.
  const std::string sql = fmt::format(
      "SELECT EXISTS (SELECT 1 FROM {} WHERE {}{})", tx.quote_name(table), key.empty() ? "false" : where,
      key.empty() || key[0] != "customer_id" ? std::string()
                                             : fmt::format(" AND customer_id = {}::integer", tx.quote(values[0])));
  return tx.exec1(sql)[0].as<bool>();
}

// key (as text) -> row hash, of a whole table.
std::map<std::vector<std::string>, std::int64_t> RowHashes(pqxx::connection_base& c, const std::string& table,
                                                           const std::vector<std::string>& key) {
  pqxx::read_transaction tx{c, "verify diff"};
  std::string columns;
  for (const auto& k : key) columns += tx.quote_name(k) + "::text, ";
  if (key.empty()) columns = "t::text, ";
  std::map<std::vector<std::string>, std::int64_t> out;
  for (const auto& row :
       tx.exec(fmt::format("SELECT {}hashtextextended(t::text, 0) FROM {} AS t", columns, tx.quote_name(table)))) {
    std::vector<std::string> k;
    for (std::size_t i = 0; i + 1 < row.size(); ++i)
      k.push_back(row[static_cast<pqxx::row::size_type>(i)].is_null()
                      ? "NULL"
                      : row[static_cast<pqxx::row::size_type>(i)].as<std::string>());
    const auto hash = row[static_cast<pqxx::row::size_type>(row.size() - 1)].as<std::int64_t>();
    out[std::move(k)] += hash;  // without a key, equal rows add up
  }
  return out;
}

}  // namespace shardkit::detail
