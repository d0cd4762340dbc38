// Demo 9 (seed 001's exercise): rebalance under load. From the shards that
// hold the buckets now to those plus one empty shard, and back, while writer
// threads place orders with items through the routed write API (shardkit
// IDs) and reader threads ask "my orders" and a cross-shard report. Then a
// checker in the Jepsen style: every acknowledged order exists exactly once,
// with all its items, on the shard that owns its bucket; outcome-unknown
// writes are reported apart; the union of the shards equals the reference;
// the report never counted a bucket twice or missed one.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/writes/routed.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct DemoOrder {
  CustomerId customer{};
  std::int64_t order_id = 0;
  int items = 0;
  std::int64_t total_cents = 0;
  std::string ordered_at;  // microseconds since the epoch, the same on the shard and the reference
};

// One second of the timeline.
struct Second {
  std::uint64_t ok = 0, retried = 0, failed = 0, unknown = 0;
  std::uint64_t reads = 0, read_retried = 0, read_failed = 0;
  std::vector<double> latency_ms;
  std::string phase;
};

class Recorder {
 public:
  explicit Recorder(Clock::time_point start) : start_(start) {}
  void Phase(std::string name) {
    std::lock_guard lock(mutex_);
    phase_ = std::move(name);
  }
  Second& At(Clock::time_point t) {  // mutex held by the caller
    const auto s = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::seconds>(t - start_).count());
    if (seconds_.size() <= s) seconds_.resize(s + 1);
    if (seconds_[s].phase.empty()) seconds_[s].phase = phase_;
    return seconds_[s];
  }
  void Write(Clock::time_point began, Clock::time_point ended, bool ok, bool retried, bool unknown) {
    std::lock_guard lock(mutex_);
    Second& s = At(ended);
    if (unknown) {
      ++s.unknown;
    } else if (!ok) {
      ++s.failed;
    } else {
      ++s.ok;
      if (retried) ++s.retried;
      s.latency_ms.push_back(Millis(ended - began));
    }
  }
  void Read(Clock::time_point ended, bool ok, bool retried) {
    std::lock_guard lock(mutex_);
    Second& s = At(ended);
    ++s.reads;
    if (retried) ++s.read_retried;
    if (!ok) ++s.read_failed;
  }
  std::vector<Second> Seconds() const {
    std::lock_guard lock(mutex_);
    return seconds_;
  }

 private:
  Clock::time_point start_;
  mutable std::mutex mutex_;
  std::string phase_ = "before";
  std::vector<Second> seconds_;
};

std::string LabNowParam() { return fmt::format("{}", kLabNow); }

// The cross-shard report: orders and their total up to the lab's "now" (the
// loaded data; the demo's own orders come later), in cents.
constexpr const char* kReportSql =
    "SELECT count(*)::bigint, coalesce(sum(total * 100), 0)::bigint FROM orders WHERE ordered_at <= to_timestamp($1)";
// "My orders" up to the lab's "now".
constexpr const char* kMyOrdersSql =
    "SELECT count(*)::bigint FROM orders WHERE customer_id = $1 AND ordered_at <= to_timestamp($2)";

// Per table, a count and checksums of the rows (every row a shard holds,
// whichever bucket): the union of the shards must equal the reference.
const std::vector<std::pair<std::string, std::string>>& TableSums() {
  static const std::vector<std::pair<std::string, std::string>> sums{
      {"customers", "SELECT count(*)::bigint, coalesce(sum(customer_id::bigint), 0)::bigint, 0::bigint FROM customers"},
      {"orders",
       "SELECT count(*)::bigint, coalesce(sum(total * 100), 0)::bigint, coalesce(sum(order_id % 1000003), 0)::bigint "
       "FROM orders"},
      {"order_items",
       "SELECT count(*)::bigint, coalesce(sum(quantity::bigint * (line_no + 1)), 0)::bigint, "
       "coalesce(sum(order_id % 1000003), 0)::bigint FROM order_items"},
  };
  return sums;
}

using Sums = std::map<std::string, std::array<std::int64_t, 3>>;

Sums SumsOf(const Dsn& dsn, bool all_buckets) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::work tx{c};
  if (all_buckets) tx.exec("SET LOCAL shardkit.buckets = 'all'");
  Sums out;
  for (const auto& [table, sql] : TableSums()) {
    const auto row = tx.exec1(sql);
    out[table] = {row[0].as<std::int64_t>(), row[1].as<std::int64_t>(), row[2].as<std::int64_t>()};
  }
  return out;
}

void InsertOrder(pqxx::transaction_base& tx, const DemoOrder& o, BucketId bucket) {
  tx.exec_params(
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
      "VALUES ($1, $2, $3, to_timestamp($4::double precision / 1000000), 'placed', $5::numeric / 100)",
      o.customer, bucket, o.order_id, o.ordered_at, o.total_cents);
  tx.exec_params(
      "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
      "SELECT $1, $2, $3::bigint, n, 1 + (($3::bigint + n) % 50), 1 + n % 2, 9.99 FROM generate_series(1, $4::int) AS n",
      o.customer, bucket, o.order_id, o.items);
}

std::string Sets(const std::vector<ShardId>& shards) {
  std::string out;
  for (const ShardId s : shards) out += fmt::format("{}{}", out.empty() ? "" : ",", ToInt(s));
  return "{" + out + "}";
}

}  // namespace

DemoResult RunRebalance(Lab& lab) {
  RebalanceDemoOptions options;
  // Progress on stderr, so it does not disturb --json on stdout.
  options.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  return RunRebalance(lab, options);
}

DemoResult RunRebalance(Lab& lab, const RebalanceDemoOptions& options) {
  DemoResult r;
  r.name = "rebalance";
  const ClusterConfig& config = lab.Config();
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  if (!config.catalog_dsn) {
    r.Expect("rebalance.ran", false, "the config has no [catalog] dsn: moves keep their journal there");
    r.text = "error: the config has no [catalog] dsn\n";
    return r;
  }
  BucketShardResolver& resolver = lab.Resolver();
  DirectoryWatcherOptions watcher_options;
  watcher_options.check_interval = 200ms;
  DirectoryWatcher watcher{resolver, *config.catalog_dsn, watcher_options};
  watcher.RefreshNow();
  const BucketDirectory start_directory = *resolver.Directory();

  // From the shards holding buckets to those plus the first empty one.
  std::vector<ShardId> from;
  std::optional<ShardId> extra;
  for (int s = 0; s < lab.ShardCount(); ++s) {
    if (BucketSet::Of(start_directory, ShardId{s}).Size() > 0) {
      from.push_back(ShardId{s});
    } else if (!extra) {
      extra = ShardId{s};
    }
  }
  if (!extra) {
    const std::string why = fmt::format(
        "every shard of the config holds buckets; the demo needs an empty one to grow to (lab/cluster add-shard)");
    r.Expect("rebalance.ran", false, why);
    r.text = "error: " + why + "\n";
    return r;
  }
  std::vector<ShardId> to = from;
  to.push_back(*extra);

  // The ground truth for the readers, from the reference.
  std::int64_t report_count = 0, report_cents = 0;
  std::vector<std::pair<CustomerId, std::int64_t>> sample;  // customer, orders up to kLabNow
  {
    pqxx::read_transaction tx{lab.Reference()};
    const auto row = tx.exec_params1(kReportSql, LabNowParam());
    report_count = row[0].as<std::int64_t>();
    report_cents = row[1].as<std::int64_t>();
    for (const auto& c : tx.exec_params("SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = "
                                        "c.customer_id AND o.ordered_at <= to_timestamp($1)) FROM customers c "
                                        "ORDER BY hashint4(c.customer_id) LIMIT 1000",
                                        LabNowParam())) {
      sample.emplace_back(CustomerId{c[0].as<int>()}, c[1].as<std::int64_t>());
    }
  }
  if (sample.empty()) {
    r.Expect("rebalance.ran", false, "no customers loaded: run lab/run load first");
    r.text = "error: no customers loaded\n";
    return r;
  }

  // Order ids: Snowflake IDs from a leased worker id (a fixed one if the
  // catalog has no lease table).
  SnowflakeOptions id_options;
  id_options.epoch_unix_ms = kLabIdEpochMs;
  std::shared_ptr<WorkerLease> id_lease;
  std::unique_ptr<SnowflakeGenerator> ids;
  try {
    WorkerLeaseOptions lo;
    lo.id_space = "bookstore-lab-orders";
    lo.owner = "bookstore-lab rebalance demo";
    id_lease = WorkerLease::Claim(*config.catalog_dsn, lo);
    ids = std::make_unique<SnowflakeGenerator>(id_lease, id_options);
  } catch (const Error&) {
    ids = std::make_unique<SnowflakeGenerator>(1001, id_options);
  }

  RoutedTransactions routed{resolver, &watcher};
  ScatterGather& scatter = lab.Scatter();
  scatter.FollowDirectory(&watcher);
  const auto started = Clock::now();
  Recorder recorder{started};
  std::atomic<bool> stop{false};
  std::mutex orders_mutex;
  std::vector<DemoOrder> acknowledged, unknown;
  std::uint64_t failed_writes = 0;
  std::atomic<std::uint64_t> report_runs{0}, report_wrong{0}, report_failed{0};
  std::atomic<std::uint64_t> my_orders_runs{0}, my_orders_wrong{0}, my_orders_failed{0};
  std::vector<std::string> read_errors;  // first few, for the text
  std::vector<std::string> write_errors;

  std::vector<std::thread> threads;
  for (int w = 0; w < options.writers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 random(static_cast<std::uint64_t>(w) * 7919 + 1);
      pqxx::connection reference{lab.ReferenceDsn().Reveal()};
      const auto period = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(1.0 / std::max(1.0, options.orders_per_second_per_writer)));
      auto next = Clock::now();
      while (!stop.load()) {
        next += period;
        std::this_thread::sleep_until(next);  // pacing the load, not synchronising
        DemoOrder o;
        o.customer = sample[random() % sample.size()].first;
        o.order_id = ids->Next();
        o.items = 1 + static_cast<int>(random() % 3);
        o.total_cents = 999 * o.items;
        o.ordered_at = fmt::format("{}", std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
        RoutedOptions ro;
        ro.deadline = Clock::now() + 5s;
        ro.label = "place order";
        RoutedOutcome outcome;
        const auto began = Clock::now();
        try {
          routed.Run(
              o.customer, [&](pqxx::transaction_base& tx, const RoutedContext& at) { InsertOrder(tx, o, at.bucket); },
              ro, &outcome);
          recorder.Write(began, Clock::now(), true, outcome.attempts > 1, false);
          {
            std::lock_guard lock(orders_mutex);
            acknowledged.push_back(o);
          }
          // The reference keeps the acknowledged orders, for the union check
          // (a failure here shows there as a difference).
          try {
            pqxx::work ref{reference};
            InsertOrder(ref, o, BucketOf(o.customer));
            ref.commit();
          } catch (const std::exception& e) {
            std::lock_guard lock(orders_mutex);
            if (write_errors.size() < 3) write_errors.push_back(std::string("mirroring to the reference: ") + e.what());
          }
        } catch (const OutcomeUnknown&) {
          recorder.Write(began, Clock::now(), false, false, true);
          std::lock_guard lock(orders_mutex);
          unknown.push_back(o);
        } catch (const std::exception& e) {
          recorder.Write(began, Clock::now(), false, false, false);
          std::lock_guard lock(orders_mutex);
          ++failed_writes;
          if (write_errors.size() < 3) write_errors.emplace_back(e.what());
        }
      }
    });
  }
  for (int rd = 0; rd < options.readers; ++rd) {
    threads.emplace_back([&, rd] {
      std::mt19937_64 random(static_cast<std::uint64_t>(rd) * 104729 + 7);
      std::uint64_t n = 0;
      while (!stop.load()) {
        ++n;
        if (n % 4 == 0) {
          // The cross-shard report: each shard answers for the buckets the
          // scatter's directory version gives it.
          try {
            ScatterOptions so;
            so.deadline = Clock::now() + 10s;
            const auto result = scatter.Run(kReportSql, {LabNowParam()}, so);
            std::int64_t count = 0, cents = 0;
            for (const auto& shard : result.shards) {
              for (const auto& row : shard.rows) {
                count += row[0].as<std::int64_t>();
                cents += row[1].as<std::int64_t>();
              }
            }
            ++report_runs;
            if (count != report_count || cents != report_cents) {
              ++report_wrong;
              std::lock_guard lock(orders_mutex);
              if (read_errors.size() < 3) {
                read_errors.push_back(fmt::format("report: {} orders / {} cents, the reference {} / {}", count, cents,
                                                  report_count, report_cents));
              }
            }
            recorder.Read(Clock::now(), true, false);
          } catch (const std::exception& e) {
            ++report_failed;
            recorder.Read(Clock::now(), false, false);
            std::lock_guard lock(orders_mutex);
            if (read_errors.size() < 3) read_errors.emplace_back(e.what());
          }
        } else {
          const auto& [customer, expected] = sample[random() % sample.size()];
          RoutedOptions ro;
          ro.deadline = Clock::now() + 5s;
          ro.read_only = true;
          ro.label = "my orders";
          RoutedOutcome outcome;
          try {
            const auto got = routed.Run(
                customer,
                [&](pqxx::transaction_base& tx, const RoutedContext&) {
                  return tx.exec_params1(kMyOrdersSql, customer, LabNowParam())[0].as<std::int64_t>();
                },
                ro, &outcome);
            ++my_orders_runs;
            if (got != expected) {
              ++my_orders_wrong;
              std::lock_guard lock(orders_mutex);
              if (read_errors.size() < 3) {
                read_errors.push_back(fmt::format("my orders of {}: {}, the reference {}", customer, got, expected));
              }
            }
            recorder.Read(Clock::now(), true, outcome.attempts > 1);
          } catch (const std::exception& e) {
            ++my_orders_failed;
            recorder.Read(Clock::now(), false, false);
            std::lock_guard lock(orders_mutex);
            if (read_errors.size() < 3) read_errors.emplace_back(e.what());
          }
        }
      }
    });
  }

  // The moves: there, a pause, back.
  std::vector<MoveRecord> moved;
  std::vector<std::string> move_failures;
  RebalanceOptions ro;
  ro.parallel = options.parallel;
  ro.move.cleanup_grace = options.cleanup_grace;
  ro.on_progress = [&](const RebalanceProgress& p) {
    if (p.move.state == MoveState::kDone) {
      say(fmt::format("  bucket {:>2} {} -> {} done ({} of {}): {} rows, stall {:.1f} ms", p.move.bucket,
                      lab.ShardLabel(p.move.source), lab.ShardLabel(p.move.target), p.finished, p.total,
                      p.move.rows_copied, p.move.stall_ms.value_or(0)));
    }
  };
  std::this_thread::sleep_for(options.settle);  // load before the moves, for the timeline
  const auto moves_started = Clock::now();
  std::array<double, 2> leg_seconds{};
  for (int leg = 0; leg < 2 && move_failures.empty(); ++leg) {
    const auto& target = leg == 0 ? to : from;
    recorder.Phase(leg == 0 ? fmt::format("to {}", Sets(to)) : fmt::format("back to {}", Sets(from)));
    auto plan = PlanRebalance(*resolver.Directory(), target);
    if (leg == 0 && options.max_moves > 0 && plan.moves.size() > static_cast<std::size_t>(options.max_moves)) {
      plan.moves.resize(static_cast<std::size_t>(options.max_moves));
    }
    say(fmt::format("rebalance to shards {}: {} moves", Sets(target), plan.moves.size()));
    const auto leg_start = Clock::now();
    try {
      const RebalanceReport report = ApplyRebalance(config, plan, ro);
      moved.insert(moved.end(), report.moves.begin(), report.moves.end());
      move_failures.insert(move_failures.end(), report.failures.begin(), report.failures.end());
      for (const auto& m : report.not_started) {
        move_failures.push_back(fmt::format("bucket {} {} -> {} not started", m.bucket, m.from, m.to));
      }
    } catch (const std::exception& e) {
      move_failures.emplace_back(e.what());
    }
    leg_seconds[static_cast<std::size_t>(leg)] = std::chrono::duration<double>(Clock::now() - leg_start).count();
    if (leg == 0) {
      recorder.Phase("between");
      std::this_thread::sleep_for(options.settle);
    }
  }
  const double moves_seconds = std::chrono::duration<double>(Clock::now() - moves_started).count();
  recorder.Phase("after");
  std::this_thread::sleep_for(options.settle);
  stop = true;
  for (auto& t : threads) t.join();
  scatter.FollowDirectory(nullptr);
  const double total_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  // ------------------------------------------------------------ checker
  watcher.RefreshNow();
  const BucketDirectory final_directory = *resolver.Directory();
  // Unknown outcomes: look them up; one that committed joins the reference.
  std::int64_t unknown_committed = 0;
  std::vector<DemoOrder> checked = acknowledged;
  {
    pqxx::connection reference{lab.ReferenceDsn().Reveal()};
    for (const auto& o : unknown) {
      const ShardConfig& shard = config.shards[static_cast<std::size_t>(ToInt(final_directory.ShardFor(o.customer)))];
      pqxx::connection c{shard.dsn.Reveal()};
      pqxx::read_transaction tx{c};
      if (tx.exec_params1("SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2", o.customer,
                          o.order_id)[0]
              .as<int>() > 0) {
        ++unknown_committed;
        pqxx::work ref{reference};
        InsertOrder(ref, o, BucketOf(o.customer));
        ref.commit();
      }
    }
  }
  // Every acknowledged order: where it is, how often, with how many items.
  std::map<std::int64_t, std::vector<std::pair<ShardId, int>>> found;  // order -> (shard, items)
  {
    std::vector<std::int64_t> order_ids;
    order_ids.reserve(checked.size());
    for (const auto& o : checked) order_ids.push_back(o.order_id);
    std::string array = "{";
    for (std::size_t i = 0; i < order_ids.size(); ++i) array += fmt::format("{}{}", i ? "," : "", order_ids[i]);
    array += "}";
    for (int s = 0; s < lab.ShardCount(); ++s) {
      pqxx::connection c{config.shards[static_cast<std::size_t>(s)].dsn.Reveal()};
      pqxx::work tx{c};
      tx.exec("SET LOCAL shardkit.buckets = 'all'");  // every row the shard holds
      for (const auto& row : tx.exec_params(
               "SELECT o.order_id, (SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id AND "
               "i.order_id = o.order_id) FROM orders o WHERE o.order_id = ANY($1::bigint[])",
               array)) {
        found[row[0].as<std::int64_t>()].emplace_back(ShardId{s}, row[1].as<int>());
      }
    }
  }
  std::int64_t lost = 0, duplicated = 0, misplaced = 0, short_items = 0;
  for (const auto& o : checked) {
    const auto it = found.find(o.order_id);
    if (it == found.end()) {
      ++lost;
      continue;
    }
    if (it->second.size() > 1) ++duplicated;
    for (const auto& [shard, items] : it->second) {
      if (shard != final_directory.ShardFor(o.customer)) ++misplaced;
      if (items != o.items) ++short_items;
    }
  }
  // The union of the shards (every row they hold) equals the reference.
  Sums shards_sum;
  for (const auto& shard : config.shards) {
    for (const auto& [table, v] : SumsOf(shard.dsn, true)) {
      auto& total = shards_sum[table];
      for (std::size_t i = 0; i < v.size(); ++i) total[i] += v[i];
    }
  }
  const Sums reference_sum = SumsOf(lab.ReferenceDsn(), false);
  std::string union_detail;
  for (const auto& [table, v] : reference_sum) {
    const auto& got = shards_sum[table];
    union_detail += fmt::format("{}{}: shards {} rows, reference {}{}", union_detail.empty() ? "" : "; ", table,
                                got[0], v[0], got == v ? "" : " (checksums differ)");
  }
  const auto leftovers = LeftoverReplicationObjects(config);
  std::size_t live_moves = 0;
  {
    BucketMover mover{config};
    live_moves = mover.List(true).size();
  }
  std::int64_t directory_differs = 0;
  for (const BucketId b : AllBuckets()) {
    if (final_directory.ShardOf(b) != start_directory.ShardOf(b)) ++directory_differs;
  }

  // ------------------------------------------------------------ figures
  const auto seconds = recorder.Seconds();
  std::uint64_t ok = 0, retried = 0, failed = 0, unknown_count = 0;
  std::vector<double> all_latency;
  Json timeline = Json::array();
  std::string timeline_text;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    const auto& s = seconds[i];
    ok += s.ok;
    retried += s.retried;
    failed += s.failed;
    unknown_count += s.unknown;
    all_latency.insert(all_latency.end(), s.latency_ms.begin(), s.latency_ms.end());
    const double p50 = Quantile(s.latency_ms, 0.5), p99 = Quantile(s.latency_ms, 0.99),
                 max = s.latency_ms.empty() ? 0 : *std::max_element(s.latency_ms.begin(), s.latency_ms.end());
    timeline.push_back({{"second", i}, {"phase", s.phase}, {"writes_ok", s.ok}, {"writes_retried", s.retried},
                        {"writes_failed", s.failed}, {"writes_unknown", s.unknown}, {"p50_ms", p50},
                        {"p99_ms", p99}, {"max_ms", max}, {"reads", s.reads}, {"reads_retried", s.read_retried},
                        {"reads_failed", s.read_failed}});
    timeline_text += fmt::format("  {:>3}  {:<14} {:>5} {:>7} {:>6} {:>7}  {:>7.1f} {:>7.1f} {:>7.1f}  {:>5}\n", i,
                                 s.phase, s.ok, s.retried, s.failed, s.unknown, p50, p99, max, s.reads);
  }
  std::vector<double> stalls;
  std::int64_t rows_moved = 0;
  Json stall_json = Json::array();
  std::string stall_text;
  for (const auto& m : moved) {
    stalls.push_back(m.stall_ms.value_or(0));
    rows_moved += m.rows_copied;
    stall_json.push_back({{"move_id", m.move_id}, {"bucket", ToInt(m.bucket)}, {"from", ToInt(m.source)},
                          {"to", ToInt(m.target)}, {"rows", m.rows_copied}, {"copy_ms", m.copy_ms.value_or(0)},
                          {"stall_ms", m.stall_ms.value_or(0)}});
    stall_text += fmt::format("  bucket {:>2}  {} -> {}  {:>7} rows  copy {:>7.1f} ms  stall {:>6.1f} ms\n", m.bucket,
                              lab.ShardLabel(m.source), lab.ShardLabel(m.target), m.rows_copied,
                              m.copy_ms.value_or(0), m.stall_ms.value_or(0));
  }
  const double max_stall = stalls.empty() ? 0 : *std::max_element(stalls.begin(), stalls.end());
  const double median_stall = Quantile(stalls, 0.5);

  r.figures["from_shards"] = Sets(from);
  r.figures["to_shards"] = Sets(to);
  r.figures["writers"] = options.writers;
  r.figures["readers"] = options.readers;
  r.figures["parallel"] = options.parallel;
  r.figures["acknowledged_writes"] = acknowledged.size();
  r.figures["lost_writes"] = lost;
  r.figures["duplicate_writes"] = duplicated;
  r.figures["misplaced_writes"] = misplaced;
  r.figures["incomplete_writes"] = short_items;
  r.figures["unknown_writes"] = unknown.size();
  r.figures["unknown_writes_committed"] = unknown_committed;
  r.figures["failed_writes"] = failed;
  r.figures["retried_writes"] = retried;
  r.figures["buckets_moved"] = moved.size();
  r.figures["rows_moved"] = rows_moved;
  r.figures["max_stall_ms"] = max_stall;
  r.figures["median_stall_ms"] = median_stall;
  r.figures["write_p50_ms"] = Quantile(all_latency, 0.5);
  r.figures["write_p99_ms"] = Quantile(all_latency, 0.99);
  r.figures["moves_seconds"] = moves_seconds;
  r.figures["there_seconds"] = leg_seconds[0];
  r.figures["back_seconds"] = leg_seconds[1];
  r.figures["total_seconds"] = total_seconds;
  r.figures["report_runs"] = report_runs.load();
  r.figures["report_wrong"] = report_wrong.load();
  r.figures["report_failed"] = report_failed.load();
  r.figures["my_orders_runs"] = my_orders_runs.load();
  r.figures["my_orders_wrong"] = my_orders_wrong.load();
  r.figures["my_orders_failed"] = my_orders_failed.load();
  r.figures["timeline"] = timeline;
  r.figures["moves"] = stall_json;

  r.Expect("rebalance.moves_finished", move_failures.empty(),
           move_failures.empty() ? fmt::format("{} buckets moved there and back", moved.size())
                                 : fmt::format("{} move(s) failed: {}", move_failures.size(), move_failures.front()));
  r.Expect("rebalance.no_lost_writes", lost == 0,
           fmt::format("{} of {} acknowledged orders missing", lost, acknowledged.size()));
  r.Expect("rebalance.no_duplicate_writes", duplicated == 0, fmt::format("{} orders on more than one shard", duplicated));
  r.Expect("rebalance.on_the_owning_shard", misplaced == 0,
           fmt::format("{} order copies on a shard that does not own their bucket", misplaced));
  r.Expect("rebalance.all_items", short_items == 0, fmt::format("{} orders with items missing or extra", short_items));
  r.Expect("rebalance.union_equals_reference", shards_sum == reference_sum, union_detail);
  r.Expect("rebalance.report_never_double_counted", report_wrong == 0 && report_runs > 0,
           fmt::format("{} reports, {} differed from the reference, {} failed", report_runs.load(),
                       report_wrong.load(), report_failed.load()));
  r.Expect("rebalance.my_orders_exact", my_orders_wrong == 0 && my_orders_runs > 0,
           fmt::format("{} reads, {} differed from the reference, {} failed", my_orders_runs.load(),
                       my_orders_wrong.load(), my_orders_failed.load()));
  r.Expect("rebalance.no_replication_objects_left", leftovers.empty() && live_moves == 0,
           leftovers.empty() ? fmt::format("none; {} live moves", live_moves)
                             : fmt::format("{} left, e.g. {}", leftovers.size(), leftovers.front()));
  r.Expect("rebalance.directory_back_to_start", directory_differs == 0,
           fmt::format("{} buckets elsewhere than at the start", directory_differs));

  std::string text = fmt::format(
      "Rebalance under load: shards {} -> {} -> {}; {} writer threads (orders with items, routed), {} readers "
      "(my orders, a cross-shard report)\n\n"
      "  sec  phase             ok retried failed unknown    p50 ms  p99 ms  max ms  reads\n{}\n"
      "Per bucket:\n{}\n"
      "Buckets moved: {} ({} rows); stall per bucket median {:.1f} ms, max {:.1f} ms; moves took {:.1f} s "
      "(there {:.1f} s, back {:.1f} s); total {:.1f} s\n"
      "Writes: {} acknowledged ({} after a retry), {} failed, {} outcome unknown ({} of them committed); "
      "lost {}, duplicated {}\n",
      Sets(from), Sets(to), Sets(from), options.writers, options.readers, timeline_text, stall_text, moved.size(),
      rows_moved, median_stall, max_stall, moves_seconds, leg_seconds[0], leg_seconds[1], total_seconds,
      acknowledged.size(), retried, failed, unknown.size(), unknown_committed, lost, duplicated);
  for (const auto& e : write_errors) text += "  a failed write: " + e + "\n";
  for (const auto& e : read_errors) text += "  a read: " + e + "\n";
  text += "Checks:\n";
  for (const auto& c : r.checks) text += fmt::format("  {} {}: {}\n", c.ok ? "ok  " : "FAIL", c.name, c.detail);
  r.text = std::move(text);
  return r;
}

}  // namespace shardkit::lab
