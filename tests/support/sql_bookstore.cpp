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
  return AnswerOnReference(*scratch_, sql, params);
}

SqlBookstorePg::Rows SqlBookstorePg::Sorted(Rows rows) {
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace shardkit::test
