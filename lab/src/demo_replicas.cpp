// 11. Replicas under load (demos.hpp: RunReplicas): the load, the faults
// (a paused replay, a killed primary and its failover) and a checker over
// the history of every operation, as Jepsen checks a database: what was
// acknowledged must be there at the end, and a read given its write's
// token must see it.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>

#include "demos.hpp"
#include "order_ids.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primary_leases.hpp"
#include "shardkit/topology/failover.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kCustomers = 2000;
// The primaries' leases (routing/primary_leases.hpp): short, as the forced
// failover waits this long (and a second) before it promotes.
constexpr milliseconds kLeaseTtl{2000};

double MsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Every operation's outcome, under one mutex.
struct History {
  std::mutex mutex;
  std::vector<std::int64_t> acknowledged;
  ReadToken acknowledged_token;  // covers every acknowledged write
  std::uint64_t unknown = 0, failed = 0;
  std::uint64_t token_reads = 0, reads_on_replicas = 0, stale_reads = 0, read_failures = 0, fallbacks = 0;
  std::uint64_t reports = 0, report_shards_on_replicas = 0, report_errors = 0, report_violations = 0;
  std::vector<std::string> anomalies;  // the first few, in words
  // The failover of the victim shard, as the writers saw it.
  std::optional<Clock::time_point> killed_at, first_error, first_success;
  std::uint64_t errors_during_failover = 0;

  // The run over time, for the report's charts: per half second since
  // `started`, writes acknowledged, writes failed or unknown, token reads on
  // a replica, on a primary; and the faults, when they came.
  Clock::time_point started = Clock::now();
  std::vector<std::array<std::uint64_t, 4>> ticks;
  std::vector<std::pair<std::string, double>> events;

  void Anomaly(std::string what) {
    if (anomalies.size() < 5) anomalies.push_back(std::move(what));
  }
  std::array<std::uint64_t, 4>& Tick() {
    const auto i = static_cast<std::size_t>((Clock::now() - started) / milliseconds(500));
    if (ticks.size() <= i) ticks.resize(i + 1, {0, 0, 0, 0});
    return ticks[i];
  }
  void Event(const std::string& what) {
    std::lock_guard lock(mutex);
    events.emplace_back(what, std::chrono::duration<double>(Clock::now() - started).count());
  }
};

class Load {
 public:
  // Order ids are Snowflakes (time-ordered): this run's are above `first`.
  Load(Cluster& cluster, History& history, ShardId victim, SnowflakeGenerator& ids)
      : cluster_(cluster), history_(history), victim_(victim), ids_(ids), first_(ids.Next()) {}
  ~Load() { Stop(); }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  void Start(int writers) {
    for (int w = 0; w < writers; ++w) threads_.emplace_back([this, w] { Write(static_cast<unsigned>(w) + 1); });
    threads_.emplace_back([this] { Report(); });
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  [[nodiscard]] std::int64_t Attempted() const { return attempted_.load(); }
  [[nodiscard]] std::int64_t FirstId() const { return first_; }

 private:
  void Write(unsigned seed) {
    std::minstd_rand random{seed};
    while (!stop_) {
      const int customer = 1 + static_cast<int>(random() % kCustomers);
      const ShardId shard = cluster_.Route(CustomerId{customer}).shard;
      const std::int64_t id = ids_.Next();
      ++attempted_;
      RoutedOptions options;
      options.deadline = Clock::now() + std::chrono::seconds(10);
      options.label = "place order";
      RoutedOutcome written;
      try {
        cluster_.Run(
            CustomerId{customer},
            [&](pqxx::transaction_base& tx, const RoutedContext& at) {
              tx.exec_params(
                  "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 1)",
                  customer, at.bucket, id);
            },
            options, &written);
      } catch (const std::exception& e) {
        std::lock_guard lock(history_.mutex);
        ++(dynamic_cast<const OutcomeUnknown*>(&e) != nullptr ? history_.unknown : history_.failed);
        ++history_.Tick()[1];
        if (shard == victim_ && history_.killed_at && !history_.first_success) {
          ++history_.errors_during_failover;
          if (!history_.first_error) history_.first_error = Clock::now();
        }
        continue;
      }
      {
        std::lock_guard lock(history_.mutex);
        history_.acknowledged.push_back(id);
        history_.acknowledged_token.Combine(written.token);
        ++history_.Tick()[0];
        if (shard == victim_ && history_.first_error && !history_.first_success) {
          history_.first_success = Clock::now();
        }
      }
      ReadBack(customer, id, written.token);
    }
  }

  // The customer's next request: its own order, on a replica that has it.
  void ReadBack(int customer, std::int64_t id, const ReadToken& token) {
    RoutedOptions options;
    options.read.preference = ReadPreference::kReplicaPreferred;
    options.read.max_lag = std::chrono::seconds(1);
    options.read.after = token;
    options.deadline = Clock::now() + std::chrono::seconds(10);
    options.label = "my orders";
    RoutedOutcome outcome;
    try {
      const auto rows = cluster_.Transactions().Read(
          CustomerId{customer}, "SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2",
          {std::to_string(customer), std::to_string(id)}, options, &outcome);
      std::lock_guard lock(history_.mutex);
      ++history_.token_reads;
      history_.fallbacks += static_cast<std::uint64_t>(outcome.replica_fallbacks);
      if (outcome.on_replica) ++history_.reads_on_replicas;
      ++history_.Tick()[outcome.on_replica ? 2 : 3];
      if (rows[0][0].as<int>() != 1) {
        ++history_.stale_reads;
        history_.Anomaly(fmt::format("order {} of customer {} missing from its own read on {} ({})", id, customer,
                                     outcome.server, token.ToString()));
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(history_.mutex);
      ++history_.read_failures;
    }
  }

  // A cross-shard report on the replicas, with the token of every write
  // acknowledged before it began: it counts at least those, at most every
  // write attempted by its end.
  void Report() {
    while (!stop_) {
      std::this_thread::sleep_for(milliseconds(100));
      SqlOptions options;
      options.read.preference = ReadPreference::kReplicaPreferred;
      options.read.max_lag = std::chrono::seconds(1);
      std::size_t at_least = 0;
      {
        std::lock_guard lock(history_.mutex);
        options.read.after = history_.acknowledged_token;
        at_least = history_.acknowledged.size();
      }
      try {
        const SqlResult r =
            cluster_.Execute("SELECT count(*) FROM orders WHERE order_id >= $1", {std::to_string(first_)}, options);
        const auto counted = std::stoll(*r.rows.at(0).at(0));
        const auto at_most = Attempted();
        std::lock_guard lock(history_.mutex);
        ++history_.reports;
        history_.report_shards_on_replicas += static_cast<std::uint64_t>(r.from_replicas);
        if (counted < static_cast<std::int64_t>(at_least) || counted > at_most) {
          ++history_.report_violations;
          history_.Anomaly(fmt::format("a report counted {} orders: {} were acknowledged before it, {} attempted",
                                       counted, at_least, at_most));
        }
      } catch (const std::exception&) {
        std::lock_guard lock(history_.mutex);
        ++history_.report_errors;
      }
    }
  }

  Cluster& cluster_;
  History& history_;
  const ShardId victim_;
  SnowflakeGenerator& ids_;
  const std::int64_t first_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> attempted_{0};
  std::vector<std::thread> threads_;
};

// SIGKILL to the server's postmaster and its processes, from inside it (a
// superuser's COPY TO PROGRAM: the shell's parent is our backend, whose
// parent is the postmaster), so it works wherever the server runs. One kill
// for all: a postmaster that saw a child die first would signal the child's
// process group, this shell included, and restart the rest.
void KillServer(const Dsn& admin) {
  pqxx::connection c{admin.Reveal()};
  pqxx::nontransaction tx{c};
  try {
    tx.exec(
        "COPY (SELECT 1) TO PROGRAM 'pm=$(cut -d\" \" -f4 /proc/$PPID/stat); kids=$(for p in /proc/[0-9]*; do "
        "[ \"$(cut -d\" \" -f4 $p/stat 2>/dev/null)\" = \"$pm\" ] && echo ${p#/proc/}; done); kill -KILL $pm $kids'");
  } catch (const pqxx::broken_connection&) {
    // Our own backend went with it.
  } catch (const pqxx::sql_error&) {
    // The same, reported as an error of the COPY's program.
  }
}

void SetReplay(const Dsn& replica_admin, bool paused) {
  pqxx::connection c{replica_admin.Reveal()};
  pqxx::nontransaction tx{c};
  tx.exec(paused ? "SELECT pg_wal_replay_pause()" : "SELECT pg_wal_replay_resume()");
}

bool Synchronous(const Dsn& primary_admin) {
  pqxx::connection c{primary_admin.Reveal()};
  pqxx::nontransaction tx{c};
  return !std::string_view(tx.exec1("SHOW synchronous_standby_names")[0].c_str()).empty();
}

// Acknowledged orders that no shard's primary has now.
std::vector<std::int64_t> LostWrites(Cluster& cluster, std::int64_t first_id,
                                     const std::vector<std::int64_t>& acknowledged, std::size_t& rows_found) {
  const ScatterResult rows =
      cluster.Scatter("SELECT order_id FROM orders WHERE order_id >= $1", {std::to_string(first_id)});
  if (static_cast<int>(rows.shards.size()) != cluster.ShardCount()) {
    throw Error(fmt::format("the lost-writes check read {} of {} shards", rows.shards.size(), cluster.ShardCount()));
  }
  std::set<std::int64_t> present;
  rows_found = 0;
  for (const auto& shard : rows.shards) {
    for (const auto& row : shard.rows) {
      present.insert(row[0].as<std::int64_t>());
      ++rows_found;
    }
  }
  std::vector<std::int64_t> lost;
  for (const std::int64_t id : acknowledged) {
    if (present.count(id) == 0) lost.push_back(id);
  }
  return lost;
}

}  // namespace

DemoResult RunReplicas(Lab& lab) {
  return RunReplicas(lab, ReplicasDemoOptions{});
}

DemoResult RunReplicas(Lab& lab, const ReplicasDemoOptions& options) {
  DemoResult r;
  r.name = "replicas";
  const ClusterConfig& config = lab.Config();
  const bool every_shard_has_replicas =
      std::all_of(config.shards.begin(), config.shards.end(), [](const ShardConfig& s) { return !s.replicas.empty(); });
  if (!r.Expect("replicas.configured", every_shard_has_replicas && config.catalog_dsn.has_value(),
                "every shard needs a replica and the configuration a catalog: lab/run replicas starts a cluster "
                "with them")) {
    r.text = "needs a replica per shard and a catalog: run lab/run replicas\n";
    return r;
  }
  const auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const ShardConfig& paused = config.shards.front();
  const ShardConfig& victim = config.shards.back();
  const ShardId victim_id{static_cast<int>(config.shards.size()) - 1};
  const bool synchronous = Synchronous(victim.AdminDsn());

  // Leases on: the forced failover below waits them out, so the killed
  // primary commits no shardkit write if it comes back.
  SetLeaseTtl(config, kLeaseTtl);
  ClusterOptions cluster_options;
  cluster_options.watcher.check_interval = milliseconds(200);
  ReplicaMonitorOptions probes;
  probes.probe_interval = milliseconds(50);
  cluster_options.replicas = probes;
  auto cluster = Cluster::Open(config, cluster_options);
  const OrderIds ids = ClaimOrderIds(*config.catalog_dsn, "bookstore-lab replicas demo", 1002);

  History history;
  Load load{*cluster, history, victim_id, *ids.ids};
  const auto started = Clock::now();
  history.started = started;
  load.Start(options.writers);
  progress("steady load");
  std::this_thread::sleep_for(options.phase);
  progress(fmt::format("{}: replay paused", paused.replicas.front().name));
  SetReplay(paused.replicas.front().AdminDsn(), true);
  history.Event(paused.replicas.front().name + " replay paused");
  std::this_thread::sleep_for(options.phase);
  SetReplay(paused.replicas.front().AdminDsn(), false);
  history.Event("replay resumed");
  progress("replay resumed");
  std::this_thread::sleep_for(options.phase);

  progress(fmt::format("{}: primary killed (SIGKILL)", victim.name));
  {
    std::lock_guard lock(history.mutex);
    history.killed_at = Clock::now();
  }
  history.Event(victim.name + " killed");
  KillServer(victim.AdminDsn());
  // The operator's failover: forced, since the dead primary cannot be fenced.
  FailoverOptions failover_options;
  failover_options.force = true;
  failover_options.requested_by = "bookstore-lab";
  std::optional<FailoverReport> failover;
  std::string failover_error;
  try {
    failover = Failover(config, victim.name, failover_options);
    history.Event(failover->to_server + " promoted");
    progress(fmt::format("{}: {} promoted in {} ms", victim.name, failover->to_server, failover->took.count()));
  } catch (const std::exception& e) {
    failover_error = e.what();
    progress("failover failed: " + failover_error);
  }
  std::this_thread::sleep_for(2 * options.phase);
  load.Stop();
  const auto elapsed = Clock::now() - started;

  std::size_t rows_found = 0;
  const std::vector<std::int64_t> lost = LostWrites(*cluster, load.FirstId(), history.acknowledged, rows_found);
  const double failover_ms =
      history.first_error && history.first_success ? MsBetween(*history.first_error, *history.first_success) : -1;

  r.figures = {{"reads_on_replicas", history.reads_on_replicas},
               {"stale_reads", history.stale_reads},
               {"acknowledged_writes", history.acknowledged.size()},
               {"lost_writes", lost.size()},
               {"failover_ms", failover_ms},
               {"errors_during_failover", history.errors_during_failover},
               {"synchronous_replication", synchronous},
               {"writes_unknown_outcome", history.unknown},
               {"writes_failed", history.failed},
               {"token_reads", history.token_reads},
               {"read_failures", history.read_failures},
               {"replica_fallbacks", history.fallbacks},
               {"reports", history.reports},
               {"report_shard_reads_on_replicas", history.report_shards_on_replicas},
               {"report_errors", history.report_errors},
               {"report_violations", history.report_violations},
               {"rows_found", rows_found},
               {"seconds", std::chrono::duration<double>(elapsed).count()}};
  Json& events = r.figures["timeline_events"] = Json::array();
  for (const auto& [what, at] : history.events) events.push_back({{"event", what}, {"at_s", at}});
  Json& ticks = r.figures["per_half_second"] = Json::array();
  for (std::size_t i = 0; i < history.ticks.size(); ++i) {
    const auto& t = history.ticks[i];
    ticks.push_back({0.5 * static_cast<double>(i), t[0], t[1], t[2], t[3]});
  }
  if (failover) {
    r.figures["failover"] = {{"shard", failover->shard},          {"from", failover->from_server},
                             {"to", failover->to_server},         {"epoch", failover->epoch},
                             {"took_ms", failover->took.count()}, {"loss", failover->loss}};
  }

  r.Expect("replicas.no_stale_reads", history.stale_reads == 0,
           fmt::format("{} of {} reads given their write's token missed it", history.stale_reads, history.token_reads));
  r.Expect("replicas.reads_on_replicas", history.reads_on_replicas > 0,
           fmt::format("{} of {} token reads on a replica", history.reads_on_replicas, history.token_reads));
  r.Expect("replicas.fallbacks", history.fallbacks > 0,
           fmt::format("{} reads left a replica that had not replayed their token (replay paused) for another "
                       "server",
                       history.fallbacks));
  r.Expect("replicas.reports_exact", history.reports > 0 && history.report_violations == 0,
           fmt::format("{} reports on the replicas, {} outside [acknowledged, attempted]", history.reports,
                       history.report_violations));
  r.Expect("replicas.failover", failover.has_value(), failover ? failover->to_server : failover_error);
  r.Expect("replicas.leases_waited_out",
           failover && failover->loss.find("leases ran out before the promotion") != std::string::npos,
           failover ? failover->loss : failover_error);
  r.Expect("replicas.writes_after_failover", history.first_success.has_value() || !history.first_error,
           history.first_success
               ? fmt::format("the first write on the new primary {:.0f} ms after the first error", failover_ms)
               : "no write succeeded on the new primary");
  if (synchronous) {
    r.Expect("replicas.no_lost_writes", lost.empty(),
             fmt::format("{} of {} acknowledged writes missing{}", lost.size(), history.acknowledged.size(),
                         lost.empty() ? "" : fmt::format(", e.g. order {}", lost.front())));
  }

  std::string text = fmt::format(
      "{} writers placed orders and read each back with its token (replica preferred, max lag 1 s), a reporter "
      "counted them on the replicas; {} replication.\n",
      options.writers, synchronous ? "synchronous" : "asynchronous");
  const auto line = [&](const std::string& what, const std::string& value) {
    text += fmt::format("  {:<34} {}\n", what, value);
  };
  line("acknowledged writes", Thousands(static_cast<std::int64_t>(history.acknowledged.size())));
  line("lost writes", std::to_string(lost.size()) + (synchronous ? "" : " (asynchronous: may be > 0)"));
  line("outcome unknown / failed", fmt::format("{} / {}", history.unknown, history.failed));
  line("token reads on replicas", fmt::format("{} of {}", history.reads_on_replicas, history.token_reads));
  line("stale reads", std::to_string(history.stale_reads));
  line("fallbacks from a replica", std::to_string(history.fallbacks));
  line("reports (shard reads on replicas)",
       fmt::format("{} ({}), {} wrong", history.reports, history.report_shards_on_replicas, history.report_violations));
  line("failover",
       failover ? fmt::format("{} -> {} in {} ms", failover->from_server, failover->to_server, failover->took.count())
                : "FAILED: " + failover_error);
  line("primary leases", fmt::format("on ({} ms): the failover waited them out before promoting", kLeaseTtl.count()));
  line("outage seen by writers",
       failover_ms < 0 ? std::string("none seen")
                       : fmt::format("{:.0f} ms, {} errors", failover_ms, history.errors_during_failover));
  for (const auto& a : history.anomalies) text += "  anomaly: " + a + "\n";
  r.text = text;
  return r;
}

}  // namespace shardkit::lab
