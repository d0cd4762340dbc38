#include "sql/sql_engine.hpp"

#include <fmt/format.h>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/routed.hpp"
#include "sql/parse.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {

SqlEngine::SqlEngine(BucketShardResolver& resolver, RoutedTransactions& transactions,
                     std::vector<std::string> reference_tables, std::size_t cache_capacity)
    : resolver_(resolver),
      transactions_(transactions),
      reference_tables_(std::move(reference_tables)),
      cache_(cache_capacity) {}

std::shared_ptr<const SqlCatalog> SqlEngine::Catalog() {
  const std::lock_guard lock(catalog_mutex_);
  if (!catalog_) {
    // Any reachable shard answers: they share one schema (shardctl migrate).
    std::string failures;
    for (ConnectionPool& pool : resolver_.AllShards()) {
      try {
        auto lease = pool.Acquire();
        catalog_ = std::make_shared<const SqlCatalog>(LoadSqlCatalog(*lease, reference_tables_));
        break;
      } catch (const std::exception& e) {
        failures += fmt::format("{}{}", failures.empty() ? "" : "; ", e.what());
      }
    }
    if (!catalog_) throw Error("sql: the sharded tables could not be read from any shard: " + failures);
  }
  return catalog_;
}

std::shared_ptr<const SqlPlan> SqlEngine::Plan(const std::string& sql, bool* cached) {
  if (auto plan = cache_.Find(sql)) {
    if (cached != nullptr) *cached = true;
    return plan;
  }
  // Parsed first: a syntax error needs no shard.
  const ParsedStatement parsed = ParseStatement(sql);
  const std::shared_ptr<const SqlCatalog> catalog = Catalog();
  auto plan = PlanStatement(parsed, *catalog);
  cache_.Insert(sql, plan);
  if (cached != nullptr) *cached = false;
  return plan;
}

SqlEngine::Bound SqlEngine::Bind(const std::string& sql, const SqlParams& params) {
  Bound bound;
  bound.plan = Plan(sql, &bound.cached);
  bound.route = BindRoute(*bound.plan, params);
  // No sharded table: any shard answers; customer 0's is as good as any.
  bound.customer = bound.route.customer.value_or(CustomerId{0});
  RequireOneShard(*bound.plan, bound.route, *resolver_.Directory());
  return bound;
}

SqlPlanInfo SqlEngine::Info(const Bound& bound, ShardId shard) const {
  SqlPlanInfo info;
  info.kind = bound.plan->kind;
  info.shard = shard;
  if (info.kind == SqlPlanInfo::Kind::kRouted) {
    info.customer = bound.customer;
    info.bucket = BucketOf(bound.customer);
  }
  info.statement = bound.plan->statement;
  info.read_only = bound.plan->read_only;
  info.sharded_tables = bound.plan->sharded_tables;
  info.reference_tables = bound.plan->reference_tables;
  info.cached = bound.cached;
  return info;
}

SqlPlanInfo SqlEngine::Explain(const std::string& sql, const SqlParams& params) {
  const Bound bound = Bind(sql, params);
  return Info(bound, resolver_.Resolve(bound.customer).shard);
}

SqlResult SqlEngine::Execute(const std::string& sql, const SqlParams& params, const SqlOptions& options) {
  const Bound bound = Bind(sql, params);
  const std::string text = StatementText(*bound.plan, bound.route);
  RoutedOptions routed;
  routed.deadline = options.deadline;
  routed.isolation = options.isolation;
  routed.read_only = bound.plan->read_only;
  routed.label = options.label;
  SqlResult result;
  transactions_.Run(
      bound.customer,
      [&](pqxx::transaction_base& tx, const RoutedContext& at) {
        const pqxx::result rows = tx.exec_params(text, pqxx::prepare::make_dynamic_params(params));
        result = SqlResult{};
        const auto columns = rows.columns();
        for (pqxx::row::size_type c = 0; c < columns; ++c) {
          result.columns.emplace_back(rows.column_name(c));
          result.types.push_back(static_cast<unsigned>(rows.column_type(c)));
        }
        result.rows.reserve(rows.size());
        for (const auto& row : rows) {
          auto& out = result.rows.emplace_back();
          out.reserve(columns);
          for (const auto& field : row) {
            if (field.is_null()) {
              out.emplace_back(std::nullopt);
            } else {
              out.emplace_back(std::string(field.c_str(), field.size()));
            }
          }
        }
        result.affected = bound.plan->read_only ? rows.size() : static_cast<std::size_t>(rows.affected_rows());
        result.plan = Info(bound, at.shard);
      },
      routed);
  return result;
}

}  // namespace shardkit::sql
