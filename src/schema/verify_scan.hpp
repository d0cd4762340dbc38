// What verify reads from the servers in one pass: each shard's and the
// reference server's tables, counts per bucket, column definitions,
// reference-table checksums and ownership rows (ScanServers), and the
// catalog's live moves (LiveMoves).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/connection>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/schema/verify.hpp"

namespace shardkit::detail {

// Rows of one table on one server with the same bucket_of(customer_id)
// and stored bucket.
struct Group {
  int computed = 0;  // bucket_of(customer_id), -1 if NULL
  int stored = 0;
  std::int64_t rows = 0;
};

struct TableScan {
  std::string table;
  std::string shard_key = "customer_id";             // its key column, quoted for SQL
  std::string bucket_of = "bucket_of(customer_id)";  // the key's bucket in SQL
  std::vector<std::string> key;                      // primary key columns
  std::vector<Group> groups;                         // shards
  TableCounts counts;
};

struct ReferenceTableSum {
  bool present = false;
  std::vector<std::string> key;
  std::int64_t rows = 0;
  std::string hash_sum;
};

// A shard's ownership row of a bucket (sql/010).
struct OwnershipRow {
  std::string state;
  std::optional<std::int64_t> move_id;
  std::optional<int> new_owner;
};

// A live move in the catalog's journal.
struct LiveMove {
  std::int64_t move_id = 0;
  int bucket = 0;
  int source = 0;
  int target = 0;
  std::string state;
  double idle_s = 0;             // since its last journaled step
  std::optional<int> mover_pid;  // the catalog session running it, if any
};

// One server: what its scan found, or why it could not be scanned (no connection).
struct ScannedServer {
  std::string name;
  Dsn dsn;
  std::optional<ShardId> shard;
  std::unique_ptr<pqxx::connection> connection;
  std::string error;
  std::vector<std::string> sharded_tables;  // discovered there
  // table -> its key column (as an identifier) and the key's bucket in SQL
  std::map<std::string, std::pair<std::string, std::string>> shard_keys;
  std::vector<TableScan> scans;
  std::map<std::string, ReferenceTableSum> reference_sums;
  std::map<std::string, std::vector<std::string>> columns;  // table -> "name type [not null]"
  std::map<int, OwnershipRow> ownership;                    // bucket -> row (enrolled shards)
  std::chrono::microseconds elapsed{0};
};

// The scan of `table` on `s`, if it has one.
[[nodiscard]] const TableScan* ScanOf(const ScannedServer& s, const std::string& table);

// Every shard (named as in the configuration) and the reference server,
// scanned at once, one connection each; the connections stay open for the
// checks' follow-up queries.
[[nodiscard]] std::vector<ScannedServer> ScanServers(const ClusterConfig& config, const VerifyOptions& options);

// The catalog's live moves; empty without a catalog or its journal (or when
// the catalog cannot be read: then `error` says why).
[[nodiscard]] std::vector<LiveMove> LiveMoves(const ClusterConfig& config, std::chrono::milliseconds connect_timeout,
                                              std::string& error);

}  // namespace shardkit::detail
