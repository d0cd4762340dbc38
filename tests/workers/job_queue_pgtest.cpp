// The job/outbox table and its workers on real shards: a job commits with
// its order or not at all; workers under churn complete every job exactly
// once as far as its effects go; a frozen worker's completion after a
// takeover is refused by the fence; salting spreads a hot customer over S
// partitions (and so over workers); a stream's effects never go backwards.
#include "shardkit/workers/job_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/short_leases.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr CustomerId kHot{4242};     // bucket 44, shard 1
constexpr CustomerId kOther{4243};   // bucket 20, shard 0
constexpr CustomerId kThird{77777};  // bucket 53, shard 1

class JobQueuePg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = std::make_unique<test::ScratchCluster>("job_queue_pgtest");
    resolver_ = cluster_->MakeResolver();
  }
  static void TearDownTestSuite() {
    resolver_.reset();
    cluster_.reset();
  }

  static const Dsn& Catalog() { return cluster_->CatalogDsn(); }

  static PartitionLeaseOptions Leases(std::string group, std::string owner, bool background) {
    PartitionLeaseOptions o = test::ShortPartitionLeases(std::move(group), std::move(owner));
    o.handoff_pause = 10ms;
    o.run_in_background = background;
    return o;
  }

  static JobWorkerOptions Fast() {
    JobWorkerOptions o;
    o.batch_size = 16;
    o.idle_poll_min = 2ms;
    o.idle_poll_max = 20ms;
    o.sweep_interval = 200ms;
    o.hot_keys_refresh = 50ms;
    o.retry_backoff = 0ms;
    return o;
  }

  // One job per (customer, job id), each in its own order transaction.
  static void Enqueue(const JobQueue& queue, CustomerId customer, std::int64_t job_id,
                      std::optional<std::int64_t> stream = {}, std::int64_t seq = 0, std::string kind = "notify") {
    auto lease = resolver_->PoolFor(customer).Acquire();
    pqxx::work tx{*lease};
    (void)queue.Enqueue(tx, {customer, job_id, std::move(kind), "", stream, seq, 0ms});
    tx.commit();
  }

  static std::int64_t Count(const std::string& sql) {
    std::int64_t total = 0;
    for (const ShardId s : FirstShards(resolver_->ShardCount())) {
      auto lease = resolver_->Pool(s).Acquire();
      pqxx::nontransaction tx{*lease};
      total += tx.exec1(sql)[0].as<std::int64_t>();
    }
    return total;
  }

  // The effect of a job: one row in notification_log, in the completion's transaction.
  static JobHandler LogEffect(std::string who) {
    JobHandler h;
    h.apply = [who](const Job& job, pqxx::transaction_base& tx) {
      tx.exec_params(
          "INSERT INTO notification_log (customer_id, bucket, notification_id, fence, order_id, kind, sent_by) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7)",
          job.customer_id, job.bucket, job.job_id, job.fence, job.stream_key.value_or(0), job.kind, who);
    };
    return h;
  }

  static std::unique_ptr<test::ScratchCluster> cluster_;
  static std::unique_ptr<BucketShardResolver> resolver_;
};

std::unique_ptr<test::ScratchCluster> JobQueuePg::cluster_;
std::unique_ptr<BucketShardResolver> JobQueuePg::resolver_;

TEST_F(JobQueuePg, AJobCommitsWithItsOrderOrNotAtAll) {
  const JobQueue queue{{.queue = "atomic"}};
  {
    auto lease = resolver_->PoolFor(kHot).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 10)", kHot,
        BucketOf(kHot), 9001);
    EXPECT_EQ(queue.Enqueue(tx, {kHot, 1, "order_placed", "{}", 9001, 1, 0ms}), 44);
    tx.abort();  // the order fails: its job must vanish with it
  }
  EXPECT_EQ(Count("SELECT count(*) FROM shardkit_jobs WHERE queue = 'atomic'"), 0);
  {
    auto lease = resolver_->PoolFor(kHot).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 10)", kHot,
        BucketOf(kHot), 9002);
    (void)queue.Enqueue(tx, {kHot, 2, "order_placed", "{}", 9002, 1, 0ms});
    tx.commit();
  }
  // On the customer's shard, in its bucket's partition, pending.
  auto lease = resolver_->Pool(resolver_->ShardFor(kHot)).Acquire();
  pqxx::nontransaction tx{*lease};
  const auto row = tx.exec1(
      "SELECT bucket, partition, state, fence, attempts, stream_key FROM shardkit_jobs "
      "WHERE queue = 'atomic' AND job_id = 2");
  EXPECT_EQ(row[0].as<int>(), 44);
  EXPECT_EQ(row[1].as<int>(), 44);
  EXPECT_EQ(row[2].as<std::string>(), "pending");
  EXPECT_EQ(row[3].as<int>(), 0);
  EXPECT_EQ(row[4].as<int>(), 0);
  EXPECT_EQ(row[5].as<std::int64_t>(), 9002);
  // A duplicate job id is a clear error.
  auto again_lease = resolver_->PoolFor(kHot).Acquire();
  pqxx::work again{*again_lease};
  EXPECT_THROW((void)queue.Enqueue(again, {kHot, 2, "order_placed", "", std::nullopt, 0, 0ms}), JobError);
}

TEST_F(JobQueuePg, EveryJobIsCompletedOnceUnderChurn) {
  const std::string name = "churn";
  const JobQueue queue{{.queue = name}};
  constexpr int kJobs = 600;
  for (int i = 0; i < kJobs; ++i) Enqueue(queue, CustomerId{1000 + (i % 150)}, 50'000 + i);

  struct Running {
    std::shared_ptr<PartitionLeases> leases;
    std::unique_ptr<JobWorker> worker;
    std::jthread thread;
  };
  std::atomic<int> refused{0};
  auto start = [&](const std::string& owner, std::chrono::milliseconds grace) {
    auto r = std::make_unique<Running>();
    PartitionLeaseOptions o = Leases(name, owner, true);
    o.join_grace = grace;
    r->leases = PartitionLeases::Join(Catalog(), o);
    r->worker = std::make_unique<JobWorker>(*resolver_, r->leases, queue, Fast());
    r->worker->OnRefused([&](const Job&) { refused += 1; });
    JobHandler h = LogEffect(owner);
    h.process = [](const Job&, const JobContext&) { std::this_thread::sleep_for(200us); };
    JobWorker* w = r->worker.get();
    r->thread = std::jthread([w, h](std::stop_token stop) { w->Run(stop, h); });
    return r;
  };
  auto done = [&] { return Count("SELECT count(*) FROM shardkit_jobs WHERE queue = 'churn' AND state = 'done'"); };
  auto wait_for_done = [&](std::int64_t at_least) {
    const auto deadline = Clock::now() + 60s;
    while (done() < at_least && Clock::now() < deadline) std::this_thread::sleep_for(20ms);  // polling
  };

  // a, b and c start together (the join grace lets them split at once); d
  // joins later and gets partitions handed over one by one.
  std::vector<std::unique_ptr<Running>> workers(3);
  {
    std::vector<std::thread> starting;
    for (std::size_t i = 0; i < 3; ++i) {
      starting.emplace_back([&, i] { workers[i] = start(std::string(1, static_cast<char>('a' + i)), 500ms); });
    }
    for (auto& t : starting) t.join();
  }
  wait_for_done(kJobs / 4);
  workers.push_back(start("d", 0ms));
  wait_for_done(kJobs / 2);
  {
    // "b" leaves gracefully: finishes its in-flight jobs, releases.
    workers[1]->thread.request_stop();
    workers[1]->thread.join();
    workers[1]->leases->Leave(Clock::now() + 2s);
  }
  wait_for_done(kJobs);
  for (auto& w : workers) {
    w->thread.request_stop();
    if (w->thread.joinable()) w->thread.join();
  }
  ASSERT_EQ(done(), kJobs);
  // The checker: every job's effect committed exactly once.
  EXPECT_EQ(Count("SELECT count(*) FROM (SELECT notification_id FROM notification_log WHERE notification_id "
                  "BETWEEN 50000 AND 50599 GROUP BY notification_id HAVING count(*) > 1) d"),
            0)
      << "a job's effect committed twice";
  EXPECT_EQ(Count("SELECT count(DISTINCT notification_id) FROM notification_log WHERE notification_id BETWEEN 50000 "
                  "AND 50599"),
            kJobs)
      << "a job completed without its effect, or lost";
  // And the workers' own counters add up.
  std::uint64_t completed = 0;
  for (auto& w : workers) {
    std::uint64_t mine = 0;
    for (const auto& pm : w->worker->Stats()) mine += pm.completed;
    if (w->leases->Owner() != "d") {
      EXPECT_GT(mine, 0U) << w->leases->Owner() << " did none of the work";
    }
    completed += mine;
  }
  EXPECT_GT(workers[3]->leases->Stats().claimed, 0U) << "the worker that joined never got a partition";
  EXPECT_EQ(completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(refused.load(), 0) << "graceful handoffs never need the fence";
}

TEST_F(JobQueuePg, AFrozenWorkersCompletionAfterTakeoverIsRefused) {
  const std::string name = "frozen";
  const JobQueue queue{{.queue = name}};
  // Three jobs of one customer: one partition.
  for (int i = 0; i < 3; ++i) Enqueue(queue, kHot, 70'000 + i);
  auto frozen_leases = PartitionLeases::Join(Catalog(), Leases(name, "frozen", false));
  JobWorker frozen{*resolver_, frozen_leases, queue, Fast()};
  std::vector<std::int64_t> refused_jobs;
  frozen.OnRefused([&](const Job& j) { refused_jobs.push_back(j.job_id); });

  std::shared_ptr<PartitionLeases> rescuer_leases;
  std::unique_ptr<JobWorker> rescuer;
  JobRound rescue_round;
  JobHandler frozen_handler = LogEffect("frozen");
  frozen_handler.process = [&](const Job& job, const JobContext& ctx) {
    if (rescuer) return;
    EXPECT_TRUE(ctx.StillOwned());
    // The process freezes in the middle of its first job (a GC pause, SIGSTOP):
    // no renewals. Meanwhile its lease expires and another worker takes over
    // and finishes the partition's jobs, this one included.
    rescuer_leases = PartitionLeases::Join(Catalog(), Leases(name, "rescuer", false));
    const auto deadline = Clock::now() + 20s;
    while (rescuer_leases->Held().size() < 64 && Clock::now() < deadline) {
      (void)rescuer_leases->Tick();
      std::this_thread::sleep_for(20ms);  // polling the catalog
    }
    ASSERT_EQ(rescuer_leases->Held().size(), 64U);
    EXPECT_FALSE(ctx.StillOwned());
    rescuer = std::make_unique<JobWorker>(*resolver_, rescuer_leases, queue, Fast());
    rescue_round = rescuer->RunOnce(LogEffect("rescuer"));
    EXPECT_GT(rescuer_leases->Held()[static_cast<std::size_t>(job.partition)].version, job.fence);
    // ... and now the frozen process wakes up and completes its job.
  };
  const JobRound frozen_round = frozen.RunOnce(frozen_handler);
  EXPECT_EQ(frozen_round.taken, 3);
  EXPECT_EQ(frozen_round.refused, 1) << "the late completion must be refused by the fence";
  EXPECT_EQ(frozen_round.completed, 0);
  EXPECT_EQ(frozen_round.abandoned, 2) << "the rest of its batch is not even started: the lease is lost";
  EXPECT_EQ(refused_jobs, std::vector<std::int64_t>{70'000});
  EXPECT_EQ(rescue_round.completed, 3) << "the new owner adopted and finished all three";
  // Each effect exactly once, by the new owner, under its fence.
  auto lease = resolver_->Pool(resolver_->ShardFor(kHot)).Acquire();
  pqxx::nontransaction tx{*lease};
  const auto rows = tx.exec(
      "SELECT notification_id, sent_by, count(*) OVER (PARTITION BY notification_id) "
      "FROM notification_log WHERE notification_id BETWEEN 70000 AND 70002");
  ASSERT_EQ(rows.size(), 3U);
  for (const auto& r : rows) {
    EXPECT_EQ(r[1].as<std::string>(), "rescuer");
    EXPECT_EQ(r[2].as<int>(), 1);
  }
  const auto jobs = tx.exec("SELECT state, attempts FROM shardkit_jobs WHERE queue = 'frozen'");
  for (const auto& r : jobs) {
    EXPECT_EQ(r[0].as<std::string>(), "done");
    EXPECT_EQ(r[1].as<int>(), 2);  // taken by both
  }
  EXPECT_EQ(frozen_leases->Tick().lost.size(), 64U);
  rescuer_leases->Leave(Clock::now() + 1s);
}

TEST_F(JobQueuePg, SaltingSpreadsAHotCustomerOverSPartitionsAndWorkers) {
  const std::string name = "salted";
  auto registry = std::make_shared<HotKeyRegistry>(Catalog(), name, 64);
  const JobQueue queue{{.queue = name}, registry};
  registry->Salt(kHot, 8);
  (void)registry->Refresh();
  // 400 jobs of the hot customer, 50 orders of 8 status jobs each.
  for (int i = 0; i < 400; ++i) Enqueue(queue, kHot, 80'000 + i, 900'000 + i / 8, i % 8);
  // Readers know: 8 partitions, all of the customer's jobs on its shard.
  const auto partitions = queue.PartitionsOf(kHot);
  EXPECT_EQ(partitions.size(), 8U);
  {
    auto lease = resolver_->Pool(resolver_->ShardFor(kHot)).Acquire();
    pqxx::nontransaction tx{*lease};
    EXPECT_EQ(tx.exec1("SELECT count(DISTINCT partition) FROM shardkit_jobs WHERE queue = 'salted'")[0].as<int>(), 8);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_jobs WHERE queue = 'salted'")[0].as<int>(), 400);
    // One stream (an order) stays in one partition.
    EXPECT_EQ(tx.exec1("SELECT max(n) FROM (SELECT count(DISTINCT partition) AS n FROM shardkit_jobs "
                       "WHERE queue = 'salted' GROUP BY stream_key) s")[0]
                  .as<int>(),
              1);
  }
  EXPECT_EQ(Count("SELECT count(*) FROM shardkit_jobs WHERE queue = 'salted'"), 400);
  // Two workers (32 partitions each): both get a share of the hot customer,
  // including the one whose partitions belong to the other shard's buckets.
  auto a_leases = PartitionLeases::Join(Catalog(), Leases(name, "a", false));
  auto b_leases = PartitionLeases::Join(Catalog(), Leases(name, "b", false));
  const auto deadline = Clock::now() + 20s;
  while ((a_leases->Held().size() != 32 || b_leases->Held().size() != 32) && Clock::now() < deadline) {
    (void)a_leases->Tick();
    (void)b_leases->Tick();
    std::this_thread::sleep_for(5ms);  // polling: handoffs are paced
  }
  ASSERT_EQ(a_leases->Held().size(), 32U);
  JobWorker a{*resolver_, a_leases, queue, Fast()};
  JobWorker b{*resolver_, b_leases, queue, Fast()};
  const auto work_deadline = Clock::now() + 60s;
  while (Count("SELECT count(*) FROM shardkit_jobs WHERE queue = 'salted' AND state <> 'done'") > 0 &&
         Clock::now() < work_deadline) {
    (void)a_leases->Tick();  // manual leases: renewed by the test
    (void)b_leases->Tick();
    (void)a.RunOnce(LogEffect("a"));
    (void)b.RunOnce(LogEffect("b"));
  }
  // Each worker did exactly the hot jobs of the partitions it holds.
  std::map<int, std::uint64_t> per_partition;
  {
    auto lease = resolver_->Pool(resolver_->ShardFor(kHot)).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row : tx.exec("SELECT partition, count(*) FROM shardkit_jobs WHERE queue = 'salted' "
                                   "AND state = 'done' GROUP BY partition")) {
      per_partition[row[0].as<int>()] = row[1].as<std::uint64_t>();
    }
  }
  auto expected_for = [&](const PartitionLeases& l) {
    std::uint64_t n = 0;
    for (const auto& h : l.Held()) n += per_partition.count(h.partition) ? per_partition[h.partition] : 0;
    return n;
  };
  std::uint64_t by_a = 0, by_b = 0;
  std::set<int> active;
  for (const auto& m : a.Stats()) {
    by_a += m.completed;
    if (m.completed > 0) active.insert(m.partition);
  }
  for (const auto& m : b.Stats()) {
    by_b += m.completed;
    if (m.completed > 0) active.insert(m.partition);
  }
  EXPECT_EQ(by_a + by_b, 400U);
  EXPECT_GT(by_a, 0U);
  EXPECT_GT(by_b, 0U);
  EXPECT_EQ(by_a, expected_for(*a_leases));
  EXPECT_EQ(by_b, expected_for(*b_leases));
  EXPECT_EQ(active, std::set<int>(partitions.begin(), partitions.end()));
  a_leases->Leave(Clock::now() + 1s);
  b_leases->Leave(Clock::now() + 1s);

  // Unsalted, the same load sits in one partition: one worker does it all.
  registry->Unsalt(kHot);
  (void)registry->Refresh();
  EXPECT_EQ(queue.PartitionFor(kHot, 12345), 44);
  EXPECT_EQ(queue.PartitionsOf(kHot).size(), 8U) << "readers still look where old salted jobs may be";
}

TEST_F(JobQueuePg, AStreamsEffectsNeverGoBackwards) {
  const std::string name = "ordered";
  const JobQueue queue{{.queue = name}};
  const CustomerId customer = kOther;
  const std::int64_t order = 777'001;
  {
    auto lease = resolver_->PoolFor(customer).Acquire();
    pqxx::work tx{*lease};
    tx.exec_params("INSERT INTO order_tracking (customer_id, bucket, order_id, status) VALUES ($1, $2, $3, 'placed')",
                   customer, BucketOf(customer), order);
    int seq = 0;
    for (const char* status : {"packed", "shipped", "delivered"}) {
      ++seq;
      (void)queue.Enqueue(tx, {customer, 90'000 + seq, status, status, order, seq, 0ms});
    }
    tx.commit();
  }
  // The guarded effect: only a newer status may overwrite.
  std::vector<std::string> applied;
  JobHandler h;
  h.apply = [&](const Job& job, pqxx::transaction_base& tx) {
    const auto r = tx.exec_params(
        "UPDATE order_tracking SET status = $3, status_seq = $4 WHERE customer_id = $1 AND order_id = $2 "
        "AND status_seq < $4",
        job.customer_id, *job.stream_key, job.payload, job.seq);
    if (r.affected_rows() == 1) applied.push_back(job.payload);
  };
  auto leases = PartitionLeases::Join(Catalog(), Leases(name, "solo", false));
  JobWorker worker{*resolver_, leases, queue, Fast()};
  EXPECT_EQ(worker.RunOnce(h).completed, 3);
  EXPECT_EQ(applied, (std::vector<std::string>{"packed", "shipped", "delivered"})) << "created order in a partition";
  // A late, stale "shipped" (a takeover overlap delivering out of order) is ignored by the guard.
  {
    auto lease = resolver_->PoolFor(customer).Acquire();
    pqxx::work tx{*lease};
    (void)queue.Enqueue(tx, {customer, 90'010, "shipped", "shipped", order, 2, 0ms});
    tx.commit();
  }
  EXPECT_EQ(worker.RunOnce(h).completed, 1);
  EXPECT_EQ(applied.size(), 3U);
  auto lease = resolver_->PoolFor(customer).Acquire();
  pqxx::nontransaction tx{*lease};
  const auto row = tx.exec_params1(
      "SELECT status, status_seq FROM order_tracking WHERE customer_id = $1 AND order_id = $2", customer, order);
  EXPECT_EQ(row[0].as<std::string>(), "delivered");
  EXPECT_EQ(row[1].as<int>(), 3);
  leases->Leave(Clock::now() + 1s);
}

TEST_F(JobQueuePg, FailingJobsAreRetriedThenDeadAndTheBacklogSaysSo) {
  const std::string name = "failing";
  const JobQueue queue{{.queue = name}};
  Enqueue(queue, kThird, 95'000);
  Enqueue(queue, kThird, 95'001);
  auto leases = PartitionLeases::Join(Catalog(), Leases(name, "solo", false));
  JobWorkerOptions o = Fast();
  o.max_attempts = 2;
  JobWorker worker{*resolver_, leases, queue, o};
  JobHandler h;
  h.process = [](const Job& job, const JobContext&) {
    if (job.job_id == 95'000) throw std::runtime_error("the mail server said no");
  };
  JobRound r = worker.RunOnce(h);
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.failed, 1);
  r = worker.RunOnce(h);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(worker.RunOnce(h).taken, 0) << "dead after max_attempts";
  const auto backlog = ReadBacklog(*resolver_, name, 64);
  ASSERT_EQ(backlog.size(), 64U);
  const auto& b = backlog[static_cast<std::size_t>(ToInt(BucketOf(kThird)))];
  EXPECT_EQ(b.dead, 1);
  EXPECT_EQ(b.pending, 0);
  EXPECT_EQ(b.done_recently, 1);
  auto lease = resolver_->PoolFor(kThird).Acquire();
  pqxx::nontransaction tx{*lease};
  EXPECT_EQ(
      tx.exec1("SELECT last_error FROM shardkit_jobs WHERE queue = 'failing' AND job_id = 95000")[0].as<std::string>(),
      "the mail server said no");
  leases->Leave(Clock::now() + 1s);
}

}  // namespace
}  // namespace shardkit
