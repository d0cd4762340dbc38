// Demo 7 (seed 000): worker sharding. Orders enqueue notification jobs in
// their own transaction (shardkit_jobs on the customer's shard); real worker
// processes share the 64 partitions through leases with fencing tokens in
// the catalog. A 5th worker joins (gradual handoff), one is SIGKILLed (its
// partitions are taken over when its leases run out), one is frozen with
// SIGSTOP in the middle of a job past its lease and resumed (its late
// completion is refused by the fence); then a hot customer makes 40% of the
// jobs, pins one partition's worker, and salting spreads it. At the end a
// checker reads every job and every effect: nothing done twice, nothing lost.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/workers/hot_keys.hpp"
#include "shardkit/workers/job_queue.hpp"
#include "shardkit/workers/partition_lease.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"
#include "worker_process.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr CustomerId kHotCustomer{4242};
constexpr int kSalt = 8;
constexpr double kHotShare = 0.4;  // seed 000: one customer, ~40% of all notifications

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct PlacedOrder {
  CustomerId customer{};
  std::int64_t order_id = 0;
  std::int64_t total_cents = 0;
  std::string ordered_at;  // the same value on the shard and the reference
  std::array<std::int64_t, 3> jobs{};
};

// Places orders: the order, its tracking row and its three notification
// jobs in one transaction on the customer's shard.
class OrderPlacer {
 public:
  OrderPlacer(Lab& lab, const JobQueue& queue, SnowflakeGenerator& ids) : lab_(lab), queue_(queue), ids_(ids) {}

  PlacedOrder Place(CustomerId customer, std::uint64_t random) {
    PlacedOrder o;
    o.customer = customer;
    o.order_id = ids_.Next();
    o.total_cents = 500 + static_cast<std::int64_t>(random % 9500);
    o.ordered_at = fmt::format("{}", std::chrono::duration_cast<std::chrono::microseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
    static constexpr std::array<const char*, 3> kKinds{"order_confirmed", "order_shipped", "order_delivered"};
    auto lease = lab_.Resolver().PoolFor(customer).Acquire();
    pqxx::work tx{*lease, "place_order"};
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
        "VALUES ($1, $2, $3, to_timestamp($4::double precision / 1000000), 'placed', $5::numeric / 100)",
        customer, BucketOf(customer), o.order_id, o.ordered_at, o.total_cents);
    tx.exec_params(
        "INSERT INTO order_tracking (customer_id, bucket, order_id, status, status_seq) VALUES ($1, $2, $3, 'placed', 0)",
        customer, BucketOf(customer), o.order_id);
    for (std::size_t i = 0; i < kKinds.size(); ++i) {
      o.jobs[i] = ids_.Next();
      NewJob job;
      job.customer_id = customer;
      job.job_id = o.jobs[i];
      job.kind = kKinds[i];
      job.payload = fmt::format(R"({{"order_id":{}}})", o.order_id);
      job.stream_key = o.order_id;  // one order's notifications: one partition, in order
      job.seq = static_cast<std::int64_t>(i + 1);
      (void)queue_.Enqueue(tx, job);
    }
    tx.commit();
    std::lock_guard lock(mutex_);
    placed_.push_back(o);
    return o;
  }

  [[nodiscard]] std::vector<PlacedOrder> Placed() const {
    std::lock_guard lock(mutex_);
    return placed_;
  }

 private:
  Lab& lab_;
  const JobQueue& queue_;
  SnowflakeGenerator& ids_;
  mutable std::mutex mutex_;
  std::vector<PlacedOrder> placed_;
};

// SQL on every shard, rows concatenated.
std::vector<pqxx::result> OnShards(Lab& lab, const std::string& sql, const std::string& queue) {
  std::vector<pqxx::result> out;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    out.push_back(tx.exec_params(sql, queue));
  }
  return out;
}

std::int64_t Unfinished(Lab& lab, const std::string& queue) {
  std::int64_t n = 0;
  for (const auto& r : OnShards(lab, "SELECT count(*) FROM shardkit_jobs WHERE queue = $1 AND state IN "
                                     "('pending', 'running')",
                                queue)) {
    n += r[0][0].as<std::int64_t>();
  }
  return n;
}

std::int64_t Done(Lab& lab, const std::string& queue) {
  std::int64_t n = 0;
  for (const auto& r : OnShards(lab, "SELECT count(*) FROM shardkit_jobs WHERE queue = $1 AND state = 'done'", queue)) {
    n += r[0][0].as<std::int64_t>();
  }
  return n;
}

// Polls until `done` or the deadline; true if it held.
bool WaitUntil(const std::function<bool()>& done, Clock::duration timeout, Clock::duration every = 20ms) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

PartitionGroupView Group(const Dsn& catalog_dsn, const std::string& queue) {
  pqxx::connection c{catalog_dsn.Reveal()};
  auto groups = ReadPartitionGroups(c, queue);
  return groups.empty() ? PartitionGroupView{} : groups.front();
}

// owner -> partitions, of unexpired leases.
std::map<std::string, std::vector<int>> Holdings(const PartitionGroupView& g) {
  std::map<std::string, std::vector<int>> out;
  for (const auto& p : g.partitions) {
    if (p.owner && !p.expired) out[*p.owner].push_back(p.partition);
  }
  return out;
}

// Every live worker holds exactly its fair share (ceil for the first
// 64 mod n by join order, floor for the rest) and all 64 are held.
bool Converged(const PartitionGroupView& g, const std::vector<std::string>& live) {
  const auto held = Holdings(g);
  std::vector<std::string> order;
  for (const auto& w : g.workers) {
    if (w.live && std::find(live.begin(), live.end(), w.owner) != live.end()) order.push_back(w.owner);
  }
  if (order.size() != live.size()) return false;
  const int n = static_cast<int>(order.size());
  int total = 0;
  for (int i = 0; i < n; ++i) {
    const auto it = held.find(order[static_cast<std::size_t>(i)]);
    const int count = it == held.end() ? 0 : static_cast<int>(it->second.size());
    if (count != kBucketCount / n + (i < kBucketCount % n ? 1 : 0)) return false;
    total += count;
  }
  for (const auto& [owner, parts] : held) {
    if (std::find(live.begin(), live.end(), owner) == live.end()) return false;
  }
  return total == kBucketCount;
}

std::string Shares(const PartitionGroupView& g) {
  std::string out;
  for (const auto& w : g.workers) {
    if (!w.live) continue;
    const auto held = Holdings(g);
    const auto it = held.find(w.owner);
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", w.owner, it == held.end() ? 0 : it->second.size());
  }
  return out;
}

// What one phase's jobs did, from the jobs table.
struct PhaseStats {
  std::int64_t jobs = 0;
  double drain_s = 0;  // first created -> last done
  std::map<int, std::int64_t> per_partition;
  std::map<int, double> partition_rate;  // jobs/s while the partition was being worked
  std::map<std::string, std::int64_t> per_worker;
  std::int64_t hot_jobs = 0;
  double hot_drain_s = 0;  // the hot customer's jobs: first created -> last done
  std::set<int> hot_partitions;
  [[nodiscard]] double HotJobsPerSecond() const { return hot_drain_s > 0 ? static_cast<double>(hot_jobs) / hot_drain_s : 0; }
  [[nodiscard]] double BusiestWorkerShare() const {
    std::int64_t most = 0;
    for (const auto& [w, n] : per_worker) most = std::max(most, n);
    return jobs > 0 ? static_cast<double>(most) / static_cast<double>(jobs) : 0;
  }
  // The partition that did the most jobs, and its throughput.
  [[nodiscard]] std::pair<int, double> BusiestPartition() const {
    int best = -1;
    std::int64_t most = 0;
    for (const auto& [p, n] : per_partition) {
      if (n > most) {
        most = n;
        best = p;
      }
    }
    return {best, best < 0 ? 0.0 : partition_rate.at(best)};
  }
};

PhaseStats MeasurePhase(Lab& lab, const std::string& queue, std::int64_t first_job, std::int64_t last_job) {
  PhaseStats s;
  double first_created = 1e300, last_done = 0, hot_first = 1e300, hot_last = 0;
  std::map<int, std::pair<double, double>> spans;  // partition -> first taken, last done (epoch s)
  for (const ShardId shard : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(shard).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row : tx.exec_params(
             "SELECT partition, coalesce(owner, ''), count(*), extract(epoch FROM min(created))::float8, "
             "extract(epoch FROM min(taken_at))::float8, extract(epoch FROM max(done_at))::float8, "
             "count(*) FILTER (WHERE customer_id = $4), "
             "extract(epoch FROM min(created) FILTER (WHERE customer_id = $4))::float8, "
             "extract(epoch FROM max(done_at) FILTER (WHERE customer_id = $4))::float8 "
             "FROM shardkit_jobs WHERE queue = $1 AND job_id BETWEEN $2 AND $3 AND state = 'done' "
             "GROUP BY partition, owner",
             queue, first_job, last_job, kHotCustomer)) {
      const int p = row[0].as<int>();
      const auto n = row[2].as<std::int64_t>();
      s.jobs += n;
      s.per_partition[p] += n;
      s.per_worker[row[1].as<std::string>()] += n;
      first_created = std::min(first_created, row[3].as<double>());
      last_done = std::max(last_done, row[5].as<double>());
      auto& span = spans.try_emplace(p, 1e300, 0.0).first->second;
      span.first = std::min(span.first, row[4].as<double>());
      span.second = std::max(span.second, row[5].as<double>());
      const auto hot = row[6].as<std::int64_t>();
      s.hot_jobs += hot;
      if (hot > 0) {
        s.hot_partitions.insert(p);
        hot_first = std::min(hot_first, row[7].as<double>());
        hot_last = std::max(hot_last, row[8].as<double>());
      }
    }
  }
  s.hot_drain_s = s.hot_jobs > 0 ? hot_last - hot_first : 0;
  s.drain_s = s.jobs > 0 ? last_done - first_created : 0;
  for (const auto& [p, span] : spans) {
    const double seconds = std::max(span.second - span.first, 1e-3);
    s.partition_rate[p] = static_cast<double>(s.per_partition[p]) / seconds;
  }
  return s;
}

Json PhaseJson(const PhaseStats& s) {
  Json partitions = Json::array();
  for (const auto& [p, n] : s.per_partition) {
    partitions.push_back({{"partition", p}, {"jobs", n}, {"jobs_per_s", s.partition_rate.at(p)}});
  }
  Json workers = Json::object();
  for (const auto& [w, n] : s.per_worker) workers[w] = n;
  const auto [busiest, rate] = s.BusiestPartition();
  return {{"jobs", s.jobs},
          {"hot_jobs", s.hot_jobs},
          {"hot_partitions", std::vector<int>(s.hot_partitions.begin(), s.hot_partitions.end())},
          {"hot_drain_s", s.hot_drain_s},
          {"hot_jobs_per_s", s.HotJobsPerSecond()},
          {"drain_s", s.drain_s},
          {"busiest_worker_share", s.BusiestWorkerShare()},
          {"busiest_partition", busiest},
          {"busiest_partition_jobs", busiest < 0 ? 0 : s.per_partition.at(busiest)},
          {"busiest_partition_jobs_per_s", rate},
          {"jobs_per_worker", workers},
          {"partitions", partitions}};
}

std::string DescribePhase(const PhaseStats& s) {
  std::string workers;
  std::vector<std::pair<std::int64_t, std::string>> sorted;
  for (const auto& [w, n] : s.per_worker) sorted.emplace_back(n, w);
  std::sort(sorted.rbegin(), sorted.rend());
  for (const auto& [n, w] : sorted) {
    workers += fmt::format("{}{} {}", workers.empty() ? "" : ", ", w,
                           Percent(static_cast<double>(n) / static_cast<double>(std::max<std::int64_t>(s.jobs, 1)), 0));
  }
  std::string hot;
  for (const int p : s.hot_partitions) {
    hot += fmt::format("{}{}: {} jobs at {:.0f}/s", hot.empty() ? "" : "; ", p, s.per_partition.at(p),
                       s.partition_rate.at(p));
  }
  return fmt::format("    {} jobs drained in {:.2f} s; customer {}'s {} jobs done at {:.0f}/s, in partition{} {}\n"
                     "    share of the jobs per worker: {}\n",
                     s.jobs, s.drain_s, kHotCustomer, s.hot_jobs, s.HotJobsPerSecond(),
                     s.hot_partitions.size() == 1 ? "" : "s", hot, workers);
}

// The demo's own rows, from an earlier run too: its orders and their
// tracking (shards and reference), its jobs and notifications, its leases.
void CleanUp(Lab& lab, const Dsn& catalog_dsn, const std::string& queue, bool keep_jobs) {
  const std::string orders =
      "DELETE FROM orders o USING order_tracking t WHERE o.customer_id = t.customer_id AND o.order_id = t.order_id";
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::work tx{*lease};
    tx.exec(orders);
    tx.exec("DELETE FROM order_tracking");
    if (!keep_jobs) {
      tx.exec_params("DELETE FROM shardkit_jobs WHERE queue = $1", queue);
      tx.exec("DELETE FROM notification_log");
    }
    tx.commit();
  }
  {
    pqxx::work tx{lab.Reference()};
    tx.exec(orders);
    tx.exec("DELETE FROM order_tracking");
    tx.commit();
  }
  if (!keep_jobs) {
    pqxx::connection c{catalog_dsn.Reveal()};
    pqxx::work tx{c};
    tx.exec_params("DELETE FROM shardkit_partition_groups WHERE worker_group = $1", queue);
    tx.exec_params("DELETE FROM shardkit_hot_keys WHERE queue = $1", queue);
    tx.commit();
  }
}

// The reference holds every row unsharded: the demo's orders too.
void MirrorToReference(Lab& lab, const std::vector<PlacedOrder>& placed) {
  pqxx::work tx{lab.Reference()};
  constexpr std::size_t kChunk = 2000;
  for (std::size_t i = 0; i < placed.size(); i += kChunk) {
    std::string customers = "{", buckets = "{", ids = "{", at = "{", totals = "{";
    for (std::size_t k = i; k < std::min(placed.size(), i + kChunk); ++k) {
      const auto& o = placed[k];
      const char* sep = k == i ? "" : ",";
      customers += sep + std::to_string(ToInt(o.customer));
      buckets += sep + std::to_string(ToInt(BucketOf(o.customer)));
      ids += sep + std::to_string(o.order_id);
      at += sep + o.ordered_at;
      totals += sep + std::to_string(o.total_cents);
    }
    customers += "}", buckets += "}", ids += "}", at += "}", totals += "}";
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
        "SELECT c, b, o, to_timestamp(a::double precision / 1000000), 'placed', t::numeric / 100 "
        "FROM unnest($1::int[], $2::smallint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(c, b, o, a, t)",
        customers, buckets, ids, at, totals);
    tx.exec_params(
        "INSERT INTO order_tracking (customer_id, bucket, order_id, status, status_seq) "
        "SELECT c, b, o, 'delivered', 3 FROM unnest($1::int[], $2::smallint[], $3::bigint[]) AS u(c, b, o)",
        customers, buckets, ids);
  }
  tx.commit();
}

std::string DefaultExecutable() {
  if (const char* env = std::getenv("BOOKSTORE_LAB_EXE"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bookstore-lab") : self.string();
}

}  // namespace

DemoResult RunWorkers(Lab& lab) {
  WorkersDemoOptions options;
  return RunWorkers(lab, options);
}

DemoResult RunWorkers(Lab& lab, const WorkersDemoOptions& options) {
  DemoResult r;
  r.name = "workers";
  const WorkerSettings& ws = options.settings;
  const std::string queue_name = ws.queue;
  const Dsn catalog = CatalogDsn(lab.Config());
  const std::string executable = options.executable.empty() ? DefaultExecutable() : options.executable;
  CleanUp(lab, catalog, queue_name, false);

  // Order and job ids: Snowflake IDs from a leased worker id.
  SnowflakeOptions id_options;
  id_options.epoch_unix_ms = kLabIdEpochMs;
  std::shared_ptr<WorkerLease> id_lease;
  std::unique_ptr<SnowflakeGenerator> ids;
  try {
    WorkerLeaseOptions lo;
    lo.id_space = "bookstore-lab-orders";
    lo.owner = "bookstore-lab workers demo";
    id_lease = WorkerLease::Claim(catalog, lo);
    ids = std::make_unique<SnowflakeGenerator>(id_lease, id_options);
  } catch (const Error&) {
    ids = std::make_unique<SnowflakeGenerator>(1000, id_options);
  }
  auto registry = std::make_shared<HotKeyRegistry>(catalog, queue_name, kBucketCount);
  (void)registry->Refresh();
  const JobQueue queue{{.queue = queue_name, .partition_count = kBucketCount}, registry};
  OrderPlacer placer{lab, queue, *ids};

  std::vector<CustomerId> customers;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row : tx.exec("SELECT customer_id FROM customers")) customers.push_back(row[0].as<CustomerId>());
  }
  std::sort(customers.begin(), customers.end());
  if (customers.empty()) throw Error("workers demo: no customers on the shards; load the data first (lab/run load)");
  Rng rng(options.seed);

  const auto config_file = WriteConfigFile(lab.Config(), options.work_dir);
  std::map<std::string, std::unique_ptr<WorkerProcess>> workers;
  std::vector<std::string> live;
  auto start_worker = [&](const std::string& name) {
    workers[name] = std::make_unique<WorkerProcess>(executable, config_file, name, ws, options.work_dir);
    live.push_back(name);
  };
  auto forget = [&](const std::string& name) { live.erase(std::find(live.begin(), live.end(), name)); };
  auto cleanup_processes = [&] {
    for (auto& [name, w] : workers) (void)w->Terminate(3s);
    std::error_code ignored;
    std::filesystem::remove(config_file, ignored);
  };

  Json figures = Json::object();
  try {
    r.text += fmt::format(
        "queue '{}': 64 partitions (a job's partition is its customer's bucket); leases {} ms (stop {} ms early, "
        "renewed every {} ms) in the catalog; \"sending\" a notification takes {} ms\n",
        queue_name, ws.lease.count(), ws.margin.count(), ws.renew.count(), ws.work.count());

    // 1. Four worker processes share the partitions.
    const auto started = Clock::now();
    for (const char* name : {"w1", "w2", "w3", "w4"}) start_worker(name);
    const bool four = WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);
    PartitionGroupView g = Group(catalog, queue_name);
    std::string pids;
    for (const auto& name : live) pids += fmt::format("{}{} pid {}", pids.empty() ? "" : ", ", name, workers[name]->Pid());
    r.text += fmt::format("4 worker processes ({}): {} after {:.2f} s\n", pids, Shares(g), Seconds(Clock::now() - started));
    r.Expect("workers.four_share_the_partitions", four, Shares(g));

    // A steady load: orders (3 jobs each) in their own transactions.
    std::atomic<bool> producing{true};
    std::atomic<std::int64_t> produced{0};
    const double rate = options.orders_per_second;
    std::jthread producer([&](std::stop_token stop) {
      Rng local(options.seed + 1);
      auto next = Clock::now();
      while (!stop.stop_requested() && producing.load()) {
        const auto c = customers[static_cast<std::size_t>(local.Below(customers.size()))];
        try {
          (void)placer.Place(c, local.Next());
          produced += 1;
        } catch (const std::exception& e) {
          fmt::print(stderr, "workers demo: placing an order failed: {}\n", e.what());
        }
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
        std::this_thread::sleep_until(next);
      }
    });
    r.text += fmt::format("steady load: {:.0f} orders/s, each enqueuing 3 jobs (confirmed, shipped, delivered) in the "
                          "order's transaction\n",
                          rate);
    (void)WaitUntil([&] { return Done(lab, queue_name) >= 300; }, 30s);

    // 2. A fifth worker joins: the others hand partitions over one at a time.
    const auto join_at = Clock::now();
    start_worker("w5");
    const bool five = WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);
    const double handoff_s = Seconds(Clock::now() - join_at);
    g = Group(catalog, queue_name);
    std::vector<double> gaps;
    for (const auto& p : g.partitions) {
      if (p.owner == std::optional<std::string>("w5") && p.lease_age_s && p.released_ago_s) {
        gaps.push_back((*p.released_ago_s - *p.lease_age_s) * 1000.0);  // release -> claim
      }
    }
    const double gap_median = Median(gaps);
    const double gap_max = gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end());
    r.text += fmt::format("w5 joins: {} partitions handed over one at a time in {:.2f} s ({}); handoff pause "
                          "(release -> claim) median {:.0f} ms, max {:.0f} ms\n",
                          gaps.size(), handoff_s, Shares(g), gap_median, gap_max);
    r.Expect("workers.fifth_joins_and_shares_converge", five && gaps.size() >= 12, Shares(g));
    figures["handoff"] = {{"partitions_handed_over", gaps.size()},
                          {"converged_s", handoff_s},
                          {"pause_ms_median", gap_median},
                          {"pause_ms_max", gap_max},
                          {"pauses_ms", gaps}};

    // 3. SIGKILL: no goodbye; its partitions wait for their leases to expire.
    const std::string killed = "w2";
    const auto killed_held = Holdings(Group(catalog, queue_name))[killed];
    const auto kill_at = Clock::now();
    workers[killed]->Kill();
    forget(killed);
    const bool taken_over = WaitUntil(
        [&] {
          const auto h = Holdings(Group(catalog, queue_name));
          return h.find(killed) == h.end() && Converged(Group(catalog, queue_name), live);
        },
        30s, 10ms);
    const double takeover_ms = Millis(Clock::now() - kill_at);
    g = Group(catalog, queue_name);
    r.text += fmt::format("{} SIGKILLed holding {} partitions: all taken over after {:.0f} ms (lease {} ms); {}\n",
                          killed, killed_held.size(), takeover_ms, ws.lease.count(), Shares(g));
    r.Expect("workers.killed_workers_partitions_taken_over", taken_over, Shares(g));
    figures["kill"] = {{"worker", killed}, {"partitions", killed_held.size()}, {"takeover_ms", takeover_ms},
                       {"lease_ms", ws.lease.count()}};

    // 4. SIGSTOP in the middle of a job, past its lease, then SIGCONT.
    const std::string frozen = "w3";
    WorkerProcess& fw = *workers[frozen];
    WorkerStatus status;
    int attempts = 0;
    for (; attempts < 200; ++attempts) {
      fw.Signal(SIGSTOP);
      int st = 0;
      (void)::waitpid(fw.Pid(), &st, WUNTRACED);  // until it is really stopped
      status = fw.Status();
      if (status.phase == WorkerPhase::kProcessing) break;
      fw.Signal(SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(3 + static_cast<int>(rng.Below(20))));
    }
    const auto frozen_at = Clock::now();
    const bool frozen_mid_job = status.phase == WorkerPhase::kProcessing;
    std::string frozen_job_owner;
    int frozen_effects = 0;
    const CustomerId frozen_customer = [&] {
      for (const auto& o : placer.Placed()) {
        if (std::find(o.jobs.begin(), o.jobs.end(), status.job_id) != o.jobs.end()) return o.customer;
      }
      return CustomerId{0};
    }();
    auto frozen_job_row = [&]() -> std::pair<std::string, std::string> {
      auto lease = lab.Resolver().PoolFor(frozen_customer).Acquire();
      pqxx::nontransaction tx{*lease};
      const auto row = tx.exec_params("SELECT state, coalesce(owner, '') FROM shardkit_jobs WHERE queue = $1 AND "
                                      "customer_id = $2 AND job_id = $3",
                                      queue_name, frozen_customer, status.job_id);
      if (row.empty()) return {"", ""};
      return {row[0][0].as<std::string>(), row[0][1].as<std::string>()};
    };
    // Others take its partitions over (new fence) and finish its job.
    // ... and it stays frozen past its whole lease, counted from the freeze.
    const bool rescued = frozen_mid_job && WaitUntil(
                                               [&] {
                                                 const auto [state, owner] = frozen_job_row();
                                                 frozen_job_owner = owner;
                                                 return state == "done" && owner != frozen &&
                                                        Clock::now() - frozen_at > ws.lease;
                                               },
                                               30s);
    const double frozen_ms = Millis(Clock::now() - frozen_at);
    fw.Signal(SIGCONT);
    const bool refused = fw.WaitFor(
        [&](const std::vector<Json>& events) {
          return std::any_of(events.begin(), events.end(), [&](const Json& e) {
            return e.value("event", "") == "refused" && e.value("job_id", std::int64_t{0}) == status.job_id;
          });
        },
        Clock::now() + 15s);
    {
      auto lease = lab.Resolver().PoolFor(frozen_customer).Acquire();
      pqxx::nontransaction tx{*lease};
      frozen_effects = tx.exec_params1("SELECT count(*) FROM notification_log WHERE customer_id = $1 AND "
                                       "notification_id = $2",
                                       frozen_customer, status.job_id)[0]
                           .as<int>();
    }
    r.text += fmt::format(
        "{} SIGSTOPped while sending job {} (partition {}, fence {}) and kept frozen {:.0f} ms (> lease {} ms): {} "
        "took the partition over with a higher fence and finished the job; after SIGCONT {}'s late completion was "
        "{}\n",
        frozen, status.job_id, status.partition, status.fence, frozen_ms, ws.lease.count(),
        frozen_job_owner.empty() ? "nobody" : frozen_job_owner, frozen,
        refused ? "refused by the fence (0 rows updated, rolled back)" : "NOT refused");
    r.Expect("workers.frozen_mid_job", frozen_mid_job, fmt::format("{} attempts to catch it mid-job", attempts + 1));
    r.Expect("workers.frozen_job_finished_by_new_owner", rescued, fmt::format("job {} owner {}", status.job_id,
                                                                              frozen_job_owner));
    r.Expect("workers.late_completion_refused_by_fence", refused, fmt::format("job {}", status.job_id));
    r.Expect("workers.frozen_job_effect_once", frozen_effects == 1,
             fmt::format("{} effects of job {}", frozen_effects, status.job_id));
    figures["stop"] = {{"worker", frozen},
                       {"job_id", status.job_id},
                       {"partition", status.partition},
                       {"fence", status.fence},
                       {"frozen_ms", frozen_ms},
                       {"finished_by", frozen_job_owner},
                       {"late_completion_refused", refused}};

    producing = false;
    producer.request_stop();
    producer.join();
    const bool drained = WaitUntil([&] { return Unfinished(lab, queue_name) == 0; }, 60s);
    r.Expect("workers.steady_load_drained", drained, fmt::format("{} orders placed", produced.load()));
    // w3 rejoined after its leases were lost; wait for the shares to settle.
    (void)WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);

    // 5. A hot customer: 40% of a burst of orders, all in one partition.
    auto burst = [&](const std::string& label) {
      const std::int64_t first = ids->Next();
      for (int i = 0; i < options.hot_burst_orders; ++i) {
        const CustomerId c = rng.Unit() < kHotShare ? kHotCustomer
                                                    : customers[static_cast<std::size_t>(rng.Below(customers.size()))];
        (void)placer.Place(c, rng.Next());
      }
      const std::int64_t last = ids->Next();
      const bool ok = WaitUntil([&] { return Unfinished(lab, queue_name) == 0; }, 120s);
      r.Expect("workers." + label + "_drained", ok, label);
      return MeasurePhase(lab, queue_name, first, last);
    };
    const PhaseStats before = burst("hot_unsalted");
    r.text += fmt::format("hot customer {}: {:.0f}% of a burst of {} orders ({} jobs), unsalted:\n", kHotCustomer,
                          kHotShare * 100, options.hot_burst_orders, before.jobs);
    r.text += DescribePhase(before);
    registry->Salt(kHotCustomer, kSalt);
    (void)registry->Refresh();
    // The workers refresh the hot keys every 100 ms; wait until they all know.
    std::this_thread::sleep_for(300ms);
    const PhaseStats after = burst("hot_salted");
    r.text += fmt::format("the same burst with customer {} salted over {} partitions (readers know: {}):\n",
                          kHotCustomer, kSalt, fmt::join(registry->Current()->PartitionsOf(kHotCustomer), " "));
    r.text += DescribePhase(after);
    r.Expect("workers.unsalted_hot_key_in_one_partition", before.hot_partitions.size() == 1,
             fmt::format("{} partitions", before.hot_partitions.size()));
    r.Expect("workers.salting_spreads_over_s_partitions", after.hot_partitions.size() == kSalt,
             fmt::format("{} partitions", after.hot_partitions.size()));
    r.Expect("workers.salting_drains_faster", after.drain_s < before.drain_s,
             fmt::format("{:.2f} s salted vs {:.2f} s unsalted", after.drain_s, before.drain_s));
    r.Expect("workers.salting_unpins_the_busiest_worker", after.BusiestWorkerShare() < before.BusiestWorkerShare(),
             fmt::format("{} vs {}", Percent(after.BusiestWorkerShare()), Percent(before.BusiestWorkerShare())));
    figures["per_partition_throughput"] = {{"before_salting", PhaseJson(before)}, {"after_salting", PhaseJson(after)}};
    figures["salting_speedup"] = after.drain_s > 0 ? before.drain_s / after.drain_s : 0.0;

    // 6. Everyone leaves gracefully.
    std::map<std::string, Json> finals;
    for (const auto& name : std::vector<std::string>(live)) {
      const int code = workers[name]->Terminate(5s);
      if (auto f = workers[name]->Last("final")) finals[name] = *f;
      r.Expect("workers." + name + "_left_cleanly", code == 0, fmt::format("exit status {}", code));
    }
    std::int64_t refusals = 0;
    Json per_worker = Json::object();
    for (const auto& [name, w] : workers) {
      const auto events = w->Events("refused");
      refusals += static_cast<std::int64_t>(events.size());
      const auto last = w->Last("final") ? w->Last("final") : w->Last("stats");
      per_worker[name] = {{"completed", last ? last->value("completed", 0) : 0},
                          {"refused", events.size()},
                          {"abandoned", last ? last->value("abandoned", 0) : 0},
                          {"adopted", last ? last->value("adopted", 0) : 0},
                          {"guard_skips", last ? last->value("guard_skips", 0) : 0},
                          {"partitions_released", last ? last->value("partitions_released", 0) : 0},
                          {"exit", name == killed ? "SIGKILL" : "SIGTERM"}};
      for (const auto& e : w->Events("error")) {
        r.Expect("workers." + name + "_no_errors", false, e.value("error", ""));
      }
    }
    figures["workers"] = per_worker;

    // 7. The checker: every enqueued job, every effect.
    const auto placed = placer.Placed();
    std::map<std::int64_t, int> effects;   // job -> notifications sent
    std::map<std::int64_t, std::string> state;
    for (const ShardId s : FirstShards(lab.ShardCount())) {
      auto lease = lab.Resolver().Pool(s).Acquire();
      pqxx::nontransaction tx{*lease};
      for (const auto& row : tx.exec_params("SELECT job_id, state FROM shardkit_jobs WHERE queue = $1", queue_name)) {
        state[row[0].as<std::int64_t>()] = row[1].as<std::string>();
      }
      for (const auto& row : tx.exec("SELECT notification_id, count(*) FROM notification_log GROUP BY 1")) {
        effects[row[0].as<std::int64_t>()] += row[1].as<int>();
      }
    }
    std::int64_t enqueued = 0, done = 0, lost = 0, doubled = 0, missing_rows = 0, stray = 0;
    std::set<std::int64_t> mine;
    for (const auto& o : placed) {
      for (const auto id : o.jobs) {
        ++enqueued;
        mine.insert(id);
        const auto st = state.find(id);
        const auto ef = effects.find(id);
        const int n = ef == effects.end() ? 0 : ef->second;
        if (st == state.end()) ++missing_rows;
        if (st != state.end() && st->second == "done") ++done;
        if (n > 1) ++doubled;
        if (n == 0 || st == state.end() || st->second != "done") ++lost;
      }
    }
    for (const auto& [id, n] : effects) stray += mine.count(id) ? 0 : n;
    // Order statuses only ever moved forward: every order ends delivered.
    std::int64_t orders_delivered = 0, orders_total = 0, guard_skips = 0;
    for (const ShardId s : FirstShards(lab.ShardCount())) {
      auto lease = lab.Resolver().Pool(s).Acquire();
      pqxx::nontransaction tx{*lease};
      const auto row = tx.exec1("SELECT count(*), count(*) FILTER (WHERE status = 'delivered' AND status_seq = 3) "
                                "FROM order_tracking");
      orders_total += row[0].as<std::int64_t>();
      orders_delivered += row[1].as<std::int64_t>();
    }
    for (const auto& [name, w] : per_worker.items()) guard_skips += w.value("guard_skips", std::int64_t{0});
    r.text += fmt::format(
        "checker: {} jobs enqueued with {} orders, {} done; effects: double_processed = {}, lost = {}; stale "
        "completions refused by the fence: {}; orders delivered: {} of {} (statuses never went backwards; {} late "
        "updates ignored by the sequence guard)\n",
        Thousands(enqueued), Thousands(static_cast<std::int64_t>(placed.size())), Thousands(done), doubled, lost,
        refusals, Thousands(orders_delivered), Thousands(orders_total), guard_skips);
    r.Expect("workers.double_processed_is_zero", doubled == 0, fmt::format("{} jobs with more than one effect", doubled));
    r.Expect("workers.lost_is_zero", lost == 0 && missing_rows == 0,
             fmt::format("{} jobs without their effect or not done, {} missing rows", lost, missing_rows));
    r.Expect("workers.no_stray_effects", stray == 0, fmt::format("{} effects of jobs nobody enqueued", stray));
    r.Expect("workers.stale_completions_refused", refusals >= 1, fmt::format("{} refused", refusals));
    r.Expect("workers.order_status_never_backwards", orders_delivered == orders_total &&
                                                          orders_total == static_cast<std::int64_t>(placed.size()),
             fmt::format("{} of {} orders delivered", orders_delivered, orders_total));

    // The reference server holds the same orders, unsharded.
    MirrorToReference(lab, placed);
    std::int64_t shard_orders = 0, shard_cents = 0;
    const std::string demo_orders =
        "SELECT count(*), coalesce(sum(o.total * 100), 0)::bigint FROM orders o JOIN order_tracking t "
        "ON o.customer_id = t.customer_id AND o.order_id = t.order_id";
    for (const ShardId s : FirstShards(lab.ShardCount())) {
      auto lease = lab.Resolver().Pool(s).Acquire();
      pqxx::nontransaction tx{*lease};
      const auto row = tx.exec1(demo_orders);
      shard_orders += row[0].as<std::int64_t>();
      shard_cents += row[1].as<std::int64_t>();
    }
    pqxx::nontransaction ref{lab.Reference()};
    const auto ref_row = ref.exec1(demo_orders);
    ref.commit();
    r.Expect("workers.orders_equal_reference",
             shard_orders == ref_row[0].as<std::int64_t>() && shard_cents == ref_row[1].as<std::int64_t>() &&
                 shard_orders == static_cast<std::int64_t>(placed.size()),
             fmt::format("shards {} orders {} cents, reference {} orders {} cents", shard_orders, shard_cents,
                         ref_row[0].as<std::int64_t>(), ref_row[1].as<std::int64_t>()));

    figures["jobs"] = {{"enqueued", enqueued}, {"done", done}, {"orders", placed.size()}};
    figures["double_processed"] = doubled;
    figures["lost"] = lost;
    figures["stale_refused"] = refusals;
    figures["guard_skips"] = guard_skips;
    figures["handoff_pause_ms"] = gap_median;
    figures["settings"] = {{"lease_ms", ws.lease.count()},         {"margin_ms", ws.margin.count()},
                           {"renew_ms", ws.renew.count()},         {"claim_ms", ws.claim.count()},
                           {"handoff_pause_ms", ws.handoff_pause.count()}, {"work_ms", ws.work.count()},
                           {"orders_per_second", rate},            {"hot_burst_orders", options.hot_burst_orders}};
  } catch (...) {
    cleanup_processes();
    CleanUp(lab, catalog, queue_name, true);
    throw;
  }
  cleanup_processes();
  // The orders go (the other demos count orders); jobs, notifications and
  // leases stay for shardctl workers to show.
  CleanUp(lab, catalog, queue_name, true);
  r.figures = figures;
  return r;
}

}  // namespace shardkit::lab
