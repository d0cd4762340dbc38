// shardctl move <bucket> --to <shard>     move one bucket, live
// shardctl move resume <move-id>          finish a move whose mover stopped
// shardctl move abort <move-id>           roll a move back (until the target owns the bucket)
// shardctl move show <move-id>            one move and its journal
// shardctl moves [--live] [--limit N]     running and past moves
// shardctl rebalance --plan|--apply [--shards 0,1,2] [--parallel K]
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"

namespace {

using shardkit::BucketId;
using shardkit::MoveRecord;
using shardkit::MoveState;
using shardkit::ShardId;

struct MoveFlags {
  std::int64_t drain_timeout_ms = 2000;
  std::int64_t grace_ms = 2000;
  std::int64_t catchup_timeout_ms = 60000;

  void Add(CLI::App& cmd) {
    cmd.add_option("--drain-timeout-ms", drain_timeout_ms,
                   "freeze: wait this long for writers (and then readers) already in the bucket, else abort the move")
        ->check(CLI::Range(1, 600000));
    cmd.add_option("--grace-ms", grace_ms, "after the cutover, wait this long before deleting the old rows")
        ->check(CLI::Range(0, 3600000));
    cmd.add_option("--catchup-timeout-ms", catchup_timeout_ms, "how long the target may take to catch up")
        ->check(CLI::Range(1, 86400000));
  }
  [[nodiscard]] shardkit::MoveOptions Options() const {
    shardkit::MoveOptions o;
    o.drain_timeout = std::chrono::milliseconds(drain_timeout_ms);
    o.cleanup_grace = std::chrono::milliseconds(grace_ms);
    o.catchup_timeout = std::chrono::milliseconds(catchup_timeout_ms);
    return o;
  }
};

std::string Opt(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : "-";
}

nlohmann::json RecordJson(const MoveRecord& r) {
  nlohmann::json j = {
      {"move_id", r.move_id},
      {"bucket", r.bucket},
      {"source", r.source},
      {"target", r.target},
      {"state", std::string(shardkit::MoveStateName(r.state))},
      {"live", shardkit::IsLive(r.state)},
      {"token", r.token},
      {"requested_by", r.requested_by},
      {"created_at", r.created_at},
      {"updated_at", r.updated_at},
      {"finished_at", r.finished_at.empty() ? nlohmann::json() : nlohmann::json(r.finished_at)},
      {"rows_copied", r.rows_copied},
      {"rows_deleted", r.rows_deleted},
      {"copy_ms", r.copy_ms ? nlohmann::json(*r.copy_ms) : nlohmann::json()},
      {"stall_ms", r.stall_ms ? nlohmann::json(*r.stall_ms) : nlohmann::json()},
      {"directory_version", r.directory_version ? nlohmann::json(*r.directory_version) : nlohmann::json()},
      {"plan_id", r.plan_id ? nlohmann::json(*r.plan_id) : nlohmann::json()},
      {"error", r.error.empty() ? nlohmann::json() : nlohmann::json(r.error)}};
  return j;
}

void PrintRecord(const MoveRecord& r) {
  fmt::print("move {}: bucket {} shard {} -> shard {}, {}\n", r.move_id, r.bucket, r.source, r.target,
             shardkit::MoveStateName(r.state));
  fmt::print("  rows copied {} (copy {} ms), writes stalled {} ms, old rows deleted {}", r.rows_copied, Opt(r.copy_ms),
             Opt(r.stall_ms), r.rows_deleted);
  if (r.directory_version) fmt::print(", directory version {}", *r.directory_version);
  fmt::print("\n  started {} by {}{}\n", r.created_at, r.requested_by,
             r.finished_at.empty() ? "" : fmt::format(", finished {}", r.finished_at));
  if (!r.error.empty()) fmt::print("  error: {}\n", r.error);
}

// One line per state change of each move, plus copy/catch-up figures at
// most once a second per move: readable in a terminal and in a log.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet) {}
  void operator()(const shardkit::MoveProgress& p, int finished = -1, int total = -1) {
    if (quiet_) return;
    std::lock_guard lock(mutex_);
    auto& last = last_[p.move_id];
    const auto now = std::chrono::steady_clock::now();
    const bool changed = last.step != p.step;
    if (!changed && now - last.at < std::chrono::seconds(1)) return;
    last.step = p.step;
    last.at = now;
    std::string counter = total > 0 ? fmt::format("[{}/{}] ", finished, total) : "";
    std::string figures = fmt::format("rows copied {}", p.rows_copied);
    if (p.lag_bytes) figures += fmt::format(", lag {} bytes", *p.lag_bytes);
    if (p.stall_ms) figures += fmt::format(", stall {:.1f} ms", *p.stall_ms);
    fmt::print(stderr, "{}move {} bucket {} shard {} -> {}: {} ({}; {:.1f} s)\n", counter, p.move_id, p.bucket,
               p.source, p.target, p.step, figures, static_cast<double>(p.elapsed.count()) / 1e6);
  }

 private:
  struct Last {
    std::string step;
    std::chrono::steady_clock::time_point at;
  };
  bool quiet_;
  std::mutex mutex_;
  std::map<std::int64_t, Last> last_;
};

std::vector<ShardId> ParseShardList(const std::string& text, int shard_count) {
  std::vector<ShardId> shards;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto end = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, end - at);
    int value = -1;
    try {
      std::size_t used = 0;
      value = std::stoi(part, &used);
      if (used != part.size()) value = -1;
    } catch (const std::exception&) {
      value = -1;
    }
    if (value < 0 || value >= shard_count) {
      throw CLI::ValidationError("--shards",
                                 fmt::format("'{}' is not a shard of this cluster (0..{})", part, shard_count - 1));
    }
    shards.push_back(ShardId{value});
    at = end + 1;
  }
  return shards;
}

}  // namespace

// The arguments of every command of this file, kept alive by the callbacks.
struct MoveArgs {
  int bucket = -1;
  int target = -1;
  MoveFlags flags;
  std::int64_t move_id = 0;
  std::string reason = "aborted by shardctl move abort";
  bool live_only = false;
  int limit = 50;
  bool plan_only = false;
  bool apply = false;
  std::string shard_list;
  int parallel = 1;
};

void AddMoveCommands(CLI::App& app, CliContext& context) {
  auto args = std::make_shared<MoveArgs>();
  // ---------------------------------------------------------------- move
  auto* move = app.add_subcommand("move", "move one bucket to another shard, live (also: move resume|abort|show ID)");
  move->add_option("bucket", args->bucket, "the bucket (0..63)")->check(CLI::Range(0, shardkit::kBucketCount - 1));
  move->add_option("--to", args->target, "the shard to move it to")->check(CLI::NonNegativeNumber);
  args->flags.Add(*move);

  auto* resume = move->add_subcommand("resume", "finish a move whose mover stopped (from its journaled step)");
  resume->add_option("move-id", args->move_id, "the move (shardctl moves lists them)")->required();
  args->flags.Add(*resume);
  auto* abort = move->add_subcommand("abort", "roll a move back: allowed until the target owns the bucket");
  abort->add_option("move-id", args->move_id, "the move")->required();
  abort->add_option("--reason", args->reason, "recorded in the journal");
  auto* show = move->add_subcommand("show", "one move and every step of its journal");
  show->add_option("move-id", args->move_id, "the move")->required();

  auto finish = [&context](const MoveRecord& r) {
    if (context.json) {
      fmt::print("{}\n", RecordJson(r).dump(2));
    } else {
      PrintRecord(r);
    }
  };
  resume->final_callback([&context, finish, args] {
    ProgressPrinter printer(context.json);
    auto options = args->flags.Options();
    options.on_progress = [&printer](const shardkit::MoveProgress& p) { printer(p); };
    shardkit::BucketMover mover{context.LoadConfig(), options};
    finish(mover.Resume(args->move_id));
  });
  abort->final_callback([&context, finish, args] {
    shardkit::BucketMover mover{context.LoadConfig()};
    finish(mover.Abort(args->move_id, args->reason));
  });
  show->final_callback([&context, args] {
    shardkit::BucketMover mover{context.LoadConfig()};
    const auto record = mover.Get(args->move_id);
    if (!record) {
      throw shardkit::MoveError(fmt::format("there is no move {} (shardctl moves lists them)", args->move_id));
    }
    const auto events = mover.Events(args->move_id);
    if (context.json) {
      nlohmann::json j = RecordJson(*record);
      j["events"] = nlohmann::json::array();
      for (const auto& e : events) {
        j["events"].push_back(
            {{"at", e.at}, {"state", std::string(shardkit::MoveStateName(e.state))}, {"detail", e.detail}});
      }
      fmt::print("{}\n", j.dump(2));
      return;
    }
    PrintRecord(*record);
    for (const auto& e : events) fmt::print("  {}  {:<20} {}\n", e.at, shardkit::MoveStateName(e.state), e.detail);
  });
  move->final_callback([move, &context, finish, args] {
    if (!move->get_subcommands().empty()) return;
    if (args->bucket < 0 || args->target < 0) {
      throw CLI::ValidationError("move", "give a bucket and --to SHARD (or: move resume|abort|show MOVE-ID)");
    }
    ProgressPrinter printer(context.json);
    auto options = args->flags.Options();
    options.on_progress = [&printer](const shardkit::MoveProgress& p) { printer(p); };
    shardkit::BucketMover mover{context.LoadConfig(), options};
    finish(mover.Move(BucketId{args->bucket}, ShardId{args->target}));
  });

  // --------------------------------------------------------------- moves
  auto* moves = app.add_subcommand("moves", "running and past bucket moves, newest first");
  moves->add_flag("--live", args->live_only, "only moves not done or aborted");
  moves->add_option("--limit", args->limit, "at most this many")->check(CLI::Range(1, 100000));
  moves->final_callback([&context, args] {
    shardkit::BucketMover mover{context.LoadConfig()};
    const auto records = mover.List(args->live_only, args->limit);
    if (context.json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& r : records) list.push_back(RecordJson(r));
      fmt::print("{}\n", nlohmann::json{{"moves", list}}.dump(2));
      return;
    }
    if (records.empty()) {
      fmt::print("{}\n", args->live_only ? "no live moves" : "no moves yet");
      return;
    }
    fmt::print("{:>6} {:>6} {:>5} {:>5} {:<20} {:>9} {:>9} {:>9}  {}\n", "move", "bucket", "from", "to", "state",
               "rows", "copy ms", "stall ms", "started");
    for (const auto& r : records) {
      fmt::print("{:>6} {:>6} {:>5} {:>5} {:<20} {:>9} {:>9} {:>9}  {}{}\n", r.move_id, r.bucket, r.source, r.target,
                 shardkit::MoveStateName(r.state), r.rows_copied, Opt(r.copy_ms), Opt(r.stall_ms), r.created_at,
                 r.error.empty() ? "" : "  (" + r.error + ")");
    }
  });

  // ----------------------------------------------------------- rebalance
  auto* rebalance = app.add_subcommand(
      "rebalance", "spread the buckets evenly over the shards with the fewest moves: --plan shows, --apply runs");
  auto* plan_flag = rebalance->add_flag("--plan", args->plan_only, "print the plan with the rows per bucket");
  auto* apply_flag = rebalance->add_flag("--apply", args->apply, "run the plan's moves");
  plan_flag->excludes(apply_flag);
  rebalance->add_option("--shards", args->shard_list,
                        "the shards that hold the buckets afterwards, e.g. 0,1 (default: every configured shard)");
  rebalance->add_option("--parallel", args->parallel, "moves at a time")->check(CLI::Range(1, 16));
  args->flags.Add(*rebalance);
  rebalance->final_callback([&context, args] {
    if (!args->plan_only && !args->apply) throw CLI::ValidationError("rebalance", "give --plan or --apply");
    const shardkit::ClusterConfig config = context.LoadConfig();
    if (!config.catalog_dsn) {
      throw shardkit::ConfigError("catalog.dsn", fmt::format("{} has no [catalog] dsn: the directory to rebalance "
                                                             "lives there",
                                                             config.origin));
    }
    const shardkit::BucketDirectory current = shardkit::LoadCatalogDirectory(config);
    std::vector<ShardId> shards;
    if (args->shard_list.empty()) {
      for (const ShardId s : shardkit::FirstShards(current.ShardCount())) shards.push_back(s);
    } else {
      shards = ParseShardList(args->shard_list, current.ShardCount());
    }
    shardkit::RebalancePlan plan = shardkit::PlanRebalance(current, shards);
    const auto rows = shardkit::CountRowsPerBucket(config);
    for (auto& m : plan.moves) m.rows = rows[static_cast<std::size_t>(shardkit::ToInt(m.bucket))];

    nlohmann::json out = {{"directory_version", current.Version()},
                          {"shards", plan.shards},
                          {"moves", nlohmann::json::array()},
                          {"rows_to_move", plan.TotalRows()}};
    for (const auto& m : plan.moves) {
      out["moves"].push_back({{"bucket", m.bucket}, {"from", m.from}, {"to", m.to}, {"rows", m.rows}});
    }
    if (!context.json) {
      fmt::print("rebalance onto shards {} (directory version {}): {} bucket move{}, {} rows\n",
                 fmt::join(plan.shards, ","), current.Version(), plan.moves.size(), plan.moves.size() == 1 ? "" : "s",
                 plan.TotalRows());
      for (const ShardId s : shardkit::FirstShards(current.ShardCount())) {
        fmt::print("  shard {}: {:>2} buckets now, {:>2} after  ({})\n", s, current.BucketsOf(s).size(),
                   plan.after.BucketsOf(s).size(), shardkit::BucketSet::Of(plan.after, s).Ranges());
      }
      for (std::size_t i = 0; i < plan.moves.size(); ++i) {
        const auto& m = plan.moves[i];
        fmt::print("  {:>2}. bucket {:>2}: shard {} -> shard {}  {:>9} rows\n", i + 1, m.bucket, m.from, m.to, m.rows);
      }
      if (plan.moves.empty()) fmt::print("  the buckets are spread evenly already: nothing to move\n");
    }
    if (args->plan_only) {
      if (context.json) fmt::print("{}\n", out.dump(2));
      return;
    }
    ProgressPrinter printer(context.json);
    shardkit::RebalanceOptions options;
    options.parallel = args->parallel;
    options.move = args->flags.Options();
    options.on_progress = [&printer](const shardkit::RebalanceProgress& p) { printer(p.move, p.finished, p.total); };
    const shardkit::RebalanceReport report = shardkit::ApplyRebalance(config, plan, options);
    out["plan_id"] = report.plan_id;
    out["elapsed_ms"] = static_cast<double>(report.elapsed.count()) / 1000.0;
    out["done"] = nlohmann::json::array();
    double max_stall = 0;
    for (const auto& r : report.moves) {
      out["done"].push_back(RecordJson(r));
      max_stall = std::max(max_stall, r.stall_ms.value_or(0));
    }
    out["failures"] = report.failures;
    out["resumed"] = report.resumed;
    out["not_started"] = nlohmann::json::array();
    for (const auto& m : report.not_started) {
      out["not_started"].push_back({{"bucket", m.bucket}, {"from", m.from}, {"to", m.to}});
    }
    out["max_stall_ms"] = max_stall;
    out["ok"] = report.Ok();
    if (context.json) {
      fmt::print("{}\n", out.dump(2));
    } else {
      if (!report.resumed.empty()) {
        fmt::print("\nresumed first the live moves a stopped run left: {}\n", fmt::join(report.resumed, ", "));
      }
      fmt::print("\n{} of {} moves done in {:.1f} s; max stall {:.1f} ms\n", report.moves.size(),
                 report.moves.size() + report.failures.size() + report.not_started.size(),
                 static_cast<double>(report.elapsed.count()) / 1e6, max_stall);
      fmt::print("{:>6} {:>6} {:>5} {:>5} {:>9} {:>9} {:>9}\n", "move", "bucket", "from", "to", "rows", "copy ms",
                 "stall ms");
      for (const auto& r : report.moves) {
        fmt::print("{:>6} {:>6} {:>5} {:>5} {:>9} {:>9} {:>9}\n", r.move_id, r.bucket, r.source, r.target,
                   r.rows_copied, Opt(r.copy_ms), Opt(r.stall_ms));
      }
      for (const auto& f : report.failures) fmt::print("FAILED {}\n", f);
      for (const auto& m : report.not_started)
        fmt::print("not started: bucket {} shard {} -> {}\n", m.bucket, m.from, m.to);
    }
    if (!report.Ok()) {
      throw shardkit::MoveError(
          fmt::format("the rebalance stopped: {} of {} moves failed, {} not started (shardctl "
                      "moves --live shows what to resume or abort)",
                      report.failures.size(), plan.moves.size(), report.not_started.size()));
    }
  });
}
