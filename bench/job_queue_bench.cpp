// Worker sharding on the local cluster: jobs per second with 1, 2 and 4
// workers (each with its own partition leases and job worker, as separate
// processes would have), the latency of claiming partitions, and the
// handoff pause when a worker joins. Needs the local cluster (lab/cluster start).
//
//   build/bench/job_queue_bench --benchmark_filter=JobsPerSecond
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <pqxx/pqxx>
#include <thread>
#include <vector>

#include "shardkit/routing/resolver.hpp"
#include "shardkit/workers/job_queue.hpp"
#include "shardkit/workers/partition_lease.hpp"
#include "support/test_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

shardkit::test::ScratchCluster& Cluster() {
  static auto cluster = std::make_unique<shardkit::test::ScratchCluster>("job_queue_bench");
  return *cluster;
}

shardkit::PartitionLeaseOptions Options(const std::string& group, const std::string& owner) {
  shardkit::PartitionLeaseOptions o;
  o.group = group;
  o.owner = owner;
  o.lease_duration = 5000ms;
  o.safety_margin = 1000ms;
  o.renew_interval = 1000ms;
  o.claim_interval = 20ms;
  o.handoff_pause = 0ms;
  o.join_grace = 0ms;
  o.run_in_background = false;
  return o;
}

// `count` pending jobs over customers 1..count, written straight into each
// shard (the same rows Enqueue writes, without one transaction per job).
void Fill(shardkit::BucketShardResolver& resolver, const std::string& queue, std::int64_t first_id, int count) {
  const auto directory = resolver.Directory();
  for (const shardkit::ShardId s : shardkit::FirstShards(resolver.ShardCount())) {
    std::string buckets = "{";
    for (const shardkit::BucketId b : directory->BucketsOf(s)) {
      buckets += (buckets.size() > 1 ? "," : "") + std::to_string(shardkit::ToInt(b));
    }
    buckets += "}";
    auto lease = resolver.Pool(s).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params(
        "INSERT INTO shardkit_jobs (customer_id, bucket, job_id, queue, partition, kind) "
        "SELECT g, bucket_of(g), $2::bigint + g, $1, bucket_of(g), 'bench' FROM generate_series(1, $3::integer) g "
        "WHERE bucket_of(g) = ANY($4::smallint[])",
        queue, first_id, count, buckets);
    tx.commit();
    pqxx::nontransaction analyze{*lease};
    analyze.exec("ANALYZE shardkit_jobs");  // plans as in a long-running system, not a fresh table
  }
}

// Jobs per second with N workers; each job "sends" for `work_us` (0: the
// database round trips only) and logs its effect in the completion.
void BM_JobsPerSecond(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto work = std::chrono::microseconds(state.range(1));
  auto& cluster = Cluster();
  auto resolver = cluster.MakeResolver(shardkit::PoolOptions{.max_size = 8});
  const std::string queue_name = fmt::format("bench-{}-{}", n, state.range(1));
  const shardkit::JobQueue queue{{.queue = queue_name}};
  std::vector<std::shared_ptr<shardkit::PartitionLeases>> leases;
  std::vector<std::unique_ptr<shardkit::JobWorker>> workers;
  for (int i = 0; i < n; ++i) {
    auto o = Options(queue_name, fmt::format("w{}", i));
    o.run_in_background = true;  // renewals while the iterations run
    leases.push_back(shardkit::PartitionLeases::Join(cluster.CatalogDsn(), o));
  }
  for (int round = 0; round < 500; ++round) {  // converge: 64/n each
    bool done = true;
    for (auto& l : leases) {
      (void)l->Tick();
      done = done && static_cast<int>(l->Held().size()) == 64 / n;
    }
    if (done) break;
  }
  shardkit::JobWorkerOptions wo;
  wo.batch_size = 32;
  wo.idle_poll_min = 1ms;
  wo.idle_poll_max = 5ms;
  for (auto& l : leases) workers.push_back(std::make_unique<shardkit::JobWorker>(*resolver, l, queue, wo));
  shardkit::JobHandler handler;
  handler.process = [work](const shardkit::Job&, const shardkit::JobContext&) {
    if (work.count() > 0) std::this_thread::sleep_for(work);
  };
  handler.apply = [](const shardkit::Job& job, pqxx::transaction_base& tx) {
    tx.exec_params(
        "INSERT INTO notification_log (customer_id, bucket, notification_id, fence, order_id, kind, sent_by) "
        "VALUES ($1, $2, $3, $4, 0, 'bench', 'bench')",
        job.customer_id, job.bucket, job.job_id, job.fence);
  };
  constexpr int kJobs = 2000;
  static std::int64_t next_id = 1'000'000'000LL;  // job ids never repeat, across runs and repetitions
  std::int64_t processed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Fill(*resolver, queue_name, next_id, kJobs);
    next_id += kJobs;
    state.ResumeTiming();
    std::atomic<int> completed{0};
    std::vector<std::jthread> threads;
    for (auto& w : workers) {
      threads.emplace_back([&, w = w.get()] {
        int idle = 0;
        while (completed.load() < kJobs && idle < 200) {
          const auto round = w->RunOnce(handler);
          completed += round.completed;
          idle = round.taken == 0 ? idle + 1 : 0;
          if (round.taken == 0) std::this_thread::sleep_for(1ms);
        }
      });
    }
    threads.clear();  // join
    processed += completed.load();
  }
  state.SetItemsProcessed(processed);
  state.counters["jobs_per_s"] = benchmark::Counter(static_cast<double>(processed), benchmark::Counter::kIsRate);
  for (auto& l : leases) l->Leave(Clock::now() + 1s);
}
BENCHMARK(BM_JobsPerSecond)
    ->ArgsProduct({{1, 2, 4}, {0, 1000}})
    ->ArgNames({"workers", "work_us"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

// Claiming partitions: the claim statement (FOR UPDATE SKIP LOCKED, bump
// claim_version) for 1 or all 64 free partitions, and the whole tick
// (heartbeat, renew, share, claim, commit).
void BM_Claim(benchmark::State& state) {
  auto& cluster = Cluster();
  const int partitions = static_cast<int>(state.range(0));
  std::int64_t i = 0;
  double claim_us = 0, tick_us = 0;
  for (auto _ : state) {
    auto o = Options(fmt::format("claim-{}", partitions), fmt::format("claimer-{}", i++));
    o.partition_count = partitions;
    auto leases = shardkit::PartitionLeases::Join(cluster.CatalogDsn(), o);  // claims in its tick
    const auto stats = leases->Stats();
    state.SetIterationTime(static_cast<double>(stats.last_claim.count()) / 1e6);
    claim_us += static_cast<double>(stats.last_claim.count());
    tick_us += static_cast<double>(stats.last_tick.count());
    if (static_cast<int>(leases->Held().size()) != partitions) state.SkipWithError("did not claim everything");
    state.PauseTiming();
    leases->Leave(Clock::now() + 1s);
    state.ResumeTiming();
  }
  state.counters["claim_us"] = claim_us / static_cast<double>(state.iterations());
  state.counters["tick_us"] = tick_us / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Claim)
    ->Arg(1)
    ->Arg(64)
    ->ArgName("partitions")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(50);

// A worker joins a group whose 64 partitions one worker holds: the holder
// hands 32 over one at a time (no in-flight jobs, no pause); both tick in
// the background as a deployment would (claim_interval 20 ms). Figures:
// release -> claim per partition (what the newcomer waits) and the whole
// rebalance.
void BM_HandoffPause(benchmark::State& state) {
  auto& cluster = Cluster();
  std::vector<double> gaps;
  double total_ms = 0;
  int run = 0;
  for (auto _ : state) {
    const std::string group = fmt::format("handoff-{}", run++);
    auto o = Options(group, "old");
    o.run_in_background = true;
    auto old_owner = shardkit::PartitionLeases::Join(cluster.CatalogDsn(), o);
    const auto started = Clock::now();
    auto n = Options(group, "new");
    n.run_in_background = true;
    auto new_owner = shardkit::PartitionLeases::Join(cluster.CatalogDsn(), n);
    while (new_owner->Held().size() < 32 && Clock::now() - started < 30s) std::this_thread::sleep_for(1ms);
    const auto elapsed = Clock::now() - started;
    state.SetIterationTime(std::chrono::duration<double>(elapsed).count());
    total_ms += std::chrono::duration<double, std::milli>(elapsed).count();
    pqxx::connection c{cluster.CatalogDsn().Reveal()};
    pqxx::nontransaction tx{c};
    for (const auto& row :
         tx.exec_params("SELECT extract(epoch FROM claimed_at - released_at) * 1000 FROM shardkit_partition_leases "
                        "WHERE worker_group = $1 AND owner = 'new' AND released_at IS NOT NULL",
                        group)) {
      gaps.push_back(row[0].as<double>());
    }
    new_owner->Leave(Clock::now() + 1s);
    old_owner->Leave(Clock::now() + 1s);
  }
  std::sort(gaps.begin(), gaps.end());
  state.counters["pause_ms_median"] = gaps.empty() ? 0 : gaps[gaps.size() / 2];
  state.counters["pause_ms_max"] = gaps.empty() ? 0 : gaps.back();
  state.counters["rebalance_ms"] = total_ms / static_cast<double>(state.iterations());
}
BENCHMARK(BM_HandoffPause)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
