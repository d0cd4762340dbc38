// shardkit/config.hpp — the cluster configuration file (TOML).
//
// One file describes the shards (libpq connection strings or URIs, so TLS,
// .pgpass and PG* environment variables work as with psql; held as Dsn,
// core/dsn.hpp, which shows them without passwords), the pool limits, the
// bucket directory and, optionally, an unsharded reference server:
//
//   [pool]
//   max_size = 8              # connections per shard
//   max_waiters = 64          # queued Acquire calls per shard
//   connect_timeout_ms = 2000 # opening one connection, at most (a caller's deadline may cut it shorter)
//   acquire_timeout_ms = 1000
//   time_zone = "UTC"         # every connection's TimeZone (session.hpp)
//   search_path = "public"    # every connection's search_path (session.hpp)
//
//   [directory]
//   source = "config"         # or "catalog": table shard_directory in the catalog
//   version = 1
//   buckets = { "0-31" = 0, "32-63" = 1 }   # omitted: even contiguous split
//
//   [catalog]                 # the control database: authoritative directory,
//   dsn = "host=127.0.0.1 port=55434 dbname=shardkit_catalog user=bookstore"
//                             # worker-id leases, migration targets "catalog"
//
//   [[shard]]
//   name = "shard0"
//   dsn = "host=127.0.0.1 port=55432 dbname=bookstore user=bookstore"
//   admin_dsn = "host=127.0.0.1 port=55432 dbname=bookstore user=shardkit_admin"
//                             # optional: a superuser for bucket moves (logical
//                             # replication needs one); default: dsn
//
//   [[shard]]
//   name = "shard1"
//   dsn = "postgresql://bookstore@127.0.0.1:55433/bookstore"
//   replicas = ["host=127.0.0.1 port=55436 dbname=bookstore user=bookstore"]
//                             # optional: streaming hot standbys of the shard, each
//                             # a dsn, or { name = "...", dsn = "...", admin_dsn = "..." }
//                             # (names default to "<shard>-replica<j>", j from 1;
//                             # admin_dsn, a superuser for failovers, to dsn)
//
//   [reference]               # optional: all data unsharded, the ground truth
//   dsn = "host=127.0.0.1 port=55434 dbname=bookstore user=bookstore"
//
//   [sql]                     # optional: Cluster::Execute
//   reference_tables = ["books"]   # copies on every shard, read with any customer's rows
//   max_gather_rows = 100000  # a SELECT that neither routes nor merges is answered on one
//                             # server over its tables' rows from every shard, up to this many
//   max_gather_bytes = 268435456  # ... and up to this many bytes of them, as text (0: no bound)
//
//   [replicas]                # optional: the shards' replicas (replica_monitor.hpp)
//   probe_interval_ms = 250   # how often each replica's lag is measured
//   max_size = 8              # connections per replica (default: pool.max_size)
//
// The file is found through --config, else $SHARDKIT_CONFIG, else
// ./shardkit.toml. It is read strictly: an unknown table or key (a typo
// such as max_sise), a value of the wrong type, two shards with one name or
// one connection string are errors (ConfigError naming the key, its line
// and the closest known key), never silently ignored.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket_directory.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/pool/pool.hpp"

namespace shardkit {

// A streaming replica of a shard (a hot standby) that may serve its reads.
struct ReplicaConfig {
  std::string name;  // unique among every shard's and replica's names
  Dsn dsn;
  // For promoting it in a failover (pg_promote needs a superuser). Empty: dsn.
  Dsn admin_dsn{};
  [[nodiscard]] const Dsn& AdminDsn() const noexcept { return admin_dsn.empty() ? dsn : admin_dsn; }
};

struct ShardConfig {
  std::string name;
  Dsn dsn;
  // For privileged operations only (a bucket move's replication slot,
  // publication and subscription need a superuser in PostgreSQL 15), so the
  // application's role need not be one. Empty: dsn.
  Dsn admin_dsn{};
  std::vector<ReplicaConfig> replicas{};
  [[nodiscard]] const Dsn& AdminDsn() const noexcept { return admin_dsn.empty() ? dsn : admin_dsn; }
};

// Where the bucket directory comes from: the [directory] table of this file,
// or the shard_directory table of the catalog database ([catalog] dsn).
enum class DirectorySource { kConfig, kCatalog };

// [replicas]: how the shards' replicas are used.
struct ReplicaSettings {
  std::chrono::milliseconds probe_interval{250};
  std::optional<int> max_size;  // each replica's pool; default: pool.max_size
};

inline constexpr std::int64_t kDefaultMaxGatherRows = 100'000;
inline constexpr std::int64_t kMaxGatherRowsLimit = 100'000'000;
inline constexpr std::int64_t kDefaultMaxGatherBytes = std::int64_t{256} << 20;  // 256 MiB
inline constexpr std::int64_t kMaxGatherBytesLimit = std::int64_t{64} << 30;     // 64 GiB

// Plain values: copy freely; not synchronised (build once, then share read-only).
struct ClusterConfig {
  std::vector<ShardConfig> shards;
  PoolOptions pool;
  DirectorySource directory_source = DirectorySource::kConfig;
  BucketDirectory directory = BucketDirectory::EvenSplit(1);  // from the file (kConfig)
  std::optional<Dsn> reference_dsn;
  std::optional<Dsn> catalog_dsn;             // [catalog] dsn: the control database
  std::vector<std::string> reference_tables;  // [sql] reference_tables
  // [sql] max_gather_rows: the most rows a gathered SELECT may bring to one
  // server (sql_options.hpp); 0 refuses every such statement.
  std::int64_t max_gather_rows = kDefaultMaxGatherRows;
  // [sql] max_gather_bytes: the most bytes of rows (the shards' arrays as
  // text) a gathered SELECT may bring to one server; 0: no bound.
  std::int64_t max_gather_bytes = kDefaultMaxGatherBytes;
  ReplicaSettings replica_settings;  // [replicas]
  std::string origin;                // where it was read from, for messages
};

// Parses TOML text; throws ConfigError naming the key (and line) at fault.
[[nodiscard]] ClusterConfig ParseConfig(std::string_view toml_text, std::string origin = "<string>");
// Reads and parses a file; throws ConfigError if it cannot be read.
[[nodiscard]] ClusterConfig LoadConfig(const std::filesystem::path& path);
// The index in config.shards of the shard named so; throws ConfigError
// ("shard") listing the shards there are.
[[nodiscard]] int ShardIndexNamed(const ClusterConfig& config, std::string_view name);
// The explicit path if given, else $SHARDKIT_CONFIG, else ./shardkit.toml.
[[nodiscard]] std::filesystem::path ResolveConfigPath(const std::optional<std::string>& explicit_path);

}  // namespace shardkit
