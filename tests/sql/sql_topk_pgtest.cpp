// Cluster::Execute answers the best-sellers shape by exact top-k: on the
// lab's Bookstore data (scale 0.01, three shards) every variant returns the
// unsharded reference server's columns, types and rows; the naive
// statement ships far fewer rows than the merge of every partial; and the
// statements top-k must not answer (or cannot: a negative or oversized sum)
// go to the merge, with the same answer.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "shardkit/cluster.hpp"
#include "support/reference_answer.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::Rows;

constexpr const char* kNaive =
    "SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
    "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 GROUP BY i.book_id ORDER BY sold DESC, i.book_id LIMIT 10";

class SqlTopKPg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<test::ScratchCluster>("sql_topk_pgtest", test::ScratchOptions().Shards(3));
    {
      lab::Lab lab(scratch_->Config());
      (void)lab::LoadDataset(lab, lab::GenerateDataset({0.01, 1}), {lab::ProgressMode::kNone});
    }
    // Columns of each kind the shape tells apart, each a function of its row
    // (so the shards change their rows as the reference changes the same
    // ones): nullable measures and keys, a measure that is negative, a
    // bigint one whose sums are numeric.
    scratch_->ExecEverywhere(R"(
      ALTER TABLE order_items ADD COLUMN gift integer, ADD COLUMN shelf integer,
        ADD COLUMN adjust integer NOT NULL DEFAULT 0, ADD COLUMN weight bigint NOT NULL DEFAULT 0;
      UPDATE order_items SET
        gift = CASE WHEN line_no = 1 OR book_id % 5 = 0 THEN NULL ELSE quantity END,
        shelf = CASE WHEN book_id % 7 = 0 THEN NULL ELSE (book_id % 13)::int END,
        adjust = quantity - 2,
        weight = quantity * 1000000000000 + book_id)");
    ClusterConfig with_books = scratch_->Config();
    with_books.reference_tables = {"books"};
    cluster_ = Cluster::Open(with_books);
  }
  static void TearDownTestSuite() {
    cluster_.reset();
    scratch_.reset();
  }

  static test::ReferenceAnswer OnReference(const std::string& sql, const SqlParams& params) {
    return test::AnswerOnReference(*scratch_, sql, params);
  }

  static std::string WindowStart() { return lab::FormatTimestamp(lab::kWindowStart); }

  static inline std::unique_ptr<test::ScratchCluster> scratch_;
  static inline std::unique_ptr<Cluster> cluster_;
};

bool TookTopK(const SqlResult& r) {
  return r.plan.merge.starts_with("exact top-k");
}

// Only one column of the rows (no tie-break: the other is not determined).
std::vector<std::optional<std::string>> ColumnOf(const Rows& rows, std::size_t c) {
  std::vector<std::optional<std::string>> out;
  for (const auto& row : rows) out.push_back(row.at(c));
  return out;
}

TEST_F(SqlTopKPg, TheNaiveBestSellersStatementIsExactTopKWithFewRows) {
  const SqlParams params{WindowStart()};
  const SqlResult got = cluster_->Execute(kNaive, params);
  const test::ReferenceAnswer want = OnReference(kNaive, params);
  EXPECT_EQ(got.columns, want.columns);
  EXPECT_EQ(got.types, want.types);
  EXPECT_EQ(got.rows, want.rows);
  ASSERT_EQ(got.rows.size(), 10U);
  EXPECT_TRUE(TookTopK(got)) << got.plan.merge;
  // kAuto picks the method its cost model predicts faster on the links it
  // measured: TPUT ships few rows, all partials every group's.
  const bool tput = got.plan.merge.find("TPUT (exact)") != std::string::npos;
  EXPECT_TRUE(tput || got.plan.merge.find("all partials (exact)") != std::string::npos) << got.plan.merge;
  EXPECT_NE(got.plan.merge.find(" ms vs "), std::string::npos) << got.plan.merge;  // the estimate

  // Far fewer rows than groups, and than the merge ships (every shard's
  // partial of every book: the same statement ordered otherwise).
  pqxx::connection c{scratch_->ReferenceDsn().Reveal()};
  pqxx::nontransaction tx{c};
  const auto groups =
      tx.exec_params1(
            "SELECT count(DISTINCT i.book_id) FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
            "AND o.order_id = i.order_id WHERE o.ordered_at >= $1",
            WindowStart())[0]
          .as<std::size_t>();
  if (tput) {
    EXPECT_LT(got.rows_received, groups);
  }
  std::string merged_sql = kNaive;
  merged_sql.replace(merged_sql.find("i.book_id LIMIT"), 9, "i.book_id DESC");
  const SqlResult merged = cluster_->Execute(merged_sql, params);
  EXPECT_FALSE(TookTopK(merged)) << merged.plan.merge;
  EXPECT_EQ(merged.rows, OnReference(merged_sql, params).rows);
  EXPECT_GE(merged.rows_received, groups);
  if (tput) {
    EXPECT_LT(got.rows_received * 3, merged.rows_received);
  }
  std::printf("best sellers of the window: %zu groups; exact top-k shipped %zu rows, the merge %zu\n  %s\n", groups,
              got.rows_received, merged.rows_received, got.plan.merge.c_str());

  // Explain says so without running anything.
  const SqlPlanInfo plan = cluster_->Explain(kNaive, params);
  EXPECT_EQ(plan.kind, SqlPlanInfo::Kind::kScatter);
  EXPECT_TRUE(plan.merge.starts_with("exact top-k (auto) by sum(\"i\".\"quantity\") of \"i\".\"book_id\", k = 10"))
      << plan.merge;
  EXPECT_NE(plan.Describe().find("per-shard SQL: SELECT (\"i\".\"book_id\")::bigint AS k"), std::string::npos)
      << plan.Describe();
}

struct Case {
  std::string sql;
  bool topk;  // answered by exact top-k (else the merge)
  SqlParams params = {};
  bool ordered = true;             // ORDER BY orders the rows completely
  std::size_t sum_column = 1;      // not ordered: only this column is compared
  const char* fallback = nullptr;  // top-k's shape, but top-k cannot answer: the merge says why
};

TEST_F(SqlTopKPg, VariantsAnswerAsTheReferenceServer) {
  const std::vector<Case> cases = {
      // The shape, written every way.
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 10",
       true},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10", true},
      {"SELECT sum(quantity) AS n, book_id AS b FROM order_items GROUP BY b ORDER BY sum(quantity) DESC, b ASC "
       "NULLS LAST LIMIT 7",
       true},
      {"SELECT book_id AS b, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC NULLS LAST, "
       "book_id FETCH FIRST 5 ROWS ONLY",
       true},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id "
       "LIMIT 5 OFFSET 7",
       true},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id "
       "OFFSET 1000 LIMIT 5",
       true},
      // bigint measures: sums are numeric, printed as the same digits.
      {"SELECT customer_id, sum(book_id) FROM order_items GROUP BY customer_id ORDER BY 2 DESC, 1 LIMIT 10", true},
      {"SELECT book_id, sum(weight) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10", true},
      // smallint key and measure; a nullable key (NULL ranks last among equal sums).
      {"SELECT bucket, sum(quantity) FROM order_items GROUP BY bucket ORDER BY 2 DESC, bucket LIMIT 8", true},
      {"SELECT book_id, sum(bucket) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 8", true},
      {"SELECT shelf, sum(quantity) FROM order_items GROUP BY shelf ORDER BY 2 DESC, shelf LIMIT 20", true},
      // WHERE with parameters, joins with a reference table.
      {"SELECT book_id, sum(quantity) AS sold FROM order_items WHERE quantity >= $1 AND customer_id % $2 <> 0 "
       "GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 10",
       true,
       {"2", "3"}},
      {"SELECT i.book_id, sum(i.quantity) FROM order_items i JOIN books b ON b.book_id = i.book_id "
       "WHERE b.category = $1 AND b.price > $2 GROUP BY i.book_id ORDER BY 2 DESC, 1 LIMIT 5",
       true,
       {"Fiction", "10"}},
      {"SELECT o.customer_id, sum(i.quantity) FROM orders o, order_items i WHERE o.customer_id = i.customer_id "
       "AND o.order_id = i.order_id AND o.ordered_at < $1 GROUP BY o.customer_id ORDER BY 2 DESC, 1 LIMIT 10",
       true,
       {WindowStart()}},
      // The shape, but top-k cannot answer it exactly: the merge does.
      {.sql = "SELECT book_id, sum(adjust) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
       .topk = false,
       .fallback = "negative"},
      {.sql = "SELECT book_id, sum(order_id) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10",
       .topk = false,
       .fallback = "64-bit"},
      // Not the shape: no tie-break, ASC, the key DESC or NULLS FIRST, a
      // nullable or numeric measure, HAVING, an outer join, more outputs.
      {.sql = "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC LIMIT 10",
       .topk = false,
       .ordered = false},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold, book_id LIMIT 10",
       false},
      {"SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id DESC "
       "LIMIT 10",
       false},
      {"SELECT shelf, sum(quantity) FROM order_items GROUP BY shelf ORDER BY 2 DESC, 1 NULLS FIRST LIMIT 20", false},
      {"SELECT book_id, sum(gift) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10", false},
      {"SELECT book_id, sum(unit_price) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10", false},
      {"SELECT book_id, sum(quantity) FROM order_items GROUP BY book_id HAVING sum(quantity) < 60 "
       "ORDER BY 2 DESC, 1 LIMIT 10",
       false},
      {"SELECT o.customer_id, sum(i.quantity) FROM orders o LEFT JOIN order_items i ON i.customer_id = o.customer_id "
       "AND i.order_id = o.order_id GROUP BY o.customer_id ORDER BY 2 DESC, 1 LIMIT 10",
       false},
      {"SELECT book_id, sum(quantity), count(*) FROM order_items GROUP BY book_id ORDER BY 2 DESC, 1 LIMIT 10", false},
      {"SELECT b.category, sum(i.quantity) FROM order_items i JOIN books b USING (book_id) GROUP BY b.category "
       "ORDER BY 2 DESC, 1 LIMIT 5",
       false},
  };
  int topk = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sql);
    const SqlResult got = cluster_->Execute(c.sql, c.params);
    const test::ReferenceAnswer want = OnReference(c.sql, c.params);
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.types, want.types) << fmt::format("{} vs {}", got.types, want.types);
    if (c.ordered) {
      EXPECT_EQ(got.rows, want.rows);
    } else {
      EXPECT_EQ(ColumnOf(got.rows, c.sum_column), ColumnOf(want.rows, c.sum_column));
    }
    EXPECT_EQ(TookTopK(got), c.topk) << got.plan.merge;
    if (c.fallback != nullptr) {
      EXPECT_NE(got.plan.merge.find("(exact top-k did not answer: "), std::string::npos) << got.plan.merge;
      EXPECT_NE(got.plan.merge.find(c.fallback), std::string::npos) << got.plan.merge;
    }
    topk += TookTopK(got) ? 1 : 0;
  }
  EXPECT_GE(topk, 12);
}

}  // namespace
}  // namespace shardkit
