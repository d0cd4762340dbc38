// demos.hpp — the Bookstore case's experiments, each a function over a loaded Lab.
//
// Every demo prints in the Bookstore case's format, records its figures, and checks
// its answers against the unsharded reference server:
//
//   shardkit::lab::Lab lab{config};
//   auto top = shardkit::lab::RunTop10(lab);   // exact vs shortcut vs TPUT
//   top.Expect(...); top.text; top.figures["exact"]["rows"];
//
// All demos assume the data was loaded (load.hpp) and use kLabNow as "now".
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "lab.hpp"
#include "shardkit/routing/directory.hpp"
#include "worker_process.hpp"

namespace shardkit::lab {

// 1. "my orders" for 4242, 4243 and 77777 through the resolver, on fresh
//    pools (first connection to each shard) and again pooled.
[[nodiscard]] DemoResult RunRouting(Lab& lab);
// 2. Orders per year and in the last 30 days per shard (hash by
//    customer_id), and the same orders range-sharded by year.
[[nodiscard]] DemoResult RunShardKey(Lab& lab);
// 3. Identity columns collide across shards; shardkit IDs do not.
[[nodiscard]] DemoResult RunIds(Lab& lab);
// 4. The wrong top-10: exact (all partials), per-shard shortcut, TPUT.
[[nodiscard]] DemoResult RunTop10(Lab& lab);
// 5. Average order amount per category from per-shard SUM and COUNT.
[[nodiscard]] DemoResult RunCategoryAvg(Lab& lab);
// 10. Median and p95 of order amount per category and distinct books sold,
//     exactly by distributed selection, next to the reference, a gather of
//     every value and the sketches' estimates.
[[nodiscard]] DemoResult RunPercentiles(Lab& lab);
// 6. A third shard: the fewest bucket moves vs customer_id % shard count.
[[nodiscard]] DemoResult RunThirdShard(Lab& lab);
// 7. Worker sharding (the worker-sharding case): worker processes share the 64 partitions
//    by leases with fencing tokens; join, SIGKILL, SIGSTOP past the lease,
//    a hot customer and salting; a checker over every job and effect.
struct WorkersDemoOptions {
  // The bookstore-lab binary the workers run (`bookstore-lab worker ...`):
  // $BOOKSTORE_LAB_EXE, else this process's own executable.
  std::string executable;
  std::filesystem::path work_dir = std::filesystem::temp_directory_path();
  std::uint64_t seed = 1;
  double orders_per_second = 150;  // the steady load, 3 jobs per order
  int hot_burst_orders = 600;      // per hot phase, 40% from one customer
  WorkerSettings settings;
};
[[nodiscard]] DemoResult RunWorkers(Lab& lab);
[[nodiscard]] DemoResult RunWorkers(Lab& lab, const WorkersDemoOptions& options);
// 9. Rebalance under load (the Bookstore case's exercise): to one more shard and
//    back while writers place orders through the routed write API and
//    readers ask "my orders" and a cross-shard report; a per-second
//    timeline, each bucket's stall, and a checker (nothing lost, nothing
//    duplicated, the union of the shards equals the reference). Needs a
//    shard that holds no bucket (lab/cluster add-shard). Not part of `all`.
struct RebalanceDemoOptions {
  int writers = 4;
  int readers = 2;
  double orders_per_second_per_writer = 50;
  int parallel = 2;
  std::chrono::milliseconds cleanup_grace{500};
  std::chrono::milliseconds settle{1500};  // load before, between and after the moves
  int max_moves = 0;                       // > 0: only the first N moves of the plan there (and those back); tests
  std::function<void(const std::string&)> progress;  // a line per finished move
};
[[nodiscard]] DemoResult RunRebalance(Lab& lab);
[[nodiscard]] DemoResult RunRebalance(Lab& lab, const RebalanceDemoOptions& options);
// 11. Replicas under load: writers place orders through routed writes and
//     read each back with its read token on a replica (read-your-writes), a
//     reporter counts every order on the replicas with the token of all the
//     acknowledged ones; the first shard's replica pauses its replay (reads
//     fall back to the primary), then the last shard's primary is killed
//     (SIGKILL) and its replica promoted (topology/failover.hpp); a
//     Jepsen-style checker over the history: stale reads, lost writes, the
//     failover's outage. Needs a replica per shard and a catalog; it kills
//     a server, so lab/run replicas runs it on a cluster of its own. Not
//     part of `all`.
struct ReplicasDemoOptions {
  int writers = 4;
  std::chrono::milliseconds phase{2000};             // each phase: steady, replay paused, steady, failover, after
  std::function<void(const std::string&)> progress;  // a line per phase
};
[[nodiscard]] DemoResult RunReplicas(Lab& lab);
[[nodiscard]] DemoResult RunReplicas(Lab& lab, const ReplicasDemoOptions& options);
// 8. The run's cross-shard query statistics.
[[nodiscard]] DemoResult RunStats(Lab& lab);

// The demo of that name (DemoNames()), or nullptr.
[[nodiscard]] std::function<DemoResult(Lab&)> DemoByName(const std::string& name);

// Shared SQL: the last 30 days' window start as a timestamptz parameter.
[[nodiscard]] std::string WindowStartParam();

}  // namespace shardkit::lab
