// Verify's checks, each adding its findings to the report. VerifyCluster
// (verify.cpp) runs them in order over the servers as scanned
// (verify_scan.hpp): the tables (verify_tables.cpp) and where the rows of
// each bucket are (verify_buckets.cpp).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "schema/verify_scan.hpp"
#include "shardkit/config.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/schema/verify.hpp"

namespace shardkit::detail {

// "1 row", "2 rows"
inline std::string Rows(std::int64_t n) {
  return fmt::format("{} row{}", n, n == 1 ? "" : "s");
}
// "1 row stores", "2 rows store"
inline std::string RowsDo(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", Rows(n), n == 1 ? one : many);
}

inline void AddFinding(VerifyReport& report, FindingKind kind, std::string server, std::string table,
                       std::optional<BucketId> bucket, std::int64_t rows, std::string sample, std::string detail) {
  report.findings.push_back(
      VerifyFinding{kind, std::move(server), std::move(table), bucket, rows, std::move(sample), std::move(detail)});
}

// What the checks share: the configuration and options, every server as
// scanned (the shards in order, then the reference server), the directory
// if it could be read, and the report the findings go to.
struct VerifyRun {
  const ClusterConfig& config;
  const VerifyOptions& options;
  std::vector<ScannedServer>& servers;
  const std::optional<BucketDirectory>& directory;
  VerifyReport& report;
  // Compare the reference server's rows of the mirrored tables, per bucket.
  bool count_reference = false;

  void Add(FindingKind kind, std::string server, std::string table, std::optional<BucketId> bucket, std::int64_t rows,
           std::string sample, std::string detail) {
    AddFinding(report, kind, std::move(server), std::move(table), bucket, rows, std::move(sample), std::move(detail));
  }
  [[nodiscard]] bool Mirrored(const std::string& table) const {
    return std::find(options.mirrored_tables.begin(), options.mirrored_tables.end(), table) !=
           options.mirrored_tables.end();
  }
};

// ---------------------------------------------------------------- tables

// The sharded tables: those of any shard (report.sharded_tables); each
// shard must have them all, the reference server the mirrored ones.
void CheckShardedTablesPresent(VerifyRun& run);

// One definition of each table everywhere: the columns, their types and
// NOT NULL, in order, as on the reference server (else the first shard).
void CheckTableDefinitions(VerifyRun& run);

// Reference tables: identical everywhere.
void CheckReferenceTables(VerifyRun& run);

// --------------------------------------------------------------- buckets

// Buckets in a move (live in the journal, or marked on a shard): their
// rows are on two shards on purpose, and the one the directory names may
// not be the one holding the latest writes (the target owns the bucket
// before the directory flips). One finding each, naming the move and
// what to run; no orphan, misplaced or count finding for them (the
// returned buckets), since deleting either copy by hand could delete the
// only copy of writes.
[[nodiscard]] std::set<int> CheckMovesInProgress(VerifyRun& run);

// Rows on the wrong shard (orphan copies or misplaced rows, but not of the
// buckets `in_motion`) or with the wrong bucket.
void CheckRowPlacement(VerifyRun& run, const std::set<int>& in_motion);

// Each bucket's rows on its owner against the reference server's (but not
// of the buckets `in_motion`).
void CheckCountsAgainstReference(VerifyRun& run, const std::set<int>& in_motion);

}  // namespace shardkit::detail
