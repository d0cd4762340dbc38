// The transfers demo: the bank's coordinator killed at every step of its
// two-phase commit, what is left in doubt, the recovery pass, the checker;
// and what a scatter reader sees while transfers are in flight.
#include <fmt/format.h>

#include <atomic>
#include <fstream>
#include <pqxx/pqxx>
#include <thread>

#include "lab.hpp"
#include "shardkit/errors.hpp"
#include "transfers.hpp"
#include "transfers_process.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct KillPoint {
  const char* step;
  int count;
  const char* where;
};

// Before any prepare, between the prepares, after the decision, between the commits.
constexpr KillPoint kKillPoints[] = {
    {"logged", 20, "before any PREPARE"},
    {"prepared", 20, "between the PREPAREs"},
    {"decided", 20, "after the decision"},
    {"committed", 20, "between the COMMIT PREPAREDs"},
};

std::vector<std::string> BankArgs(const std::filesystem::path& config, const TransfersDemoOptions& options) {
  return {"transfers",
          "--config",
          config.string(),
          "--customers",
          std::to_string(options.bank.customers),
          "--cents",
          std::to_string(options.bank.initial_cents),
          "--first-customer",
          std::to_string(options.bank.first_customer),
          "--threads",
          std::to_string(options.threads),
          "--journal",
          options.journal.string()};
}

// Every line indented (the checker's report under a kill's heading).
std::string Indented(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::size_t stop = end == std::string::npos ? text.size() : end + 1;
    out += "   " + text.substr(start, stop - start);
    start = stop;
  }
  return out;
}

std::string InDoubtText(Cluster& cluster, const ClusterConfig& config) {
  std::vector<std::string> failures;
  const auto parts = ListInDoubt(cluster.Resolver(), config.catalog_dsn, failures);
  std::string out;
  std::map<std::string, int> per_shard;
  for (const ShardId shard : FirstShards(cluster.Resolver().ShardCount()))
    per_shard[cluster.Resolver().ShardName(shard)];
  for (const InDoubtPart& part : parts) ++per_shard[cluster.Resolver().ShardName(part.shard)];
  std::string counts;
  for (const auto& [shard, n] : per_shard) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", shard, n);
  out += fmt::format("   in doubt (pg_prepared_xacts): {}\n", counts);
  for (const InDoubtPart& part : parts) {
    out += fmt::format("     {}  {}  prepared {} ms ago, catalog says {}\n", cluster.Resolver().ShardName(part.shard),
                       part.gid, part.age.count(), part.decision);
  }
  for (const std::string& f : failures) out += "     (" + f + ")\n";
  pqxx::connection c{config.catalog_dsn->Reveal()};
  pqxx::nontransaction tx{c};
  const pqxx::result rows = tx.exec(
      "SELECT transaction_id, state, array_to_string(shards, ','), label FROM shardkit_transactions "
      "ORDER BY created_at LIMIT 8");
  out += fmt::format("   the catalog's coordinator log: {} row{}\n", rows.size(), rows.size() == 1 ? "" : "s");
  for (const auto& row : rows) {
    out += fmt::format("     {}  {}  on {}  ({})\n", row[0].c_str(), row[1].c_str(), row[2].c_str(), row[3].c_str());
  }
  return out;
}

// A scatter of the total, again and again while `running`: how often it
// is not the total (a transfer committed on one shard and not yet on the
// other, or one shard read before a commit and the other after).
struct ReaderFigures {
  int reads = 0;
  int off = 0;
  std::int64_t largest_gap = 0;
};

ReaderFigures ReadTotals(Cluster& cluster, const BankOptions& bank, const std::atomic<bool>& running) {
  ReaderFigures figures;
  const std::int64_t total = bank.initial_cents * bank.customers;
  const SqlParams range{std::to_string(bank.first_customer), std::to_string(bank.first_customer + bank.customers - 1)};
  while (running.load()) {
    const SqlResult r =
        cluster.Execute("SELECT sum(balance_cents) FROM store_credit WHERE customer_id BETWEEN $1 AND $2", range);
    const std::int64_t seen = std::stoll(r.rows.at(0).at(0).value_or("0"));
    ++figures.reads;
    if (seen != total) {
      ++figures.off;
      figures.largest_gap = std::max(figures.largest_gap, std::abs(seen - total));
    }
  }
  return figures;
}

}  // namespace

InDoubtReport SettleInDoubt(Cluster& cluster, const Dsn& catalog, const InDoubtOptions& options,
                            std::chrono::milliseconds& took) {
  InDoubtReport total;
  // Past the bound, every part and row of the dead coordinator is settled.
  std::this_thread::sleep_for(options.settle_after);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(15);
  for (;;) {
    InDoubtReport pass = RecoverInDoubt(cluster.Resolver(), catalog, options);
    total.committed.insert(total.committed.end(), pass.committed.begin(), pass.committed.end());
    total.rolled_back.insert(total.rolled_back.end(), pass.rolled_back.begin(), pass.rolled_back.end());
    total.rows_aborted += pass.rows_aborted;
    total.rows_forgotten += pass.rows_forgotten;
    total.failures = pass.failures;  // the last pass's: earlier ones may have met a shard restarting
    if ((pass.waiting.empty() && pass.failures.empty()) || Clock::now() > deadline) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return total;
}

int RunTransfersDemo(Cluster& cluster, const ClusterConfig& config, const std::filesystem::path& config_path,
                     const TransfersDemoOptions& options) {
  if (!config.catalog_dsn) throw Error("the transfers demo needs a [catalog] (the coordinator log)");
  const Dsn catalog = *config.catalog_dsn;
  SetUpBank(cluster, options.bank);
  { std::ofstream truncate{options.journal, std::ios::trunc}; }
  std::map<std::string, int> per_shard;
  for (int i = 0; i < options.bank.customers; ++i) {
    ++per_shard[cluster.Resolver().ShardName(cluster.Route(CustomerId{options.bank.first_customer + i}).shard)];
  }
  std::string spread;
  for (const auto& [shard, n] : per_shard) spread += fmt::format("{}{} {}", spread.empty() ? "" : ", ", shard, n);
  fmt::print(
      "\n== transfers: store credit moved between customers on different shards (Cluster::TransactAcross), the "
      "coordinator killed at every step\n"
      "{} accounts ({}), {} cents each: {} cents in all; transfers of 1-100 cents by {} threads of a coordinator "
      "process (bookstore-lab transfers), {}% on one shard, {}% more than the sender has (refused)\n",
      options.bank.customers, spread, options.bank.initial_cents,
      Thousands(options.bank.initial_cents * options.bank.customers), options.threads, 20, 5);
  const std::string exe = LabExecutable();
  InDoubtOptions recovery;
  recovery.settle_after = options.settle_after;
  int failed = 0;
  int seed = 1;
  TextTable table({{"kill point", TextTable::Align::kLeft},
                   {"acked before"},
                   {"in doubt"},
                   {"committed"},
                   {"rolled back"},
                   {"pass ms"},
                   {"check", TextTable::Align::kLeft}});
  for (const KillPoint& kill : kKillPoints) {
    auto args = BankArgs(config_path, options);
    args.insert(args.end(), {"--transfers", std::to_string(options.transfers_per_kill), "--seed",
                             std::to_string(seed++), "--stop-at", fmt::format("{}:{}", kill.step, kill.count)});
    CoordinatorProcess coordinator{exe, args};
    const auto stopped = coordinator.WaitForLine("stopped ", Clock::now() + std::chrono::seconds(60));
    coordinator.Kill();
    int acked = 0;
    for (const std::string& line : coordinator.Lines()) acked += line.rfind("ack ", 0) == 0 ? 1 : 0;
    fmt::print("\n-- kill at \"{}\" ({}): {}; SIGKILL to pid {} after {} acknowledged transfers\n", kill.step,
               kill.where, stopped.value_or("the coordinator never got there"), coordinator.Pid(), acked);
    std::vector<std::string> failures;
    const auto in_doubt = ListInDoubt(cluster.Resolver(), config.catalog_dsn, failures);
    fmt::print("{}", InDoubtText(cluster, config));
    milliseconds took{0};
    const InDoubtReport report = SettleInDoubt(cluster, catalog, recovery, took);
    fmt::print(
        "   recovery, once the parts are older than settle_after ({} ms): committed {} part(s), rolled back {}, "
        "rows decided 'abort' {}, rows forgotten {}, in {} ms{}\n",
        recovery.settle_after.count(), report.committed.size(), report.rolled_back.size(), report.rows_aborted,
        report.rows_forgotten, took.count(), report.failures.empty() ? "" : "; " + report.failures.front());
    const BankCheck check = CheckBank(cluster, options.bank, ReadJournal(options.journal));
    fmt::print("{}", Indented(check.Describe()));
    if (!check.Ok() || !stopped) ++failed;
    table.AddRow({kill.step, std::to_string(acked), std::to_string(in_doubt.size()),
                  std::to_string(report.committed.size()), std::to_string(report.rolled_back.size()),
                  std::to_string(took.count()), check.Ok() ? "ok" : "FAILED"});
  }

  // Readers while transfers are in flight.
  auto args = BankArgs(config_path, options);
  args.insert(args.end(), {"--transfers", std::to_string(options.transfers_in_flight), "--seed", "99"});
  std::atomic<bool> running{true};
  ReaderFigures reader;
  std::thread reading([&] { reader = ReadTotals(cluster, options.bank, running); });
  const auto start = Clock::now();
  int status = 0;
  {
    CoordinatorProcess coordinator{exe, args};
    status = coordinator.Wait();
  }
  const auto elapsed = Clock::now() - start;
  running = false;
  reading.join();
  const BankCheck check = CheckBank(cluster, options.bank, ReadJournal(options.journal));
  if (!check.Ok() || status != 0) ++failed;
  const double seconds = std::chrono::duration<double>(elapsed).count();
  fmt::print(
      "\n-- no kill: {} transfers in {:.1f} s ({:.0f}/s); meanwhile a reader's scatter \"SELECT sum(balance_cents) "
      "FROM store_credit\" (Cluster::Execute) ran {} times: {} ({}) differed from the total, by up to {} cents.\n"
      "   No snapshot spans shards: a scatter can read one shard before a transfer's COMMIT PREPARED there and "
      "another after it, so it sees a transfer on one side only. The total is exact once no transfer is in flight.\n"
      "{}",
      options.transfers_in_flight, seconds, options.transfers_in_flight / seconds, reader.reads, reader.off,
      Percent(reader.reads == 0 ? 0.0 : static_cast<double>(reader.off) / reader.reads), reader.largest_gap,
      Indented(check.Describe()));
  fmt::print("\n{}", table.Render("   "));
  fmt::print("\n{}\n", failed == 0
                           ? "every check passed: after recovery the total is exact, nothing is left "
                             "prepared, every acknowledged transfer applied once and every refused one not at all"
                           : fmt::format("{} check(s) FAILED", failed));
  return failed == 0 ? 0 : 1;
}

}  // namespace shardkit::lab
