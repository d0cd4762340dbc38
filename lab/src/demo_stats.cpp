// Demo 7: the run's cross-shard query statistics. A cross-shard query is as
// slow as its slowest shard, and a growing number of them hints at a wrong
// shard key (the Bookstore case: measure and limit them).
#include <fmt/format.h>

#include <map>

#include "demos.hpp"
#include "shardkit/pool/pool.hpp"

namespace shardkit::lab {

DemoResult RunStats(Lab& lab) {
  DemoResult r;
  r.name = "stats";
  const ScatterStats stats = lab.Scatter().Stats();
  const auto records = lab.Records();

  const double mean_fanout =
      stats.scatters + stats.single_shard > 0
          ? static_cast<double>(stats.shard_requests) / static_cast<double>(stats.scatters + stats.single_shard)
          : 0;
  const std::chrono::microseconds mean_slowest{stats.scatters + stats.single_shard > 0
                                                   ? stats.total_slowest.count() /
                                                         static_cast<std::int64_t>(stats.scatters + stats.single_shard)
                                                   : 0};
  r.text += fmt::format(
      "cross-shard queries this run: {} (and {} on a single shard); fan-out {:.1f} shards on average, {} at most; "
      "{} rows received; failed {}, partial {}\n",
      stats.scatters, stats.single_shard, mean_fanout, stats.max_fanout,
      Thousands(static_cast<std::int64_t>(stats.rows)), stats.failed, stats.partial);
  r.text += fmt::format("waiting for the slowest shard: {} ms on average, {} ms at most, {} ms in all\n",
                        Ms(mean_slowest), Ms(stats.max_slowest), Ms(stats.total_slowest));

  TextTable table(
      {{"query", TextTable::Align::kLeft}, {"shards"}, {"rows"}, {"ms"}, {"slowest shard", TextTable::Align::kLeft}});
  std::map<ShardId, int> slowest_count;
  Json queries = Json::array();
  for (const auto& rec : records) {
    std::string slowest = "-";
    if (rec.slowest_shard) {
      slowest = fmt::format("{} ({} ms)", lab.ShardLabel(*rec.slowest_shard), Ms(rec.slowest_elapsed));
      ++slowest_count[*rec.slowest_shard];
    }
    table.AddRow({rec.label, std::to_string(rec.fanout), Thousands(static_cast<std::int64_t>(rec.rows)),
                  Ms(rec.elapsed), slowest});
    Json q{{"label", rec.label}, {"fanout", rec.fanout}, {"rows", rec.rows}, {"ms", MsValue(rec.elapsed)}};
    if (rec.slowest_shard) {
      q["slowest_shard"] = *rec.slowest_shard;
      q["slowest_ms"] = MsValue(rec.slowest_elapsed);
    }
    queries.push_back(std::move(q));
  }
  if (!records.empty()) r.text += table.Render();
  std::string tally;
  for (const auto& [shard, n] : slowest_count)
    tally += fmt::format("{}{} {} time{}", tally.empty() ? "" : ", ", lab.ShardLabel(shard), n, n == 1 ? "" : "s");
  if (!tally.empty()) r.text += "slowest shard: " + tally + "\n";

  TextTable pools({{"pool", TextTable::Align::kLeft},
                   {"acquired"},
                   {"waited"},
                   {"connects"},
                   {"timeouts"},
                   {"broken"},
                   {"in use"},
                   {"idle"},
                   {"wait p99 ms"}});
  Json pool_json = Json::array();
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    const PoolStats p = lab.Resolver().Pool(s).Stats();
    pools.AddRow({lab.ShardLabel(s), std::to_string(p.acquired), std::to_string(p.waited), std::to_string(p.connects),
                  std::to_string(p.timeouts), std::to_string(p.broken), std::to_string(p.in_use),
                  std::to_string(p.idle), Ms(p.acquire_wait_p99)});
    pool_json.push_back({{"shard", s},
                         {"acquired", p.acquired},
                         {"waited", p.waited},
                         {"connects", p.connects},
                         {"timeouts", p.timeouts},
                         {"broken", p.broken},
                         {"in_use", p.in_use},
                         {"idle", p.idle},
                         {"acquire_wait_p99_ms", MsValue(p.acquire_wait_p99)}});
  }
  r.text += pools.Render();
  r.Expect("stats.no_failed_scatters", stats.failed == 0 && stats.partial == 0,
           fmt::format("{} failed, {} partial", stats.failed, stats.partial));
  r.figures = {{"scatters", stats.scatters},
               {"single_shard", stats.single_shard},
               {"shard_requests", stats.shard_requests},
               {"mean_fanout", mean_fanout},
               {"max_fanout", stats.max_fanout},
               {"rows", stats.rows},
               {"bytes", stats.bytes},
               {"failed", stats.failed},
               {"partial", stats.partial},
               {"mean_slowest_ms", MsValue(mean_slowest)},
               {"max_slowest_ms", MsValue(stats.max_slowest)},
               {"total_slowest_ms", MsValue(stats.total_slowest)},
               {"queries", queries},
               {"pools", pool_json}};
  return r;
}

std::function<DemoResult(Lab&)> DemoByName(const std::string& name) {
  if (name == "routing") return RunRouting;
  if (name == "shard-key") return RunShardKey;
  if (name == "ids") return RunIds;
  if (name == "top10") return RunTop10;
  if (name == "category-avg") return RunCategoryAvg;
  if (name == "percentiles") return RunPercentiles;
  if (name == "third-shard") return RunThirdShard;
  if (name == "workers") return static_cast<DemoResult (*)(Lab&)>(RunWorkers);
  if (name == "stats") return RunStats;
  if (name == "rebalance") return static_cast<DemoResult (*)(Lab&)>(RunRebalance);
  if (name == "replicas") return static_cast<DemoResult (*)(Lab&)>(RunReplicas);
  return nullptr;
}

}  // namespace shardkit::lab
