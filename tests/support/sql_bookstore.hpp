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

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/cluster.hpp"
#include "support/reference_answer.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::test {

// A statement of a corpus compared with the reference server.
struct CorpusStatement {
  std::string sql;
  bool ordered = false;  // ORDER BY orders the rows completely (or at most one row)
  SqlParams params = {};
  // What Execute must do (else any answer equal to the reference, or a refusal):
  bool must_route = false;       // answer it on one shard (SqlPlanInfo::Kind::kRouted)
  std::string must_refuse = {};  // refuse it, construct() containing this text
  int refused_at = 0;            // ... at this 1-based position (0: not checked)
};

// How a corpus's statements ended.
struct CorpusTally {
  int routed = 0;
  int any_shard = 0;
  int scattered = 0;
  int topk = 0;      // of the scattered: answered by exact top-k
  int gathered = 0;  // of the scattered: rows gathered onto one server
  int refused = 0;
  int wrong = 0;
  int failed = 0;
  int total = 0;
  int nonempty = 0;
  std::map<std::string, int> refusals;  // construct -> how many
  [[nodiscard]] int Answered() const { return routed + any_shard + scattered; }
  CorpusTally& operator+=(const CorpusTally& other);
  void Print(const char* what) const;
};

class SqlBookstorePg : public ::testing::Test {
 protected:
  using Rows = test::Rows;  // as SqlResult::rows
  // What the reference server answers.
  using Reference = ReferenceAnswer;

  // For SetUpTestSuite: the scratch cluster `name` (its databases' prefix),
  // loaded; then `vary_sql`, when given, on every shard and the reference
  // (it must leave the reference the union of the shards); then the Cluster.
  static void SetUpBookstore(const std::string& name, const std::string& vary_sql = {},
                             const ScratchOptions& options = ScratchOptions().Shards(3));
  static void TearDownTestSuite();

  // `sql` on the reference server, in the shards' pinned session (session.hpp).
  static Reference OnReference(const std::string& sql, const SqlParams& params);

  static Rows Sorted(Rows rows);

  // Data varied after FillBookstore for the corpus tests (statuses, totals,
  // quantities, prices, items deleted, books missing from the books table):
  // each change is a function of the row alone, so the reference stays the
  // union of the shards.
  static constexpr const char* kVariedBookstore =
      "UPDATE customers SET created_at = timestamptz '2025-06-01 00:00:00+00' + interval '7 hours' * customer_id; "
      "UPDATE orders SET status = (ARRAY['placed', 'shipped', 'delivered'])[1 + (order_id * 7 + customer_id) % 3], "
      "total = ((order_id * 37 + customer_id * 11) % 5000) / 100.0 + 0.5; "
      "UPDATE orders SET total = 0 WHERE order_id % 17 = 0; "
      "UPDATE order_items SET quantity = 1 + (order_id + line_no * 3) % 6, "
      "unit_price = 2.50 + ((order_id * 13 + line_no) % 40) * 0.75; "
      "UPDATE order_items SET book_id = 50 + order_id % 4 WHERE (order_id + line_no) % 9 = 0; "
      "DELETE FROM order_items WHERE order_id % 11 = 3 AND line_no = 1";

  // Runs the statement through the Cluster and on the reference server and
  // counts how it ended. The reference's columns, types and rows (in order
  // when `ordered`) are required; a refusal is allowed if it says why and
  // what to do (and required, or forbidden, when the statement says so); a
  // wrong answer, any other error, or a statement the reference cannot run
  // fails the test. SQL_CORPUS_VERBOSE=1 prints each.
  static void CheckAgainstReference(const CorpusStatement& s, CorpusTally& tally);

  static inline ScratchCluster* scratch_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
};

}  // namespace shardkit::test
