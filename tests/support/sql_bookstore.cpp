// The SQL tests' Bookstore fixture and reference-server answers (sql_bookstore.hpp).
#include "support/sql_bookstore.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"

#include "support/bookstore_rows.hpp"

namespace shardkit::test {
namespace {

std::string Show(const Rows& rows, std::size_t at_most = 8) {
  std::string out;
  for (std::size_t r = 0; r < rows.size() && r < at_most; ++r) {
    out += "  (";
    for (std::size_t c = 0; c < rows[r].size(); ++c) out += (c ? ", " : "") + rows[r][c].value_or("NULL");
    out += ")\n";
  }
  if (rows.size() > at_most) out += fmt::format("  ... {} rows\n", rows.size());
  return out;
}

}  // namespace

void SqlBookstorePg::SetUpBookstore(const std::string& name, const std::string& vary_sql,
                                    const ScratchOptions& options) {
  scratch_ = new ScratchCluster(name, options);
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

void SqlBookstorePg::CheckAgainstReference(const CorpusStatement& s, CorpusTally& tally) {
  SCOPED_TRACE(s.sql);
  ++tally.total;
  // SQL_CORPUS_VERBOSE=1: every statement and how it ended.
  static const bool verbose = std::getenv("SQL_CORPUS_VERBOSE") != nullptr;
  if (verbose) std::printf("%s%s\n", s.sql.c_str(), s.params.empty() ? "" : "  -- with parameters");
  Reference want;
  try {
    want = OnReference(s.sql, s.params);
  } catch (const std::exception& e) {
    ++tally.failed;
    ADD_FAILURE() << "the statement does not run on the reference server: " << e.what() << "\n" << s.sql;
    return;
  }
  SqlResult got;
  try {
    got = cluster_->Execute(s.sql, s.params);
  } catch (const SqlError& e) {
    if (e.kind() == SqlError::Kind::kRefused) {
      ++tally.refused;
      ++tally.refusals[e.construct()];
      if (verbose) std::printf("  refused: %s\n", e.what());
      EXPECT_FALSE(e.reason().empty()) << e.what();
      EXPECT_FALSE(e.advice().empty()) << e.what();
      if (s.must_route) {
        ++tally.failed;
        ADD_FAILURE() << "refused a statement pinned to one customer: " << e.what();
      }
      if (!s.must_refuse.empty()) {
        EXPECT_NE(e.construct().find(s.must_refuse), std::string::npos)
            << "refused for another reason than " << s.must_refuse << ": " << e.what();
        if (s.refused_at > 0) EXPECT_EQ(e.position(), s.refused_at) << e.what();
      }
      return;
    }
    ++tally.failed;
    ADD_FAILURE() << "a syntax error for a statement the server runs: " << e.what();
    return;
  } catch (const std::exception& e) {
    ++tally.failed;
    ADD_FAILURE() << "not an SqlError: " << e.what() << "\n" << s.sql;
    return;
  }
  if (verbose) std::printf("  %s\n", got.plan.Describe().c_str());
  if (!s.must_refuse.empty()) {
    ++tally.failed;
    ADD_FAILURE() << "answered (" << got.plan.Describe() << ") what must be refused for " << s.must_refuse;
  }
  if (s.must_route && got.plan.kind != SqlPlanInfo::Kind::kRouted) {
    ++tally.failed;
    ADD_FAILURE() << "not routed to one shard: " << got.plan.Describe();
  }
  switch (got.plan.kind) {
    case SqlPlanInfo::Kind::kRouted:
      ++tally.routed;
      break;
    case SqlPlanInfo::Kind::kAnyShard:
      ++tally.any_shard;
      break;
    case SqlPlanInfo::Kind::kScatter:
      ++tally.scattered;
      if (got.plan.merge.starts_with("exact top-k")) ++tally.topk;
      if (got.plan.merge.starts_with("gathered")) ++tally.gathered;
      break;
  }
  if (!want.rows.empty()) ++tally.nonempty;
  const bool same_rows = s.ordered ? got.rows == want.rows : Sorted(got.rows) == Sorted(want.rows);
  if (!same_rows || got.columns != want.columns || got.types != want.types) {
    ++tally.wrong;
    ADD_FAILURE() << "WRONG ANSWER (" << got.plan.Describe() << ")\n"
                  << s.sql << "\ncolumns " << fmt::format("{}", fmt::join(got.columns, ", ")) << " / reference "
                  << fmt::format("{}", fmt::join(want.columns, ", ")) << "\ntypes "
                  << fmt::format("{}", fmt::join(got.types, ", ")) << " / reference "
                  << fmt::format("{}", fmt::join(want.types, ", ")) << "\ngot " << got.rows.size() << " rows:\n"
                  << Show(got.rows) << "reference " << want.rows.size() << " rows:\n"
                  << Show(want.rows);
  }
}

CorpusTally& CorpusTally::operator+=(const CorpusTally& other) {
  routed += other.routed;
  any_shard += other.any_shard;
  scattered += other.scattered;
  topk += other.topk;
  gathered += other.gathered;
  refused += other.refused;
  wrong += other.wrong;
  failed += other.failed;
  total += other.total;
  nonempty += other.nonempty;
  for (const auto& [construct, n] : other.refusals) refusals[construct] += n;
  return *this;
}

void CorpusTally::Print(const char* what) const {
  const CorpusTally& t = *this;
  std::printf(
      "%s: %d statements: %d routed, %d scattered (%d by exact top-k, %d gathered), %d any shard, %d refused; %d "
      "wrong, %d failed; %d answered non-empty\n",
      what, t.total, t.routed, t.scattered, t.topk, t.gathered, t.any_shard, t.refused, t.wrong, t.failed, t.nonempty);
  for (const auto& [construct, n] : t.refusals) std::printf("  refused %3d x %s\n", n, construct.c_str());
}

}  // namespace shardkit::test
