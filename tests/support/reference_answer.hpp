// Test support: what the unsharded reference server answers to a statement,
// in the session settings every shard's connection pins (session.hpp), as
// Cluster::Execute returns it (column names, type OIDs, rows as text), for
// tests that compare the two.
//
//   const test::ReferenceAnswer want = test::AnswerOnReference(cluster, sql, params);
//   EXPECT_EQ(got.rows, want.rows);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardkit/queries/scatter.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::test {

using Rows = std::vector<std::vector<std::optional<std::string>>>;

struct ReferenceAnswer {
  std::vector<std::string> columns;
  std::vector<unsigned> types;
  Rows rows;
};

[[nodiscard]] ReferenceAnswer AnswerOnReference(const ScratchCluster& cluster, const std::string& sql,
                                                const SqlParams& params);

}  // namespace shardkit::test
