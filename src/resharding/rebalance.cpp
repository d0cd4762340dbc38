#include "shardkit/resharding/rebalance.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "pg/server_message.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;

using detail::FirstLine;

}  // namespace

std::int64_t RebalancePlan::TotalRows() const noexcept {
  std::int64_t total = 0;
  for (const auto& m : moves) total += m.rows;
  return total;
}

RebalancePlan PlanRebalance(const BucketDirectory& current, const std::vector<ShardId>& shards) {
  const int shard_count = current.ShardCount();
  std::set<int> keep;
  for (const ShardId s : shards) {
    if (ToInt(s) < 0 || ToInt(s) >= shard_count) {
      throw DirectoryError(fmt::format("shard {} does not exist: the directory has shards 0..{}", s, shard_count - 1),
                           std::nullopt, s);
    }
    if (!keep.insert(ToInt(s)).second)
      throw DirectoryError(fmt::format("shard {} is listed twice", s), std::nullopt, s);
  }
  if (keep.empty()) throw DirectoryError("a rebalance needs at least one shard to hold the buckets");
  const int n = static_cast<int>(keep.size());
  const int ceil_share = (kBucketCount + n - 1) / n;

  BucketDirectory::Assignments table = current.AssignmentTable();
  std::vector<int> held(static_cast<std::size_t>(shard_count), 0);
  for (const BucketId b : AllBuckets())
    ++held[static_cast<std::size_t>(ToInt(table[static_cast<std::size_t>(ToInt(b))]))];

  RebalancePlan plan;
  plan.before = current;
  plan.shards.assign(shards.begin(), shards.end());
  std::sort(plan.shards.begin(), plan.shards.end());
  auto move = [&](BucketId b, ShardId to) {
    auto& slot = table[static_cast<std::size_t>(ToInt(b))];
    plan.moves.push_back(PlannedMove{b, slot, to, 0});
    --held[static_cast<std::size_t>(ToInt(slot))];
    ++held[static_cast<std::size_t>(ToInt(to))];
    slot = to;
  };
  // Fewest buckets first; among equals the highest shard number (a new
  // shard is usually the highest).
  auto emptiest = [&] {
    int best = -1;
    for (const int s : keep) {
      if (best < 0 || held[static_cast<std::size_t>(s)] <= held[static_cast<std::size_t>(best)]) best = s;
    }
    return best;
  };
  // Most buckets first; among equals the lowest shard number (as
  // BucketDirectory::WithShardAdded picks its donor).
  auto fullest = [&] {
    int best = -1;
    for (const int s : keep) {
      if (best < 0 || held[static_cast<std::size_t>(s)] > held[static_cast<std::size_t>(best)]) best = s;
    }
    return best;
  };

  // 1. Shards left out give back every bucket, each to the kept shard of its
  //    nearest lower-numbered (else higher-numbered) neighbour that stays.
  for (const BucketId b : AllBuckets()) {
    if (keep.contains(ToInt(table[static_cast<std::size_t>(ToInt(b))]))) continue;
    int to = -1;
    for (int d = 1; d < kBucketCount && to < 0; ++d) {
      for (const int neighbour : {ToInt(b) - d, ToInt(b) + d}) {
        if (neighbour < 0 || neighbour >= kBucketCount) continue;
        const int owner = ToInt(table[static_cast<std::size_t>(neighbour)]);
        if (keep.contains(owner) && held[static_cast<std::size_t>(owner)] < ceil_share) {
          to = owner;
          break;
        }
      }
    }
    if (to < 0) to = emptiest();
    move(b, ShardId{to});
  }
  // 2. Even out: the fullest kept shard gives its highest-numbered bucket to
  //    the emptiest, until they differ by at most one.
  for (;;) {
    const int donor = fullest();
    const int receiver = emptiest();
    if (held[static_cast<std::size_t>(donor)] - held[static_cast<std::size_t>(receiver)] <= 1) break;
    BucketId highest{-1};
    for (const BucketId b : AllBuckets()) {
      if (ToInt(table[static_cast<std::size_t>(ToInt(b))]) == donor) highest = b;
    }
    move(highest, ShardId{receiver});
  }
  plan.after = BucketDirectory::FromAssignments(table, shard_count,
                                                current.Version() + static_cast<std::int64_t>(plan.moves.size()));
  return plan;
}

std::array<std::int64_t, kBucketCount> CountRowsPerBucket(const ClusterConfig& as_written) {
  const ClusterConfig config = AtCurrentPrimaries(as_written);
  std::vector<std::array<std::int64_t, kBucketCount>> per_shard(config.shards.size());
  std::vector<std::string> errors(config.shards.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    threads.emplace_back([&, i] {
      per_shard[i].fill(0);
      try {
        pqxx::connection c{WithConnectTimeout(config.shards[i].dsn, config.pool.connect_timeout).Reveal()};
        const auto tables = ShardedTables(c);
        pqxx::read_transaction tx{c};
        tx.exec0("SET LOCAL shardkit.buckets = 'all'");
        for (const auto& table : tables) {
          for (const auto& row : tx.exec(fmt::format("SELECT bucket, count(*) FROM {} GROUP BY bucket", table))) {
            const int b = row[0].as<int>();
            if (b >= 0 && b < kBucketCount) per_shard[i][static_cast<std::size_t>(b)] += row[1].as<std::int64_t>();
          }
        }
      } catch (const std::exception& e) {
        errors[i] = fmt::format("{}: {}", config.shards[i].name, FirstLine(e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].empty()) {
      throw ShardError(ShardId{static_cast<int>(i)}, "counting rows per bucket failed on " + errors[i]);
    }
  }
  std::array<std::int64_t, kBucketCount> total{};
  for (const auto& counts : per_shard) {
    for (std::size_t b = 0; b < counts.size(); ++b) total[b] += counts[b];
  }
  return total;
}

RebalanceReport ApplyRebalance(const ClusterConfig& config, const RebalancePlan& plan,
                               const RebalanceOptions& options) {
  const auto start = Clock::now();
  RebalanceReport report;
  report.plan_id =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();

  struct Cleanup {
    std::int64_t move_id;
    Clock::time_point not_before;
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<PlannedMove> pending;
  std::vector<Cleanup> cleanups;
  bool stop = false;
  int running_moves = 0;
  int finished = 0;
  int total = 0;

  std::mutex progress_mutex;
  auto report_progress = [&](const MoveProgress& p) {
    if (!options.on_progress) return;
    RebalanceProgress r;
    {
      std::lock_guard lock(mutex);
      r.finished = finished;
    }
    r.total = total;
    r.move = p;
    std::lock_guard lock(progress_mutex);
    options.on_progress(r);
  };
  MoveOptions first = options.move;
  first.defer_cleanup = true;
  first.on_progress = report_progress;
  MoveOptions second = options.move;
  second.defer_cleanup = false;
  second.on_progress = report_progress;
  BucketMover mover{config, first};
  BucketMover cleaner{config, second};

  // Live moves first (a rebalance or move that stopped left them): each is
  // resumed where it stopped (or rolled back, if it was aborting), then the
  // plan is made again from the directory they leave, onto the same shards.
  std::vector<PlannedMove> moves = plan.moves;
  {
    std::deque<MoveRecord> live;
    for (const MoveRecord& m : mover.List(true, 1000)) {
      live.push_back(m);
      report.resumed.push_back(m.move_id);
    }
    total = static_cast<int>(live.size() + moves.size());
    std::vector<std::thread> resumers;
    for (int i = 0; i < std::max(1, options.parallel) && !live.empty(); ++i) {
      resumers.emplace_back([&] {
        for (;;) {
          MoveRecord m;
          {
            std::lock_guard lock(mutex);
            if (live.empty()) return;
            m = live.front();
            live.pop_front();
          }
          try {
            const MoveRecord r = cleaner.Resume(m.move_id);
            std::lock_guard lock(mutex);
            report.moves.push_back(r);
            ++finished;
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            report.failures.push_back(fmt::format("resuming move {} of bucket {} (shard {} -> shard {}): {}", m.move_id,
                                                  m.bucket, m.source, m.target, FirstLine(e.what())));
            ++finished;
          }
        }
      });
    }
    for (auto& t : resumers) t.join();
    if (!report.failures.empty()) {
      report.not_started = moves;
      report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
      return report;
    }
    if (!report.resumed.empty()) {
      const BucketDirectory now = LoadCatalogDirectory(config);
      if (!plan.shards.empty()) {
        std::vector<PlannedMove> again = PlanRebalance(now, plan.shards).moves;
        for (auto& m : again) {
          for (const auto& old : plan.moves) {
            if (old.bucket == m.bucket) m.rows = old.rows;
          }
        }
        moves = std::move(again);
      } else {
        std::erase_if(moves, [&](const PlannedMove& m) { return now.ShardOf(m.bucket) == m.to; });
        for (auto& m : moves) m.from = now.ShardOf(m.bucket);
      }
    }
  }
  pending.assign(moves.begin(), moves.end());
  total = finished + static_cast<int>(pending.size());
  if (pending.empty()) {
    report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    return report;
  }

  auto worker = [&] {
    for (;;) {
      std::optional<PlannedMove> move;
      std::optional<std::int64_t> cleanup;
      {
        std::unique_lock lock(mutex);
        for (;;) {
          const auto now = Clock::now();
          auto due = std::min_element(cleanups.begin(), cleanups.end(),
                                      [](const Cleanup& a, const Cleanup& b) { return a.not_before < b.not_before; });
          if (due != cleanups.end() && due->not_before <= now) {
            cleanup = due->move_id;
            cleanups.erase(due);
            break;
          }
          if (!stop && !pending.empty()) {
            move = pending.front();
            pending.pop_front();
            ++running_moves;
            break;
          }
          if (due != cleanups.end()) {
            wake.wait_until(lock, due->not_before);
            continue;
          }
          if (running_moves > 0) {
            wake.wait(lock);  // a running move may still add a cleanup
            continue;
          }
          return;
        }
      }
      if (move) {
        try {
          const MoveRecord r = mover.Move(move->bucket, move->to, report.plan_id);
          std::lock_guard lock(mutex);
          if (r.state == MoveState::kDone) {
            report.moves.push_back(r);
            ++finished;
          } else {
            cleanups.push_back({r.move_id, Clock::now() + options.move.cleanup_grace});
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          report.failures.push_back(fmt::format("bucket {} (shard {} -> shard {}): {}", move->bucket, move->from,
                                                move->to, FirstLine(e.what())));
          ++finished;
          stop = true;
        }
        {
          std::lock_guard lock(mutex);
          --running_moves;
        }
        wake.notify_all();
      } else if (cleanup) {
        try {
          const MoveRecord r = cleaner.Resume(*cleanup);
          std::lock_guard lock(mutex);
          report.moves.push_back(r);
          ++finished;
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          report.failures.push_back(fmt::format("move {} (cleaning up): {}", *cleanup, FirstLine(e.what())));
          ++finished;
        }
        wake.notify_all();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, options.parallel); ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  report.not_started.assign(pending.begin(), pending.end());
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  return report;
}

}  // namespace shardkit
