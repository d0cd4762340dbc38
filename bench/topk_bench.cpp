// Top-10 best sellers of the last 30 days on a seed-001-sized data set, over
// the local cluster: the per-shard shortcut (NOT exact), all partials (exact),
// TPUT (exact, three phases in one snapshot per shard) and auto (exact:
// TPUT or the rest of the partials, chosen after phase 1) — rows transferred
// and time for each, next to the single
// unsharded reference server. Plus in-memory simulations of TPUT at larger
// scale and more shards (rows only; no servers needed).
//
// Two sales shapes, same volumes (39,875 orders in the window, 1-3 items
// each, 30,000 books; plus older history outside the window):
//   flat   — the Bookstore case / the lab: ~2,000 "hot" books sell 14-18 copies each,
//            the rest of the catalogue a few; best sellers barely stand out.
//   zipf   — a long-tailed catalogue: book popularity Zipf(s = 0.9).
//
//   build/bench/topk_bench                       # $SHARDKIT_CONFIG or .cluster/shardkit.toml
//   TOPK_BENCH_HISTORY_ORDERS=400000 build/bench/topk_bench --benchmark_filter=flat
//   TOPK_BENCH_KEEP=1 ...   # leave the scratch databases topk_bench_<pid> behind
//   TOPK_BENCH_BIG=1 build/bench/topk_bench --benchmark_filter=big/   # 8 shards, 1.2M keys (opt-in)
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memory_topk_source.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/topk.hpp"
#include "shardkit/routing/resolver.hpp"
#include "topk_bench_data.hpp"
#include "topk_shortcut.hpp"

namespace shardkit {
namespace {

using bench::BigCluster;
using bench::Clock;
using bench::I64;
using bench::kTop;
using bench::Scenario;
using bench::WithDatabase;
constexpr int kBooks = 30000;
constexpr int kHotBooks = 2000;
constexpr int kWindowOrders = 39875;
constexpr int kCustomers = 100000;
constexpr I64 kNow = 1794614400;  // 2026-11-14 00:00 UTC: a fixed "now"
constexpr I64 kWindow = 30LL * 86400;

std::string Timestamp(I64 unix_seconds) {
  const auto tp = std::chrono::sys_seconds{std::chrono::seconds{unix_seconds}};
  const auto day = std::chrono::floor<std::chrono::days>(tp);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{tp - day};
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}+00", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), hms.hours().count(),
                     hms.minutes().count(), hms.seconds().count());
}

struct OrderRow {
  CustomerId customer;
  I64 order_id;
  I64 ordered_at;
  std::vector<I64> books;
};

// The orders of one shape: the window and the older history.
std::vector<OrderRow> GenerateOrders(const std::string& shape, int history_orders) {
  std::mt19937_64 rng(1);
  std::vector<OrderRow> orders;
  std::vector<int> items_per_order;
  auto customer = [&] { return CustomerId{std::uniform_int_distribution<std::int32_t>(1, kCustomers)(rng)}; };
  std::vector<double> zipf_cdf;
  double zipf_sum = 0;
  for (int r = 1; r <= kBooks; ++r) zipf_cdf.push_back(zipf_sum += 1.0 / std::pow(r, 0.9));
  std::vector<I64> permutation(kBooks);
  for (int i = 0; i < kBooks; ++i) permutation[static_cast<std::size_t>(i)] = i + 1;
  std::shuffle(permutation.begin(), permutation.end(), rng);
  auto zipf_book = [&] {
    const double u = std::uniform_real_distribution<double>(0, zipf_sum)(rng);
    return permutation[static_cast<std::size_t>(std::lower_bound(zipf_cdf.begin(), zipf_cdf.end(), u) -
                                                zipf_cdf.begin())];
  };

  // Window: decide the order sizes, then which book each line sells.
  std::size_t lines = 0;
  for (int o = 0; o < kWindowOrders; ++o) {
    items_per_order.push_back(std::uniform_int_distribution<int>(1, 3)(rng));
    lines += static_cast<std::size_t>(items_per_order.back());
  }
  std::vector<I64> line_books;
  line_books.reserve(lines);
  if (shape == "flat") {
    // ~2,000 hot books sell 14-18 copies each; the rest spread thinly.
    for (int h = 0; h < kHotBooks && line_books.size() < lines; ++h) {
      const int copies = std::uniform_int_distribution<int>(14, 18)(rng);
      for (int c = 0; c < copies; ++c) line_books.push_back(permutation[static_cast<std::size_t>(h)]);
    }
    while (line_books.size() < lines) {
      line_books.push_back(
          permutation[static_cast<std::size_t>(std::uniform_int_distribution<int>(kHotBooks, kBooks - 1)(rng))]);
    }
    std::shuffle(line_books.begin(), line_books.end(), rng);
  } else {
    while (line_books.size() < lines) line_books.push_back(zipf_book());
  }
  I64 next_id = 1;
  std::size_t line = 0;
  for (int o = 0; o < kWindowOrders; ++o) {
    OrderRow row{customer(), next_id++, kNow - 1 - std::uniform_int_distribution<I64>(0, kWindow - 2)(rng), {}};
    for (int i = 0; i < items_per_order[static_cast<std::size_t>(o)]; ++i) row.books.push_back(line_books[line++]);
    orders.push_back(std::move(row));
  }
  // History: older than the window, Zipf-popular books.
  for (int o = 0; o < history_orders; ++o) {
    OrderRow row{
        customer(), next_id++, kNow - kWindow - 1 - std::uniform_int_distribution<I64>(0, 4 * 365 * 86400LL)(rng), {}};
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int i = 0; i < n; ++i) row.books.push_back(zipf_book());
    orders.push_back(std::move(row));
  }
  return orders;
}

// The scratch databases, the data and a resolver over them; made once.
class Cluster {
 public:
  static Cluster* Get() {
    static std::unique_ptr<Cluster> instance = [] {
      try {
        return std::make_unique<Cluster>();
      } catch (const std::exception& e) {
        fmt::print(stderr, "topk_bench: no cluster ({}); database benchmarks are skipped\n", e.what());
        return std::unique_ptr<Cluster>();
      }
    }();
    return instance.get();
  }

  Cluster() {
    std::filesystem::path path = "/work/main/.cluster/shardkit.toml";
    if (const char* env = std::getenv("SHARDKIT_CONFIG"); env != nullptr && *env != '\0') path = env;
    config_ = LoadConfig(path);
    if (!config_.reference_dsn) throw std::runtime_error(path.string() + " has no [reference] server");
    int history = 80000;
    if (const char* env = std::getenv("TOPK_BENCH_HISTORY_ORDERS"); env != nullptr) history = std::atoi(env);
    database_ = fmt::format("topk_bench_{}", ::getpid());
    config_.directory = BucketDirectory::EvenSplit(static_cast<int>(config_.shards.size()));
    config_.directory_source = DirectorySource::kConfig;
    try {
      for (auto* dsn : Dsns(config_)) {
        created_.push_back(*dsn);
        Exec(*dsn, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", database_));
        Exec(*dsn, fmt::format("CREATE DATABASE {}", database_));
        *dsn = WithDatabase(*dsn, database_);
      }
      resolver_ = BucketShardResolver::FromConfig(config_);
      scatter_ = std::make_unique<ScatterGather>(*resolver_);
      for (const char* shape : {"flat", "zipf"}) Load(shape, history);
    } catch (...) {
      DropDatabases();
      throw;
    }
  }

  ~Cluster() {
    scatter_.reset();
    resolver_.reset();
    if (const char* keep = std::getenv("TOPK_BENCH_KEEP"); keep != nullptr && *keep == '1') {
      fmt::print("kept the databases {} for inspection\n", database_);
      return;
    }
    DropDatabases();
  }
  void DropDatabases() noexcept {
    for (const auto& dsn : created_) {
      try {
        Exec(dsn, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", database_));
      } catch (const std::exception&) {
        // A server that went away; the name carries the pid, nothing else uses it.
      }
    }
  }

  [[nodiscard]] ScatterGather& Scatter() { return *scatter_; }
  // The scratch databases are not migrated: no bucket functions, so each
  // shard answers for all of its rows (no move runs here).
  [[nodiscard]] static ScatterOptions Options() {
    ScatterOptions o;
    o.directory_buckets = false;
    return o;
  }
  [[nodiscard]] BucketShardResolver& Resolver() { return *resolver_; }
  [[nodiscard]] Scenario& Shape(const std::string& shape) { return scenarios_.at(shape); }
  [[nodiscard]] const Dsn& ReferenceDsn() const { return *config_.reference_dsn; }
  [[nodiscard]] int ShardCount() const { return static_cast<int>(config_.shards.size()); }

 private:
  static std::vector<Dsn*> Dsns(ClusterConfig& c) {
    std::vector<Dsn*> out;
    for (auto& s : c.shards) out.push_back(&s.dsn);
    out.push_back(&*c.reference_dsn);
    return out;
  }
  static void Exec(const Dsn& dsn, const std::string& sql) {
    pqxx::connection c{dsn.Reveal()};
    pqxx::nontransaction tx{c};
    tx.exec(sql);
  }

  void Load(const std::string& shape, int history) {
    const auto orders_table = "orders_" + shape;
    const auto items_table = "order_items_" + shape;
    const auto orders = GenerateOrders(shape, history);
    const auto directory = resolver_->Directory();
    auto dsns = Dsns(config_);
    for (std::size_t target = 0; target < dsns.size(); ++target) {
      const bool reference = target + 1 == dsns.size();
      pqxx::connection c{dsns[target]->Reveal()};
      {
        pqxx::work tx{c};
        // The Bookstore schema's columns and indexes (examples/bookstore-service/sql/002) that matter here.
        tx.exec(fmt::format(
            "CREATE TABLE {0} (customer_id integer NOT NULL, bucket smallint NOT NULL, order_id bigint NOT NULL, "
            "ordered_at timestamptz NOT NULL, status text NOT NULL DEFAULT 'placed', PRIMARY KEY (customer_id, "
            "order_id));"
            "CREATE TABLE {1} (customer_id integer NOT NULL, bucket smallint NOT NULL, order_id bigint NOT NULL, "
            "line_no integer NOT NULL, book_id bigint NOT NULL, quantity integer NOT NULL, "
            "PRIMARY KEY (customer_id, order_id, line_no))",
            orders_table, items_table));
        pqxx::stream_to o{tx, orders_table};
        for (const auto& row : orders) {
          if (!reference && directory->ShardFor(row.customer) != static_cast<ShardId>(target)) continue;
          o << std::make_tuple(row.customer, BucketOf(row.customer), row.order_id, Timestamp(row.ordered_at), "placed");
        }
        o.complete();
        pqxx::stream_to i{tx, items_table};
        for (const auto& row : orders) {
          if (!reference && directory->ShardFor(row.customer) != static_cast<ShardId>(target)) continue;
          for (std::size_t l = 0; l < row.books.size(); ++l) {
            i << std::make_tuple(row.customer, BucketOf(row.customer), row.order_id, static_cast<int>(l + 1),
                                 row.books[l], 1);
          }
        }
        i.complete();
        tx.exec(
            fmt::format("CREATE INDEX ON {0} (ordered_at); CREATE INDEX ON {1} (book_id)", orders_table, items_table));
        tx.commit();
      }
      pqxx::nontransaction tx{c};
      tx.exec(fmt::format("ANALYZE {}; ANALYZE {}", orders_table, items_table));
    }

    Scenario s;
    s.shape = shape;
    s.query.from = fmt::format("{} i JOIN {} o ON o.customer_id = i.customer_id AND o.order_id = i.order_id",
                               items_table, orders_table);
    s.query.key = "i.book_id";
    s.query.measure = "i.quantity";
    s.query.where = "o.ordered_at >= $1::timestamptz";
    s.query.params = {Timestamp(kNow - kWindow)};
    s.query.k = kTop;
    s.query.label = "best-sellers " + shape;
    pqxx::connection ref{ReferenceDsn().Reveal()};
    pqxx::nontransaction tx{ref};
    for (const auto& row : tx.exec_params(ReferenceSql(s.query), *s.query.params[0])) {
      s.reference.push_back({row[0].as<I64>(), row[1].as<I64>()});
    }
    scenarios_.emplace(shape, std::move(s));
  }

 public:
  static std::string ReferenceSql(const TopKQuery& q) {
    return fmt::format(
        "SELECT {0}, coalesce(sum({1}), 0) AS total FROM {2} WHERE {3} GROUP BY 1 "
        "ORDER BY total DESC, 1 LIMIT {4}",
        q.key, q.measure, q.from, q.where, q.k);
  }

 private:
  ClusterConfig config_;
  std::string database_;
  std::vector<Dsn> created_;
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<ScatterGather> scatter_;
  std::map<std::string, Scenario> scenarios_;
};

// A shape's scatter and scenario: the 2-shard data sets or the 8-shard ones.
struct Target {
  ScatterGather* scatter = nullptr;
  Scenario* scenario = nullptr;
};
std::optional<Target> Find(const std::string& shape) {
  if (shape.starts_with("big-")) {
    BigCluster* big = BigCluster::Get();
    if (big == nullptr) return std::nullopt;
    return Target{&big->Scatter(), &big->Shape(shape)};
  }
  Cluster* cluster = Cluster::Get();
  if (cluster == nullptr) return std::nullopt;
  return Target{&cluster->Scatter(), &cluster->Shape(shape)};
}

// What the summary prints after the run.
struct Figures {
  std::size_t rows = 0;
  std::size_t bytes = 0;
  double mean_ms = 0;
  bool matches_reference = false;
  std::string phases;
  std::string extra;
};
std::map<std::string, Figures>& Summary() {
  static std::map<std::string, Figures> summary;
  return summary;
}

// The shortcut's figures in the exact methods' result type, for one report.
TopKResult<I64> AsResult(lab::ShortcutTopKResult<I64> r) {
  TopKResult<I64> out;
  out.items = std::move(r.items);
  out.phases = std::move(r.phases);
  out.total_rows = r.total_rows;
  out.total_bytes = r.total_bytes;
  out.elapsed = r.elapsed;
  out.warnings = std::move(r.warnings);
  return out;
}

// method is ignored with shortcut (the wrong per-shard list, lab/src/topk_shortcut.hpp).
void BM_BestSellers(benchmark::State& state, const std::string& shape, TopKMethod method, bool shortcut) {
  const auto target = Find(shape);
  if (!target) {
    state.SkipWithError("no cluster: run lab/cluster start");
    return;
  }
  Scenario& s = *target->scenario;
  TopKResult<I64> last;
  double total_ms = 0;
  std::size_t runs = 0;
  std::vector<double> phase_ms;
  for (auto _ : state) {
    if (shortcut) {
      SqlTopKSource source(*target->scatter, s.query, Cluster::Options());
      last = AsResult(lab::PerShardShortcutTopK(source, kTop));
    } else {
      last = TopKBySum(*target->scatter, s.query, method, Cluster::Options());
    }
    total_ms += static_cast<double>(last.elapsed.count()) / 1000.0;
    phase_ms.resize(last.phases.size());
    for (std::size_t p = 0; p < last.phases.size(); ++p)
      phase_ms[p] += static_cast<double>(last.phases[p].elapsed.count()) / 1000.0;
    ++runs;
  }
  const bool equal = last.items == s.reference;
  if (!shortcut && !equal) {
    state.SkipWithError("an exact method differs from the reference server");
    return;
  }
  state.counters["rows"] = static_cast<double>(last.total_rows);
  state.counters["bytes"] = static_cast<double>(last.total_bytes);
  state.counters["equals_ref"] = equal ? 1 : 0;
  Figures f;
  f.rows = last.total_rows;
  f.bytes = last.total_bytes;
  f.mean_ms = runs > 0 ? total_ms / static_cast<double>(runs) : 0;
  f.matches_reference = equal;
  for (std::size_t p = 0; p < last.phases.size(); ++p) {
    f.phases += fmt::format("{}{}: {} rows {:.1f} ms", p == 0 ? "" : "; ", last.phases[p].name, last.phases[p].rows,
                            phase_ms[p] / static_cast<double>(runs));
    state.counters[fmt::format("p{}_rows", p + 1)] = static_cast<double>(last.phases[p].rows);
  }
  if (!shortcut && method == TopKMethod::kAuto) f.extra = last.choice;
  if (!shortcut && last.method == TopKMethod::kTput && last.tau1) {
    f.extra = fmt::format("tau1 {} tau2 {}, {} keys seen after phase 2, {} candidates, {} partials fetched", *last.tau1,
                          *last.tau2, last.seen_after_phase2, last.candidates, last.fetched_keys);
    state.counters["candidates"] = static_cast<double>(last.candidates);
  }
  Summary()[shape + " / " + (shortcut ? lab::kShortcutName : TopKMethodName(method))] = f;
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// TPUT (or auto) and all partials alternately, one after the other in every
// iteration (which goes first alternates too), so that both see the same
// load on a shared machine: medians of each and the median of the
// per-iteration ratios.
void BM_BestSellersPaired(benchmark::State& state, const std::string& shape, TopKMethod method) {
  const auto target = Find(shape);
  if (!target) {
    state.SkipWithError("no cluster: run lab/cluster start");
    return;
  }
  Scenario& s = *target->scenario;
  std::vector<double> mine, all, ratio;
  TopKResult<I64> last_mine, last_all;
  bool first_mine = true;
  for (auto _ : state) {
    const auto run = [&](TopKMethod m) { return TopKBySum(*target->scatter, s.query, m, Cluster::Options()); };
    if (first_mine) {
      last_mine = run(method);
      last_all = run(TopKMethod::kAllPartials);
    } else {
      last_all = run(TopKMethod::kAllPartials);
      last_mine = run(method);
    }
    first_mine = !first_mine;
    mine.push_back(static_cast<double>(last_mine.elapsed.count()) / 1000.0);
    all.push_back(static_cast<double>(last_all.elapsed.count()) / 1000.0);
    ratio.push_back(mine.back() / all.back());
  }
  if (last_mine.items != s.reference || last_all.items != s.reference) {
    state.SkipWithError("an exact method differs from the reference server");
    return;
  }
  const auto median = MedianOf;
  state.counters["ms"] = median(mine);
  state.counters["all_partials_ms"] = median(all);
  state.counters["ratio"] = median(ratio);
  state.counters["rows"] = static_cast<double>(last_mine.total_rows);
  state.counters["all_partials_rows"] = static_cast<double>(last_all.total_rows);
  Figures f;
  f.rows = last_mine.total_rows;
  f.bytes = last_mine.total_bytes;
  f.mean_ms = median(mine);
  f.matches_reference = true;
  f.extra = fmt::format(
      "paired with all partials ({} rows, {} bytes): medians {:.2f} / {:.2f} ms, median ratio {:.3f} "
      "over {} iterations",
      last_all.total_rows, last_all.total_bytes, median(mine), median(all), median(ratio), ratio.size());
  Summary()[shape + " / " + TopKMethodName(method) + " vs all partials, paired"] = f;
}

// All partials, TPUT and auto in every iteration (the order rotates), so
// all three see the same load: medians of each, and the median of the
// iterations' auto / min(all partials, TPUT).
void BM_AutoVsFaster(benchmark::State& state, const std::string& shape) {
  const auto target = Find(shape);
  if (!target) {
    state.SkipWithError("no cluster: run lab/cluster start");
    return;
  }
  Scenario& s = *target->scenario;
  const TopKMethod methods[3] = {TopKMethod::kAllPartials, TopKMethod::kTput, TopKMethod::kAuto};
  std::vector<double> ms[3];
  std::vector<double> ratio;
  TopKResult<I64> last[3];
  int turn = 0;
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) {
      const int which = (turn + i) % 3;
      last[which] = TopKBySum(*target->scatter, s.query, methods[which], Cluster::Options());
      ms[which].push_back(static_cast<double>(last[which].elapsed.count()) / 1000.0);
    }
    turn = (turn + 1) % 3;
    ratio.push_back(ms[2].back() / std::min(ms[0].back(), ms[1].back()));
  }
  for (const auto& r : last) {
    if (r.items != s.reference) {
      state.SkipWithError("an exact method differs from the reference server");
      return;
    }
  }
  const double faster = std::min(MedianOf(ms[0]), MedianOf(ms[1]));
  state.counters["all_partials_ms"] = MedianOf(ms[0]);
  state.counters["tput_ms"] = MedianOf(ms[1]);
  state.counters["auto_ms"] = MedianOf(ms[2]);
  state.counters["auto_to_faster"] = MedianOf(ms[2]) / faster;
  state.counters["auto_to_faster_paired"] = MedianOf(ratio);
  Figures f;
  f.rows = last[2].total_rows;
  f.bytes = last[2].total_bytes;
  f.mean_ms = MedianOf(ms[2]);
  f.matches_reference = true;
  f.extra = fmt::format(
      "medians: all partials {:.2f} ms ({} rows, {} B), TPUT {:.2f} ms ({} rows, {} B), auto {:.2f} ms ({}); "
      "auto / faster {:.3f}, paired {:.3f}, {} iterations\n      auto's last estimate: {}",
      MedianOf(ms[0]), last[0].total_rows, last[0].total_bytes, MedianOf(ms[1]), last[1].total_rows,
      last[1].total_bytes, MedianOf(ms[2]), TopKMethodName(last[2].method), MedianOf(ms[2]) / faster, MedianOf(ratio),
      ratio.size(), last[2].choice);
  Summary()[shape + " / auto vs the faster of all partials and TPUT"] = f;
}

// The same question asked of the one unsharded server (for scale only).
void BM_BestSellersReference(benchmark::State& state, const std::string& shape) {
  Cluster* cluster = Cluster::Get();
  if (cluster == nullptr) {
    state.SkipWithError("no cluster: run lab/cluster start");
    return;
  }
  Scenario& s = cluster->Shape(shape);
  pqxx::connection c{cluster->ReferenceDsn().Reveal()};
  pqxx::nontransaction tx{c};
  const std::string sql = Cluster::ReferenceSql(s.query);
  double total_ms = 0;
  std::size_t runs = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    auto rows = tx.exec_params(sql, *s.query.params[0]);
    benchmark::DoNotOptimize(rows);
    total_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ++runs;
  }
  Figures f;
  f.rows = kTop;
  f.mean_ms = total_ms / static_cast<double>(runs);
  f.matches_reference = true;
  Summary()[shape + " / reference server (unsharded)"] = f;
}

// ---------------------------------------------------------------------------
// Simulations: in-memory shards, larger scale, more shards. Rows only.

std::vector<std::vector<TopKEntry<I64>>> Simulate(const std::string& shape, int shards, int keys, int sales) {
  std::mt19937_64 rng(7);
  std::vector<std::unordered_map<I64, I64>> partial(static_cast<std::size_t>(shards));
  auto shard = [&] { return static_cast<std::size_t>(std::uniform_int_distribution<int>(0, shards - 1)(rng)); };
  std::vector<double> cdf;
  double sum = 0;
  for (int r = 1; r <= keys; ++r) cdf.push_back(sum += 1.0 / std::pow(r, 0.9));
  auto zipf = [&] {
    const double u = std::uniform_real_distribution<double>(0, sum)(rng);
    return static_cast<I64>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin()) + 1;
  };
  if (shape == "zipf") {
    for (int i = 0; i < sales; ++i) partial[shard()][zipf()] += 1;
  } else if (shape == "one-shard-holds") {
    // Zipf popularity; 85% of a key's sales on its home shard.
    for (int i = 0; i < sales; ++i) {
      const I64 key = zipf();
      const auto home = static_cast<std::size_t>(key % shards);
      partial[std::bernoulli_distribution(0.85)(rng) ? home : shard()][key] += 1;
    }
  } else {  // flat: 1/15 of the keys are hot and share ~40% of the sales evenly
    const int hot = keys / 15;
    const int per_hot = std::max(1, static_cast<int>(0.4 * sales / hot));
    for (int h = 1; h <= hot; ++h) {
      const int copies = per_hot - 2 + std::uniform_int_distribution<int>(0, 4)(rng);
      for (int c = 0; c < copies; ++c) partial[shard()][h] += 1;
    }
    const int rest = sales - hot * per_hot;
    for (int i = 0; i < rest; ++i) partial[shard()][std::uniform_int_distribution<I64>(hot + 1, keys)(rng)] += 1;
  }
  std::vector<std::vector<TopKEntry<I64>>> out(static_cast<std::size_t>(shards));
  for (std::size_t s = 0; s < out.size(); ++s) {
    for (const auto& [k, v] : partial[s]) out[s].push_back({k, v});
  }
  return out;
}

void BM_Simulated(benchmark::State& state, const std::string& shape) {
  const int shards = static_cast<int>(state.range(0));
  const int keys = static_cast<int>(state.range(1));
  const int sales = static_cast<int>(state.range(2));
  lab::MemoryTopKSource<I64> source(Simulate(shape, shards, keys, sales));
  TopKResult<I64> tput;
  for (auto _ : state) tput = TputTopK(source, kTop);
  const auto all = AllPartialsTopK(source, kTop);
  if (tput.items != all.items) {
    state.SkipWithError("TPUT differs from all partials");
    return;
  }
  const double pct = 100.0 * static_cast<double>(tput.total_rows) / static_cast<double>(all.total_rows);
  state.counters["tput_rows"] = static_cast<double>(tput.total_rows);
  state.counters["all_rows"] = static_cast<double>(all.total_rows);
  state.counters["pct"] = pct;
  Figures f;
  f.rows = tput.total_rows;
  f.extra = fmt::format("all partials {} rows -> TPUT {:.2f}% ({:.0f}x fewer); phases {}/{}/{}; tau1 {} tau2 {}",
                        all.total_rows, pct, static_cast<double>(all.total_rows) / static_cast<double>(tput.total_rows),
                        tput.phases[0].rows, tput.phases[1].rows, tput.phases[2].rows, *tput.tau1, *tput.tau2);
  Summary()[fmt::format("sim {} m={} keys={} sales={}", shape, shards, keys, sales)] = f;
}

void Register() {
  for (const char* shape : {"flat", "zipf"}) {
    const std::string s = shape;
    benchmark::RegisterBenchmark(("best_sellers/" + s + "/reference_unsharded").c_str(), BM_BestSellersReference, s)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
    benchmark::RegisterBenchmark(("best_sellers/" + s + "/shortcut_NOT_exact").c_str(), BM_BestSellers, s,
                                 TopKMethod::kAllPartials, true)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
    for (auto [name, method] : {std::pair{"all_partials", TopKMethod::kAllPartials},
                                std::pair{"tput", TopKMethod::kTput}, std::pair{"auto", TopKMethod::kAuto}}) {
      benchmark::RegisterBenchmark(("best_sellers/" + s + "/" + name).c_str(), BM_BestSellers, s, method, false)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(2.0);
    }
    for (auto [name, method] :
         {std::pair{"tput_vs_all_partials", TopKMethod::kTput}, std::pair{"auto_vs_all_partials", TopKMethod::kAuto}}) {
      benchmark::RegisterBenchmark(("best_sellers/" + s + "/" + name).c_str(), BM_BestSellersPaired, s, method)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(4.0);
    }
    benchmark::RegisterBenchmark(("best_sellers/" + s + "/auto_vs_faster").c_str(), BM_AutoVsFaster, s)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(6.0);
  }
  // The 8-shard, 1.2M-key data set: opt-in, its load takes a while.
  if (const char* big = std::getenv("TOPK_BENCH_BIG"); big != nullptr && *big == '1') {
    for (const char* shape : {"big-flat", "big-zipf"}) {
      const std::string s = shape;
      for (auto [name, method] : {std::pair{"all_partials", TopKMethod::kAllPartials},
                                  std::pair{"tput", TopKMethod::kTput}, std::pair{"auto", TopKMethod::kAuto}}) {
        benchmark::RegisterBenchmark(("big/" + s + "/" + name).c_str(), BM_BestSellers, s, method, false)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(5);
      }
      benchmark::RegisterBenchmark(("big/" + s + "/tput_vs_all_partials").c_str(), BM_BestSellersPaired, s,
                                   TopKMethod::kTput)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(5);
      benchmark::RegisterBenchmark(("big/" + s + "/auto_vs_faster").c_str(), BM_AutoVsFaster, s)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(5);
    }
  }
  for (const char* shape : {"zipf", "flat", "one-shard-holds"}) {
    benchmark::RegisterBenchmark((std::string("simulated/") + shape).c_str(), BM_Simulated, std::string(shape))
        ->Args({2, 30000, 80000})
        ->Args({8, 200000, 2000000})
        ->Args({32, 200000, 2000000})
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
  }
}

}  // namespace
}  // namespace shardkit

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  shardkit::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  fmt::print("\nSummary (top-{} best sellers; rows = rows transferred from the shards)\n", shardkit::kTop);
  for (const auto& [name, f] : shardkit::Summary()) {
    fmt::print("  {:<52} rows {:>7}  bytes {:>8}  {:>8.2f} ms  {}\n", name, f.rows, f.bytes, f.mean_ms,
               name.starts_with("sim") ? "" : (f.matches_reference ? "= reference" : "DIFFERS from reference"));
    if (!f.phases.empty()) fmt::print("      {}\n", f.phases);
    if (!f.extra.empty()) fmt::print("      {}\n", f.extra);
  }
  return 0;
}
