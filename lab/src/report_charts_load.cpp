// The report's charts of the demos under load (report.hpp): the rebalance's
// timeline, the workers' jobs over time and their partitions before and
// after salting, the replicas demo's writes and reads through its faults.
#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>

#include "report.hpp"

namespace shardkit::lab {
namespace {

// A dashed vertical line and a label where the timeline's phase changes.
std::string PhaseMarks(const Json& timeline) {
  std::string out;
  std::string previous;
  int n = 0;  // labels alternate between two heights: phases can be a second apart
  for (const Json& s : timeline) {
    const std::string phase = s.value("phase", std::string());
    if (phase == previous) continue;
    previous = phase;
    const double at = s.value("second", 0.0);
    out += fmt::format(
        "set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#888888'\n"
        "set label {1} at {0},graph {2} left offset 0.3,0 font ',10' tc rgb '#555555'\n",
        at, GnuplotQuote(phase.empty() ? "start" : phase), n++ % 2 == 0 ? 0.96 : 0.91);
  }
  return out;
}

// The same for the workers demo's events (at_s: seconds since it started).
std::string EventMarks(const Json& events) {
  std::string out;
  int n = 0;
  for (const Json& e : events) {
    out += fmt::format(
        "set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#888888'\n"
        "set label {1} at {0},graph {2} left offset 0.3,0 font ',10' tc rgb '#555555'\n",
        e.value("at_s", 0.0), GnuplotQuote(e.value("event", std::string())), 0.97 - 0.05 * (n++ % 3));
  }
  return out;
}

// Jobs per worker per second through join, SIGKILL, SIGSTOP and the bursts.
std::optional<Chart> WorkersOverTime(const Json& f) {
  const Json& over_time = Field(f, "jobs_over_time");
  const Json& workers = Field(over_time, "workers");
  if (workers.empty() || Field(over_time, "seconds").empty()) return std::nullopt;
  std::vector<std::vector<std::string>> rows;
  for (const Json& second : over_time["seconds"]) {
    std::vector<std::string> row;
    for (const Json& cell : second) row.push_back(NumberCell(cell));
    row[0] = NumberCell(second[0].get<double>() + 0.5);  // the middle of the second
    rows.push_back(std::move(row));
  }
  std::string plot;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    plot += fmt::format("{}'workers-over-time.tsv' using 1:{} with lines lw 2 lt {} title {}", i == 0 ? "plot " : ", ",
                        i + 2, i + 1, GnuplotQuote(workers[i].get<std::string>()));
  }
  Chart chart{"workers-over-time",
              "Workers: jobs each worker process completed per second, through a join, SIGKILL, SIGSTOP/SIGCONT "
              "and the hot customer's bursts"};
  chart.width = 1000;
  chart.data = {{"workers-over-time.tsv", DataFile(rows)}};
  chart.script = EventMarks(Field(f, "timeline_events")) +
                 "set xlabel 'seconds since the demo started'\nset ylabel 'jobs completed per second'\n"
                 "set yrange [0:*]\nset offsets 0,0,graph 0.25,0\nset key outside right top vertical\n" +
                 plot;
  return chart;
}

}  // namespace

std::vector<Chart> RebalanceCharts(const Json& f) {
  if (!f.is_object() || !f.contains("timeline") || f["timeline"].empty()) return {};
  std::vector<std::vector<std::string>> seconds;
  for (const Json& s : f["timeline"]) {
    const double p99 = s.value("p99_ms", 0.0), p50 = s.value("p50_ms", 0.0), max = s.value("max_ms", 0.0);
    // Seconds without a write have no latency (a log scale cannot show 0).
    seconds.push_back({NumberCell(s.value("second", 0.0) + 0.5), NumberCell(Field(s, "writes_ok")),
                       NumberCell(Field(s, "reads")), p50 > 0 ? NumberCell(p50) : "-", p99 > 0 ? NumberCell(p99) : "-",
                       max > 0 ? NumberCell(max) : "-", NumberCell(Field(s, "writes_failed"))});
  }
  std::vector<std::vector<std::string>> stalls;
  for (const Json& m : Field(f, "moves")) {
    if (!m.contains("done_at_s")) continue;
    stalls.push_back(
        {NumberCell(m["done_at_s"]), NumberCell(Field(m, "stall_ms")), fmt::format("b{}", m.value("bucket", 0))});
  }
  if (stalls.empty()) stalls.push_back({"-", "-", "-"});  // an older document: no marks
  const std::string marks = PhaseMarks(f["timeline"]);
  Chart load{"rebalance-load", fmt::format("Rebalance under load: writes and reads per second, each moved bucket's "
                                           "stall marked ({} writers, {} readers)",
                                           f.value("writers", 0), f.value("readers", 0))};
  load.width = 1000;
  load.data = {{"rebalance-seconds.tsv", DataFile(seconds)}, {"rebalance-stalls.tsv", DataFile(stalls)}};
  load.script = marks +
                "set xlabel 'seconds since the load started'\nset ylabel 'operations per second'\n"
                "set y2label 'stall of the bucket''s writes (ms)'\nset ytics nomirror\nset y2tics\n"
                "set yrange [0:*]\nset y2range [0:*]\nset offsets 0,0,graph 0.2,0\n"
                "set key outside right top vertical\n"
                "plot 'rebalance-seconds.tsv' using 1:2 with linespoints pt 7 ps 0.4 lw 2 lt 1 "
                "title 'writes acknowledged/s', "
                "'' using 1:3 with linespoints pt 7 ps 0.4 lw 2 lt 3 title 'reads/s', "
                "'' using 1:7 with impulses lw 3 lt 4 title 'failed writes/s', "
                "'rebalance-stalls.tsv' using 1:2 axes x1y2 with impulses lw 2 lt 2 "
                "title 'bucket stall (ms, right)', "
                "'' using 1:2 axes x1y2 with points pt 7 ps 0.6 lt 2 notitle";
  Chart latency{"rebalance-latency", "Rebalance under load: write latency per second (log scale)"};
  latency.width = 1000;
  latency.script = marks +
                   "set xlabel 'seconds since the load started'\nset ylabel 'write latency (ms, log scale)'\n"
                   "set logscale y\nset format y '%g'\nset offsets 0,0,graph 0.2,0\n"
                   "set key outside right top vertical\n"
                   "plot 'rebalance-seconds.tsv' using 1:4 with lines lw 2 lt 1 title 'p50', "
                   "'' using 1:5 with lines lw 2 lt 2 title 'p99', '' using 1:6 with lines lw 1 lt 4 title 'max', "
                   "'rebalance-stalls.tsv' using 1:2 with points pt 9 ps 0.9 lt 5 title 'bucket stall (ms)'";
  return {load, latency};
}

std::vector<Chart> WorkersCharts(const Json& f) {
  if (!f.is_object() || !f.contains("per_partition_throughput")) return {};
  const Json& phases = f["per_partition_throughput"];
  if (!phases.contains("before_salting") || !phases.contains("after_salting")) return {};
  const Json& before = phases["before_salting"];
  const Json& after = phases["after_salting"];
  // Jobs, not each partition's own jobs per second: a partition with a few
  // jobs close together has a high rate that says nothing.
  std::map<int, std::pair<std::string, std::string>> rates;
  for (const Json& p : Field(before, "partitions")) {
    rates[p.value("partition", 0)].first = NumberCell(Field(p, "jobs"));
  }
  for (const Json& p : Field(after, "partitions")) {
    rates[p.value("partition", 0)].second = NumberCell(Field(p, "jobs"));
  }
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rates.size());
  for (const auto& [partition, r] : rates) rows.push_back({std::to_string(partition), r.first, r.second});
  std::string hot;
  for (const Json& p : Field(before, "hot_partitions")) {
    hot += fmt::format(
        "set label 'the hot customer, unsalted' at {},graph 0.95 right offset -1,0 font ',10' tc rgb '#1f77b4'\n",
        p.get<int>());
  }
  Chart partitions{"workers-partitions",
                   fmt::format("Workers: jobs per partition in a burst with a hot customer, unsalted vs salted over {} "
                               "partitions (the hot customer's jobs: {:.1f}/s vs {:.1f}/s)",
                               Field(after, "hot_partitions").size(), before.value("hot_jobs_per_s", 0.0),
                               after.value("hot_jobs_per_s", 0.0))};
  partitions.width = 900;
  partitions.data = {{"workers-partitions.tsv", DataFile(rows)}};
  partitions.script = hot +
                      "set style fill solid 0.85 noborder\nset boxwidth 0.4\nset xrange [-1:64]\nset yrange [0:*]\n"
                      "set xtics 0,4,63\nset xlabel 'partition'\nset ylabel 'jobs in the burst'\n"
                      "set offsets 0,0,graph 0.1,0\nset key top right\n"
                      "plot 'workers-partitions.tsv' using ($1-0.2):2 with boxes lt 1 title 'before salting', "
                      "'' using ($1+0.2):3 with boxes lt 2 title 'after salting'";

  std::map<std::string, std::pair<std::string, std::string>> jobs;
  for (const auto& [w, n] : Field(before, "jobs_per_worker").items()) jobs[w].first = NumberCell(n);
  for (const auto& [w, n] : Field(after, "jobs_per_worker").items()) jobs[w].second = NumberCell(n);
  std::vector<std::vector<std::string>> worker_rows;
  worker_rows.reserve(jobs.size());
  for (const auto& [w, n] : jobs) worker_rows.push_back({w, n.first, n.second});
  Chart workers{"workers-jobs", "Workers: jobs each worker ran in the hot burst, before and after salting"};
  workers.height = 360;
  workers.data = {{"workers-jobs.tsv", DataFile(worker_rows)}};
  workers.script =
      "set style data histogram\nset style histogram clustered gap 1\n"
      "set style fill solid 0.85 border rgb '#333333'\nset yrange [0:*]\n"
      "set xlabel 'worker process'\nset ylabel 'jobs run'\nset key top right\n"
      "plot 'workers-jobs.tsv' using 2:xtic(1) lt 1 title 'before salting', '' using 3 lt 2 title 'after salting'";
  std::vector<Chart> charts{partitions, workers};
  if (auto over_time = WorkersOverTime(f)) charts.insert(charts.begin(), std::move(*over_time));
  return charts;
}

std::vector<Chart> ReplicasCharts(const Json& f) {
  const Json& ticks = Field(f, "per_half_second");
  if (ticks.empty()) return {};
  std::vector<std::vector<std::string>> rows;
  for (const Json& t : ticks) {
    // Per second, at the middle of its half second.
    std::vector<std::string> row{NumberCell(t[0].get<double>() + 0.25)};
    for (std::size_t i = 1; i < t.size(); ++i) row.push_back(NumberCell(2.0 * t[i].get<double>()));
    rows.push_back(std::move(row));
  }
  const std::string marks = EventMarks(Field(f, "timeline_events"));
  const std::string axes =
      "set xlabel 'seconds since the demo started'\nset yrange [0:*]\nset offsets 0,0,graph 0.25,0\n"
      "set key outside right top vertical\n";
  Chart writes{"replicas-writes",
               fmt::format("Replicas: routed writes per second through a paused replay, a killed primary and its "
                           "forced failover ({} acknowledged, {} lost)",
                           NumberCell(Field(f, "acknowledged_writes")), NumberCell(Field(f, "lost_writes")))};
  writes.width = 1000;
  writes.data = {{"replicas-writes.tsv", DataFile(rows)}};
  writes.script = marks + axes +
                  "set ylabel 'writes per second'\n"
                  "plot 'replicas-writes.tsv' using 1:2 with lines lw 2 lt 1 title 'acknowledged', "
                  "'' using 1:3 with lines lw 2 lt 7 title 'failed or unknown'";
  Chart reads{"replicas-reads",
              fmt::format("Replicas: each write read back with its token, replica preferred: where the reads ran "
                          "({} stale)",
                          NumberCell(Field(f, "stale_reads")))};
  reads.width = 1000;
  reads.data = {{"replicas-reads.tsv", DataFile(rows)}};
  reads.script = marks + axes +
                 "set ylabel 'token reads per second'\n"
                 "plot 'replicas-reads.tsv' using 1:4 with lines lw 2 lt 2 title 'on a replica', "
                 "'' using 1:5 with lines lw 2 lt 4 title 'on the primary'";
  return {writes, reads};
}

}  // namespace shardkit::lab
