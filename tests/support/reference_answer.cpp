#include "support/reference_answer.hpp"

#include <pqxx/pqxx>

namespace shardkit::test {

ReferenceAnswer AnswerOnReference(const ScratchCluster& cluster, const std::string& sql, const SqlParams& params) {
  pqxx::connection c{cluster.ReferenceDsn().Reveal()};
  pqxx::nontransaction tx{c};
  // The shards' pinned session (session.hpp).
  tx.exec(
      "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 3; "
      "SET IntervalStyle = 'postgres'");
  const pqxx::result r = tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params));
  ReferenceAnswer out;
  for (pqxx::row::size_type col = 0; col < r.columns(); ++col) {
    out.columns.emplace_back(r.column_name(col));
    out.types.push_back(static_cast<unsigned>(r.column_type(col)));
  }
  for (const auto& row : r) {
    auto& values = out.rows.emplace_back();
    for (const auto& f : row) {
      values.push_back(f.is_null() ? std::nullopt : std::optional<std::string>(std::string(f.c_str(), f.size())));
    }
  }
  return out;
}

}  // namespace shardkit::test
