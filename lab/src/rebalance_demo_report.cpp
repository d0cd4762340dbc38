// The rebalance demo's report (rebalance_demo.hpp): the per-second
// timeline, each bucket's stall, the figures, the checks and the text.
#include <fmt/format.h>

#include <algorithm>

#include "rebalance_demo.hpp"

namespace shardkit::lab::rebalance_demo {
namespace {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The writes per second (JSON and text) and their totals.
struct Timeline {
  std::uint64_t ok = 0, retried = 0, failed = 0;
  std::vector<double> all_latency;
  Json json = Json::array();
  std::string text;
};

Timeline TimelineOf(const std::vector<Second>& seconds) {
  Timeline t;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    const auto& s = seconds[i];
    t.ok += s.ok;
    t.retried += s.retried;
    t.failed += s.failed;
    t.all_latency.insert(t.all_latency.end(), s.latency_ms.begin(), s.latency_ms.end());
    const double p50 = Quantile(s.latency_ms, 0.5), p99 = Quantile(s.latency_ms, 0.99),
                 max = s.latency_ms.empty() ? 0 : *std::max_element(s.latency_ms.begin(), s.latency_ms.end());
    t.json.push_back({{"second", i},
                      {"phase", s.phase},
                      {"writes_ok", s.ok},
                      {"writes_retried", s.retried},
                      {"writes_failed", s.failed},
                      {"writes_unknown", s.unknown},
                      {"p50_ms", p50},
                      {"p99_ms", p99},
                      {"max_ms", max},
                      {"reads", s.reads},
                      {"reads_retried", s.read_retried},
                      {"reads_failed", s.read_failed}});
    t.text += fmt::format("  {:>3}  {:<14} {:>5} {:>7} {:>6} {:>7}  {:>7.1f} {:>7.1f} {:>7.1f}  {:>5}\n", i, s.phase,
                          s.ok, s.retried, s.failed, s.unknown, p50, p99, max, s.reads);
  }
  return t;
}

// Each moved bucket's stall (JSON and text) and their summary.
struct Stalls {
  std::int64_t rows_moved = 0;
  double max_stall = 0;
  double median_stall = 0;
  Json json = Json::array();
  std::string text;
};

Stalls StallsOf(Lab& lab, const std::vector<MoveRecord>& moved, const std::map<std::int64_t, double>& done_at_s) {
  Stalls out;
  std::vector<double> stalls;
  for (const auto& m : moved) {
    stalls.push_back(m.stall_ms.value_or(0));
    out.rows_moved += m.rows_copied;
    out.json.push_back({{"move_id", m.move_id},
                        {"bucket", ToInt(m.bucket)},
                        {"from", ToInt(m.source)},
                        {"to", ToInt(m.target)},
                        {"rows", m.rows_copied},
                        {"copy_ms", m.copy_ms.value_or(0)},
                        {"stall_ms", m.stall_ms.value_or(0)}});
    if (const auto at = done_at_s.find(m.move_id); at != done_at_s.end()) out.json.back()["done_at_s"] = at->second;
    out.text += fmt::format("  bucket {:>2}  {} -> {}  {:>7} rows  copy {:>7.1f} ms  stall {:>6.1f} ms\n", m.bucket,
                            lab.ShardLabel(m.source), lab.ShardLabel(m.target), m.rows_copied, m.copy_ms.value_or(0),
                            m.stall_ms.value_or(0));
  }
  out.max_stall = stalls.empty() ? 0 : *std::max_element(stalls.begin(), stalls.end());
  out.median_stall = Quantile(stalls, 0.5);
  return out;
}

void Figures(DemoResult& r, const RebalanceDemoOptions& options, const ShardSets& shards, const Timeline& timeline,
             const Stalls& stalls, const MovesResult& moves, const LoadResults& load, const CheckerResult& checked,
             double total_seconds) {
  r.figures["from_shards"] = Sets(shards.from);
  r.figures["to_shards"] = Sets(shards.to);
  r.figures["writers"] = options.writers;
  r.figures["readers"] = options.readers;
  r.figures["parallel"] = options.parallel;
  r.figures["acknowledged_writes"] = load.acknowledged.size();
  r.figures["lost_writes"] = checked.lost;
  r.figures["duplicate_writes"] = checked.duplicated;
  r.figures["misplaced_writes"] = checked.misplaced;
  r.figures["incomplete_writes"] = checked.short_items;
  r.figures["unknown_writes"] = load.unknown.size();
  r.figures["unknown_writes_committed"] = checked.unknown_committed;
  r.figures["failed_writes"] = timeline.failed;
  r.figures["retried_writes"] = timeline.retried;
  r.figures["buckets_moved"] = moves.moved.size();
  r.figures["rows_moved"] = stalls.rows_moved;
  r.figures["max_stall_ms"] = stalls.max_stall;
  r.figures["median_stall_ms"] = stalls.median_stall;
  r.figures["write_p50_ms"] = Quantile(timeline.all_latency, 0.5);
  r.figures["write_p99_ms"] = Quantile(timeline.all_latency, 0.99);
  r.figures["moves_seconds"] = moves.moves_seconds;
  r.figures["there_seconds"] = moves.leg_seconds[0];
  r.figures["back_seconds"] = moves.leg_seconds[1];
  r.figures["total_seconds"] = total_seconds;
  r.figures["report_runs"] = load.report_runs.load();
  r.figures["report_wrong"] = load.report_wrong.load();
  r.figures["report_failed"] = load.report_failed.load();
  r.figures["my_orders_runs"] = load.my_orders_runs.load();
  r.figures["my_orders_wrong"] = load.my_orders_wrong.load();
  r.figures["my_orders_failed"] = load.my_orders_failed.load();
  r.figures["timeline"] = timeline.json;
  r.figures["moves"] = stalls.json;
}

void Checks(DemoResult& r, const MovesResult& moves, const LoadResults& load, const CheckerResult& checked) {
  const auto& move_failures = moves.move_failures;
  r.Expect("rebalance.moves_finished", move_failures.empty(),
           move_failures.empty() ? fmt::format("{} buckets moved there and back", moves.moved.size())
                                 : fmt::format("{} move(s) failed: {}", move_failures.size(), move_failures.front()));
  r.Expect("rebalance.no_lost_writes", checked.lost == 0,
           fmt::format("{} of {} acknowledged orders missing", checked.lost, load.acknowledged.size()));
  r.Expect("rebalance.no_duplicate_writes", checked.duplicated == 0,
           fmt::format("{} orders on more than one shard", checked.duplicated));
  r.Expect("rebalance.on_the_owning_shard", checked.misplaced == 0,
           fmt::format("{} order copies on a shard that does not own their bucket", checked.misplaced));
  r.Expect("rebalance.all_items", checked.short_items == 0,
           fmt::format("{} orders with items missing or extra", checked.short_items));
  r.Expect("rebalance.union_equals_reference", checked.shards_sum == checked.reference_sum, checked.union_detail);
  r.Expect("rebalance.report_never_double_counted", load.report_wrong == 0 && load.report_runs > 0,
           fmt::format("{} reports, {} differed from the reference, {} failed", load.report_runs.load(),
                       load.report_wrong.load(), load.report_failed.load()));
  r.Expect("rebalance.my_orders_exact", load.my_orders_wrong == 0 && load.my_orders_runs > 0,
           fmt::format("{} reads, {} differed from the reference, {} failed", load.my_orders_runs.load(),
                       load.my_orders_wrong.load(), load.my_orders_failed.load()));
  r.Expect("rebalance.no_replication_objects_left", checked.leftovers.empty() && checked.live_moves == 0,
           checked.leftovers.empty()
               ? fmt::format("none; {} live moves", checked.live_moves)
               : fmt::format("{} left, e.g. {}", checked.leftovers.size(), checked.leftovers.front()));
  r.Expect("rebalance.directory_back_to_start", checked.directory_differs == 0,
           fmt::format("{} buckets elsewhere than at the start", checked.directory_differs));
}

std::string Text(const DemoResult& r, const RebalanceDemoOptions& options, const ShardSets& shards,
                 const Timeline& timeline, const Stalls& stalls, const MovesResult& moves, const LoadResults& load,
                 const CheckerResult& checked, double total_seconds) {
  const auto& from = shards.from;
  std::string text = fmt::format(
      "Rebalance under load: shards {} -> {} -> {}; {} writer threads (orders with items, routed), {} readers "
      "(my orders, a cross-shard report)\n\n"
      "  sec  phase             ok retried failed unknown    p50 ms  p99 ms  max ms  reads\n{}\n"
      "Per bucket:\n{}\n"
      "Buckets moved: {} ({} rows); stall per bucket median {:.1f} ms, max {:.1f} ms; moves took {:.1f} s "
      "(there {:.1f} s, back {:.1f} s); total {:.1f} s\n"
      "Writes: {} acknowledged ({} after a retry), {} failed, {} outcome unknown ({} of them committed); "
      "lost {}, duplicated {}\n",
      Sets(from), Sets(shards.to), Sets(from), options.writers, options.readers, timeline.text, stalls.text,
      moves.moved.size(), stalls.rows_moved, stalls.median_stall, stalls.max_stall, moves.moves_seconds,
      moves.leg_seconds[0], moves.leg_seconds[1], total_seconds, load.acknowledged.size(), timeline.retried,
      timeline.failed, load.unknown.size(), checked.unknown_committed, checked.lost, checked.duplicated);
  for (const auto& e : load.write_errors) text += "  a failed write: " + e + "\n";
  for (const auto& e : load.read_errors) text += "  a read: " + e + "\n";
  text += "Checks:\n";
  for (const auto& c : r.checks) text += fmt::format("  {} {}: {}\n", c.ok ? "ok  " : "FAIL", c.name, c.detail);
  return text;
}

}  // namespace

void Report(DemoResult& r, Lab& lab, const RebalanceDemoOptions& options, const ShardSets& shards,
            const std::vector<Second>& seconds, const MovesResult& moves, const LoadResults& load,
            const CheckerResult& checked, double total_seconds) {
  const Timeline timeline = TimelineOf(seconds);
  const Stalls stalls = StallsOf(lab, moves.moved, moves.done_at_s);
  Figures(r, options, shards, timeline, stalls, moves, load, checked, total_seconds);
  Checks(r, moves, load, checked);
  r.text = Text(r, options, shards, timeline, stalls, moves, load, checked, total_seconds);
}

}  // namespace shardkit::lab::rebalance_demo
