// What the workers demo's phases did, measured from the jobs table and the
// leases, and the run's totals (workers_demo.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <string>

#include "workers_demo.hpp"

namespace shardkit::lab::workers_demo {

void Mark(Demo& d, const std::string& event) {
  const std::chrono::duration<double> at = std::chrono::system_clock::now() - d.started;
  d.figures["timeline_events"].push_back({{"event", event}, {"at_s", at.count()}});
}

void JobsOverTime(Demo& d) {
  const double zero = std::chrono::duration<double>(d.started.time_since_epoch()).count();
  std::map<int, std::map<std::string, std::int64_t>> per_second;
  std::set<std::string> workers;
  for (const ShardId shard : FirstShards(d.lab.ShardCount())) {
    auto lease = d.lab.Resolver().Pool(shard).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row :
         tx.exec_params("SELECT owner, floor(extract(epoch FROM done_at) - $2)::int, count(*) FROM shardkit_jobs "
                        "WHERE queue = $1 AND state = 'done' AND owner IS NOT NULL AND done_at >= to_timestamp($2) "
                        "GROUP BY 1, 2",
                        d.queue_name, zero)) {
      const auto worker = row[0].as<std::string>();
      workers.insert(worker);
      per_second[row[1].as<int>()][worker] += row[2].as<std::int64_t>();
    }
  }
  Json seconds = Json::array();
  if (!per_second.empty()) {
    // Every second up to the last, 0 where a worker completed nothing (a
    // killed or frozen one): the gap is what the chart shows.
    for (int second = 0; second <= per_second.rbegin()->first; ++second) {
      Json row = Json::array({second});
      const auto it = per_second.find(second);
      for (const auto& w : workers) {
        const bool any = it != per_second.end() && it->second.contains(w);
        row.push_back(any ? it->second.at(w) : 0);
      }
      seconds.push_back(row);
    }
  }
  d.figures["jobs_over_time"] = {{"workers", workers}, {"seconds", seconds}};
}

PhaseStats MeasurePhase(Lab& lab, const std::string& queue, std::int64_t first_job, std::int64_t last_job) {
  PhaseStats s;
  double first_created = 1e300, last_done = 0, hot_first = 1e300, hot_last = 0;
  std::map<int, std::pair<double, double>> spans;  // partition -> first taken, last done (epoch s)
  for (const ShardId shard : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(shard).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row :
         tx.exec_params("SELECT partition, coalesce(owner, ''), count(*), extract(epoch FROM min(created))::float8, "
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
  return fmt::format(
      "    {} jobs drained in {:.2f} s; customer {}'s {} jobs done at {:.0f}/s, in partition{} {}\n"
      "    share of the jobs per worker: {}\n",
      s.jobs, s.drain_s, kHotCustomer, s.hot_jobs, s.HotJobsPerSecond(), s.hot_partitions.size() == 1 ? "" : "s", hot,
      workers);
}

std::map<std::string, std::vector<int>> Holdings(const PartitionGroupView& g) {
  std::map<std::string, std::vector<int>> out;
  for (const auto& p : g.partitions) {
    if (p.owner && !p.expired) out[*p.owner].push_back(p.partition);
  }
  return out;
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

void TotalsFigures(Demo& d, const JobCheck& jobs, std::size_t orders, const Leaving& leaving, double handoff_pause_ms) {
  const WorkerSettings& ws = d.ws;
  Json& figures = d.figures;
  const double rate = d.options.orders_per_second;
  figures["jobs"] = {{"enqueued", jobs.enqueued}, {"done", jobs.done}, {"orders", orders}};
  figures["double_processed"] = jobs.doubled;
  figures["lost"] = jobs.lost;
  figures["stale_refused"] = leaving.refusals;
  figures["guard_skips"] = jobs.guard_skips;
  figures["handoff_pause_ms"] = handoff_pause_ms;
  figures["settings"] = {{"lease_ms", ws.lease.count()},
                         {"margin_ms", ws.margin.count()},
                         {"renew_ms", ws.renew.count()},
                         {"claim_ms", ws.claim.count()},
                         {"handoff_pause_ms", ws.handoff_pause.count()},
                         {"work_ms", ws.work.count()},
                         {"orders_per_second", rate},
                         {"hot_burst_orders", d.options.hot_burst_orders}};
}

}  // namespace shardkit::lab::workers_demo
