// shardkit/cluster.hpp — the one object a service builds from its
// configuration: the shards' pools, the resolver, the directory watcher
// (when the configuration has a catalog), scatters, routed transactions,
// merges and top-k, and their statistics in one place.
//
//   auto cluster = shardkit::Cluster::Open(shardkit::LoadConfig("shardkit.toml"));
//   shardkit::Route route = cluster->Route(shardkit::CustomerId{4242});   // bucket 44, shard 1
//   cluster->Run(customer, [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& at) {
//     tx.exec_params("INSERT INTO orders (customer_id, bucket, ...) VALUES ($1, $2, ...)", customer, at.bucket);
//   });
//   auto sold = cluster->Merge(shardkit::AggregateQuery::From("order_items").GroupBy("book_id")
//                                  .Sum("quantity", "sold").OrderBy("sold", shardkit::SortDirection::kDesc)
//                                  .Limit(10).Plan());
//   auto best = cluster->TopK(query);                                      // exact (TPUT, auto)
//   auto median = cluster->Percentiles(shardkit::AggregateQuery::From("orders").GroupBy("status")
//                                          .Median("amount", "median").Percentiles());   // exact selection
//
// What it guarantees:
// - Everything it runs follows the directory through bucket moves: with a
//   catalog, Open() reads the catalog's directory before it returns, a
//   watcher keeps it current (LISTEN plus a periodic check), routed
//   transactions go to the new owner a refusing shard names, and scatters,
//   merges and top-k that a shard refuses for a stale directory (SK003) run
//   again on the refreshed one. Without a catalog the configuration's
//   directory is used as it is.
// - Every statement runs on a pool's connection: bounded, with deadlines,
//   with the pinned session of session.hpp.
// - With replicas in the configuration, a monitor measures their lag, and
//   reads that ask for replicas (ReadPolicy in RoutedOptions, ScatterOptions
//   and SqlOptions: read_policy.hpp) go to one that is close enough behind
//   and has replayed the caller's read token; every routed write returns
//   its token (RoutedOutcome::token, SqlResult::token).
//
// Lifetimes: the Cluster owns everything it hands out; references from
// Resolver(), Scatters(), Transactions() and Watcher() are valid until it is
// destroyed. Destroy it after the last call returns (its destructor stops
// the watcher thread and waits for statements still running past their
// deadline).
//
// Threads: every call may be made from any number of threads at once. The
// watcher has one thread of its own; scatters use worker threads only for
// shards whose pool has no idle connection (scatter.hpp).
//
// The lower-level classes (BucketShardResolver, ScatterGather,
// RoutedTransactions, DirectoryWatcher, the merge and top-k functions) stay
// public for those who need them; this header only wires them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "shardkit/config.hpp"
#include "shardkit/pg/server_error.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/percentile.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/scatter_merge.hpp"
#include "shardkit/queries/sketches.hpp"
#include "shardkit/queries/topk.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/primary_leases.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/sql/cross_shard_transaction.hpp"
#include "shardkit/sql/sql_options.hpp"
#include "shardkit/sql/sql_result.hpp"
#include "shardkit/sql/sql_transaction.hpp"
#include "shardkit/writes/cross_shard.hpp"
#include "shardkit/writes/in_doubt.hpp"
#include "shardkit/writes/routed.hpp"

namespace shardkit {

namespace sql {
class SqlEngine;
}

struct ClusterOptions {
  // Worker threads for scatters (default: the shard count).
  std::optional<int> scatter_threads;
  // How the watcher checks the catalog (only with a catalog).
  DirectoryWatcherOptions watcher;
  // How the replicas are probed (only with replicas); unset: the
  // configuration's [replicas] probe_interval_ms and the defaults.
  std::optional<ReplicaMonitorOptions> replicas;
  // With a catalog: how often a recovery pass settles the prepared parts of
  // cross-shard transactions whose coordinator stopped (in_doubt.hpp);
  // zero: never (run `shardctl recover` instead).
  std::chrono::milliseconds in_doubt_interval{std::chrono::seconds(10)};
  InDoubtOptions in_doubt;
  // With a catalog: how the primaries' leases are kept (primary_leases.hpp;
  // nothing to keep while the catalog has leases off).
  PrimaryLeasesOptions leases;
};

// One shard as Stats() found it.
struct ShardStats {
  ShardId shard{};
  std::string name;         // the configuration's name of the shard
  std::size_t buckets = 0;  // the buckets the current directory gives it
  PoolStats pool;           // its primary's pool
};

// Everything the cluster counts, read at one moment.
struct ClusterStats {
  std::int64_t directory_version = 0;
  std::vector<ShardStats> shards;  // by shard
  ScatterStats scatters;
  RoutedStats transactions;
  std::optional<DirectoryWatcherStats> watcher;  // with a catalog
  std::vector<ReplicaStatus> replicas;           // every configured replica, as last probed
  std::optional<InDoubtRecoveryStats> in_doubt;  // with a catalog and a periodic recovery pass
  std::optional<PrimaryLeasesStats> leases;      // with a catalog
};

class Cluster {
 public:
  // Builds the pools (no connection is opened yet) and, with a catalog,
  // reads its directory and starts the watcher. Throws ConfigError,
  // CatalogError (the catalog cannot be read) or DirectoryError.
  [[nodiscard]] static std::unique_ptr<Cluster> Open(const ClusterConfig& config, ClusterOptions options = {});
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // The key's bucket, shard, directory version and pool, from one snapshot
  // of the current directory. A key is a CustomerId or any ShardKey
  // (bigint, uuid, text: core/shard_key.hpp).
  [[nodiscard]] shardkit::Route Route(const ShardKey& key) const;

  // fn(tx, context) in a transaction on the customer's shard, following the
  // bucket through moves (routed.hpp).
  template <class Fn>
  auto Run(const ShardKey& key, Fn&& fn, const RoutedOptions& options = {}, RoutedOutcome* outcome = nullptr) {
    return transactions_->Run(key, std::forward<Fn>(fn), options, outcome);
  }

  // fn(SqlTransaction&) in a transaction on the customer's shard: plain SQL
  // statements that stay on that customer's bucket, committed together when
  // fn returns (sql_transaction.hpp); otherwise as Run(), except that a
  // server's error comes out as shardkit's (pg/server_error.hpp: inside fn
  // it is still libpqxx's).
  template <class Fn>
  auto Transact(const ShardKey& key, Fn&& fn, const RoutedOptions& options = {}, RoutedOutcome* outcome = nullptr) {
    try {
      return transactions_->Run(
          key,
          [&](pqxx::transaction_base& tx, const RoutedContext& at) {
            SqlTransaction sql_tx(*sql_, tx, at);
            return fn(sql_tx);
          },
          options, outcome);
    } catch (...) {
      RethrowAsShardError(Route(key).shard, "a transaction for " + Describe(key));
    }
  }

  // fn(CrossShardTransaction&) in one transaction per shard the keys live
  // on, committed on all of them or on none: a plain COMMIT when they share
  // a shard, two-phase commit decided in the catalog otherwise
  // (writes/cross_shard.hpp, sql/cross_shard_transaction.hpp). Statements
  // go through tx.On(key), each pinned to that key's bucket. Follows moves
  // and failovers as Transact does (fn may run more than once); a server's
  // error comes out as shardkit's.
  template <class Fn>
  auto TransactAcross(const std::vector<ShardKey>& keys, Fn&& fn, const CrossShardOptions& options = {},
                      CrossShardOutcome* outcome = nullptr) {
    try {
      return cross_shard_->Run(
          keys,
          [&](const std::vector<CrossShardPart>& parts) {
            CrossShardTransaction tx(*sql_, parts);
            return fn(tx);
          },
          options, outcome);
    } catch (const Error&) {
      throw;
    } catch (...) {
      RethrowAsShardError(keys.empty() ? ShardId{0} : Route(keys.front()).shard, "a cross-shard transaction");
    }
  }

  // One statement on every (or the chosen) shard (scatter.hpp).
  [[nodiscard]] ScatterResult Scatter(const std::string& sql, const SqlParams& params = {},
                                      const ScatterOptions& options = {});
  // A merge plan's per-shard SQL on every shard, merged: the answer one
  // unsharded server would give, or UnmergeableQuery (scatter_merge.hpp).
  [[nodiscard]] MergedResult Merge(const MergePlan& plan, const SqlParams& params = {},
                                   const ScatterOptions& options = {}, const MergeOptions& merge_options = {});
  // Exact top-k by a summed measure (topk.hpp), by `method` (default: auto),
  // on the primaries (options.read kReplicaOnly is refused: a replica cannot
  // make the temporary table its phases aggregate into).
  [[nodiscard]] TopKResult<std::int64_t> TopK(const TopKQuery& query, TopKMethod method = TopKMethod::kAuto,
                                              const ScatterOptions& options = {});
  [[nodiscard]] TopKResult<Decimal> TopKDecimal(const TopKQuery& query, TopKMethod method = TopKMethod::kAuto,
                                                const ScatterOptions& options = {});

  // Exact percentiles, medians and COUNT(DISTINCT x) by distributed
  // selection in one snapshot per shard (percentile.hpp), run again on the
  // refreshed directory if a shard refuses a bucket for a stale one.
  [[nodiscard]] PercentileResult Percentiles(const PercentileQuery& query, const ScatterOptions& options = {});
  // Approximate, only when asked by name: HyperLogLog and t-digest sketches
  // merged across shards (sketches.hpp); the result carries its error bound.
  [[nodiscard]] ApproximateResult ApproxCountDistinct(const SketchQuery& query, const ScatterOptions& options = {});
  [[nodiscard]] ApproximateResult ApproxPercentile(const SketchQuery& query, const ScatterOptions& options = {});

  // One SQL statement, answered as one unsharded server would answer it, or
  // SqlError: a syntax error, or a refusal saying why it cannot be answered
  // exactly and what to do. Routed when every sharded table in it has its
  // customer_id pinned to one customer (customer_id = 42 or = $1 in an
  // AND-conjunct of its WHERE or inner JOIN ... ON, or equated to a pinned
  // one): it runs as Run() does, on that customer's shard; an INSERT whose
  // column list lacks bucket gets it. Reading only reference tables
  // ([sql] reference_tables) it runs on any one shard. A SELECT over every
  // shard is merged from per-shard partials; what partials cannot finish
  // alone (expressions over aggregates, HAVING of any shape, DISTINCT
  // without the shard key) is evaluated by PostgreSQL over the merged rows
  // on one shard; UNION / INTERSECT / EXCEPT run arm by arm and are
  // combined the same way. A server's error comes out as ShardQueryError
  // (its SQLSTATE) or ShardUnavailable (pg/server_error.hpp). Plans are
  // cached by the exact text; the shards' catalog (sharded tables,
  // functions) is read again when its schema version changes (checked
  // every 5 s, cached plans dropped) or a statement names what it lacks.
  [[nodiscard]] SqlResult Execute(const std::string& sql, const SqlParams& params = {}, const SqlOptions& options = {});
  // Where Execute would run the statement with these parameters (Describe():
  // in words), without running it.
  [[nodiscard]] SqlPlanInfo Explain(const std::string& sql, const SqlParams& params = {});

  [[nodiscard]] ClusterStats Stats() const;
  // Closes every pool's idle connections (a service draining before it
  // exits); connections in use close when their call returns them.
  void CloseIdleConnections();

  [[nodiscard]] const ClusterConfig& Config() const noexcept { return config_; }
  [[nodiscard]] int ShardCount() const noexcept { return resolver_->ShardCount(); }
  [[nodiscard]] BucketShardResolver& Resolver() const noexcept { return *resolver_; }
  [[nodiscard]] ScatterGather& Scatters() const noexcept { return *scatter_; }
  [[nodiscard]] RoutedTransactions& Transactions() const noexcept { return *transactions_; }
  // Null without a catalog.
  [[nodiscard]] DirectoryWatcher* Watcher() const noexcept { return watcher_.get(); }
  // Null without replicas.
  [[nodiscard]] ReplicaMonitor* Replicas() const noexcept { return replicas_.get(); }
  // Null without a catalog or with in_doubt_interval zero.
  [[nodiscard]] InDoubtRecovery* InDoubt() const noexcept { return in_doubt_.get(); }
  // Null without a catalog.
  [[nodiscard]] PrimaryLeases* Leases() const noexcept { return leases_.get(); }

 private:
  Cluster(const ClusterConfig& config, ClusterOptions options);
  ClusterConfig config_;
  // Destroyed in reverse order: scatters and transactions before the
  // watcher, the watcher before the resolver and its pools.
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<DirectoryWatcher> watcher_;
  std::unique_ptr<ReplicaMonitor> replicas_;
  std::unique_ptr<ScatterGather> scatter_;
  std::unique_ptr<RoutedTransactions> transactions_;
  std::unique_ptr<CrossShardTransactions> cross_shard_;
  std::unique_ptr<InDoubtRecovery> in_doubt_;  // with a catalog
  std::unique_ptr<PrimaryLeases> leases_;      // with a catalog
  std::unique_ptr<sql::SqlEngine> sql_;
};

}  // namespace shardkit
