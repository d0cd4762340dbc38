#include "sql/sql_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <pqxx/pqxx>
#include <string_view>

#include "core/sql_text.hpp"
#include "queries/stale_directory_retry.hpp"
#include "shardkit/core/shard_key_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pg/server_error.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/scatter_merge.hpp"
#include "shardkit/queries/topk.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/routed.hpp"
#include "sql/analyzer.hpp"
#include "sql/gather_plan.hpp"
#include "sql/parse.hpp"
#include "sql/row_merge.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

// ScatterOptions' default deadline: a top-k and the merge after it, if
// top-k cannot answer, share one.
constexpr std::chrono::seconds kScatterTimeout{30};

}  // namespace

SqlEngine::SqlEngine(BucketShardResolver& resolver, RoutedTransactions& transactions, ScatterGather& scatter,
                     std::vector<std::string> reference_tables, std::int64_t max_gather_rows,
                     std::int64_t max_gather_bytes, std::size_t cache_capacity)
    : resolver_(resolver),
      transactions_(transactions),
      scatter_(scatter),
      reference_tables_(std::move(reference_tables)),
      max_gather_rows_(max_gather_rows),
      max_gather_bytes_(max_gather_bytes),
      cache_(cache_capacity) {}

std::shared_ptr<const SqlCatalog> SqlEngine::Catalog(bool load) {
  std::shared_ptr<const SqlCatalog> seen;
  {
    const std::lock_guard lock(catalog_mutex_);
    if (!catalog_ && !load) return nullptr;
    const auto now = std::chrono::steady_clock::now();
    if (catalog_ && now - catalog_checked_at_ < kSchemaCheckInterval) return catalog_;
    catalog_checked_at_ = now;
    seen = catalog_;
  }
  if (seen) {
    // One caller per interval asks a shard; the others go on with the copy.
    const std::optional<std::string> version = CurrentSchemaVersion();
    if (!version || *version == seen->SchemaVersion()) return seen;
  }
  return ReloadCatalog(seen);
}

std::optional<std::string> SqlEngine::CurrentSchemaVersion() {
  // Only a connection that is idle now: the check never waits for a pool
  // or a server that is not there (it is tried again next interval).
  for (ConnectionPool& pool : resolver_.AllShards()) {
    try {
      auto lease = pool.TryAcquireIdle();
      if (!lease) continue;
      pqxx::read_transaction tx{**lease};
      tx.exec0("SET LOCAL statement_timeout = 1000");
      std::string version = ReadSchemaVersion(tx);
      tx.commit();
      return version;
    } catch (const std::exception&) {
      // The next shard; none reachable: the statement's own run says so.
    }
  }
  return std::nullopt;
}

std::shared_ptr<const SqlCatalog> SqlEngine::ReloadCatalog(const std::shared_ptr<const SqlCatalog>& seen,
                                                           std::chrono::milliseconds unless_newer_than) {
  const std::lock_guard lock(catalog_mutex_);
  if (catalog_ != seen) return catalog_;  // another caller read it meanwhile
  if (catalog_ && std::chrono::steady_clock::now() - catalog_read_at_ < unless_newer_than) return catalog_;
  // Any reachable shard answers: they share one schema (shardctl migrate).
  std::string failures;
  std::shared_ptr<const SqlCatalog> fresh;
  for (ConnectionPool& pool : resolver_.AllShards()) {
    try {
      auto lease = pool.Acquire();
      fresh = std::make_shared<const SqlCatalog>(LoadSqlCatalog(*lease, reference_tables_));
      break;
    } catch (const std::exception& e) {
      failures += fmt::format("{}{}", failures.empty() ? "" : "; ", e.what());
    }
  }
  if (!fresh) {
    if (catalog_) return catalog_;
    throw Error("sql: the sharded tables could not be read from any shard: " + failures);
  }
  if (catalog_ && fresh->SchemaVersion() != catalog_->SchemaVersion()) cache_.Clear();
  catalog_ = fresh;
  catalog_checked_at_ = catalog_read_at_ = std::chrono::steady_clock::now();
  return catalog_;
}

std::shared_ptr<const SqlPlan> SqlEngine::Plan(const std::string& sql, bool* cached) {
  // A cached plan is only as new as the catalog it was made with (the
  // check drops plans of an older schema).
  std::shared_ptr<const SqlCatalog> catalog = Catalog(/*load=*/false);
  if (auto plan = cache_.Find(sql)) {
    if (cached != nullptr) *cached = true;
    return plan;
  }
  // Parsed first: a syntax error needs no shard.
  const ParsedStatement parsed = ParseStatement(sql);
  if (!catalog) catalog = Catalog();
  std::shared_ptr<const SqlPlan> plan;
  try {
    plan = PlanStatement(parsed, *catalog);
  } catch (const NotInCatalog&) {
    // Created (or registered) after the catalog was read? Once more with a
    // fresh one (at most one read per kMissReloadInterval, so a statement
    // that is simply wrong costs no read each time); still unknown, the
    // refusal goes out.
    catalog = ReloadCatalog(catalog, kMissReloadInterval);
    plan = PlanStatement(parsed, *catalog);
  }
  {
    // Not a plan of a catalog that a reload replaced (and whose plans it
    // dropped) meanwhile.
    const std::lock_guard lock(catalog_mutex_);
    if (catalog_ == catalog) cache_.Insert(sql, plan);
  }
  if (cached != nullptr) *cached = false;
  return plan;
}

SqlEngine::Bound SqlEngine::Bind(const std::string& sql, const SqlParams& params) {
  bool cached = false;
  std::shared_ptr<const SqlPlan> plan = Plan(WithParameterTypes(sql, params), &cached);
  return Bind(std::move(plan), cached, params);
}

SqlEngine::Bound SqlEngine::Bind(std::shared_ptr<const SqlPlan> plan, bool cached, const SqlParams& params) {
  RequireParameterCount(*plan, params);
  if (plan->arm_by_arm) {
    // A set operation pinned by several parameters: routed when they name
    // one customer, arm by arm when they do not.
    try {
      (void)BindRoute(*plan, params);
    } catch (const SqlError&) {
      return Bind(plan->arm_by_arm, cached, params);
    }
  }
  Bound bound;
  bound.plan = std::move(plan);
  bound.cached = cached;
  bound.route = BindRoute(*bound.plan, params);
  // No sharded table: any shard answers; customer 0's is as good as any.
  if (bound.route.key) bound.key = *bound.route.key;
  RequireOneShard(*bound.plan, bound.route, *resolver_.Directory());
  return bound;
}

SqlPlanInfo SqlEngine::Info(const Bound& bound, ShardId shard) const {
  SqlPlanInfo info;
  info.kind = bound.plan->kind;
  info.shard = shard;
  if (info.kind == SqlPlanInfo::Kind::kRouted) {
    info.key = bound.key;
    info.bucket = BucketOf(bound.key);
  }
  info.key_column = bound.plan->key_column;
  info.statement = bound.plan->statement;
  info.read_only = bound.plan->read_only;
  info.sharded_tables = bound.plan->sharded_tables;
  info.reference_tables = bound.plan->reference_tables;
  info.cached = bound.cached;
  if (const auto& set = bound.plan->set_operation; set) {
    info.total_shards = resolver_.ShardCount();
    info.shard_count = info.total_shards;
    info.merge = set->Describe();
  }
  if (const auto& gather = bound.plan->gather; gather) {
    info.total_shards = resolver_.ShardCount();
    info.shard_count = info.total_shards;
    info.shard_sql = gather->shard_sql;
    info.merge = fmt::format("gathered (not merged: {}): every shard's rows of {} onto one shard, which runs: {}",
                             gather->why, fmt::join(gather->tables, ", "), gather->finish_sql);
  }
  if (const auto& scatter = bound.plan->scatter; scatter) {
    info.total_shards = resolver_.ShardCount();
    info.shard_count = info.total_shards;
    if (bound.route.key_values) {
      // Restricted: the owners of its buckets now (Execute reports the ones it ran on).
      const auto directory = resolver_.Directory();
      for (const BucketId b : bound.route.Buckets()) info.shards.push_back(directory->ShardOf(b));
      std::sort(info.shards.begin(), info.shards.end());
      info.shards.erase(std::unique(info.shards.begin(), info.shards.end()), info.shards.end());
      info.shard_count = static_cast<int>(info.shards.size());
    }
    info.shard_sql = scatter->shard_sql;
    info.merge = scatter->DescribeMerge();
    if (scatter->topk) {
      info.shard_sql = scatter->topk->shard_sql;
      info.merge = fmt::format(
          "{}: each shard's top {} and statistics, then TPUT's threshold and exact partials or the rest of the "
          "partials; if top-k cannot answer exactly (a negative or oversized sum), per-shard SQL: {}; merge: {}",
          scatter->topk->Describe(), scatter->topk->K(), scatter->shard_sql, scatter->DescribeMerge());
    }
  }
  return info;
}

SqlPlanInfo SqlEngine::Explain(const std::string& sql, const SqlParams& params) {
  const Bound bound = Bind(sql, params);
  return Info(bound, resolver_.Resolve(bound.key).shard);
}

namespace {

// Field: pg::Field or pqxx::field; Rows: pg::Rows (scatters, routed reads)
// or pqxx::result (a routed write's transaction).
template <class Field>
std::optional<std::string> FieldText(const Field& field) {
  if (field.is_null()) return std::nullopt;
  return std::string(field.c_str(), field.size());
}

// The result's columns from a shard's rows.
template <class Rows>
void ReadColumns(const Rows& rows, SqlResult& result) {
  for (pqxx::row_size_type c = 0; c < rows.columns(); ++c) {
    result.columns.emplace_back(rows.column_name(c));
    result.types.push_back(static_cast<unsigned>(rows.column_type(c)));
  }
}

template <class Rows>
void AppendRows(const Rows& rows, SqlResult& result) {
  for (const auto& row : rows) {
    auto& out = result.rows.emplace_back();
    out.reserve(row.size());
    for (const auto& field : row) out.push_back(FieldText(field));
  }
}

// LIMIT $n / OFFSET $n's value: a non-negative bigint, or NULL (nullopt:
// no limit, offset 0, as PostgreSQL reads them).
std::optional<std::int64_t> LimitArgument(const SqlPlan& plan, int param, const char* what, const SqlParams& params) {
  const std::string construct = fmt::format("{} ${}", what, param);
  const auto refuse = [&](const std::string& reason) {
    throw Refusal(plan.text, 0, construct, reason,
                  fmt::format("pass the {} as a non-negative integer, or NULL for {}", what,
                              std::string_view(what) == "LIMIT" ? "no limit" : "none"));
  };
  if (static_cast<std::size_t>(param) > params.size()) {
    refuse(fmt::format("it has no value ({} parameter(s) given)", params.size()));
  }
  const std::optional<std::string>& text = params[static_cast<std::size_t>(param - 1)];
  if (!text) return std::nullopt;
  const std::optional<std::int64_t> value = detail::ParseIntegerText(*text);
  if (!value) refuse(fmt::format("\"{}\" is not a bigint", *text));
  if (*value < 0) refuse(fmt::format("it is {}, and it must not be negative", *value));
  return value;
}

}  // namespace

std::optional<SqlResult> SqlEngine::ExecuteTopK(const Bound& bound, const SqlParams& params,
                                                const ScatterOptions& scatter_options, std::string* why) {
  const ScatterPlan& plan = *bound.plan->scatter;
  const TopKShape& shape = *plan.topk;
  TopKResult<std::int64_t> top;
  try {
    top = TopKBySum<std::int64_t>(scatter_, shape.Query(params, scatter_options.label), TopKMethod::kAuto,
                                  scatter_options);
  } catch (const UnmergeableQuery& e) {
    // A negative partial (TPUT's bounds need non-negative ones; kAuto
    // refuses it in phase 1), or a sum beyond 64 bits.
    *why = e.what();
    return std::nullopt;
  } catch (const ScatterError& e) {
    for (const ScatterError::Failure& f : e.failures()) {
      // The session does not follow a bucket move; the merge's scatter does.
      if (f.stale_directory) {
        *why = fmt::format("shard {} answered for a stale directory ({})", ToInt(f.shard), f.cause);
        return std::nullopt;
      }
      // The session's temporary table needs the TEMPORARY privilege, which
      // the merge does not (any other missing privilege fails it too).
      if (f.sqlstate == "42501") {
        *why = f.cause;
        return std::nullopt;
      }
    }
    throw;  // the statement's own error (its WHERE, its parameters), as the merge would give it
  }
  if (!top.warnings.empty()) {
    *why = top.warnings.front();
    return std::nullopt;
  }
  SqlResult result;
  result.plan = Info(bound, ShardId{0});
  std::string phases;
  for (const TopKPhaseStats& p : top.phases)
    phases += fmt::format("{}{}: {}", phases.empty() ? "" : ", ", p.name, p.rows);
  result.plan.merge = fmt::format("{}: {}, {} rows ({}); {}", shape.Describe(), TopKMethodName(top.method),
                                  top.total_rows, phases, top.choice);
  result.columns = plan.column_names;
  result.types.assign(2, shape.sum_type);
  result.types[shape.key_position] = shape.key_type;
  const auto offset = static_cast<std::size_t>(shape.offset);
  for (std::size_t i = offset; i < top.items.size(); ++i) {
    const TopKEntry<std::int64_t>& item = top.items[i];
    auto& row = result.rows.emplace_back(2);
    if (const auto* key = std::get_if<std::int64_t>(&item.key)) row[shape.key_position] = std::to_string(*key);
    row[1 - shape.key_position] = std::to_string(item.value);
  }
  result.rows_received = top.total_rows;
  result.affected = result.rows.size();
  return result;
}

SqlResult SqlEngine::ExecuteScatter(const Bound& bound, const SqlParams& params, const SqlOptions& options) {
  const ScatterPlan& plan = *bound.plan->scatter;
  ScatterOptions scatter_options;
  scatter_options.deadline = options.deadline;
  scatter_options.label = options.label;
  scatter_options.read = options.read;
  // customer_id IN (...): only the shards of those customers' buckets, by
  // the snapshot the scatter fences with (picked again on a retry).
  if (bound.route.key_values) scatter_options.buckets = bound.route.Buckets();
  if (plan.percentile) {
    if (options.read.preference == ReadPreference::kReplicaOnly) {
      throw Refusal(bound.plan->text, 0, "this statement over every shard",
                    "exact percentiles and COUNT(DISTINCT) read the primaries (each shard's rows go into a temporary "
                    "table, which a replica cannot make), and replicas only were asked for",
                    fmt::format("read the primaries or prefer replicas (it then reads the primaries), or pin {}",
                                bound.plan->key_column));
    }
    SqlResult result;
    try {
      // Its rounds run in one session per shard: after a move, all of them again.
      result = RunFollowingDirectory(
          resolver_, scatter_.FollowedDirectory(),
          scatter_options.deadline.value_or(StaleDirectoryRetry::Clock::time_point::max()),
          [&] { return RunPercentileShape(scatter_, *plan.percentile, params, scatter_options); });
    } catch (const UnmergeableQuery& e) {
      // What only the shards' types tell (a value type not ranked exactly, too many distinct values).
      throw Refusal(bound.plan->text, 0, "this statement over every shard", e.what(),
                    fmt::format("pin {} so that it runs on one shard, or rewrite it as said", bound.plan->key_column));
    }
    std::string merge = std::move(result.plan.merge);
    result.plan = Info(bound, ShardId{0});
    result.plan.merge = std::move(merge);
    return result;
  }
  std::string topk_refused;
  if (plan.topk && options.read.UsesReplicas()) {
    topk_refused =
        "it reads the primaries (its temporary table cannot be made on a replica), and replicas were asked for";
  } else if (plan.topk) {
    if (!scatter_options.deadline) scatter_options.deadline = std::chrono::steady_clock::now() + kScatterTimeout;
    if (auto answered = ExecuteTopK(bound, params, scatter_options, &topk_refused)) return *std::move(answered);
  }
  SqlResult result;
  result.plan = Info(bound, ShardId{0});
  if (plan.topk) {
    result.plan.shard_sql = plan.shard_sql;
    result.plan.merge = fmt::format("{} (exact top-k did not answer: {})", plan.DescribeMerge(), topk_refused);
  }
  const auto ran_on = [&](const ScatterResult& scattered) {
    for (const ShardResult& shard : scattered.shards) result.from_replicas += shard.on_replica ? 1 : 0;
    if (!bound.route.key_values) return;
    result.plan.shards.clear();
    for (const ShardResult& shard : scattered.shards) result.plan.shards.push_back(shard.shard);
    result.plan.shard_count = static_cast<int>(result.plan.shards.size());
  };
  const auto refuse = [&](const UnmergeableQuery& e, const std::string& reason, int location = 0) {
    throw Refusal(bound.plan->text, location, "this statement over every shard", reason.empty() ? e.what() : reason,
                  fmt::format("pin {} so that it runs on one shard", bound.plan->key_column));
  };
  // LIMIT $n / OFFSET $n: bound now (the cached plan has no value).
  std::optional<std::int64_t> limit;
  std::optional<std::int64_t> offset;
  if (plan.limit_param > 0) limit = LimitArgument(*bound.plan, plan.limit_param, "LIMIT", params);
  if (plan.offset_param > 0) offset = LimitArgument(*bound.plan, plan.offset_param, "OFFSET", params);
  if (plan.rows) {
    RowOrder order = *plan.rows;
    if (plan.limit_param > 0) order.limit = limit;
    if (plan.offset_param > 0) order.offset = offset.value_or(0);
    if (order.limit && order.offset > std::numeric_limits<std::int64_t>::max() - *order.limit) {
      throw Refusal(bound.plan->text, 0, "LIMIT + OFFSET",
                    fmt::format("each shard would be asked for OFFSET + LIMIT = {} + {} rows, more than a bigint holds",
                                order.offset, *order.limit),
                    "give a smaller LIMIT or OFFSET, or none");
    }
    const ScatterResult scattered = scatter_.Run(plan.shard_sql, params, scatter_options);
    ran_on(scattered);
    try {
      SqlPlanInfo keep = std::move(result.plan);
      const int from_replicas = result.from_replicas;
      result = order.distinct ? FinishDistinct(scattered, order, params, scatter_options)
                              : MergeSortedRows(scattered, order);
      result.plan = std::move(keep);
      result.from_replicas = from_replicas;
      result.rows_received = scattered.TotalRows();
    } catch (const UnmergeableQuery& e) {
      refuse(e, "");
    }
  } else if (!plan.merge) {
    const ScatterResult scattered = scatter_.Run(plan.shard_sql, params, scatter_options);
    ran_on(scattered);
    for (const ShardResult& shard : scattered.shards) {
      if (result.columns.empty()) ReadColumns(shard.rows, result);
      AppendRows(shard.rows, result);
    }
    result.rows_received = result.rows.size();
  } else {
    MergedResult merged;
    ShardId finish_on{0};
    try {
      MergePlan merge = *plan.merge;
      if (limit) merge.Limit(*limit);
      if (offset) merge.Offset(*offset);
      merge.Validate();
      const ScatterResult scattered = scatter_.Run(plan.shard_sql, params, scatter_options);
      ran_on(scattered);
      merged = Merge(merge, scattered);
      finish_on = scattered.shards.empty() ? ShardId{0} : scattered.shards.front().shard;
    } catch (const UnmergeableQuery& e) {
      // What only the shards' column types tell (a type the merge cannot order or group).
      std::string reason = e.what();
      // The merge's column names as the statement writes them; the refusal
      // points at the first column named (a HAVING condition: at HAVING).
      int location = -1;
      const auto rename = [&](const std::string& name, const std::string& text, int at_column) {
        const std::string internal = fmt::format("\"{}\"", name);
        for (std::size_t at; (at = reason.find(internal)) != std::string::npos;) {
          reason.replace(at, internal.size(), fmt::format("\"{}\"", text));
          if (location < 0) location = at_column;
        }
      };
      if (reason.starts_with("HAVING ")) location = plan.having_location;
      for (std::size_t i = plan.column_names.size(); i-- > 0;) {
        rename(fmt::format("_c{}", i + 1), plan.column_names[i],
               i < plan.column_locations.size() ? plan.column_locations[i] : -1);
      }
      for (const auto& hidden : plan.hidden_columns) rename(hidden.name, hidden.text, hidden.location);
      refuse(e, reason, std::max(location, 0));
    }
    result.columns = plan.column_names;
    result.rows_received = merged.rows_in;
    for (const std::string& type : merged.column_types) result.types.push_back(TypeOidNamed(type));
    result.rows.reserve(merged.rows.size());
    for (const auto& row : merged.rows) {
      auto& out = result.rows.emplace_back();
      out.reserve(row.size());
      for (const Value& v : row) {
        out.push_back(v.IsNull() ? std::nullopt : std::optional<std::string>(v.ToString()));
      }
    }
    if (plan.finish) {
      // The merged groups are the finishing step's input _m1.
      FinishInput input{CastTypeNames(result.types), std::move(result.rows)};
      SqlResult finished = Finish(*plan.finish, {input}, params, scatter_options, finish_on);
      finished.plan = std::move(result.plan);
      finished.rows_received = result.rows_received;
      finished.from_replicas = result.from_replicas;
      result = std::move(finished);
    }
  }
  result.affected = result.rows.size();
  return result;
}

std::vector<std::string> SqlEngine::CastTypeNames(const std::vector<unsigned>& oids) {
  std::vector<unsigned> missing;
  {
    const std::lock_guard lock(type_names_mutex_);
    for (const unsigned oid : oids) {
      if (!type_names_.contains(oid)) missing.push_back(oid);
    }
  }
  if (!missing.empty()) {
    // Never format_type(): it names bpchar "character", which a cast reads as character(1).
    const std::string sql = fmt::format(
        "SELECT t.oid::int8, format('%I.%I', n.nspname, t.typname) FROM pg_catalog.pg_type t JOIN "
        "pg_catalog.pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = ANY('{{{}}}'::oid[])",
        fmt::join(missing, ","));
    std::string failures;
    bool read = false;
    for (ConnectionPool& pool : resolver_.AllShards()) {
      try {
        auto lease = pool.Acquire();
        pqxx::nontransaction tx(*lease);
        const pqxx::result rows = tx.exec(sql);
        const std::lock_guard lock(type_names_mutex_);
        for (const auto& row : rows) type_names_[row[0].as<unsigned>()] = row[1].as<std::string>();
        read = true;
        break;
      } catch (const std::exception& e) {
        failures += fmt::format("{}{}", failures.empty() ? "" : "; ", e.what());
      }
    }
    if (!read) throw Error("sql: the result's column types could not be read from any shard: " + failures);
  }
  std::vector<std::string> names;
  const std::lock_guard lock(type_names_mutex_);
  for (const unsigned oid : oids) {
    const auto it = type_names_.find(oid);
    if (it == type_names_.end()) throw Error(fmt::format("sql: no type with OID {} on the shards", oid));
    names.push_back(it->second);
  }
  return names;
}

ScatterResult SqlEngine::RunOn(ShardId shard, const std::string& sql, const SqlParams& params, ScatterOptions options) {
  // It reads no sharded table: no bucket to fence, any shard computes it alike.
  options.shards = std::vector<ShardId>{shard};
  options.buckets.reset();
  options.directory_buckets = false;
  options.read_only = true;
  return scatter_.Run(sql, params, options);
}

SqlResult SqlEngine::Finish(const FinishStep& step, const std::vector<FinishInput>& inputs, const SqlParams& params,
                            ScatterOptions options, ShardId shard) {
  const FinishStatement statement = BuildFinishStatement(step, inputs, params);
  const ScatterResult finished = RunOn(shard, statement.sql, statement.params, std::move(options));
  SqlResult result;
  for (const ShardResult& one : finished.shards) {
    ReadColumns(one.rows, result);
    AppendRows(one.rows, result);
  }
  result.affected = result.rows.size();
  return result;
}

SqlResult SqlEngine::FinishDistinct(const ScatterResult& scattered, const RowOrder& order, const SqlParams& params,
                                    const ScatterOptions& options) {
  // Every shard's rows (the merge checks that each was sorted as the
  // server sorts: C collation), without their hidden columns.
  RowOrder all = order;
  all.limit.reset();
  all.offset = 0;
  const SqlResult rows = MergeSortedRows(scattered, all);
  FinishStep step;
  step.inputs.push_back(NumberedColumns(rows.columns.size()));
  std::string select = SelectNamed(rows.columns, "_m1", true);
  for (std::size_t k = 0; k < order.keys.size(); ++k) {
    const SortColumn& key = order.keys[k];
    select += fmt::format("{}{}{}{}", k == 0 ? " ORDER BY " : ", ", key.column + 1,
                          key.direction == SortDirection::kDesc ? " DESC" : "",
                          key.nulls == NullsOrder::kFirst  ? " NULLS FIRST"
                          : key.nulls == NullsOrder::kLast ? " NULLS LAST"
                                                           : "");
  }
  if (order.limit) select += fmt::format(" LIMIT {}", *order.limit);
  if (order.offset > 0) select += fmt::format(" OFFSET {}", order.offset);
  step.select = std::move(select);
  FinishInput input{CastTypeNames(rows.types), rows.rows};
  const ShardId shard = scattered.shards.empty() ? ShardId{0} : scattered.shards.front().shard;
  return Finish(step, {input}, params, options, shard);
}

SqlResult SqlEngine::ExecuteSetOperation(const Bound& bound, const SqlParams& params, const SqlOptions& options) {
  const SetOperationPlan& set = *bound.plan->set_operation;
  SqlOptions arm_options = options;
  // One deadline for every arm and the finishing step.
  if (!arm_options.deadline) arm_options.deadline = std::chrono::steady_clock::now() + kScatterTimeout;
  std::vector<SqlResult> arms;
  std::size_t rows_received = 0;
  int from_replicas = 0;
  for (const SetOperationArm& arm : set.arms) {
    SqlParams arm_params;
    for (const int p : arm.params) {
      if (static_cast<std::size_t>(p) > params.size()) {
        throw Refusal(bound.plan->text, 0, fmt::format("the parameter ${}", p),
                      fmt::format("it has no value ({} parameter(s) given)", params.size()), "give every parameter");
      }
      arm_params.push_back(params[static_cast<std::size_t>(p - 1)]);
    }
    arms.push_back(ExecuteBound(Bind(arm.plan, true, arm_params), arm_params, arm_options));
    rows_received += arms.back().rows_received;
    from_replicas += arms.back().from_replicas;
  }
  const bool same_types =
      std::all_of(arms.begin(), arms.end(), [&](const SqlResult& a) { return a.types == arms.front().types; });
  SqlResult result;
  if (set.union_all_only && same_types) {
    // UNION ALL: the arms' rows one after the other.
    result.columns = arms.front().columns;
    result.types = arms.front().types;
    for (SqlResult& arm : arms) {
      for (auto& row : arm.rows) result.rows.push_back(std::move(row));
    }
  } else {
    FinishStep step;
    std::vector<FinishInput> inputs;
    for (SqlResult& arm : arms) {
      step.inputs.push_back(NumberedColumns(arm.columns.size()));
      inputs.push_back(FinishInput{CastTypeNames(arm.types), std::move(arm.rows)});
    }
    // The first arm's columns name the result's.
    step.select = set.combination;
    step.select.replace(step.select.find(SetOperationPlan::kFirstArm),
                        std::string_view(SetOperationPlan::kFirstArm).size(), SelectNamed(arms.front().columns, "_m1"));
    if (!set.tail.empty()) step.select += " " + set.tail;
    step.params_used = ParamsIn(step.select);
    ScatterOptions scatter_options;
    scatter_options.deadline = arm_options.deadline;
    scatter_options.label = options.label;
    result = Finish(step, inputs, params, scatter_options, ShardId{0});
  }
  result.plan = Info(bound, ShardId{0});
  result.rows_received = rows_received;
  result.from_replicas = from_replicas;
  result.affected = result.rows.size();
  return result;
}

SqlResult SqlEngine::Execute(const std::string& sql, const SqlParams& params, const SqlOptions& options) {
  return ExecuteBound(Bind(sql, params), params, options);
}

SqlResult SqlEngine::ExecuteGather(const Bound& bound, const SqlParams& params, const SqlOptions& options) {
  const GatherPlan& gather = *bound.plan->gather;
  const std::int64_t bound_rows = options.max_gather_rows.value_or(max_gather_rows_);
  const auto too_many = [&](const std::string& seen) {
    throw Refusal(bound.plan->text, 0, "this statement over every shard",
                  fmt::format("it neither runs on one shard nor merges from each shard's answer ({}), so it runs "
                              "on one server over the rows of {} from every shard, and that is more than "
                              "max_gather_rows = {} rows ({})",
                              gather.why, fmt::join(bound.plan->sharded_tables, ", "), bound_rows, seen),
                  fmt::format("pin {} so that it runs on one shard, narrow it, or raise SqlOptions::max_gather_rows "
                              "(or [sql] max_gather_rows)",
                              bound.plan->key_column));
  };
  if (bound_rows <= 0) too_many("gathering is turned off");
  ScatterOptions scatter_options;
  scatter_options.deadline = options.deadline.value_or(std::chrono::steady_clock::now() + kScatterTimeout);
  scatter_options.label = options.label;
  scatter_options.read = options.read;
  // Each shard sends at most one row more than the bound, per table: past
  // it the statement is refused having shipped little.
  SqlParams shard_params = {std::to_string(bound_rows + 1)};
  for (const int number : gather.shard_params) shard_params.push_back(params.at(static_cast<std::size_t>(number - 1)));
  const ScatterResult scattered = scatter_.Run(gather.shard_sql, shard_params, scatter_options);
  // The rows first: each shard's count per table (its second column).
  std::int64_t total = 0;
  std::vector<std::int64_t> per_table(gather.tables.size(), 0);
  for (const ShardResult& shard : scattered.shards) {
    for (const auto& row : shard.rows) {
      for (std::size_t t = 0; t < gather.tables.size(); ++t) {
        const auto count = row[static_cast<int>(2 * t + 1)].as<std::int64_t>();
        per_table[t] += count;
        total += count;
      }
    }
  }
  if (total > bound_rows) {
    std::string seen;
    for (std::size_t t = 0; t < gather.tables.size(); ++t) {
      seen += fmt::format("{}{}: {}{}", seen.empty() ? "" : ", ", bound.plan->sharded_tables[t],
                          per_table[t] > bound_rows ? "more than " : "", std::min(per_table[t], bound_rows));
    }
    too_many(seen);
  }
  // Then the bytes: each shard's arrays as the text it sent, added shard by
  // shard; past the bound the statement is refused before the rows are
  // joined or sent on.
  const std::int64_t bound_bytes = options.max_gather_bytes.value_or(max_gather_bytes_);
  std::vector<std::int64_t> bytes_per_table(gather.tables.size(), 0);
  std::int64_t total_bytes = 0;
  for (std::size_t s = 0; s < scattered.shards.size(); ++s) {
    for (const auto& row : scattered.shards[s].rows) {
      for (std::size_t t = 0; t < gather.tables.size(); ++t) {
        const auto size = static_cast<std::int64_t>(row[static_cast<int>(2 * t)].size());
        bytes_per_table[t] += size;
        total_bytes += size;
      }
    }
    if (bound_bytes > 0 && total_bytes > bound_bytes) {
      std::string seen;
      for (std::size_t t = 0; t < gather.tables.size(); ++t) {
        seen +=
            fmt::format("{}{}: {} bytes", seen.empty() ? "" : ", ", bound.plan->sharded_tables[t], bytes_per_table[t]);
      }
      throw Refusal(
          bound.plan->text, 0, "this statement over every shard",
          fmt::format("it neither runs on one shard nor merges from each shard's answer ({}), so it runs on one "
                      "server over the rows of {} from every shard, and those are more than max_gather_bytes = {} "
                      "bytes as text ({}{})",
                      gather.why, fmt::join(bound.plan->sharded_tables, ", "), bound_bytes, seen,
                      s + 1 < scattered.shards.size()
                          ? fmt::format(", from {} of {} shards", s + 1, scattered.shards.size())
                          : std::string()),
          fmt::format("pin {} so that it runs on one shard, narrow it, select fewer or smaller rows, or raise "
                      "SqlOptions::max_gather_bytes (or [sql] max_gather_bytes; 0: no bound)",
                      bound.plan->key_column));
    }
  }
  // Table i's rows: every shard's array, their elements joined into one.
  std::vector<std::string> arrays(gather.tables.size(), "{");
  for (std::size_t t = 0; t < gather.tables.size(); ++t) {
    arrays[t].reserve(static_cast<std::size_t>(bytes_per_table[t]) + 2);
  }
  int from_replicas = 0;
  for (const ShardResult& shard : scattered.shards) {
    from_replicas += shard.on_replica ? 1 : 0;
    for (const auto& row : shard.rows) {
      for (std::size_t t = 0; t < gather.tables.size(); ++t) {
        const std::string_view text(row[static_cast<int>(2 * t)].c_str(), row[static_cast<int>(2 * t)].size());
        // "{a,b}": its elements after the ones before (a row type's delimiter is a comma).
        if (row[static_cast<int>(2 * t + 1)].as<std::int64_t>() > 0 && text.size() > 2) {
          if (arrays[t].size() > 1) arrays[t] += ',';
          arrays[t].append(text.substr(1, text.size() - 2));
        }
      }
    }
  }
  SqlParams finish_params = params;
  for (std::string& array : arrays) finish_params.emplace_back(std::move(array += '}'));
  const ShardId on = scattered.shards.empty() ? ShardId{0} : scattered.shards.front().shard;
  const ScatterResult finished = RunOn(on, gather.finish_sql, finish_params, scatter_options);
  SqlResult result;
  for (const ShardResult& one : finished.shards) {
    ReadColumns(one.rows, result);
    AppendRows(one.rows, result);
  }
  result.plan = Info(bound, on);
  result.rows_received = static_cast<std::size_t>(total);
  result.from_replicas = from_replicas;
  result.affected = result.rows.size();
  return result;
}

SqlResult SqlEngine::ExecuteBound(const Bound& bound, const SqlParams& params, const SqlOptions& options) {
  if (bound.plan->gather) return ExecuteGather(bound, params, options);
  if (bound.plan->set_operation) return ExecuteSetOperation(bound, params, options);
  if (bound.plan->kind == SqlPlanInfo::Kind::kScatter) return ExecuteScatter(bound, params, options);
  const std::string text = StatementText(*bound.plan, bound.route);
  RoutedOptions routed;
  routed.deadline = options.deadline;
  routed.isolation = options.isolation;
  routed.read_only = bound.plan->read_only;
  routed.label = options.label;
  routed.read = options.read;
  SqlResult result;
  const auto fill = [&](const auto& rows, ShardId shard) {
    result = SqlResult{};
    ReadColumns(rows, result);
    result.rows.reserve(rows.size());
    AppendRows(rows, result);
    result.affected = bound.plan->read_only ? rows.size() : static_cast<std::size_t>(rows.affected_rows());
    result.rows_received = rows.size();
    result.plan = Info(bound, shard);
  };
  try {
    if (bound.plan->read_only) {
      // A read: its whole transaction in one round trip.
      RoutedOutcome outcome;
      const pg::Rows rows = transactions_.Read(bound.key, text, params, routed, &outcome);
      fill(rows, outcome.shard);
      result.from_replicas = outcome.on_replica ? 1 : 0;
      return result;
    }
    // A write: its transaction, COMMIT and read token in one round trip.
    RoutedOutcome outcome;
    const pg::Rows rows = transactions_.Write(bound.key, text, params, routed, &outcome);
    fill(rows, outcome.shard);
    result.token = std::move(outcome.token);
    return result;
  } catch (...) {
    // The server's error about the statement, as shardkit's.
    RethrowAsShardError(resolver_.Resolve(bound.key).shard,
                        fmt::format("{} for {}", bound.plan->statement, Describe(bound.key, bound.plan->key_column)));
  }
}

SqlResult SqlEngine::ExecuteIn(pqxx::transaction_base& tx, const RoutedContext& at, const std::string& sql,
                               const SqlParams& params) {
  const Bound bound = Bind(sql, params);
  const std::string bound_to = fmt::format("the transaction is bound to {} (bucket {}, shard {})",
                                           Describe(at.key, bound.plan->key_column), ToInt(at.bucket), ToInt(at.shard));
  const std::string advice = fmt::format(
      "run it outside this transaction (Cluster::Execute, or Cluster::Transact for its own {0}), or pin "
      "{1} to a {0} of bucket {2}",
      bound.plan->KeyNoun(), bound.plan->key_column, ToInt(at.bucket));
  if (bound.plan->kind == SqlPlanInfo::Kind::kScatter) {
    throw Refusal(bound.plan->text, 0, "this statement in a transaction on one shard",
                  fmt::format("it runs over several shards, and {}", bound_to), advice);
  }
  if (bound.plan->kind == SqlPlanInfo::Kind::kRouted && BucketOf(bound.key) != at.bucket) {
    // Another bucket may live on another shard, or move on its own: the
    // transaction's fence holds its own bucket only.
    throw Refusal(bound.plan->text, 0, "this statement in a transaction on one shard",
                  fmt::format("it is pinned to {} (bucket {}), and {}", Describe(bound.key, bound.plan->key_column),
                              ToInt(BucketOf(bound.key)), bound_to),
                  advice);
  }
  const pqxx::result rows =
      tx.exec_params(StatementText(*bound.plan, bound.route), pqxx::prepare::make_dynamic_params(params));
  SqlResult result;
  ReadColumns(rows, result);
  result.rows.reserve(rows.size());
  AppendRows(rows, result);
  result.affected = bound.plan->read_only ? rows.size() : static_cast<std::size_t>(rows.affected_rows());
  result.rows_received = rows.size();
  result.plan = Info(bound, at.shard);
  return result;
}

}  // namespace shardkit::sql
