// Bucket moves on scratch databases of the local cluster (three shards on
// the two shard servers, a scratch catalog):
//
//  - BM_MoveOneBucket: one lab-scale bucket (scale 1: ~1M orders over 64
//    buckets, so ~15,600 orders with their items and customers) moved to
//    another shard and back, next to a plain binary COPY of the same rows
//    between the same databases (copy_rate_ratio = the move's copy rate /
//    plain COPY's).
//  - BM_MoveUnderLoad: writer threads place orders in every bucket of the
//    source shard while buckets move away one by one: each move's stall
//    (freeze requested -> directory flipped; where it went, step by step,
//    is printed on stderr), the slowest write to a moving bucket as its
//    writer saw it (moving_write_max_ms, refusals and retries included),
//    and the other buckets' write p99 during the moves vs before them
//    (other_p99_ratio).
//  - BM_FenceOverhead: one order with three items in a transaction, on an
//    enrolled (fenced, row-level security on) shard vs an unenrolled one,
//    interleaved, with the client and the backends pinned to CPUs
//    (fence_ratio = fenced / unfenced, medians; see the function).
//
//   lab/cluster start && build/bench/move_bench
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <sched.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "pg/raw_pg.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/routed.hpp"
#include "support/test_cluster.hpp"

namespace {

using shardkit::BucketDirectory;
using shardkit::BucketId;
using shardkit::CustomerId;
using shardkit::ShardId;
using Clock = std::chrono::steady_clock;

double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

BucketDirectory TwoOfThree() {
  return BucketDirectory::FromAssignments(BucketDirectory::EvenSplit(2).AssignmentTable(), 3, 1);
}

// Customers, orders and items of one bucket, the lab's shape: ~10 orders per
// customer, 1-3 items per order.
std::string FillBucketSql(BucketId bucket, int orders) {
  return fmt::format(
      "CREATE TEMP TABLE fill_customers ON COMMIT DROP AS SELECT c FROM generate_series(1, 50000000) AS c "
      "WHERE bucket_of(c) = {0} LIMIT {1};"
      "INSERT INTO customers (customer_id, bucket, name, email) SELECT c, {0}, 'c' || c, c || '@example.com' "
      "FROM fill_customers;"
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) SELECT c, {0}, c::bigint * 100 + o, "
      "timestamptz '2026-01-01' + interval '1 minute' * o, 10 + o FROM fill_customers, generate_series(1, 10) AS o;"
      "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
      "SELECT c, {0}, c::bigint * 100 + o, l, (c + l) % 500, 1 + l % 2, 9.99 FROM fill_customers, "
      "generate_series(1, 10) AS o, generate_series(1, 1 + (o % 3)) AS l;",
      ToInt(bucket), (orders + 9) / 10);
}

shardkit::MoveOptions QuickMoves() {
  shardkit::MoveOptions o;
  o.cleanup_grace = std::chrono::milliseconds(0);
  return o;
}

void BM_MoveOneBucket(benchmark::State& state) {
  shardkit::test::ScratchCluster cluster{"move_bench_one",
                                         shardkit::test::ScratchOptions().Shards(3).Directory(TwoOfThree())};
  const BucketId bucket{5};  // on shard 0
  {
    pqxx::connection c{cluster.ShardDsn(0).Reveal()};
    pqxx::work tx{c};
    tx.exec(FillBucketSql(bucket, static_cast<int>(state.range(0))));
    tx.commit();
  }
  // Plain COPY's target: the same tables, with their indexes, unfenced, in
  // a schema of their own (not sharded tables of the shard).
  const std::vector<std::string> tables{"customers", "orders", "order_items"};
  cluster.ExecOnShard(2, "CREATE SCHEMA plain");
  for (const auto& t : tables) {
    cluster.ExecOnShard(2, fmt::format("CREATE TABLE plain.{0} (LIKE public.{0} INCLUDING ALL)", t));
  }
  shardkit::BucketMover mover{cluster.Config(), QuickMoves()};
  std::vector<double> move_ms, copy_ms, plain_ms, stall_ms;
  std::int64_t rows = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    const auto there = mover.Move(bucket, ShardId{2});
    move_ms.push_back(Millis(Clock::now() - start));
    copy_ms.push_back(there.copy_ms.value_or(0));
    stall_ms.push_back(there.stall_ms.value_or(0));
    rows = there.rows_copied;
    state.PauseTiming();
    (void)mover.Move(bucket, ShardId{0});
    // The same rows by plain binary COPY, source -> target, table by table.
    shardkit::detail::RawConnection out{cluster.ShardDsn(0), "shard 0"};
    shardkit::detail::RawConnection in{cluster.ShardDsn(2), "shard 2"};
    (void)out.Exec("SET shardkit.buckets = 'all'");
    for (const auto& t : tables) (void)in.Exec(fmt::format("TRUNCATE plain.{}", t));
    const auto plain_start = Clock::now();
    for (const auto& t : tables) {
      (void)out.CopyInto(
          fmt::format("COPY (SELECT * FROM {} WHERE bucket = {}) TO STDOUT (FORMAT binary)", t, ToInt(bucket)), in,
          fmt::format("COPY plain.{} FROM STDIN (FORMAT binary)", t));
    }
    plain_ms.push_back(Millis(Clock::now() - plain_start));
    state.ResumeTiming();
  }
  const double copy = Quantile(copy_ms, 0.5), plain = Quantile(plain_ms, 0.5);
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["move_ms"] = Quantile(move_ms, 0.5);
  state.counters["copy_ms"] = copy;
  state.counters["plain_copy_ms"] = plain;
  state.counters["copy_rate_ratio"] = copy > 0 ? plain / copy : 0;  // move's rows/s over plain COPY's
  state.counters["stall_ms"] = Quantile(stall_ms, 0.5);
}
// 15,600 orders: one bucket of the lab at scale 1.
BENCHMARK(BM_MoveOneBucket)->Arg(15600)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MoveUnderLoad(benchmark::State& state) {
  shardkit::test::ScratchCluster cluster{"move_bench_load",
                                         shardkit::test::ScratchOptions().Shards(3).Directory(TwoOfThree())};
  const int moves = static_cast<int>(state.range(0));
  {
    pqxx::connection c{cluster.ShardDsn(0).Reveal()};
    for (int b = 0; b < moves; ++b) {
      pqxx::work tx{c};
      tx.exec(FillBucketSql(BucketId{b}, 2000));
      tx.commit();
    }
  }
  auto resolver = shardkit::BucketShardResolver::FromConfig(cluster.Config());
  shardkit::DirectoryWatcher watcher{*resolver, cluster.CatalogDsn()};
  shardkit::RoutedTransactions routed{*resolver, &watcher};
  // Customers of shard 0's buckets: the moving ones and the staying ones.
  std::vector<CustomerId> customers;
  for (int c = 1; customers.size() < 400; ++c) {
    if (resolver->ShardFor(CustomerId{c}) == ShardId{0}) customers.emplace_back(CustomerId{c});
  }
  std::vector<double> stalls, before_p99, during_p99, moving_max;
  for (auto _ : state) {
    std::atomic<bool> stop{false};
    std::atomic<bool> moving{false};
    std::mutex mutex;
    std::vector<double> before, during;  // other buckets' write latency
    std::vector<double> moving_writes;   // the moving buckets' writes during the moves (retries included)
    std::atomic<std::int64_t> next_id{1'000'000'000};
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      writers.emplace_back([&, w] {
        std::size_t i = static_cast<std::size_t>(w);
        auto next = Clock::now();
        while (!stop) {
          next += std::chrono::milliseconds(20);  // 50 orders/s per writer: the lab's rate
          std::this_thread::sleep_until(next);
          const CustomerId customer = customers[(i += 7) % customers.size()];
          const bool other = ToInt(shardkit::BucketOf(customer)) >= moves;
          const std::int64_t id = next_id++;
          const auto start = Clock::now();
          try {
            routed.Run(customer, [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& at) {
              tx.exec_params(
                  "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
                  "VALUES ($1, $2, $3, now(), 30)",
                  customer, at.bucket, id);
              tx.exec_params(
                  "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, "
                  "unit_price) SELECT $1, $2, $3, l, 7, 1, 9.99 FROM generate_series(1, 3) AS l",
                  customer, at.bucket, id);
            });
          } catch (const std::exception&) {
            continue;
          }
          std::lock_guard lock(mutex);
          if (!other) {
            if (moving) moving_writes.push_back(Millis(Clock::now() - start));
            continue;
          }
          (moving ? during : before).push_back(Millis(Clock::now() - start));
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));  // the "before" window
    moving = true;
    shardkit::BucketMover mover{cluster.Config(), QuickMoves()};
    for (int b = 0; b < moves; ++b) {
      const auto moved = mover.Move(BucketId{b}, ShardId{2});
      stalls.push_back(moved.stall_ms.value_or(0));
      // Where the stall went, step by step (the journal's 'flipped' event).
      for (const auto& e : mover.Events(moved.move_id)) {
        if (e.state == shardkit::MoveState::kFlipped) fmt::print(stderr, "bucket {}: {}\n", b, e.detail);
      }
    }
    stop = true;
    for (auto& t : writers) t.join();
    moving_max.push_back(moving_writes.empty() ? 0 : *std::max_element(moving_writes.begin(), moving_writes.end()));
    before_p99.push_back(Quantile(before, 0.99));
    during_p99.push_back(Quantile(during, 0.99));
    state.PauseTiming();
    for (int b = 0; b < moves; ++b) (void)mover.Move(BucketId{b}, ShardId{0});
    state.ResumeTiming();
  }
  const double b = Quantile(before_p99, 0.5), d = Quantile(during_p99, 0.5);
  state.counters["stall_median_ms"] = Quantile(stalls, 0.5);
  state.counters["stall_max_ms"] = stalls.empty() ? 0 : *std::max_element(stalls.begin(), stalls.end());
  // The stall as a writer of a moving bucket sees it: its slowest write.
  state.counters["moving_write_max_ms"] = Quantile(moving_max, 0.5);
  state.counters["other_p99_before_ms"] = b;
  state.counters["other_p99_during_ms"] = d;
  state.counters["other_p99_ratio"] = b > 0 ? d / b : 0;
}
BENCHMARK(BM_MoveUnderLoad)->Arg(6)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void PlaceOrder(pqxx::connection& c, int customer, std::int64_t order_id) {
  pqxx::work tx{c};
  tx.exec_params(
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
      "VALUES ($1, bucket_of($1), $2, now(), 30)",
      customer, order_id);
  for (int line = 1; line <= 3; ++line) {
    tx.exec_params(
        "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
        "VALUES ($1, bucket_of($1), $2, $3, 7, 1, 9.99)",
        customer, order_id, line);
  }
  tx.commit();
}

// Pins `pid` (0: this thread) to one CPU; false where that is not allowed
// (another user's backend without CAP_SYS_NICE) or there is no such CPU.
bool PinTo(pid_t pid, int cpu) {
  if (cpu >= static_cast<int>(std::thread::hardware_concurrency())) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(pid, sizeof set, &set) == 0;
}

void UnpinThisThread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned i = 0; i < std::thread::hardware_concurrency(); ++i) CPU_SET(i, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

pid_t BackendPid(pqxx::connection& c) {
  return static_cast<pid_t>(c.backendpid());
}

// The fence's cost per write transaction, fenced / unfenced, interleaved
// (medians). Where the scheduler puts the client and the two backends
// changes the ratio from run to run (1.04x-1.75x unpinned for the same
// code), so each placement is pinned and measured on its own:
//   fence_ratio       client on CPU 0, both backends on CPU 1 (as with a
//                     database server on another machine)
//   fence_ratio_same  client and backends on CPU 0 (every round trip a
//                     context switch: the server's share of the time, hence
//                     the ratio, is the largest)
// pinned = 0 when the backends could not be pinned (not root): then both
// figures are the scheduler's choice.
void BM_FenceOverhead(benchmark::State& state) {
  shardkit::test::ScratchCluster fenced{"move_bench_fenced", shardkit::test::ScratchOptions().Shards(1)};
  shardkit::test::ScratchCluster bare{"move_bench_bare", shardkit::test::ScratchOptions().Shards(1).Unenrolled()};
  pqxx::connection f{fenced.ShardDsn(0).Reveal()};
  pqxx::connection u{bare.ShardDsn(0).Reveal()};
  std::int64_t order = 1;
  bool pinned = true;
  auto measure = [&](int server_cpu, int iterations) {
    pinned = PinTo(BackendPid(f), server_cpu) && PinTo(BackendPid(u), server_cpu) && PinTo(0, 0) && pinned;
    std::vector<double> fenced_us, bare_us;
    for (int i = 0; i < iterations; ++i, ++order) {
      const int customer = 1 + static_cast<int>(order % 5000);
      // Alternate which goes first: the second of a pair finds warmer caches.
      pqxx::connection& first = i % 2 == 0 ? f : u;
      pqxx::connection& second = i % 2 == 0 ? u : f;
      auto t0 = Clock::now();
      PlaceOrder(first, customer, order);
      auto t1 = Clock::now();
      PlaceOrder(second, customer, order);
      auto t2 = Clock::now();
      (i % 2 == 0 ? fenced_us : bare_us).push_back(Millis(t1 - t0) * 1000);
      (i % 2 == 0 ? bare_us : fenced_us).push_back(Millis(t2 - t1) * 1000);
    }
    return std::pair{Quantile(fenced_us, 0.5), Quantile(bare_us, 0.5)};
  };
  double with = 0, without = 0, with_same = 0, without_same = 0;
  for (auto _ : state) {
    std::tie(with, without) = measure(1, 2000);
    std::tie(with_same, without_same) = measure(0, 2000);
  }
  UnpinThisThread();
  state.counters["fenced_us"] = with;
  state.counters["unfenced_us"] = without;
  state.counters["fence_ratio"] = without > 0 ? with / without : 0;
  state.counters["fenced_same_cpu_us"] = with_same;
  state.counters["unfenced_same_cpu_us"] = without_same;
  state.counters["fence_ratio_same"] = without_same > 0 ? with_same / without_same : 0;
  state.counters["pinned"] = pinned ? 1 : 0;
}
BENCHMARK(BM_FenceOverhead)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
