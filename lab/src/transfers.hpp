// transfers.hpp — the bank: store credit moved between customers on
// different shards through Cluster::TransactAcross (two-phase commit), a
// coordinator process that can be stopped at any step of it, and a checker.
//
// The accounts are store_credit rows of `customers` customers from
// `first_customer` on (spread over every shard), `initial_cents` each. A
// transfer moves cents from one customer to another and, in the same
// transaction, writes one store_credit_transfers row per customer it
// changed (-cents for the sender, +cents for the receiver) under a transfer
// id no other transfer has. So the checker can tell, after any crash:
//
//   - the total balance equals the initial total;
//   - every customer's balance equals the initial one plus its rows' cents;
//   - each transfer id has both of its rows or none (never one side only);
//   - every acknowledged transfer is there, every refused one is not, and
//     one whose decision ('commit') was reported is there;
//   - no shard holds a prepared transaction of this database.
//
// The coordinator (`bookstore-lab transfers`) prints one line per event,
// flushed, and appends it to the journal file the checker reads:
//
//   step <logged|prepared|decided|committed> <transaction id> <transfer id> [shard]
//   ack <transfer id> | refused <transfer id> <why> | unknown <transfer id> <why>
//   stopped <step> <transfer id>      (then it sleeps until killed)
//   done <transfers> <acked> <refused>
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "shardkit/cluster.hpp"

namespace shardkit::lab {

struct BankOptions {
  int customers = 40;
  std::int64_t initial_cents = 1000;
  int first_customer = 2'000'000'000;  // far above the Bookstore's customers
};

// Deletes the bank's accounts and transfer rows and opens every account
// with initial_cents. Throws shardkit::Error naming the migration if
// store_credit_transfers is missing.
void SetUpBank(Cluster& cluster, const BankOptions& bank);

struct TransferRunOptions {
  BankOptions bank;
  int transfers = 200;
  int threads = 4;
  // Stop (sleep until killed) at the stop_at_count-th time a transaction
  // reaches this step ("" never): "logged" (before any prepare),
  // "prepared" (its first part prepared, the others not), "decided",
  // "committed" (its first part committed, the others not). The other
  // threads stop at their next step.
  std::string stop_at;
  int stop_at_count = 1;
  std::uint64_t seed = 1;
  int same_shard_percent = 20;  // both customers on one shard: a plain COMMIT
  int refused_percent = 5;      // more than the sender has: refused by CHECK
  // A planted fault, to show the checker catches it ("" none):
  // "write-twice" commits the sender's side, then the receiver's, in two
  // transactions of one shard each (the steps are reported as if it were
  // one transaction), as a service without cross-shard transactions would.
  std::string fault;
  std::filesystem::path journal;  // appended with every line ("" none)
};

struct TransferRunSummary {
  int transfers = 0;
  int acknowledged = 0;
  int refused = 0;
  int unknown = 0;
};

// The coordinator's work: `transfers` transfers over `threads` threads.
TransferRunSummary RunTransfers(Cluster& cluster, const TransferRunOptions& options);

// What the coordinators reported, read back from their journal.
struct BankJournal {
  std::set<std::string> acknowledged;
  std::set<std::string> refused;
  std::set<std::string> unknown;
  std::set<std::string> decided;  // reached "step decided"
};
[[nodiscard]] BankJournal ReadJournal(const std::filesystem::path& path);

struct BankCheck {
  int accounts = 0;
  std::int64_t total_cents = 0;
  std::int64_t expected_total_cents = 0;
  std::map<std::string, int> prepared;  // per shard: prepared transactions in its database
  int applied = 0;                      // transfer ids with both rows
  int acknowledged = 0;
  int refused = 0;
  int unknown_applied = 0;  // in flight at a kill (no answer), found applied
  int unknown_not_applied = 0;
  // Each a list of what is wrong (empty: fine).
  std::vector<std::string> half_applied;  // one row only, or rows that do not cancel out
  std::vector<std::string> acknowledged_missing;
  std::vector<std::string> refused_applied;
  std::vector<std::string> decided_missing;
  std::vector<std::string> accounts_off;  // balance != initial + its rows

  [[nodiscard]] std::vector<std::string> Violations() const;
  [[nodiscard]] bool Ok() const { return Violations().empty(); }
  [[nodiscard]] std::string Describe() const;
};

// Reads every shard's primary (balances, transfer rows, pg_prepared_xacts)
// and checks them against the journal.
[[nodiscard]] BankCheck CheckBank(Cluster& cluster, const BankOptions& bank, const BankJournal& journal);

// After a coordinator was killed: waits settle_after (so every part it
// left is past the bound), then recovery passes (RecoverInDoubt) until none
// leaves a part waiting or fails (a shard restarting), 15 s at most; their
// reports summed, `took` the passes' time.
InDoubtReport SettleInDoubt(Cluster& cluster, const Dsn& catalog, const InDoubtOptions& options,
                            std::chrono::milliseconds& took);

// The demo (lab/run transfers): a coordinator process killed at each step
// (before any prepare, between the prepares, after the decision, between
// the commits), what is left in doubt, recovery passes, the checker after
// each; then a scatter reader's totals while transfers are in flight.
// Prints as it goes; returns 0 if every check passed, else 1.
struct TransfersDemoOptions {
  BankOptions bank;
  int threads = 4;
  int transfers_per_kill = 200;   // the coordinator stops before the end
  int transfers_in_flight = 400;  // the run the reader watches
  std::chrono::milliseconds settle_after{1000};
  std::filesystem::path journal = "lab/out/transfers-journal.txt";
};
int RunTransfersDemo(Cluster& cluster, const ClusterConfig& config, const std::filesystem::path& config_path,
                     const TransfersDemoOptions& options);

// `bookstore-lab transfers ...` (argv[0] is "transfers"). Returns the exit
// status: 0 done (or the check passed), 1 the check failed, 2 usage.
int TransfersMain(int argc, char** argv);

}  // namespace shardkit::lab
