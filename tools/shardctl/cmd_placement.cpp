// shardctl placement-sim --nodes 4 --add 1 [--vnodes 160] [--keys 100000] [--from-cluster]
//
// Places the keys on N nodes, then on N + add, with every strategy of
// shardkit/resharding/placement.hpp, and prints per strategy the fraction of keys that
// moved and the most/least loaded node ratio — the ring with 1 virtual node
// next to 16, V and 256 (Cassandra's tokens), and the bucket directory's
// fewest-moves plan.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/placement.hpp"
#include "shardkit/routing/resolver.hpp"

namespace {

struct SimArgs {
  int nodes = 4;
  int add = 1;
  int vnodes = 160;
  int keys = 100'000;
  bool from_cluster = false;
};

// Real customer ids from the shards' customers tables (at most `limit`).
std::vector<std::int64_t> ClusterKeys(const CliContext& context, int limit) {
  auto resolver = context.MakeResolver();
  std::vector<std::int64_t> keys;
  for (const shardkit::ShardId s : shardkit::FirstShards(resolver->ShardCount())) {
    auto lease = resolver->Pool(s).Acquire();
    pqxx::read_transaction tx{*lease};
    for (const auto& row : tx.exec_params("SELECT customer_id FROM customers ORDER BY customer_id LIMIT $1", limit)) {
      keys.push_back(row[0].as<std::int64_t>());
    }
  }
  std::sort(keys.begin(), keys.end());
  if (static_cast<int>(keys.size()) > limit) keys.resize(static_cast<std::size_t>(limit));
  if (keys.empty()) {
    throw shardkit::Error(
        "placement-sim --from-cluster: the shards hold no customers; load the lab data "
        "(lab/run load) or leave out --from-cluster");
  }
  return keys;
}

std::string Ratio(double r) {
  return std::isinf(r) ? "inf (a node gets nothing)" : fmt::format("{:.2f}", r);
}

}  // namespace

void AddPlacementCommand(CLI::App& app, CliContext& context) {
  auto* sim = app.add_subcommand("placement-sim",
                                 "compare placement strategies: keys moved and load spread when nodes are added");
  auto args = std::make_shared<SimArgs>();
  sim->add_option("--nodes", args->nodes, "nodes before (default 4)")->check(CLI::Range(1, 4096));
  sim->add_option("--add", args->add, "nodes added (default 1)")->check(CLI::Range(0, 4096));
  sim->add_option("--vnodes", args->vnodes, "virtual nodes per node of the main ring (default 160)")
      ->check(CLI::Range(1, 65536));
  sim->add_option("--keys", args->keys, "keys to place: customer ids 1..N (default 100000)")
      ->check(CLI::Range(1, 50'000'000));
  sim->add_flag("--from-cluster", args->from_cluster, "use the customer ids stored on the shards (up to --keys)");
  sim->final_callback([&context, args] {
    shardkit::PlacementSimOptions o;
    o.nodes = args->nodes;
    o.add = args->add;
    o.ring_vnodes = {1, 16, args->vnodes, 256};
    std::sort(o.ring_vnodes.begin(), o.ring_vnodes.end());
    o.ring_vnodes.erase(std::unique(o.ring_vnodes.begin(), o.ring_vnodes.end()), o.ring_vnodes.end());
    std::string source;
    if (args->from_cluster) {
      o.keys = ClusterKeys(context, args->keys);
      source = fmt::format("{} customer ids stored on the shards", o.keys.size());
    } else {
      o.keys.resize(static_cast<std::size_t>(args->keys));
      for (std::size_t i = 0; i < o.keys.size(); ++i) o.keys[i] = static_cast<std::int64_t>(i + 1);
      source = fmt::format("customer ids 1..{}", args->keys);
    }
    const auto rows = shardkit::SimulatePlacement(o);
    if (context.json) {
      nlohmann::json out = {{"nodes", o.nodes},
                            {"add", o.add},
                            {"keys", o.keys.size()},
                            {"source", source},
                            {"strategies", nlohmann::json::array()}};
      for (const auto& r : rows) {
        auto finite = [](double v) { return std::isinf(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
        out["strategies"].push_back({{"strategy", shardkit::Name(r.strategy)},
                                     {"label", r.Label()},
                                     {"vnodes", r.vnodes},
                                     {"moved_fraction", r.moved_fraction},
                                     {"expected_moved", r.expected_moved},
                                     {"max_min_before", finite(r.max_min_before)},
                                     {"max_min_after", finite(r.max_min_after)},
                                     {"load_after", r.load_after}});
      }
      fmt::print("{}\n", out.dump(2));
      return;
    }
    fmt::print("placing {} on {} nodes, then on {} ({} added)\n\n", source, o.nodes, o.nodes + o.add, o.add);
    std::size_t width = 8;
    for (const auto& r : rows) width = std::max(width, r.Label().size());
    fmt::print("  {:<{}}  {:>10}  {:>10}  {:>14}  {:>14}\n", "strategy", width, "keys moved", "theory",
               "max/min before", "max/min after");
    for (const auto& r : rows) {
      fmt::print("  {:<{}}  {:>9.1f}%  {:>9.1f}%  {:>14}  {:>14}\n", r.Label(), width, r.moved_fraction * 100,
                 r.expected_moved * 100, Ratio(r.max_min_before), Ratio(r.max_min_after));
    }
    const auto table = std::find_if(rows.begin(), rows.end(), [](const shardkit::PlacementSimRow& r) {
      return r.strategy == shardkit::PlacementStrategy::kBucketTable;
    });
    fmt::print("\nmodulo moves almost everyone; a ring with one point per node is lumpy, with {} it evens out;\n",
               args->vnodes);
    if (table != rows.end()) {
      fmt::print(
          "the bucket directory moves only the {} of {} buckets the new node{} take{} (the fewest possible),\n"
          "and its table says where everything is.\n",
          static_cast<int>(std::lround(table->expected_moved * shardkit::kBucketCount)), shardkit::kBucketCount,
          o.add == 1 ? "" : "s", o.add == 1 ? "s" : "");
    }
  });
}
