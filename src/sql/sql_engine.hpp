// The SQL layer of a Cluster: plans statements (cached by text), reads the
// shards' catalog once when first needed, runs routed statements as the
// cluster's routed transactions and scatters through its ScatterGather
// (both follow the directory through bucket moves). Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/sql/sql_options.hpp"
#include "shardkit/sql/sql_result.hpp"
#include "sql/finish.hpp"
#include "sql/plan_cache.hpp"
#include "sql/router.hpp"
#include "sql/sql_catalog.hpp"

namespace pqxx {
class transaction_base;
}

namespace shardkit {
struct RoutedContext;
class BucketShardResolver;
class RoutedTransactions;
class ScatterGather;
}  // namespace shardkit

namespace shardkit::sql {

class SqlEngine {
 public:
  static constexpr std::size_t kDefaultCacheCapacity = 1024;
  SqlEngine(BucketShardResolver& resolver, RoutedTransactions& transactions, ScatterGather& scatter,
            std::vector<std::string> reference_tables, std::int64_t max_gather_rows, std::int64_t max_gather_bytes,
            std::size_t cache_capacity = kDefaultCacheCapacity);

  [[nodiscard]] SqlResult Execute(const std::string& sql, const SqlParams& params, const SqlOptions& options);
  [[nodiscard]] SqlPlanInfo Explain(const std::string& sql, const SqlParams& params);
  // One statement inside a routed transaction (SqlTransaction): refused
  // unless it stays on the transaction's bucket or reads reference tables.
  [[nodiscard]] SqlResult ExecuteIn(pqxx::transaction_base& tx, const RoutedContext& at, const std::string& sql,
                                    const SqlParams& params);

  // The plan of a statement, from the cache or new (`cached` says which).
  [[nodiscard]] std::shared_ptr<const SqlPlan> Plan(const std::string& sql, bool* cached = nullptr);
  // Read from a shard on the first call; read again when the schema
  // version changed (checked at most every kSchemaCheckInterval) or a
  // statement names a function it does not list.
  // Without `load`, null until a first call with it.
  [[nodiscard]] std::shared_ptr<const SqlCatalog> Catalog(bool load = true);
  static constexpr std::chrono::seconds kSchemaCheckInterval{5};

 private:
  struct Bound {
    std::shared_ptr<const SqlPlan> plan;
    BoundRoute route;
    ShardKey key = CustomerId{0};
    bool cached = false;
  };
  Bound Bind(const std::string& sql, const SqlParams& params);
  Bound Bind(std::shared_ptr<const SqlPlan> plan, bool cached, const SqlParams& params);
  SqlResult ExecuteBound(const Bound& bound, const SqlParams& params, const SqlOptions& options);
  // Each arm as a statement of its own, then combined (set_operation.hpp).
  SqlResult ExecuteSetOperation(const Bound& bound, const SqlParams& params, const SqlOptions& options);
  SqlPlanInfo Info(const Bound& bound, ShardId shard) const;
  SqlResult ExecuteScatter(const Bound& bound, const SqlParams& params, const SqlOptions& options);
  // The best-sellers shape by exact top-k; nullopt (and *why) when top-k
  // cannot answer it exactly and the merge plan must.
  std::optional<SqlResult> ExecuteTopK(const Bound& bound, const SqlParams& params,
                                       const ScatterOptions& scatter_options, std::string* why);
  // A gathered SELECT (gather_plan.hpp): the tables' rows from every
  // shard, then the statement over them on one shard.
  SqlResult ExecuteGather(const Bound& bound, const SqlParams& params, const SqlOptions& options);
  // A statement that reads no sharded table, on `shard` alone.
  ScatterResult RunOn(ShardId shard, const std::string& sql, const SqlParams& params, ScatterOptions options);
  // The finishing step (finish.hpp) over these inputs, on `shard`.
  SqlResult Finish(const FinishStep& step, const std::vector<FinishInput>& inputs, const SqlParams& params,
                   ScatterOptions options, ShardId shard);
  // SELECT DISTINCT without the shard key: the shards' rows (each shard's
  // distinct ones, in order) deduplicated, ordered and limited on one shard.
  SqlResult FinishDistinct(const ScatterResult& scattered, const RowOrder& order, const SqlParams& params,
                           const ScatterOptions& options);
  // For each type OID, a name the server casts text to exactly (a
  // qualified pg_type name), looked up on a shard once.
  std::vector<std::string> CastTypeNames(const std::vector<unsigned>& oids);

  // Reads the catalog from any reachable shard; plans made with an older
  // schema version are dropped.
  std::shared_ptr<const SqlCatalog> ReloadCatalog(const std::shared_ptr<const SqlCatalog>& seen,
                                                  std::chrono::milliseconds unless_newer_than = {});
  static constexpr std::chrono::milliseconds kMissReloadInterval{200};
  // The schema version on any reachable shard, or nullopt.
  std::optional<std::string> CurrentSchemaVersion();

  BucketShardResolver& resolver_;
  RoutedTransactions& transactions_;
  ScatterGather& scatter_;
  const std::vector<std::string> reference_tables_;
  const std::int64_t max_gather_rows_;
  const std::int64_t max_gather_bytes_;  // 0: no bound
  PlanCache cache_;
  std::mutex catalog_mutex_;
  std::shared_ptr<const SqlCatalog> catalog_ SHARDKIT_GUARDED_BY(catalog_mutex_);
  std::chrono::steady_clock::time_point catalog_checked_at_ SHARDKIT_GUARDED_BY(catalog_mutex_);
  std::chrono::steady_clock::time_point catalog_read_at_ SHARDKIT_GUARDED_BY(catalog_mutex_);
  std::mutex type_names_mutex_;
  std::map<unsigned, std::string> type_names_ SHARDKIT_GUARDED_BY(type_names_mutex_);
};

}  // namespace shardkit::sql
