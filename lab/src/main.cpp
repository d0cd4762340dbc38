// bookstore-lab — the Bookstore case's Bookstore experiments on real shards.
//
//   bookstore-lab                       load if needed, then every demo
//   bookstore-lab top10 --scale 0.01    one demo (loads that scale if needed)
//   bookstore-lab load --scale 0.1      (re)load only
//   bookstore-lab all --json            one JSON document on stdout
//   bookstore-lab worker --config F ... one outbox worker process (the workers demo starts these)
//
// Exit status: 0 all checks passed, 1 a check failed, 2 usage or
// configuration error, 3 a server is unreachable.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <pqxx/pqxx>
#include <string_view>

#include "dataset.hpp"
#include "demos.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "shardkit/errors.hpp"
#include "worker_process.hpp"

namespace {

using namespace shardkit;
using namespace shardkit::lab;

constexpr int kExitChecksFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

const char* Title(const std::string& demo) {
  if (demo == "routing") return "1. routing: customer -> bucket -> shard -> that shard's pool";
  if (demo == "shard-key") return "2. shard key: hash by customer_id vs range by date";
  if (demo == "ids") return "3. global IDs: identity vs shardkit Snowflake IDs";
  if (demo == "top10") return "4. the wrong top-10: best sellers of the last 30 days";
  if (demo == "category-avg") return "5. exercise: average order amount per category";
  if (demo == "third-shard") return "6. exercise: add a third shard";
  if (demo == "workers") return "7. worker sharding: partitions, leases, fencing, hot keys (the worker-sharding case)";
  if (demo == "stats") return "8. cross-shard query statistics of this run";
  if (demo == "rebalance") return "9. exercise: rebalance to one more shard and back, under load";
  if (demo == "load") return "load";
  if (demo == "copy-vs-psql") return "COPY vs psql \\copy";
  return "";
}

struct Output {
  bool json = false;
  Json doc = Json::object();
  int failed_checks = 0;
  int passed_checks = 0;

  void Emit(const DemoResult& r) {
    for (const auto& c : r.checks) (c.ok ? passed_checks : failed_checks) += 1;
    if (json) {
      doc["demos"][r.name] = r.ToJson();
      return;
    }
    fmt::print("\n== {}\n{}", Title(r.name), r.text);
    int failed = 0;
    for (const auto& c : r.checks) {
      if (!c.ok) {
        fmt::print("  CHECK FAILED {}: {}\n", c.name, c.detail);
        ++failed;
      }
    }
    if (!r.checks.empty() && failed == 0) {
      fmt::print("  ({} check{} passed)\n", r.checks.size(), r.checks.size() == 1 ? "" : "s");
    }
    std::fflush(stdout);
  }
};

// Every server answers, or a message that says which one and what to do.
bool Reachable(Lab& lab, std::string& problem) {
  std::string out;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    ConnectionPool& pool = lab.Resolver().Pool(s);
    try {
      auto lease =
          pool.Acquire(std::chrono::steady_clock::now() + pool.Options().connect_timeout + std::chrono::seconds(1));
    } catch (const std::exception& e) {
      out += fmt::format("  {}: {}\n", lab.Resolver().ShardName(s), e.what());
    }
  }
  try {
    pqxx::nontransaction tx{lab.Reference()};
    tx.exec("SELECT 1");
  } catch (const std::exception& e) {
    out += fmt::format("  reference: {}\n", e.what());
  }
  if (out.empty()) return true;
  problem = out +
            "  Start the local servers with lab/cluster start (lab/run does it for you) and see lab/cluster status;\n"
            "  if another program holds those ports, SHARDKIT_PORT_BASE=56432 lab/run uses other ones;\n"
            "  or point SHARDKIT_CONFIG / --config at a running cluster.";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // The workers demo starts this program again as its worker processes.
  if (argc > 1 && std::string_view(argv[1]) == "worker") return WorkerMain(argc - 1, argv + 1);
  CLI::App app{
      "The Bookstore lab: the Bookstore case's sharding experiments on real PostgreSQL shards, "
      "each answer checked against an unsharded reference server."};
  app.fallthrough();
  app.require_subcommand(0, 1);
  std::optional<std::string> config_path;
  double scale = 1.0;
  std::uint64_t seed = 1;
  bool json = false;
  std::string progress = "auto";
  std::string work_dir = "lab/out";
  bool compare_psql = false;
  app.add_option("--config", config_path, "shardkit config file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_option("--scale", scale, "data size relative to the Bookstore case (1 = ~1M orders; 0.01 for tests)")
      ->check(CLI::Range(0.001, 10.0));
  app.add_option("--seed", seed, "random seed of the data generator");
  app.add_flag("--json", json, "print one JSON document with every figure and check on stdout");
  app.add_option("--progress", progress, "load progress on stderr: auto, bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_option("--work-dir", work_dir, "where copy-vs-psql writes its COPY file");

  auto* load_cmd = app.add_subcommand("load", "generate the data and (re)load every server with COPY");
  load_cmd->add_flag("--compare-psql", compare_psql, "then time psql \\copy of the same orders rows");
  app.add_subcommand("copy-vs-psql", "COPY through shardkit::CopyWriter vs psql \\copy of the same orders rows");
  for (const auto& name : DemoNames()) app.add_subcommand(name, Title(name));
  app.add_subcommand("ensure-loaded", "load the data if it is missing or at another scale, nothing else");
  // Needs a shard without buckets (lab/cluster add-shard), so the data must
  // be loaded before that shard exists: lab/run rebalance runs ensure-loaded
  // first. Not part of `all`: it changes the cluster while it runs.
  app.add_subcommand("rebalance", Title("rebalance"));
  app.add_subcommand("all", "load if needed, then every demo (the default)");
  CLI11_PARSE(app, argc, argv);

  std::string command = "all";
  if (!app.get_subcommands().empty()) command = app.get_subcommands().front()->get_name();

  const ProgressMode progress_mode = progress == "bar"     ? ProgressMode::kBar
                                     : progress == "lines" ? ProgressMode::kLines
                                     : progress == "none"  ? ProgressMode::kNone
                                                           : ProgressMode::kAuto;
  const DatasetParams params{scale, seed};
  Output out;
  out.json = json;

  std::unique_ptr<Lab> lab;
  try {
    const auto path = ResolveConfigPath(config_path);
    lab = std::make_unique<Lab>(LoadConfig(path));
    out.doc["lab"] = {{"config", path.string()},
                      {"shards", lab->ShardCount()},
                      {"scale", scale},
                      {"seed", seed},
                      {"lab_now", FormatTimestamp(kLabNow)},
                      {"window_start", FormatTimestamp(kWindowStart)}};
    (void)lab->ReferenceDsn();  // the reference is required
  } catch (const std::exception& e) {
    fmt::print(stderr, "bookstore-lab: {}\n", e.what());
    return kExitUsage;
  }
  if (std::string problem; !Reachable(*lab, problem)) {
    fmt::print(stderr, "bookstore-lab: cannot reach the servers:\n{}\n", problem);
    return kExitUnreachable;
  }

  auto run_demo = [&](const std::string& name) {
    DemoResult r;
    try {
      r = DemoByName(name)(*lab);
    } catch (const std::exception& e) {
      r.name = name;
      r.text = fmt::format("error: {}\n", e.what());
      r.Expect(name + ".ran", false, e.what());
    }
    r.name = name;
    out.Emit(r);
  };

  try {
    // Progress goes to stderr, so it does not disturb --json on stdout.
    const LoadOptions load_options{progress_mode};
    if (command == "load" || command == "copy-vs-psql") {
      if (command == "load") {
        LoadReport report = GenerateAndLoad(*lab, params, load_options);
        out.Emit(DescribeLoad(report));
      }
      if (command == "copy-vs-psql" || compare_psql) {
        const Dataset data = GenerateDataset(params);
        out.Emit(DescribeCopyComparison(CompareWithPsql(*lab, data, work_dir)));
      }
    } else if (command == "rebalance") {
      run_demo(command);
    } else {
      std::string why;
      if (IsLoaded(*lab, params, &why)) {
        if (!json) fmt::print("data already loaded: {}\n", why);
        out.doc["data"] = why;
      } else {
        if (!json) fmt::print("loading the Bookstore data: {}\n", why);
        std::fflush(stdout);
        out.Emit(DescribeLoad(GenerateAndLoad(*lab, params, load_options)));
      }
      if (command == "all") {
        for (const auto& name : DemoNames()) run_demo(name);
      } else if (command != "ensure-loaded") {
        run_demo(command);
      }
    }
  } catch (const std::exception& e) {
    if (json) {
      out.doc["error"] = e.what();
      out.doc["ok"] = false;
      fmt::print("{}\n", out.doc.dump(2));
    }
    fmt::print(stderr, "bookstore-lab: {}\n", e.what());
    return kExitChecksFailed;
  }

  if (json) {
    out.doc["checks"] = {{"passed", out.passed_checks}, {"failed", out.failed_checks}};
    out.doc["ok"] = out.failed_checks == 0;
    fmt::print("{}\n", out.doc.dump(2));
  } else if (out.passed_checks + out.failed_checks > 0) {
    fmt::print("\n{} checks passed, {} failed{}\n", out.passed_checks, out.failed_checks,
               out.failed_checks == 0 ? " (every answer equals the reference server's)" : "");
  }
  return out.failed_checks == 0 ? 0 : kExitChecksFailed;
}
