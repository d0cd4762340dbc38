// The rebalance demo's moves (rebalance_demo.hpp): to one more shard and
// back, with ApplyRebalance, while the load runs.
#include <fmt/format.h>

#include <mutex>
#include <thread>

#include "rebalance_demo.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::lab::rebalance_demo {

std::string Sets(const std::vector<ShardId>& shards) {
  std::string out;
  for (const ShardId s : shards) out += fmt::format("{}{}", out.empty() ? "" : ",", ToInt(s));
  return "{" + out + "}";
}

std::optional<ShardSets> GrowthShards(Lab& lab, const BucketDirectory& directory) {
  ShardSets shards;
  std::optional<ShardId> extra;
  for (int s = 0; s < lab.ShardCount(); ++s) {
    if (BucketSet::Of(directory, ShardId{s}).Size() > 0) {
      shards.from.push_back(ShardId{s});
    } else if (!extra) {
      extra = ShardId{s};
    }
  }
  if (!extra) return std::nullopt;
  shards.to = shards.from;
  shards.to.push_back(*extra);
  return shards;
}

MovesResult MoveThereAndBack(Lab& lab, const RebalanceDemoOptions& options, const ShardSets& shards, Recorder& recorder,
                             const std::function<void(const std::string&)>& say) {
  const ClusterConfig& config = lab.Config();
  BucketShardResolver& resolver = lab.Resolver();
  const std::vector<ShardId>& from = shards.from;
  const std::vector<ShardId>& to = shards.to;
  MovesResult out;
  RebalanceOptions ro;
  ro.parallel = options.parallel;
  ro.move.cleanup_grace = options.cleanup_grace;
  std::mutex done_mutex;  // the moves report from their own threads
  ro.on_progress = [&](const RebalanceProgress& p) {
    if (p.move.state == MoveState::kDone) {
      {
        std::lock_guard lock(done_mutex);
        out.done_at_s[p.move.move_id] = recorder.Offset(Clock::now());
      }
      say(fmt::format("  bucket {:>2} {} -> {} done ({} of {}): {} rows, stall {:.1f} ms", p.move.bucket,
                      lab.ShardLabel(p.move.source), lab.ShardLabel(p.move.target), p.finished, p.total,
                      p.move.rows_copied, p.move.stall_ms.value_or(0)));
    }
  };
  std::this_thread::sleep_for(options.settle);  // load before the moves, for the timeline
  const auto moves_started = Clock::now();
  for (int leg = 0; leg < 2 && out.move_failures.empty(); ++leg) {
    const auto& target = leg == 0 ? to : from;
    recorder.Phase(leg == 0 ? fmt::format("to {}", Sets(to)) : fmt::format("back to {}", Sets(from)));
    auto plan = PlanRebalance(*resolver.Directory(), target);
    if (leg == 0 && options.max_moves > 0 && plan.moves.size() > static_cast<std::size_t>(options.max_moves)) {
      plan.moves.resize(static_cast<std::size_t>(options.max_moves));
    }
    say(fmt::format("rebalance to shards {}: {} moves", Sets(target), plan.moves.size()));
    const auto leg_start = Clock::now();
    try {
      const RebalanceReport report = ApplyRebalance(config, plan, ro);
      out.moved.insert(out.moved.end(), report.moves.begin(), report.moves.end());
      out.move_failures.insert(out.move_failures.end(), report.failures.begin(), report.failures.end());
      for (const auto& m : report.not_started) {
        out.move_failures.push_back(fmt::format("bucket {} {} -> {} not started", m.bucket, m.from, m.to));
      }
    } catch (const std::exception& e) {
      out.move_failures.emplace_back(e.what());
    }
    out.leg_seconds[static_cast<std::size_t>(leg)] = std::chrono::duration<double>(Clock::now() - leg_start).count();
    if (leg == 0) {
      recorder.Phase("between");
      std::this_thread::sleep_for(options.settle);
    }
  }
  out.moves_seconds = std::chrono::duration<double>(Clock::now() - moves_started).count();
  return out;
}

}  // namespace shardkit::lab::rebalance_demo
