// The follow-up queries that give a finding its evidence: sample keys of
// rows, whether another server has a row, every row's hash by key.
#pragma once

#include <cstdint>
#include <map>
#include <pqxx/connection>
#include <string>
#include <vector>

namespace shardkit::detail {

// "(customer_id, order_id) = (4242, 17)"
[[nodiscard]] std::string DescribeKey(const std::vector<std::string>& columns, const std::vector<std::string>& values);

// Up to `limit` primary keys (as text) of `table` rows matching `where`.
// `params`: the value of $1 in `where`, if it has one.
[[nodiscard]] std::vector<std::vector<std::string>> SampleKeys(pqxx::connection_base& c, const std::string& table,
                                                               const std::vector<std::string>& key,
                                                               const std::string& where, int limit,
                                                               const std::vector<int>& params);

// Does `table` on `c` have the row whose key columns `key` have the text
// `values`?
[[nodiscard]] bool HasKey(pqxx::connection_base& c, const std::string& table, const std::vector<std::string>& key,
                          const std::vector<std::string>& values);

// key (as text) -> row hash, of a whole table.
[[nodiscard]] std::map<std::vector<std::string>, std::int64_t> RowHashes(pqxx::connection_base& c,
                                                                         const std::string& table,
                                                                         const std::vector<std::string>& key);

}  // namespace shardkit::detail
