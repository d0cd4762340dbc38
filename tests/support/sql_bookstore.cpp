// The SQL tests' Bookstore fixture and reference-server answers (sql_bookstore.hpp).
#include "support/sql_bookstore.hpp"

#include <algorithm>
#include <pqxx/pqxx>

#include "support/bookstore_rows.hpp"

namespace shardkit::test {

void SqlBookstorePg::SetUpBookstore(const std::string& name, const std::string& vary_sql) {
  scratch_ = new ScratchCluster(name, ScratchOptions().Shards(3));
  FillBookstore(*scratch_, 300);
  scratch_->ExecEverywhere(
      "INSERT INTO books (book_id, title, category, price) SELECT i, 'Book ' || i, "
      "(ARRAY['fiction', 'science', 'history'])[1 + i % 3], 5 + (i % 7) * 2.5 FROM generate_series(0, 49) i");
  if (!vary_sql.empty()) scratch_->ExecEverywhere(vary_sql);
  ClusterConfig config = scratch_->Config();
  config.reference_tables = {"books"};
  cluster_ = Cluster::Open(config).release();
}

void SqlBookstorePg::TearDownTestSuite() {
  delete cluster_;
  cluster_ = nullptr;
  delete scratch_;
  scratch_ = nullptr;
}

SqlBookstorePg::Reference SqlBookstorePg::OnReference(const std::string& sql, const SqlParams& params) {
  pqxx::connection c{scratch_->ReferenceDsn().Reveal()};
  pqxx::nontransaction tx{c};
  // The shards' pinned session (session.hpp).
  tx.exec(
      "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 3; "
      "SET IntervalStyle = 'postgres'");
  const pqxx::result r = tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params));
  Reference out;
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

SqlBookstorePg::Rows SqlBookstorePg::Sorted(Rows rows) {
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace shardkit::test
