// The workers demo's run (workers_demo.hpp): real worker processes share
// the 64 partitions through leases with fencing tokens; a fifth joins, one
// is SIGKILLed, one SIGSTOPped mid-job past its lease, a hot customer is
// salted, and everyone leaves.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <functional>
#include <optional>
#include <pqxx/pqxx>

#include "workers_demo.hpp"

namespace shardkit::lab::workers_demo {
namespace {

using namespace std::chrono_literals;

PartitionGroupView Group(const Dsn& catalog_dsn, const std::string& queue) {
  pqxx::connection c{catalog_dsn.Reveal()};
  auto groups = ReadPartitionGroups(c, queue);
  return groups.empty() ? PartitionGroupView{} : groups.front();
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

// SIGSTOPs `fw` until it is caught in the middle of a job (SIGCONT between
// tries, up to 200); its status then.
// `unfinished(job_id)`: the job's row is not done. A worker stopped right
// after sending its completion's COMMIT still reports the job as processing,
// and the server commits it anyway: such a catch is let go. What it sent
// before the stop is given 2 s to land (a COMMIT that waits for a
// synchronous standby on a loaded machine took over 300 ms).
// `finished_by(job)`: the worker that finished it, nullopt while it is not
// done. The stopped worker's own COMMIT, sent just before the stop, may land
// seconds later on a loaded machine: the job counts as caught mid-way only if
// the stopped worker has not finished it within 5 s (another worker taking
// it over meanwhile is the rescue the demo waits for anyway).
WorkerStatus StopMidJob(WorkerProcess& fw, const std::string& name, Rng& rng, int& attempts,
                        const std::function<std::optional<std::string>(std::int64_t)>& finished_by) {
  WorkerStatus status;
  for (; attempts < 200; ++attempts) {
    fw.Signal(SIGSTOP);
    int st = 0;
    (void)::waitpid(fw.Pid(), &st, WUNTRACED);  // until it is really stopped
    status = fw.Status();
    if (status.phase == WorkerPhase::kProcessing) {
      const std::int64_t job = status.job_id;
      std::optional<std::string> by;
      (void)WaitUntil(
          [&] {
            by = finished_by(job);
            return by.has_value();
          },
          5s, 100ms);
      if (!by || *by != name) break;
      status.phase = WorkerPhase::kIdle;
    }
    fw.Signal(SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(3 + static_cast<int>(rng.Below(20))));
  }
  return status;
}

// The customer whose order enqueued the job (0 if none did).
CustomerId CustomerOfJob(const OrderPlacer& placer, std::int64_t job_id) {
  for (const auto& o : placer.Placed()) {
    if (std::find(o.jobs.begin(), o.jobs.end(), job_id) != o.jobs.end()) return o.customer;
  }
  return CustomerId{0};
}

// The notifications the job sent.
int EffectsOf(Lab& lab, CustomerId customer, std::int64_t job_id) {
  auto lease = lab.Resolver().PoolFor(customer).Acquire();
  pqxx::nontransaction tx{*lease};
  return tx
      .exec_params1("SELECT count(*) FROM notification_log WHERE customer_id = $1 AND notification_id = $2", customer,
                    job_id)[0]
      .as<int>();
}

}  // namespace

void Fleet::Start(const std::string& name) {
  workers[name] = std::make_unique<WorkerProcess>(executable, config_file, name, ws, work_dir);
  live.push_back(name);
}

void Fleet::Forget(const std::string& name) {
  live.erase(std::find(live.begin(), live.end(), name));
}

void Fleet::TerminateAll() {
  for (auto& [name, w] : workers) (void)w->Terminate(3s);
  std::error_code ignored;
  std::filesystem::remove(config_file, ignored);
}

// Polls until `done` or the deadline; true if it held.
bool WaitUntil(const std::function<bool()>& done, Clock::duration timeout, Clock::duration every) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

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
  for (const auto& r : OnShards(lab,
                                "SELECT count(*) FROM shardkit_jobs WHERE queue = $1 AND state IN "
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

void FourShare(Demo& d) {
  const std::string& queue_name = d.queue_name;
  const Dsn& catalog = d.catalog;
  auto& workers = d.fleet.workers;
  auto& live = d.fleet.live;
  DemoResult& r = d.r;
  const auto started = Clock::now();
  Mark(d, "w1-w4 start");
  for (const char* name : {"w1", "w2", "w3", "w4"}) d.fleet.Start(name);
  const bool four = WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);
  PartitionGroupView g = Group(catalog, queue_name);
  std::string pids;
  for (const auto& name : live)
    pids += fmt::format("{}{} pid {}", pids.empty() ? "" : ", ", name, workers[name]->Pid());
  r.text +=
      fmt::format("4 worker processes ({}): {} after {:.2f} s\n", pids, Shares(g), Seconds(Clock::now() - started));
  r.Expect("workers.four_share_the_partitions", four, Shares(g));
}

double FifthJoins(Demo& d) {
  const std::string& queue_name = d.queue_name;
  const Dsn& catalog = d.catalog;
  auto& live = d.fleet.live;
  DemoResult& r = d.r;
  Json& figures = d.figures;
  const auto join_at = Clock::now();
  Mark(d, "w5 joins");
  d.fleet.Start("w5");
  const bool five = WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);
  const double handoff_s = Seconds(Clock::now() - join_at);
  const PartitionGroupView g = Group(catalog, queue_name);
  std::vector<double> gaps;
  for (const auto& p : g.partitions) {
    if (p.owner == std::optional<std::string>("w5") && p.lease_age_s && p.released_ago_s) {
      gaps.push_back((*p.released_ago_s - *p.lease_age_s) * 1000.0);  // release -> claim
    }
  }
  const double gap_median = Median(gaps);
  const double gap_max = gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end());
  r.text += fmt::format(
      "w5 joins: {} partitions handed over one at a time in {:.2f} s ({}); handoff pause "
      "(release -> claim) median {:.0f} ms, max {:.0f} ms\n",
      gaps.size(), handoff_s, Shares(g), gap_median, gap_max);
  r.Expect("workers.fifth_joins_and_shares_converge", five && gaps.size() >= 12, Shares(g));
  figures["handoff"] = {{"partitions_handed_over", gaps.size()},
                        {"converged_s", handoff_s},
                        {"pause_ms_median", gap_median},
                        {"pause_ms_max", gap_max},
                        {"pauses_ms", gaps}};
  return gap_median;
}

std::string KillOne(Demo& d) {
  const WorkerSettings& ws = d.ws;
  const std::string& queue_name = d.queue_name;
  const Dsn& catalog = d.catalog;
  auto& workers = d.fleet.workers;
  auto& live = d.fleet.live;
  DemoResult& r = d.r;
  Json& figures = d.figures;
  const std::string killed = "w2";
  const auto killed_held = Holdings(Group(catalog, queue_name))[killed];
  const auto kill_at = Clock::now();
  Mark(d, "SIGKILL " + killed);
  workers[killed]->Kill();
  d.fleet.Forget(killed);
  const bool taken_over = WaitUntil(
      [&] {
        const auto h = Holdings(Group(catalog, queue_name));
        return h.find(killed) == h.end() && Converged(Group(catalog, queue_name), live);
      },
      30s, 10ms);
  const double takeover_ms = Millis(Clock::now() - kill_at);
  const PartitionGroupView g = Group(catalog, queue_name);
  r.text += fmt::format("{} SIGKILLed holding {} partitions: all taken over after {:.0f} ms (lease {} ms); {}\n",
                        killed, killed_held.size(), takeover_ms, ws.lease.count(), Shares(g));
  r.Expect("workers.killed_workers_partitions_taken_over", taken_over, Shares(g));
  figures["kill"] = {{"worker", killed},
                     {"partitions", killed_held.size()},
                     {"takeover_ms", takeover_ms},
                     {"lease_ms", ws.lease.count()}};
  return killed;
}

void FreezeMidJob(Demo& d, const OrderPlacer& placer, Rng& rng) {
  Lab& lab = d.lab;
  const WorkerSettings& ws = d.ws;
  const std::string& queue_name = d.queue_name;
  auto& workers = d.fleet.workers;
  DemoResult& r = d.r;
  Json& figures = d.figures;
  const std::string frozen = "w3";
  WorkerProcess& fw = *workers[frozen];
  // A job's state and owner ("" when there is no such row).
  auto job_row = [&](std::int64_t job_id) -> std::pair<std::string, std::string> {
    const CustomerId customer = CustomerOfJob(placer, job_id);
    auto lease = lab.Resolver().PoolFor(customer).Acquire();
    pqxx::nontransaction tx{*lease};
    const auto row = tx.exec_params(
        "SELECT state, coalesce(owner, '') FROM shardkit_jobs WHERE queue = $1 AND "
        "customer_id = $2 AND job_id = $3",
        queue_name, customer, job_id);
    if (row.empty()) return {"", ""};
    return {row[0][0].as<std::string>(), row[0][1].as<std::string>()};
  };
  int attempts = 0;
  const WorkerStatus status =
      StopMidJob(fw, frozen, rng, attempts, [&](std::int64_t job_id) -> std::optional<std::string> {
        const auto [state, owner] = job_row(job_id);
        if (state != "done") return std::nullopt;
        return owner;
      });
  const auto frozen_at = Clock::now();
  Mark(d, "SIGSTOP " + frozen);
  const bool frozen_mid_job = status.phase == WorkerPhase::kProcessing;
  std::string frozen_job_owner;
  int frozen_effects = 0;
  const CustomerId frozen_customer = CustomerOfJob(placer, status.job_id);
  auto frozen_job_row = [&] { return job_row(status.job_id); };
  // Others take its partitions over (new fence) and finish its job.
  // ... and it stays frozen past its whole lease, counted from the freeze.
  const bool rescued =
      frozen_mid_job && WaitUntil(
                            [&] {
                              const auto [state, owner] = frozen_job_row();
                              frozen_job_owner = owner;
                              return state == "done" && owner != frozen && Clock::now() - frozen_at > ws.lease;
                            },
                            30s);
  const double frozen_ms = Millis(Clock::now() - frozen_at);
  fw.Signal(SIGCONT);
  Mark(d, "SIGCONT " + frozen);
  const bool refused = fw.WaitFor(
      [&](const std::vector<Json>& events) {
        return std::any_of(events.begin(), events.end(), [&](const Json& e) {
          return e.value("event", "") == "refused" && e.value("job_id", std::int64_t{0}) == status.job_id;
        });
      },
      Clock::now() + 15s);
  frozen_effects = EffectsOf(lab, frozen_customer, status.job_id);
  r.text += fmt::format(
      "{} SIGSTOPped while sending job {} (partition {}, fence {}) and kept frozen {:.0f} ms (> lease {} ms): {} "
      "took the partition over with a higher fence and finished the job; after SIGCONT {}'s late completion was "
      "{}\n",
      frozen, status.job_id, status.partition, status.fence, frozen_ms, ws.lease.count(),
      frozen_job_owner.empty() ? "nobody" : frozen_job_owner, frozen,
      refused ? "refused by the fence (0 rows updated, rolled back)" : "NOT refused");
  r.Expect("workers.frozen_mid_job", frozen_mid_job, fmt::format("{} attempts to catch it mid-job", attempts + 1));
  r.Expect("workers.frozen_job_finished_by_new_owner", rescued,
           fmt::format("job {} owner {}", status.job_id, frozen_job_owner));
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
}

void DrainSteadyLoad(Demo& d, SteadyLoad& load) {
  Lab& lab = d.lab;
  const std::string& queue_name = d.queue_name;
  const Dsn& catalog = d.catalog;
  auto& live = d.fleet.live;
  DemoResult& r = d.r;
  load.Stop();
  Mark(d, "load stops");
  const bool drained = WaitUntil([&] { return Unfinished(lab, queue_name) == 0; }, 60s);
  r.Expect("workers.steady_load_drained", drained, fmt::format("{} orders placed", load.Produced()));
  // w3 rejoined after its leases were lost; wait for the shares to settle.
  (void)WaitUntil([&] { return Converged(Group(catalog, queue_name), live); }, 30s);
}

void HotCustomer(Demo& d, OrderPlacer& placer, Rng& rng, const std::vector<CustomerId>& customers,
                 HotKeyRegistry& registry, SnowflakeGenerator& ids) {
  Lab& lab = d.lab;
  const WorkersDemoOptions& options = d.options;
  const std::string& queue_name = d.queue_name;
  DemoResult& r = d.r;
  Json& figures = d.figures;
  auto burst = [&](const std::string& label) {
    const std::int64_t first = ids.Next();
    for (int i = 0; i < options.hot_burst_orders; ++i) {
      const CustomerId c =
          rng.Unit() < kHotShare ? kHotCustomer : customers[static_cast<std::size_t>(rng.Below(customers.size()))];
      (void)placer.Place(c, rng.Next());
    }
    const std::int64_t last = ids.Next();
    const bool ok = WaitUntil([&] { return Unfinished(lab, queue_name) == 0; }, 120s);
    r.Expect("workers." + label + "_drained", ok, label);
    return MeasurePhase(lab, queue_name, first, last);
  };
  Mark(d, "hot burst");
  const PhaseStats before = burst("hot_unsalted");
  r.text += fmt::format("hot customer {}: {:.0f}% of a burst of {} orders ({} jobs), unsalted:\n", kHotCustomer,
                        kHotShare * 100, options.hot_burst_orders, before.jobs);
  r.text += DescribePhase(before);
  registry.Salt(kHotCustomer, kSalt);
  (void)registry.Refresh();
  // The workers refresh the hot keys every 100 ms; wait until they all know.
  std::this_thread::sleep_for(300ms);
  Mark(d, "salted burst");
  const PhaseStats after = burst("hot_salted");
  r.text += fmt::format("the same burst with customer {} salted over {} partitions (readers know: {}):\n", kHotCustomer,
                        kSalt, fmt::join(registry.Current()->PartitionsOf(kHotCustomer), " "));
  r.text += DescribePhase(after);
  r.Expect("workers.unsalted_hot_key_in_one_partition", before.hot_partitions.size() == 1,
           fmt::format("{} partitions", before.hot_partitions.size()));
  r.Expect("workers.salting_spreads_over_s_partitions", after.hot_partitions.size() == kSalt,
           fmt::format("{} partitions", after.hot_partitions.size()));
  // Drain times are reported (DescribePhase, salting_speedup), never checked: on a loaded machine the wall clock
  // decides them, not the salting.
  r.Expect("workers.salting_unpins_the_busiest_worker", after.BusiestWorkerShare() < before.BusiestWorkerShare(),
           fmt::format("{} vs {}", Percent(after.BusiestWorkerShare()), Percent(before.BusiestWorkerShare())));
  figures["per_partition_throughput"] = {{"before_salting", PhaseJson(before)}, {"after_salting", PhaseJson(after)}};
  figures["salting_speedup"] = after.drain_s > 0 ? before.drain_s / after.drain_s : 0.0;
}

Leaving EveryoneLeaves(Demo& d, const std::string& killed) {
  auto& workers = d.fleet.workers;
  auto& live = d.fleet.live;
  DemoResult& r = d.r;
  Json& figures = d.figures;
  Leaving out;
  std::int64_t& refusals = out.refusals;
  Json& per_worker = out.per_worker;
  std::map<std::string, Json> finals;
  Mark(d, "all leave");
  for (const auto& name : std::vector<std::string>(live)) {
    const int code = workers[name]->Terminate(5s);
    if (auto f = workers[name]->Last("final")) finals[name] = *f;
    r.Expect("workers." + name + "_left_cleanly", code == 0, fmt::format("exit status {}", code));
  }
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
  return out;
}

}  // namespace shardkit::lab::workers_demo
