// Demo 9 (the Bookstore case's exercise): rebalance under load. From the shards that
// hold the buckets now to those plus one empty shard, and back, while writer
// threads place orders with items through the routed write API (shardkit
// IDs) and reader threads ask "my orders" and a cross-shard report. Then a
// checker in the Jepsen style: every acknowledged order exists exactly once,
// with all its items, on the shard that owns its bucket; outcome-unknown
// writes are reported apart; the union of the shards equals the reference;
// the report never counted a bucket twice or missed one. The parts:
// rebalance_demo.hpp.
#include <fmt/format.h>

#include <atomic>
#include <thread>

#include "demos.hpp"
#include "rebalance_demo.hpp"
#include "shardkit/routing/directory_watcher.hpp"

namespace shardkit::lab {

using namespace std::chrono_literals;
using rebalance_demo::Clock;

DemoResult RunRebalance(Lab& lab) {
  RebalanceDemoOptions options;
  // Progress on stderr, so it does not disturb --json on stdout.
  options.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  return RunRebalance(lab, options);
}

DemoResult RunRebalance(Lab& lab, const RebalanceDemoOptions& options) {
  DemoResult r;
  r.name = "rebalance";
  const ClusterConfig& config = lab.Config();
  const std::function<void(const std::string&)> say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  if (!config.catalog_dsn) {
    r.Expect("rebalance.ran", false, "the config has no [catalog] dsn: moves keep their journal there");
    r.text = "error: the config has no [catalog] dsn\n";
    return r;
  }
  BucketShardResolver& resolver = lab.Resolver();
  DirectoryWatcherOptions watcher_options;
  watcher_options.check_interval = 200ms;
  DirectoryWatcher watcher{resolver, *config.catalog_dsn, watcher_options};
  watcher.RefreshNow();
  const BucketDirectory start_directory = *resolver.Directory();

  const auto shards = rebalance_demo::GrowthShards(lab, start_directory);
  if (!shards) {
    const std::string why = fmt::format(
        "every shard of the config holds buckets; the demo needs an empty one to grow to (lab/cluster add-shard)");
    r.Expect("rebalance.ran", false, why);
    r.text = "error: " + why + "\n";
    return r;
  }
  const rebalance_demo::GroundTruth truth = rebalance_demo::ReadGroundTruth(lab);
  if (truth.sample.empty()) {
    r.Expect("rebalance.ran", false, "no customers loaded: run lab/run load first");
    r.text = "error: no customers loaded\n";
    return r;
  }
  const OrderIds ids = ClaimOrderIds(*config.catalog_dsn, "bookstore-lab rebalance demo", 1001);

  RoutedTransactions routed{resolver, &watcher};
  ScatterGather& scatter = lab.Scatter();
  scatter.FollowDirectory(&watcher);
  const auto started = Clock::now();
  rebalance_demo::Recorder recorder{started};
  std::atomic<bool> stop{false};
  rebalance_demo::LoadResults results;
  rebalance_demo::Load load{lab, options, truth, *ids.ids, routed, scatter, recorder, stop, results};
  std::vector<std::thread> threads = rebalance_demo::StartLoad(load);

  // The moves: there, a pause, back.
  const rebalance_demo::MovesResult moves = rebalance_demo::MoveThereAndBack(lab, options, *shards, recorder, say);
  recorder.Phase("after");
  std::this_thread::sleep_for(options.settle);
  stop = true;
  for (auto& t : threads) t.join();
  scatter.FollowDirectory(nullptr);
  const double total_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  watcher.RefreshNow();
  const BucketDirectory final_directory = *resolver.Directory();
  const rebalance_demo::CheckerResult checked =
      rebalance_demo::CheckRebalance(lab, start_directory, final_directory, results);
  rebalance_demo::Report(r, lab, options, *shards, recorder.Seconds(), moves, results, checked, total_seconds);
  // The other demos (and the next run) expect the loaded data.
  const std::int64_t left = rebalance_demo::RemoveDemoOrders(lab, results);
  r.Expect("rebalance.demo_orders_removed", left == 0, fmt::format("{} of the demo's orders left", left));
  return r;
}

}  // namespace shardkit::lab
