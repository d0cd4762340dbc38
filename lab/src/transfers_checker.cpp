// The bank's checker: balances, transfer rows and prepared transactions
// against what the coordinators reported (transfers.hpp).
#include <fmt/format.h>

#include <fstream>
#include <pqxx/pqxx>
#include <sstream>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "transfers.hpp"

namespace shardkit::lab {
namespace {

constexpr std::size_t kShown = 5;  // ids named per violation

std::string Some(const std::vector<std::string>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < kShown; ++i) out += (i == 0 ? "" : ", ") + ids[i];
  if (ids.size() > kShown) out += fmt::format(", ... ({} in all)", ids.size());
  return out;
}

std::int64_t Int(const std::optional<std::string>& text) {
  return text ? std::stoll(*text) : 0;
}

}  // namespace

BankJournal ReadJournal(const std::filesystem::path& path) {
  BankJournal journal;
  std::ifstream in{path};
  if (!in) throw Error(fmt::format("cannot read the transfers journal {}", path.string()));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words{line};
    std::string event, a, b, c;
    words >> event >> a >> b >> c;
    if (event == "ack") journal.acknowledged.insert(a);
    if (event == "refused") journal.refused.insert(a);
    if (event == "unknown") journal.unknown.insert(a);
    if (event == "step" && a == "decided") journal.decided.insert(c);
  }
  return journal;
}

BankCheck CheckBank(Cluster& cluster, const BankOptions& bank, const BankJournal& journal) {
  BankCheck check;
  const SqlParams range{std::to_string(bank.first_customer), std::to_string(bank.first_customer + bank.customers - 1)};
  std::map<int, std::int64_t> balances;
  for (const auto& row :
       cluster.Execute("SELECT customer_id, balance_cents FROM store_credit WHERE customer_id BETWEEN $1 AND $2", range)
           .rows) {
    balances[static_cast<int>(Int(row[0]))] = Int(row[1]);
    check.total_cents += Int(row[1]);
  }
  check.accounts = static_cast<int>(balances.size());
  check.expected_total_cents = bank.initial_cents * bank.customers;

  std::map<int, std::int64_t> moved;  // per customer: the sum of its rows
  struct Legs {
    int rows = 0;
    std::int64_t sum = 0;
  };
  std::map<std::string, Legs> transfers;
  for (const auto& row : cluster
                             .Execute("SELECT customer_id, transfer_id, delta_cents FROM store_credit_transfers "
                                      "WHERE customer_id BETWEEN $1 AND $2",
                                      range)
                             .rows) {
    moved[static_cast<int>(Int(row[0]))] += Int(row[2]);
    Legs& legs = transfers[row[1].value_or("")];
    ++legs.rows;
    legs.sum += Int(row[2]);
  }
  for (const auto& [id, legs] : transfers) {
    if (legs.rows != 2 || legs.sum != 0) {
      check.half_applied.push_back(
          fmt::format("{} ({} row{}, {:+} cents)", id, legs.rows, legs.rows == 1 ? "" : "s", legs.sum));
    } else {
      ++check.applied;
    }
    if (journal.refused.count(id) != 0) check.refused_applied.push_back(id);
    if (journal.acknowledged.count(id) == 0 && journal.refused.count(id) == 0) ++check.unknown_applied;
  }
  for (const auto& [customer, balance] : balances) {
    const std::int64_t expected = bank.initial_cents + moved[customer];
    if (balance != expected) {
      check.accounts_off.push_back(
          fmt::format("customer {}: {} cents, its transfers say {}", customer, balance, expected));
    }
  }
  if (check.accounts != bank.customers) {
    check.accounts_off.push_back(fmt::format("{} accounts found, {} opened", check.accounts, bank.customers));
  }
  for (const std::string& id : journal.acknowledged) {
    if (transfers.count(id) == 0) check.acknowledged_missing.push_back(id);
  }
  for (const std::string& id : journal.decided) {
    if (transfers.count(id) == 0) check.decided_missing.push_back(id);
  }
  for (const std::string& id : journal.unknown) {
    if (transfers.count(id) == 0) ++check.unknown_not_applied;
  }
  check.acknowledged = static_cast<int>(journal.acknowledged.size());
  check.refused = static_cast<int>(journal.refused.size());

  BucketShardResolver& resolver = cluster.Resolver();
  for (const ShardId shard : FirstShards(resolver.ShardCount())) {
    auto lease =
        resolver.Servers(shard).primary.pool->Acquire(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    pqxx::nontransaction tx{*lease};
    check.prepared[resolver.ShardName(shard)] =
        tx.exec("SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()")[0][0].as<int>();
  }
  return check;
}

std::vector<std::string> BankCheck::Violations() const {
  std::vector<std::string> out;
  if (total_cents != expected_total_cents) {
    out.push_back(fmt::format("total balance {} cents, {} opened ({:+})", total_cents, expected_total_cents,
                              total_cents - expected_total_cents));
  }
  for (const auto& [shard, count] : prepared) {
    if (count != 0) out.push_back(fmt::format("{} prepared transaction(s) left on {}", count, shard));
  }
  if (!half_applied.empty()) out.push_back("applied on one side only: " + Some(half_applied));
  if (!accounts_off.empty()) out.push_back("balances that their transfers do not explain: " + Some(accounts_off));
  if (!acknowledged_missing.empty()) out.push_back("acknowledged but not applied: " + Some(acknowledged_missing));
  if (!refused_applied.empty()) out.push_back("refused but applied: " + Some(refused_applied));
  if (!decided_missing.empty()) out.push_back("decided 'commit' but not applied: " + Some(decided_missing));
  return out;
}

std::string BankCheck::Describe() const {
  std::string prepared_text;
  for (const auto& [shard, count] : prepared) {
    prepared_text += fmt::format("{}{} {}", prepared_text.empty() ? "" : ", ", shard, count);
  }
  std::string out = fmt::format(
      "accounts {}, total {} cents (opened with {}); transfers applied {} (acknowledged {}, in flight at a kill "
      "{}), refused {}, in flight and not applied {}; prepared transactions: {}\n",
      accounts, total_cents, expected_total_cents, applied, acknowledged, unknown_applied, refused, unknown_not_applied,
      prepared_text);
  const auto violations = Violations();
  if (violations.empty()) return out + "check: ok\n";
  for (const std::string& v : violations) out += "VIOLATION: " + v + "\n";
  return out;
}

}  // namespace shardkit::lab
