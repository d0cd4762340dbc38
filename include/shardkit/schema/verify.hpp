// shardkit/schema/verify.hpp — is the cluster what the directory says?
//
// One pass over every server (all at once, one connection each) that checks,
// in the spirit of Vitess' VDiff and Citus' consistency checks:
//  - every row of every sharded table (a table with customer_id and bucket
//    columns) lives on the shard that owns its bucket, and
//    bucket = bucket_of(customer_id);
//  - no shard holds rows of buckets it does not own: a copy that the owner
//    has too is an orphan (left by an interrupted move), a row the owner
//    lacks is misplaced;
//  - a bucket in a move (live in the catalog's journal, or still marked on a
//    shard) is one finding that names the move, says who serves the bucket
//    and whether a mover runs it, and what to run (resume, abort, or wait);
//    its rows on the move's two shards are neither orphans nor misplaced
//    (either copy may be the only one of some writes), nor counted;
//  - reference tables ([sql] reference_tables) are identical on every shard: a count and a
//    hash aggregate of the rows per table, then the differing keys;
//  - every table has one definition (columns, types, NOT NULL) everywhere;
//  - every server is at the same migration version (when given the set);
//  - with a [reference] server, each bucket's row count on its owner equals
//    the reference server's, for the tables it mirrors.
// Per shard, table and bucket it counts the rows. The heavy part is one
// GROUP BY bucket_of(customer_id), bucket per table and shard, so it takes
// about as long as scanning the largest shard once.
//
//   shardkit::VerifyOptions options;
//   options.migrations = shardkit::ClusterMigrations("migrations");  // also compare migration versions
//   shardkit::VerifyReport report = shardkit::VerifyCluster(config, options);
//   for (const auto& f : report.findings) log(f.detail);   // each names server, table, bucket, a key
//   if (!report.Ok()) ...
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit {

struct ClusterConfig;

struct VerifyOptions {
  // Tables that must be identical on every shard (and the reference
  // server). Unset: those registered with shardkit_reference_table() and
  // the configuration's [sql] reference_tables.
  std::optional<std::vector<std::string>> reference_tables;
  // Sharded tables that the [reference] server (if configured: the lab's
  // ground truth) holds in full: each bucket's row count on its owner must
  // equal the reference server's. Empty: no comparison. Without a
  // [reference] server this list is not read.
  std::vector<std::string> mirrored_tables{"customers", "orders", "order_items"};
  // Each set (ClusterMigrations: shardkit's own, then the application's):
  // every server must be at its latest version, with nothing failed or
  // changed. Empty: not compared.
  std::vector<MigrationSet> migrations;
  std::chrono::milliseconds connect_timeout{5000};
  // Differing keys shown per reference table and server.
  int max_samples = 3;
};

enum class FindingKind {
  kUnreachable,       // a server did not answer
  kDirectory,         // the directory cannot be read or does not fit the shards
  kSchemaVersion,     // a server is not at the same migration version as the others
  kMissingTable,      // a sharded or reference table is missing on a server
  kTableDefinition,   // a table's columns differ from the reference server's (or the first shard's)
  kWrongBucket,       // bucket <> bucket_of(customer_id)
  kMisplacedRows,     // rows of a bucket the shard does not own, that its owner lacks
  kOrphanBucket,      // rows of a bucket the shard does not own, copies of the owner's
  kReferenceDiffers,  // a reference table differs from the reference copy
  kCountDiffers,      // a bucket's rows on its owner differ in number from the reference server's
  kMoveInProgress,    // a bucket in a move (live, or a stopped mover's): names the move and what to run
};
[[nodiscard]] std::string_view FindingName(FindingKind kind) noexcept;  // "misplaced rows", ...

struct VerifyFinding {
  FindingKind kind = FindingKind::kUnreachable;
  std::string server;  // "shard1", "reference", "catalog"
  std::string table;   // empty if not about a table
  std::optional<BucketId> bucket;
  std::int64_t rows = 0;   // rows concerned, where counted
  std::string sample_key;  // "(customer_id, order_id) = (4242, 17)"
  std::string detail;      // one sentence naming all of the above
};

struct TableCounts {
  std::string table;
  std::int64_t rows = 0;
  std::array<std::int64_t, kBucketCount> by_bucket{};  // by bucket_of(customer_id)
};

struct ServerCounts {
  std::string server;
  std::optional<ShardId> shard;  // nullopt: the reference server
  bool reachable = false;
  std::vector<TableCounts> tables;
  std::chrono::microseconds elapsed{0};
};

struct VerifyReport {
  std::int64_t directory_version = 0;
  std::string directory_source;  // "catalog" or "config"
  int shard_count = 0;
  std::vector<std::string> sharded_tables;
  std::vector<std::string> reference_tables;
  std::optional<int> schema_version;  // when checked and common to all servers
  std::vector<ServerCounts> servers;  // shards in order, then the reference server
  std::vector<VerifyFinding> findings;
  std::chrono::microseconds elapsed{0};

  [[nodiscard]] bool Ok() const noexcept { return findings.empty(); }
};

// Runs every check; never throws for what it finds (those are findings), only
// for a configuration it cannot use.
[[nodiscard]] VerifyReport VerifyCluster(const ClusterConfig& config, const VerifyOptions& options = {});

}  // namespace shardkit
