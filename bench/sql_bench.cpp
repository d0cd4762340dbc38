// Plain SQL through Cluster::Execute next to the same work without the SQL
// layer: a routed "my orders" statement vs Resolve + raw libpqxx on the
// shard's pool (and vs Cluster::Run, the routed transaction Execute uses), a
// scatter aggregate vs the same AggregateQuery through Cluster::Merge, the
// best sellers of the lab's last 30 days through Execute by exact top-k vs
// the merge of every partial, and planning a statement from the plan cache
// vs parsing a new one; a one-statement write through Execute vs the same
// INSERT on the shard's connection; a gathered SELECT vs the same statement
// on one unsharded server. Needs the local cluster (lab/cluster start).
//
//   SQL_BENCH_LAB_SCALE=0.1 build/bench/sql_bench   # the lab data's scale (default 0.1)
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <pqxx/pqxx>
#include <string>

#include "dataset.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "pg/libpq_handle.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "support/bookstore_rows.hpp"
#include "support/test_cluster.hpp"

namespace {

constexpr shardkit::CustomerId kCustomer{4242};
constexpr const char* kMyOrders =
    "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";
constexpr const char* kBestSellers =
    "SELECT book_id, sum(quantity) AS sold FROM order_items GROUP BY book_id ORDER BY sold DESC, book_id LIMIT 10";

struct Setup {
  std::unique_ptr<shardkit::test::ScratchCluster> scratch;
  std::unique_ptr<shardkit::Cluster> cluster;
};

// One scratch cluster for the whole run: the Bookstore's customers, and
// customer 4242 with ten orders.
Setup& Shared() {
  static Setup setup = [] {
    Setup s;
    s.scratch = std::make_unique<shardkit::test::ScratchCluster>("sql_bench");
    shardkit::test::FillBookstore(*s.scratch, 2000);
    s.scratch->ExecEverywhere(
        "INSERT INTO books (book_id, title, category, price) SELECT i, 'Book ' || i, 'fiction', 10 "
        "FROM generate_series(0, 49) i");
    const int shard = shardkit::ToInt(s.scratch->MakeResolver()->ShardFor(kCustomer));
    s.scratch->ExecOnShard(
        shard,
        fmt::format(
            "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
            "SELECT {0}, bucket_of({0}), 1000 + g, now() - g * interval '1 day', 10 * g FROM generate_series(1, 10) g",
            kCustomer));
    shardkit::ClusterConfig config = s.scratch->Config();
    config.reference_tables = {"books"};
    s.cluster = shardkit::Cluster::Open(config);
    return s;
  }();
  return setup;
}

void BM_MyOrdersResolveRawLibpqxx(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    auto lease = cluster.Route(kCustomer).pool.Acquire();
    pqxx::read_transaction tx{*lease};
    const auto rows = tx.exec_params(kMyOrders, kCustomer);
    tx.commit();
    if (rows.size() != 10) state.SkipWithError("expected 10 orders");
  }
}
BENCHMARK(BM_MyOrdersResolveRawLibpqxx)->UseRealTime();

void BM_MyOrdersClusterRun(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  shardkit::RoutedOptions options;
  options.read_only = true;
  for (auto _ : state) {
    const auto n = cluster.Run(
        kCustomer,
        [&](pqxx::transaction_base& tx, const shardkit::RoutedContext&) {
          return tx.exec_params(kMyOrders, kCustomer).size();
        },
        options);
    if (n != 10) state.SkipWithError("expected 10 orders");
  }
}
BENCHMARK(BM_MyOrdersClusterRun)->UseRealTime();

void BM_MyOrdersExecute(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  const shardkit::SqlParams params{std::to_string(shardkit::ToInt(kCustomer))};
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute(kMyOrders, params);
    if (result.rows.size() != 10) state.SkipWithError("expected 10 orders");
  }
}
BENCHMARK(BM_MyOrdersExecute)->UseRealTime();

// One-statement writes: an INSERT of a new order for the customer, through
// Execute (its whole transaction, COMMIT and read token in one round trip)
// against the same INSERT on the customer's pooled connection without the
// routing layer: autocommit (one round trip, the least any write costs) and
// in an explicit transaction (BEGIN, INSERT, COMMIT: three).
std::int64_t NextOrderId() {
  static std::int64_t next = 1'000'000;
  return ++next;
}

constexpr const char* kInsertOrder =
    "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, bucket_of($1), $2, now(), 1)";

void BM_WriteRawAutocommit(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  auto lease = cluster.Route(kCustomer).pool.Acquire();
  for (auto _ : state) {
    pqxx::nontransaction tx{*lease};
    if (tx.exec_params(kInsertOrder, kCustomer, NextOrderId()).affected_rows() != 1) state.SkipWithError("no row");
  }
}
BENCHMARK(BM_WriteRawAutocommit)->UseRealTime();

void BM_WriteRawTransaction(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  auto lease = cluster.Route(kCustomer).pool.Acquire();
  for (auto _ : state) {
    pqxx::work tx{*lease};
    if (tx.exec_params(kInsertOrder, kCustomer, NextOrderId()).affected_rows() != 1) state.SkipWithError("no row");
    tx.commit();
  }
}
BENCHMARK(BM_WriteRawTransaction)->UseRealTime();

void BM_WriteExecute(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  const std::string customer = std::to_string(shardkit::ToInt(kCustomer));
  for (auto _ : state) {
    const auto result = cluster.Execute(kInsertOrder, {customer, std::to_string(NextOrderId())});
    if (result.affected != 1) state.SkipWithError("no row");
  }
}
BENCHMARK(BM_WriteExecute)->UseRealTime();

void BM_WriteClusterRun(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    cluster.Run(kCustomer, [&](pqxx::transaction_base& tx, const shardkit::RoutedContext&) {
      if (tx.exec_params(kInsertOrder, kCustomer, NextOrderId()).affected_rows() != 1) state.SkipWithError("no row");
    });
  }
}
BENCHMARK(BM_WriteClusterRun)->UseRealTime();

// The same one-row INSERT three ways in every iteration, in turn, so that a
// machine whose load drifts affects all alike: through Execute (BEGIN, the
// statement timeout and bucket check, INSERT, COMMIT and the read token's
// position in one round trip), and raw on the customer's pooled connection:
// BEGIN; INSERT; COMMIT sent as one libpq pipeline (one round trip, no
// routing, check or token), and the INSERT alone in autocommit (the least a
// write costs). Counters: the mean of each, and Execute's ratios to them.
void RawPipelinedInsert(PGconn* conn, benchmark::State& state) {
  const std::string order = std::to_string(NextOrderId());
  const std::string customer = std::to_string(shardkit::ToInt(kCustomer));
  const char* values[] = {customer.c_str(), order.c_str()};
  bool ok = PQenterPipelineMode(conn) == 1 &&
            PQsendQueryParams(conn, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1 &&
            PQsendQueryParams(conn, kInsertOrder, 2, nullptr, values, nullptr, nullptr, 0) == 1 &&
            PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1 &&
            PQpipelineSync(conn) == 1;
  for (int results = 0; ok && results < 4;) {
    PGresult* r = PQgetResult(conn);
    if (r == nullptr) continue;  // the end of one statement's results
    const auto status = PQresultStatus(r);
    ok = status == PGRES_COMMAND_OK || status == PGRES_PIPELINE_SYNC;
    PQclear(r);
    ++results;
  }
  if (!ok || PQexitPipelineMode(conn) != 1) state.SkipWithError(PQerrorMessage(conn));
}

void BM_OneInsertExecuteVsRaw(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  auto lease = cluster.Route(kCustomer).pool.Acquire();
  PGconn* raw = shardkit::detail::LibpqHandle(*lease);
  const std::string customer = std::to_string(shardkit::ToInt(kCustomer));
  using Clock = std::chrono::steady_clock;
  Clock::duration execute{0};
  Clock::duration pipelined{0};
  Clock::duration autocommit{0};
  for (auto _ : state) {
    auto started = Clock::now();
    if (cluster.Execute(kInsertOrder, {customer, std::to_string(NextOrderId())}).affected != 1) {
      state.SkipWithError("no row");
    }
    execute += Clock::now() - started;
    started = Clock::now();
    RawPipelinedInsert(raw, state);
    pipelined += Clock::now() - started;
    started = Clock::now();
    {
      pqxx::nontransaction tx{*lease};
      if (tx.exec_params(kInsertOrder, kCustomer, NextOrderId()).affected_rows() != 1) state.SkipWithError("no row");
    }
    autocommit += Clock::now() - started;
  }
  const auto us = [&](Clock::duration total) {
    return std::chrono::duration<double, std::micro>(total).count() / static_cast<double>(state.iterations());
  };
  state.counters["execute_us"] = us(execute);
  state.counters["raw_pipelined_us"] = us(pipelined);
  state.counters["raw_autocommit_us"] = us(autocommit);
  state.counters["execute_vs_pipelined"] = us(execute) / us(pipelined);
  state.counters["execute_vs_autocommit"] = us(execute) / us(autocommit);
}
BENCHMARK(BM_OneInsertExecuteVsRaw)->UseRealTime();

void BM_BestSellersMerge(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  const shardkit::MergePlan plan = shardkit::AggregateQuery::From("order_items")
                                       .GroupBy("book_id")
                                       .Sum("quantity", "sold")
                                       .OrderBy("sold", shardkit::SortDirection::kDesc)
                                       .OrderBy("book_id")
                                       .Limit(10)
                                       .Plan();
  for (auto _ : state) {
    const shardkit::MergedResult merged = cluster.Merge(plan);
    if (merged.rows.size() != 10) state.SkipWithError("expected 10 books");
  }
}
BENCHMARK(BM_BestSellersMerge)->UseRealTime();

void BM_BestSellersExecute(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute(kBestSellers);
    if (result.rows.size() != 10) state.SkipWithError("expected 10 books");
  }
}
BENCHMARK(BM_BestSellersExecute)->UseRealTime();

// The finishing step's cost: the same groups merged, then an expression
// over the merged aggregates evaluated by a shard (one more round trip
// with the merged rows) instead of the merge alone.
void BM_StatusTotalsMerged(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    const shardkit::SqlResult result =
        cluster.Execute("SELECT status, sum(total), count(*) FROM orders GROUP BY status ORDER BY 1");
    benchmark::DoNotOptimize(result.rows.size());
  }
}
BENCHMARK(BM_StatusTotalsMerged)->UseRealTime();

void BM_StatusTotalsFinished(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute(
        "SELECT status, round(sum(total) / count(*), 2), count(*) FROM orders GROUP BY status ORDER BY 1");
    benchmark::DoNotOptimize(result.rows.size());
  }
}
BENCHMARK(BM_StatusTotalsFinished)->UseRealTime();

// DISTINCT without the shard key (each shard's distinct rows, deduplicated
// by one shard) vs the GROUP BY that merges the same keys.
void BM_DistinctFinished(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute("SELECT DISTINCT total FROM orders ORDER BY 1");
    benchmark::DoNotOptimize(result.rows.size());
  }
}
BENCHMARK(BM_DistinctFinished)->UseRealTime();

void BM_DistinctAsGroupBy(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute("SELECT total FROM orders GROUP BY total ORDER BY 1");
    benchmark::DoNotOptimize(result.rows.size());
  }
}
BENCHMARK(BM_DistinctAsGroupBy)->UseRealTime();

// The gather path (a SELECT that neither routes nor merges: each shard
// sends its rows of the table, one shard runs the statement) vs the same
// statement on one unsharded server holding the same rows (the reference):
// a window over every order, every order shipped; and with a filter the
// shards apply (a fifth of the orders).
constexpr const char* kGatherWhole = "SELECT status, stddev_samp(total), count(*) FROM orders GROUP BY status";
constexpr const char* kGatherFiltered =
    "SELECT order_id, rank() OVER (ORDER BY total DESC, order_id) FROM orders WHERE order_id % 5 = 1";

void GatherOnReference(benchmark::State& state, const char* sql) {
  pqxx::connection reference{Shared().scratch->ReferenceDsn().Reveal()};
  for (auto _ : state) {
    pqxx::read_transaction tx{reference};
    const pqxx::result rows = tx.exec(sql);
    tx.commit();
    benchmark::DoNotOptimize(rows.size());
  }
}

void GatherExecute(benchmark::State& state, const char* sql) {
  shardkit::Cluster& cluster = *Shared().cluster;
  std::size_t shipped = 0;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute(sql);
    if (!result.plan.merge.starts_with("gathered")) state.SkipWithError("not gathered");
    shipped = result.rows_received;
  }
  state.counters["rows_shipped"] = static_cast<double>(shipped);
}

void BM_GatherWholeTableReference(benchmark::State& state) {
  GatherOnReference(state, kGatherWhole);
}
BENCHMARK(BM_GatherWholeTableReference)->UseRealTime();
void BM_GatherWholeTableExecute(benchmark::State& state) {
  GatherExecute(state, kGatherWhole);
}
BENCHMARK(BM_GatherWholeTableExecute)->UseRealTime();
void BM_GatherFilteredReference(benchmark::State& state) {
  GatherOnReference(state, kGatherFiltered);
}
BENCHMARK(BM_GatherFilteredReference)->UseRealTime();
void BM_GatherFilteredExecute(benchmark::State& state) {
  GatherExecute(state, kGatherFiltered);
}
BENCHMARK(BM_GatherFilteredExecute)->UseRealTime();

// The lab's Bookstore data (flat sales: the best sellers barely stand out)
// in scratch databases of its own, two shards.
constexpr const char* kLabBestSellers =
    "SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
    "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 GROUP BY i.book_id ORDER BY sold DESC, i.book_id LIMIT 10";
// The same work through the merge: the key's tie-break DESC is not
// top-k's order, so every shard ships every book's partial (the answer
// differs only among equal sums).
constexpr const char* kLabBestSellersMerged =
    "SELECT i.book_id, sum(i.quantity) AS sold FROM order_items i JOIN orders o ON o.customer_id = i.customer_id "
    "AND o.order_id = i.order_id WHERE o.ordered_at >= $1 GROUP BY i.book_id ORDER BY sold DESC, i.book_id DESC "
    "LIMIT 10";

Setup& LabShared() {
  static Setup setup = [] {
    Setup s;
    const char* scale = std::getenv("SQL_BENCH_LAB_SCALE");
    s.scratch = std::make_unique<shardkit::test::ScratchCluster>("sql_bench_lab");
    {
      shardkit::lab::Lab lab(s.scratch->Config());
      (void)shardkit::lab::LoadDataset(lab,
                                       shardkit::lab::GenerateDataset({scale != nullptr ? std::atof(scale) : 0.1, 1}),
                                       {shardkit::lab::ProgressMode::kNone});
    }
    s.cluster = shardkit::Cluster::Open(s.scratch->Config());
    return s;
  }();
  return setup;
}

void LabBestSellers(benchmark::State& state, const char* sql, bool topk) {
  shardkit::Cluster& cluster = *LabShared().cluster;
  const shardkit::SqlParams params{shardkit::lab::FormatTimestamp(shardkit::lab::kWindowStart)};
  std::size_t rows = 0;
  std::string method;
  for (auto _ : state) {
    const shardkit::SqlResult result = cluster.Execute(sql, params);
    if (result.rows.size() != 10) state.SkipWithError("expected 10 books");
    if (result.plan.merge.starts_with("exact top-k") != topk) state.SkipWithError(result.plan.merge.c_str());
    rows = result.rows_received;
    method = result.plan.merge;
  }
  state.counters["rows_received"] = static_cast<double>(rows);
  // Top-k: the method and its rows per phase ("...: TPUT (exact), 389 rows (1 local top-k: 20, ...").
  if (topk) state.SetLabel(method.substr(method.find(": ") + 2));
}

void BM_LabBestSellersExecuteTopK(benchmark::State& state) {
  LabBestSellers(state, kLabBestSellers, true);
}
BENCHMARK(BM_LabBestSellersExecuteTopK)->UseRealTime();

void BM_LabBestSellersExecuteMerge(benchmark::State& state) {
  LabBestSellers(state, kLabBestSellersMerged, false);
}
BENCHMARK(BM_LabBestSellersExecuteMerge)->UseRealTime();

// Explain binds the plan to its parameters and resolves the customer, as
// Execute does before it runs anything.
void BM_PlanCached(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  const shardkit::SqlParams params{"4242"};
  (void)cluster.Explain(kMyOrders, params);
  for (auto _ : state) benchmark::DoNotOptimize(cluster.Explain(kMyOrders, params));
}
BENCHMARK(BM_PlanCached);

void BM_PlanNew(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  const shardkit::SqlParams params{"4242"};
  std::int64_t n = 0;
  for (auto _ : state) {
    // A new text each time: parsed and analysed (the cache is bounded).
    benchmark::DoNotOptimize(cluster.Explain(fmt::format("{} -- {}", kMyOrders, ++n), params));
  }
}
BENCHMARK(BM_PlanNew);

void BM_PlanNewScatterAggregate(benchmark::State& state) {
  shardkit::Cluster& cluster = *Shared().cluster;
  std::int64_t n = 0;
  for (auto _ : state) benchmark::DoNotOptimize(cluster.Explain(fmt::format("{} -- {}", kBestSellers, ++n)));
}
BENCHMARK(BM_PlanNewScatterAggregate);

}  // namespace

BENCHMARK_MAIN();
