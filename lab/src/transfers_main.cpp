// `bookstore-lab transfers`: the bank's coordinator, its checker and its
// demo from the command line (transfers.hpp).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "shardkit/errors.hpp"
#include "transfers.hpp"

namespace shardkit::lab {

int TransfersMain(int argc, char** argv) {
  CLI::App app{
      "bookstore-lab transfers: store credit moved between customers on different shards in one transaction "
      "(Cluster::TransactAcross); prints every step, can stop at one so the caller kills it"};
  std::optional<std::string> config_path;
  TransferRunOptions run;
  TransfersDemoOptions demo;
  bool setup = false;
  bool check = false;
  bool run_demo = false;
  std::string stop_at;
  std::string journal;
  std::string work_dir = "lab/out";
  app.add_option("--config", config_path, "shardkit config file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_flag("--setup", setup, "open the accounts (deletes the bank's accounts and transfers first)");
  app.add_flag("--check", check, "check the bank against the journal; exit 1 on a violation");
  app.add_flag("--demo", run_demo, "the demo: kills a coordinator at every step, recovers, checks (lab/run transfers)");
  app.add_option("--customers", run.bank.customers, "accounts")->check(CLI::Range(2, 100000));
  app.add_option("--cents", run.bank.initial_cents, "each account's opening balance");
  app.add_option("--first-customer", run.bank.first_customer, "the first account's customer id");
  app.add_option("--transfers", run.transfers, "transfers to run");
  app.add_option("--threads", run.threads, "concurrent transfers")->check(CLI::Range(1, 64));
  app.add_option("--stop-at", stop_at,
                 "STEP[:K]: sleep (until killed) the K-th time a transaction reaches STEP: logged, prepared, "
                 "decided, committed");
  app.add_option("--seed", run.seed, "random seed of the transfers");
  app.add_option("--journal", journal, "append every line to this file (the checker reads it)");
  app.add_option("--work-dir", work_dir, "--demo: where its journal goes");
  CLI11_PARSE(app, argc, argv);
  if (const auto colon = stop_at.find(':'); colon != std::string::npos) {
    run.stop_at = stop_at.substr(0, colon);
    run.stop_at_count = std::atoi(stop_at.c_str() + colon + 1);
  } else {
    run.stop_at = stop_at;
  }
  if (!run.stop_at.empty() && run.stop_at != "logged" && run.stop_at != "prepared" && run.stop_at != "decided" &&
      run.stop_at != "committed") {
    fmt::print(stderr, "bookstore-lab transfers: --stop-at {}: the steps are logged, prepared, decided, committed\n",
               stop_at);
    return 2;
  }
  run.journal = journal;
  // A planted fault, for the checker's own test (transfers.hpp).
  if (const char* fault = std::getenv("BOOKSTORE_LAB_FAULT"); fault != nullptr) run.fault = fault;

  try {
    const auto path = ResolveConfigPath(config_path);
    const ClusterConfig config = LoadConfig(path);
    // The coordinator settles nothing itself: the recovery passes are the
    // caller's (the demo's, the test's), run when it says.
    ClusterOptions options;
    options.in_doubt_interval = std::chrono::milliseconds(0);
    const auto cluster = Cluster::Open(config, options);
    if (run_demo) {
      demo.bank = run.bank;
      demo.threads = run.threads;
      demo.journal = std::filesystem::path(work_dir) / "transfers-journal.txt";
      std::filesystem::create_directories(work_dir);
      return RunTransfersDemo(*cluster, config, path, demo);
    }
    if (setup) {
      SetUpBank(*cluster, run.bank);
      fmt::print("opened {} accounts of {} cents\n", run.bank.customers, run.bank.initial_cents);
      return 0;
    }
    if (check) {
      if (journal.empty()) throw Error("--check needs the coordinators' --journal");
      const BankCheck result = CheckBank(*cluster, run.bank, ReadJournal(journal));
      fmt::print("{}", result.Describe());
      return result.Ok() ? 0 : 1;
    }
    (void)RunTransfers(*cluster, run);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bookstore-lab transfers: {}\n", e.what());
    return 2;
  }
}

}  // namespace shardkit::lab
