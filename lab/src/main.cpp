// bookstore-lab — the Bookstore case's Bookstore experiments on real shards.
//
//   bookstore-lab                       load if needed, then every demo
//   bookstore-lab top10 --scale 0.01    one demo (loads that scale if needed)
//   bookstore-lab load --scale 0.1      (re)load only
//   bookstore-lab all --json            one JSON document on stdout
//   bookstore-lab --report DIR          also DIR/index.html: checks, figures, charts (gnuplot)
//   bookstore-lab top10 ids --report D  the named demos only
//   bookstore-lab report A.json B.json --report DIR   the page from saved --json documents
//   bookstore-lab worker --config F ... one outbox worker process (the workers demo starts these)
//   bookstore-lab transfers --demo      cross-shard transfers, the coordinator killed at every step
//   bookstore-lab transfers --stop-at decided --journal J   one coordinator (transfers.hpp); --check J checks
//
// Exit status: 0 all checks passed, 1 a check failed, 2 usage or
// configuration error, 3 a server is unreachable.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <pqxx/pqxx>
#include <string_view>
#include <vector>

#include "dataset.hpp"
#include "demos.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "report.hpp"
#include "shardkit/errors.hpp"
#include "transfers.hpp"
#include "worker_process.hpp"

namespace {

using namespace shardkit;
using namespace shardkit::lab;

constexpr int kExitChecksFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

struct Output {
  bool json = false;
  Json doc = Json::object();
  int failed_checks = 0;
  int passed_checks = 0;

  void Emit(const DemoResult& r) {
    for (const auto& c : r.checks) (c.ok ? passed_checks : failed_checks) += 1;
    doc["demos"][r.name] = r.ToJson();  // for --json and --report
    if (json) return;
    fmt::print("\n== {}\n{}", DemoTitle(r.name), r.text);
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

// `bookstore-lab report DOC.json... --report DIR`: the page from saved
// documents, without the servers.
int ReportFromDocuments(const std::vector<std::string>& paths, const std::string& dir) {
  if (dir.empty()) {
    fmt::print(stderr, "bookstore-lab report: say where the page goes: --report DIR\n");
    return kExitUsage;
  }
  try {
    std::vector<Json> docs;
    for (const auto& path : paths) {
      std::ifstream in{path};
      docs.push_back(Json::parse(in));
    }
    const auto page = WriteReport(MergeLabDocuments(docs), dir);
    fmt::print(stderr, "bookstore-lab: report written to {}\n", page.string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bookstore-lab report: {}\n", e.what());
    return kExitUsage;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The workers demo starts this program again as its worker processes.
  if (argc > 1 && std::string_view(argv[1]) == "worker") return WorkerMain(argc - 1, argv + 1);
  // The bank's coordinator, checker and demo: a command of its own (no Bookstore data needed).
  if (argc > 1 && std::string_view(argv[1]) == "transfers") return TransfersMain(argc - 1, argv + 1);
  CLI::App app{
      "The Bookstore lab: the Bookstore case's sharding experiments on real PostgreSQL shards, "
      "each answer checked against an unsharded reference server."};
  app.fallthrough();
  app.require_subcommand(0, 0);  // several demos may be named; the other commands stand alone
  std::optional<std::string> config_path;
  double scale = 1.0;
  std::uint64_t seed = 1;
  bool json = false;
  std::string progress = "auto";
  std::string work_dir = "lab/out";
  bool compare_psql = false;
  std::string report_dir;
  std::vector<std::string> documents;
  app.add_option("--config", config_path, "shardkit config file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_option("--scale", scale, "data size relative to the Bookstore case (1 = ~1M orders; 0.01 for tests)")
      ->check(CLI::Range(0.001, 10.0));
  app.add_option("--seed", seed, "random seed of the data generator");
  app.add_flag("--json", json, "print one JSON document with every figure and check on stdout");
  app.add_option("--progress", progress, "load progress on stderr: auto, bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_option("--work-dir", work_dir, "where copy-vs-psql writes its COPY file");
  app.add_option("--report", report_dir,
                 "also write DIR/index.html: each demo's checks, key figures and charts (needs gnuplot-nox), "
                 "and DIR/lab.json");

  auto* load_cmd = app.add_subcommand("load", "generate the data and (re)load every server with COPY");
  load_cmd->add_flag("--compare-psql", compare_psql, "then time psql \\copy of the same orders rows");
  app.add_subcommand("copy-vs-psql", "COPY through shardkit::CopyWriter vs psql \\copy of the same orders rows");
  for (const auto& name : DemoNames()) app.add_subcommand(name, DemoTitle(name));
  app.add_subcommand("ensure-loaded", "load the data if it is missing or at another scale, nothing else");
  // Needs a shard without buckets (lab/cluster add-shard), so the data must
  // be loaded before that shard exists: lab/run rebalance runs ensure-loaded
  // first. Not part of `all`: it changes the cluster while it runs.
  app.add_subcommand("rebalance", DemoTitle("rebalance"));
  // Kills a primary: lab/run replicas runs it on a cluster of its own, with
  // no Bookstore data (it writes its own orders).
  app.add_subcommand("replicas", DemoTitle("replicas"));
  // Handled before the parse (TransfersMain): listed here for --help.
  app.add_subcommand("transfers",
                     "cross-shard transfers, the coordinator killed at every step (transfers --demo; --help for more)");
  app.add_subcommand("all", "load if needed, then every demo (the default)");
  auto* report_cmd = app.add_subcommand("report", "draw the page (--report DIR) from saved --json documents");
  report_cmd->add_option("documents", documents, "bookstore-lab --json documents; a later one's demos win")
      ->required()
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);

  std::string command = "all";
  std::vector<std::string> named;
  for (const auto* sub : app.get_subcommands()) named.push_back(sub->get_name());
  if (!named.empty()) command = named.front();
  const auto& demo_names = DemoNames();
  const bool only_demos = std::all_of(named.begin(), named.end(), [&](const std::string& n) {
    return std::find(demo_names.begin(), demo_names.end(), n) != demo_names.end();
  });
  if (named.size() > 1 && !only_demos) {
    fmt::print(stderr, "bookstore-lab: only demos can be named together ({}), not {}\n", fmt::join(demo_names, " "),
               fmt::join(named, " "));
    return kExitUsage;
  }
  if (command == "report") return ReportFromDocuments(documents, report_dir);
  if (!report_dir.empty()) {
    try {
      RequireGnuplot();
    } catch (const std::exception& e) {
      fmt::print(stderr, "bookstore-lab: --report: {}\n", e.what());
      return kExitUsage;
    }
  }

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
    } else if (command == "rebalance" || command == "replicas") {
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
        for (const auto& name : named) run_demo(name);
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

  out.doc["checks"] = {{"passed", out.passed_checks}, {"failed", out.failed_checks}};
  out.doc["ok"] = out.failed_checks == 0;
  if (!report_dir.empty()) {
    try {
      const auto page = WriteReport(out.doc, report_dir);
      std::ofstream{std::filesystem::path(report_dir) / "lab.json"} << out.doc.dump(2) << "\n";
      fmt::print(stderr, "bookstore-lab: report written to {}\n", page.string());
    } catch (const std::exception& e) {
      fmt::print(stderr, "bookstore-lab: --report: {}\n", e.what());
      return kExitUsage;
    }
  }
  if (json) {
    fmt::print("{}\n", out.doc.dump(2));
  } else if (out.passed_checks + out.failed_checks > 0) {
    fmt::print("\n{} checks passed, {} failed{}\n", out.passed_checks, out.failed_checks,
               out.failed_checks == 0 ? " (every answer equals the reference server's)" : "");
  }
  return out.failed_checks == 0 ? 0 : kExitChecksFailed;
}
