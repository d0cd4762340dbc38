// Cluster: the configuration's pools, resolver, watcher, scatters and
// routed transactions, wired once.
#include "shardkit/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "queries/stale_directory_retry.hpp"
#include "sql/sql_engine.hpp"

namespace shardkit {

std::unique_ptr<Cluster> Cluster::Open(const ClusterConfig& config, ClusterOptions options) {
  return std::unique_ptr<Cluster>(new Cluster(config, std::move(options)));
}

Cluster::Cluster(const ClusterConfig& config, ClusterOptions options) : config_(config) {
  // With a catalog, FromConfig reads its directory: routing is current
  // before the first call, and the watcher keeps it so.
  resolver_ = BucketShardResolver::FromConfig(config_);
  if (config_.catalog_dsn && config_.directory_source == DirectorySource::kCatalog) {
    watcher_ = std::make_unique<DirectoryWatcher>(*resolver_, *config_.catalog_dsn, options.watcher);
  }
  if (resolver_->HasReplicas()) {
    ReplicaMonitorOptions monitor;
    monitor.probe_interval = config_.replica_settings.probe_interval;
    replicas_ = std::make_unique<ReplicaMonitor>(*resolver_, config_, options.replicas.value_or(monitor));
  }
  scatter_ = std::make_unique<ScatterGather>(*resolver_, options.scatter_threads);
  scatter_->FollowDirectory(watcher_.get());
  scatter_->ReadReplicas(replicas_.get());
  transactions_ = std::make_unique<RoutedTransactions>(*resolver_, watcher_.get());
  transactions_->ReadReplicas(replicas_.get());
  cross_shard_ =
      std::make_unique<CrossShardTransactions>(*resolver_, watcher_.get(), config_.catalog_dsn, config_.pool);
  if (config_.catalog_dsn && options.in_doubt_interval.count() > 0) {
    in_doubt_ = std::make_unique<InDoubtRecovery>(*resolver_, *config_.catalog_dsn, options.in_doubt_interval,
                                                  options.in_doubt);
  }
  if (config_.catalog_dsn) leases_ = std::make_unique<PrimaryLeases>(*resolver_, *config_.catalog_dsn, options.leases);
  sql_ = std::make_unique<sql::SqlEngine>(*resolver_, *transactions_, *scatter_, config_.reference_tables,
                                          config_.max_gather_rows, config_.max_gather_bytes);
}

Cluster::~Cluster() = default;

shardkit::Route Cluster::Route(const ShardKey& key) const {
  return resolver_->Resolve(key);
}

ScatterResult Cluster::Scatter(const std::string& sql, const SqlParams& params, const ScatterOptions& options) {
  return scatter_->Run(sql, params, options);
}

MergedResult Cluster::Merge(const MergePlan& plan, const SqlParams& params, const ScatterOptions& options,
                            const MergeOptions& merge_options) {
  return ScatterMerge(*scatter_, plan, params, options, merge_options);
}

namespace {

// Top-k and exact percentiles run their rounds in one session per shard; a
// shard that refuses a bucket for a stale directory fails the session, so
// the whole query runs again on the refreshed directory, as a scatter does.
template <class Run>
auto FollowingDirectory(BucketShardResolver& resolver, DirectoryWatcher* watcher, const ScatterOptions& options,
                        const Run& run) {
  return RunFollowingDirectory(resolver, watcher,
                               options.deadline.value_or(StaleDirectoryRetry::Clock::time_point::max()), run);
}

// Sessions with temporary tables (top-k, exact percentiles) cannot run on a
// hot standby: asked for replicas only, they refuse rather than read the
// primaries; "replica preferred" reads the primaries.
void RefuseReplicasOnly(const ScatterOptions& options, const char* what, const char* why) {
  if (options.read.preference != ReadPreference::kReplicaOnly) return;
  throw Error(
      fmt::format("{} '{}': {}, and this call asked for replicas only; run its merge plan with Merge() (or "
                  "the SELECT with Execute()) on the replicas, or read the primaries",
                  what, options.label, why));
}

template <class Measure>
TopKResult<Measure> TopKFollowingDirectory(BucketShardResolver& resolver, ScatterGather& scatter,
                                           DirectoryWatcher* watcher, const TopKQuery& query, TopKMethod method,
                                           const ScatterOptions& options) {
  RefuseReplicasOnly(
      options, "top-k",
      "exact top-k reads the primaries (its phases aggregate into a temporary table, which a replica cannot make)");
  return FollowingDirectory(resolver, watcher, options,
                            [&] { return TopKBySum<Measure>(scatter, query, method, options); });
}

}  // namespace

TopKResult<std::int64_t> Cluster::TopK(const TopKQuery& query, TopKMethod method, const ScatterOptions& options) {
  return TopKFollowingDirectory<std::int64_t>(*resolver_, *scatter_, watcher_.get(), query, method, options);
}

TopKResult<Decimal> Cluster::TopKDecimal(const TopKQuery& query, TopKMethod method, const ScatterOptions& options) {
  return TopKFollowingDirectory<Decimal>(*resolver_, *scatter_, watcher_.get(), query, method, options);
}

PercentileResult Cluster::Percentiles(const PercentileQuery& query, const ScatterOptions& options) {
  RefuseReplicasOnly(options, "percentiles",
                     "exact percentiles read the primaries (each shard's rows go into a temporary table, which a "
                     "replica cannot make)");
  return FollowingDirectory(*resolver_, watcher_.get(), options,
                            [&] { return ExactPercentiles(*scatter_, query, options); });
}

ApproximateResult Cluster::ApproxCountDistinct(const SketchQuery& query, const ScatterOptions& options) {
  return shardkit::ApproxCountDistinct(*scatter_, query, options);
}

ApproximateResult Cluster::ApproxPercentile(const SketchQuery& query, const ScatterOptions& options) {
  return shardkit::ApproxPercentile(*scatter_, query, options);
}

SqlResult Cluster::Execute(const std::string& sql, const SqlParams& params, const SqlOptions& options) {
  return sql_->Execute(sql, params, options);
}

SqlPlanInfo Cluster::Explain(const std::string& sql, const SqlParams& params) {
  return sql_->Explain(sql, params);
}

ClusterStats Cluster::Stats() const {
  ClusterStats stats;
  const auto directory = resolver_->Directory();
  stats.directory_version = directory->Version();
  for (const ShardId shard : FirstShards(resolver_->ShardCount())) {
    stats.shards.push_back(ShardStats{shard, resolver_->ShardName(shard), directory->BucketsOf(shard).size(),
                                      resolver_->Pool(shard).Stats()});
  }
  stats.scatters = scatter_->Stats();
  stats.transactions = transactions_->Stats();
  if (watcher_) stats.watcher = watcher_->Stats();
  if (replicas_) stats.replicas = replicas_->Status();
  if (in_doubt_) stats.in_doubt = in_doubt_->Stats();
  if (leases_) stats.leases = leases_->Stats();
  return stats;
}

void Cluster::CloseIdleConnections() {
  for (ConnectionPool& pool : resolver_->AllShards()) pool.CloseIdle();
}

}  // namespace shardkit
