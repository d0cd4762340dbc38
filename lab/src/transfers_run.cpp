// The bank's accounts and its coordinator: transfers over several threads,
// every step reported, stoppable at any step (transfers.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "shardkit/errors.hpp"
#include "transfers.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;

// One line at a time on stdout (flushed: the caller kills the process at
// any moment) and appended to the journal (one write: lines of several
// threads and processes do not interleave).
class Lines {
 public:
  explicit Lines(const std::filesystem::path& journal) {
    if (journal.empty()) return;
    fd_ = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("cannot open the journal {}: {}", journal.string(), std::strerror(errno)));
  }
  ~Lines() {
    if (fd_ >= 0) ::close(fd_);
  }
  Lines(const Lines&) = delete;
  Lines& operator=(const Lines&) = delete;

  void Emit(const std::string& text) {
    const std::string line = text + "\n";
    const std::lock_guard lock(mutex_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    if (fd_ >= 0 && ::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      std::fprintf(stderr, "transfers: writing the journal failed: %s\n", std::strerror(errno));
    }
  }

 private:
  std::mutex mutex_;
  int fd_ = -1;
};

std::string FirstLineOf(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

[[noreturn]] void SleepUntilKilled() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

struct Account {
  int customer = 0;
  ShardId shard{};
};

class Coordinator {
 public:
  Coordinator(Cluster& cluster, const TransferRunOptions& options)
      : cluster_(cluster), options_(options), lines_(options.journal) {
    for (int i = 0; i < options.bank.customers; ++i) {
      const int customer = options.bank.first_customer + i;
      accounts_.push_back(Account{customer, cluster.Route(CustomerId{customer}).shard});
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
    run_tag_ = fmt::format("{:x}-{}", ms.count(), ::getpid());
  }

  TransferRunSummary Run() {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(options_.threads));
    for (int t = 0; t < options_.threads; ++t) threads.emplace_back([this, t] { Work(t); });
    for (std::thread& thread : threads) thread.join();
    TransferRunSummary summary;
    summary.transfers = next_.load() > options_.transfers ? options_.transfers : next_.load();
    summary.acknowledged = acknowledged_;
    summary.refused = refused_;
    summary.unknown = unknown_;
    lines_.Emit(fmt::format("done {} {} {}", summary.transfers, summary.acknowledged, summary.refused));
    return summary;
  }

 private:
  struct Transfer {
    std::string id;
    Account from;
    Account to;
    std::int64_t cents = 0;
  };

  void Work(int thread) {
    std::mt19937_64 random{options_.seed * 1000003 + static_cast<std::uint64_t>(thread)};
    for (int n = next_++; n < options_.transfers; n = next_++) {
      Transfer t = Pick(random);
      t.id = fmt::format("{}-{}", run_tag_, n);
      Execute(t);
    }
  }

  Transfer Pick(std::mt19937_64& random) {
    auto index = [&](std::size_t count) { return static_cast<std::size_t>(random() % count); };
    Transfer t;
    t.from = accounts_[index(accounts_.size())];
    const bool same_shard = static_cast<int>(random() % 100) < options_.same_shard_percent;
    std::vector<Account> candidates;
    for (const Account& a : accounts_) {
      if (a.customer != t.from.customer && (a.shard == t.from.shard) == same_shard) candidates.push_back(a);
    }
    if (candidates.empty()) {  // one shard only, or one customer on it
      for (const Account& a : accounts_) {
        if (a.customer != t.from.customer) candidates.push_back(a);
      }
    }
    t.to = candidates[index(candidates.size())];
    const bool refused = static_cast<int>(random() % 100) < options_.refused_percent;
    t.cents = refused ? 1'000'000'000 : 1 + static_cast<std::int64_t>(random() % 100);
    return t;
  }

  // One customer's side: its balance and its row of the transfer.
  static void Leg(SqlTransaction& tx, const std::string& id, int customer, std::int64_t delta) {
    tx.Execute("UPDATE store_credit SET balance_cents = balance_cents + $2 WHERE customer_id = $1",
               {std::to_string(customer), std::to_string(delta)});
    tx.Execute("INSERT INTO store_credit_transfers (customer_id, transfer_id, delta_cents) VALUES ($1, $2, $3)",
               {std::to_string(customer), id, std::to_string(delta)});
  }

  void Execute(const Transfer& t) {
    bool decided = false;
    CrossShardOptions options;
    options.label = "transfer " + t.id;
    options.deadline = Clock::now() + std::chrono::seconds(10);
    int parts_seen = 0;  // of this attempt's prepares or commits so far
    options.on_step = [&](const CrossShardStep& step) {
      if (step.kind == CrossShardStep::Kind::kDecided) decided = true;
      const bool part = step.kind == CrossShardStep::Kind::kPrepared || step.kind == CrossShardStep::Kind::kCommitted;
      parts_seen = part ? parts_seen + 1 : 0;
      Step(step, t.id, parts_seen <= 1);
    };
    try {
      if (options_.fault == "write-twice" && t.from.shard != t.to.shard) {
        WriteTwice(t, options);
      } else {
        // Customers in id order on every transaction: no two transfers wait
        // for each other across shards (no server would see that deadlock).
        const bool from_first = t.from.customer < t.to.customer;
        cluster_.TransactAcross(
            {CustomerId{t.from.customer}, CustomerId{t.to.customer}},
            [&](CrossShardTransaction& tx) {
              if (from_first) Leg(tx.On(CustomerId{t.from.customer}), t.id, t.from.customer, -t.cents);
              Leg(tx.On(CustomerId{t.to.customer}), t.id, t.to.customer, t.cents);
              if (!from_first) Leg(tx.On(CustomerId{t.from.customer}), t.id, t.from.customer, -t.cents);
            },
            options);
      }
      ++acknowledged_;
      lines_.Emit("ack " + t.id);
    } catch (const std::exception& e) {
      // Past its decision a transfer is committed whatever came after; an
      // OutcomeUnknown may be either.
      const bool unknown = decided || dynamic_cast<const OutcomeUnknown*>(&e) != nullptr;
      ++(unknown ? unknown_ : refused_);
      lines_.Emit(fmt::format("{} {} {}", unknown ? "unknown" : "refused", t.id, FirstLineOf(e.what())));
    }
  }

  // The planted fault: each side committed on its own.
  void WriteTwice(const Transfer& t, const CrossShardOptions& options) {
    Step(CrossShardStep{CrossShardStep::Kind::kLogged, "write-twice", std::nullopt}, t.id, true);
    cluster_.Transact(
        CustomerId{t.from.customer}, [&](SqlTransaction& tx) { Leg(tx, t.id, t.from.customer, -t.cents); }, options);
    Step(CrossShardStep{CrossShardStep::Kind::kCommitted, "write-twice", t.from.shard}, t.id, true);
    cluster_.Transact(
        CustomerId{t.to.customer}, [&](SqlTransaction& tx) { Leg(tx, t.id, t.to.customer, t.cents); }, options);
    Step(CrossShardStep{CrossShardStep::Kind::kCommitted, "write-twice", t.to.shard}, t.id, false);
  }

  // `first`: the transaction's first part of a prepare or commit, so a
  // stop there is between its parts (or before anything else).
  void Step(const CrossShardStep& step, const std::string& transfer, bool first) {
    if (stopping_.load()) SleepUntilKilled();  // another thread stopped: so does every transaction
    const char* kind = ToString(step.kind);
    lines_.Emit(step.shard ? fmt::format("step {} {} {} {}", kind, step.transaction_id, transfer, ToInt(*step.shard))
                           : fmt::format("step {} {} {}", kind, step.transaction_id, transfer));
    if (first && options_.stop_at == kind && ++stop_count_ == options_.stop_at_count) {
      stopping_ = true;
      lines_.Emit(fmt::format("stopped {} {}", kind, transfer));
      SleepUntilKilled();
    }
  }

  Cluster& cluster_;
  const TransferRunOptions& options_;
  Lines lines_;
  std::vector<Account> accounts_;
  std::string run_tag_;  // makes transfer ids unique across processes
  std::atomic<int> next_{0};
  std::atomic<int> acknowledged_{0};
  std::atomic<int> refused_{0};
  std::atomic<int> unknown_{0};
  std::atomic<int> stop_count_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace

void SetUpBank(Cluster& cluster, const BankOptions& bank) {
  // One statement per customer: a write stays on one shard.
  for (int i = 0; i < bank.customers; ++i) {
    const std::string customer = std::to_string(bank.first_customer + i);
    try {
      (void)cluster.Execute("DELETE FROM store_credit_transfers WHERE customer_id = $1", {customer});
    } catch (const Error& e) {
      throw Error(
          fmt::format("the bank needs table store_credit_transfers "
                      "(examples/bookstore-service/sql/051_store_credit_transfers.sql: lab/cluster start, or "
                      "shardctl --sql-dir examples/bookstore-service/sql migrate, applies it): {}",
                      FirstLineOf(e.what())));
    }
    (void)cluster.Execute("DELETE FROM store_credit WHERE customer_id = $1", {customer});
    (void)cluster.Execute("INSERT INTO store_credit (customer_id, balance_cents) VALUES ($1, $2)",
                          {customer, std::to_string(bank.initial_cents)});
  }
}

TransferRunSummary RunTransfers(Cluster& cluster, const TransferRunOptions& options) {
  Coordinator coordinator(cluster, options);
  return coordinator.Run();
}

}  // namespace shardkit::lab
