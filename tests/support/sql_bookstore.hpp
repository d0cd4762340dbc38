// Test support: the fixture of the Cluster::Execute tests that compare with
// the unsharded reference server. A scratch cluster of three shards with the
// Bookstore (FillBookstore, 300 customers) and books 0-49 everywhere, the
// Cluster over it with books as a reference table, and the reference
// server's answer to a statement.
//
//   class SqlExecutePg : public shardkit::test::SqlBookstorePg {
//    protected:
//     static void SetUpTestSuite() { SetUpBookstore("sql_execute_pgtest"); }
//   };
//   TEST_F(SqlExecutePg, Orders) { EXPECT_EQ(cluster_->Execute(sql).rows, OnReference(sql, {}).rows); }
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "shardkit/cluster.hpp"
#include "support/reference_answer.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::test {

class SqlBookstorePg : public ::testing::Test {
 protected:
  using Rows = test::Rows;  // as SqlResult::rows
  // What the reference server answers.
  using Reference = ReferenceAnswer;

  // For SetUpTestSuite: the scratch cluster `name` (its databases' prefix),
  // loaded; then `vary_sql`, when given, on every shard and the reference
  // (it must leave the reference the union of the shards); then the Cluster.
  static void SetUpBookstore(const std::string& name, const std::string& vary_sql = {});
  static void TearDownTestSuite();

  // `sql` on the reference server, in the shards' pinned session (session.hpp).
  static Reference OnReference(const std::string& sql, const SqlParams& params);

  static Rows Sorted(Rows rows);

  static inline ScratchCluster* scratch_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
};

}  // namespace shardkit::test
