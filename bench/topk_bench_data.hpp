// topk_bench's data sets at scale: 8 shards as scratch databases on the
// local servers, 1,200,000 distinct keys, flat and Zipf, made by the
// servers themselves. Part of bench/topk_bench.cpp (opt-in there:
// TOPK_BENCH_BIG=1).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/topk.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit::bench {

using I64 = std::int64_t;
using Clock = std::chrono::steady_clock;
constexpr std::size_t kTop = 10;

struct Scenario {
  std::string shape;
  TopKQuery query;
  std::vector<TopKEntry<I64>> reference;  // the unsharded answer
  std::size_t all_partials_rows = 0;
};

Dsn WithDatabase(const Dsn& dsn, const std::string& database) {
  const std::string& text = dsn.Reveal();
  if (text.starts_with("postgres://") || text.starts_with("postgresql://")) {
    return Dsn(text + (text.find('?') == std::string::npos ? "?" : "&") + "dbname=" + database);
  }
  return Dsn(text + " dbname=" + database);  // libpq: the last keyword wins
}

// ---------------------------------------------------------------------------
// At scale (opt-in: TOPK_BENCH_BIG=1, it loads ~6M rows): 8 shards as
// scratch databases on the configuration's servers (in turn: 4 on each of
// two), 1,200,000 distinct keys in all, made by the servers themselves
// (generate_series, a hash of the row number as the random source, so the
// reference server makes exactly the union of the shards' rows):
//   big-zipf — every key sold once on one shard, plus 250,000 sales a shard
//              of Zipf(s = 1.1) popular keys, 1-3 copies each;
//   big-flat — 80,000 hot keys with ~16 copies each spread over the shards,
//              every other key sold once (1-3 copies) on one shard.
constexpr int kBigShards = 8;
constexpr I64 kBigKeys = 1200000;
constexpr int kBigZipfSales = 250000;  // per shard
constexpr int kBigHotKeys = 80000;

// A uniform double in (0, 1) from x.
std::string Uniform(const std::string& x, int seed) {
  return fmt::format("(((hashint8extended(({})::bigint, {}) & 4294967295)::float8 + 0.5) / 4294967296.0)", x, seed);
}

// The rows of `shard` ("s": every shard's, for the reference server, with s
// from a generate_series).
std::string BigRows(const std::string& shape, const std::string& shard) {
  const bool all = shard == "s";
  const std::string shards = all ? fmt::format("generate_series(0, {}) s, ", kBigShards - 1) : "";
  const std::string home = fmt::format("(hashint8extended(k, 3) & {})", kBigShards - 1);
  const std::string own = all ? "" : fmt::format(" WHERE {} = {}", home, shard);
  if (shape == "big-zipf") {
    const std::string row = fmt::format("({}::bigint * 1000000 + i)", shard);
    return fmt::format(
        "SELECT LEAST({0}, floor(power(1 - {1} * (1 - power({0} + 1.0, -0.1)), -10)))::bigint AS book_id, "
        "1 + ((hashint8extended({2}, 2) & 255) % 3)::int AS quantity FROM {3}generate_series(1, {4}) i "
        "UNION ALL SELECT k, 1 FROM generate_series(1, {0}) k{5}",
        kBigKeys, Uniform(row, 1), row, shards, kBigZipfSales, own);
  }
  return fmt::format(
      "SELECT k AS book_id, 1 AS quantity FROM {0}generate_series(1, {1}) k, generate_series(1, 4) c "
      "WHERE (hashint8extended(k * 64 + {2} * 8 + c, 4) & 1) = 0 "
      "UNION ALL SELECT k, 1 + ((hashint8extended(k, 5) & 255) % 3)::int FROM generate_series({3}, {4}) k{5}",
      shards, kBigHotKeys, shard, kBigHotKeys + 1, kBigKeys, own);
}

class BigCluster {
 public:
  static BigCluster* Get() {
    static std::unique_ptr<BigCluster> instance = [] {
      try {
        return std::make_unique<BigCluster>();
      } catch (const std::exception& e) {
        fmt::print(stderr, "topk_bench: no 8-shard data set ({}); its benchmarks are skipped\n", e.what());
        return std::unique_ptr<BigCluster>();
      }
    }();
    return instance.get();
  }

  BigCluster() {
    std::filesystem::path path = "/work/main/.cluster/shardkit.toml";
    if (const char* env = std::getenv("SHARDKIT_CONFIG"); env != nullptr && *env != '\0') path = env;
    const ClusterConfig base = LoadConfig(path);
    if (!base.reference_dsn) throw std::runtime_error(path.string() + " has no [reference] server");
    config_ = base;
    config_.shards.clear();
    database_ = fmt::format("topk_big_{}", ::getpid());
    const auto start = Clock::now();
    try {
      for (int s = 0; s < kBigShards; ++s) {
        const ShardConfig& server = base.shards[static_cast<std::size_t>(s) % base.shards.size()];
        const std::string db = fmt::format("{}_{}", database_, s);
        Create(server.dsn, db);
        ShardConfig shard = server;
        shard.name = fmt::format("big{}", s);
        shard.dsn = WithDatabase(server.dsn, db);
        shard.admin_dsn = Dsn{};
        config_.shards.push_back(shard);
      }
      Create(*base.reference_dsn, database_);
      config_.reference_dsn = WithDatabase(*base.reference_dsn, database_);
      config_.directory = BucketDirectory::EvenSplit(kBigShards);
      config_.directory_source = DirectorySource::kConfig;
      resolver_ = BucketShardResolver::FromConfig(config_);
      scatter_ = std::make_unique<ScatterGather>(*resolver_);
      for (const char* shape : {"big-flat", "big-zipf"}) Load(shape);
    } catch (...) {
      Drop();
      throw;
    }
    fmt::print(stderr, "topk_bench: the 8-shard data set loaded in {:.1f} s\n",
               std::chrono::duration<double>(Clock::now() - start).count());
  }
  ~BigCluster() {
    scatter_.reset();
    resolver_.reset();
    if (const char* keep = std::getenv("TOPK_BENCH_KEEP"); keep != nullptr && *keep == '1') return;
    Drop();
  }
  BigCluster(const BigCluster&) = delete;
  BigCluster& operator=(const BigCluster&) = delete;

  [[nodiscard]] ScatterGather& Scatter() { return *scatter_; }
  [[nodiscard]] Scenario& Shape(const std::string& shape) { return scenarios_.at(shape); }

 private:
  static void Exec(const Dsn& dsn, const std::string& sql) {
    pqxx::connection c{dsn.Reveal()};
    pqxx::nontransaction tx{c};
    tx.exec(sql);
  }
  void Create(const Dsn& server, const std::string& db) {
    created_.emplace_back(server, db);
    Exec(server, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", db));
    Exec(server, fmt::format("CREATE DATABASE {}", db));
  }
  void Drop() noexcept {
    for (const auto& [server, db] : created_) {
      try {
        Exec(server, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", db));
      } catch (const std::exception&) {
        // A server that went away; the name carries the pid.
      }
    }
  }
  void Load(const std::string& shape) {
    const std::string table = shape == "big-zipf" ? "sales_zipf" : "sales_flat";
    // In parallel: each server makes its own rows.
    std::vector<std::future<void>> loads;
    for (int s = 0; s < kBigShards; ++s) {
      loads.push_back(std::async(std::launch::async, [&, s] {
        Exec(config_.shards[static_cast<std::size_t>(s)].dsn,
             fmt::format("CREATE TABLE {} AS {}; ANALYZE {}", table, BigRows(shape, std::to_string(s)), table));
      }));
    }
    Exec(*config_.reference_dsn, fmt::format("CREATE TABLE {} AS {}; ANALYZE {}", table, BigRows(shape, "s"), table));
    for (auto& l : loads) l.get();
    Scenario sc;
    sc.shape = shape;
    sc.query.from = table;
    sc.query.key = "book_id";
    sc.query.measure = "quantity";
    sc.query.k = kTop;
    sc.query.label = "best-sellers " + shape;
    pqxx::connection ref{config_.reference_dsn->Reveal()};
    pqxx::nontransaction tx{ref};
    for (const auto& row : tx.exec(fmt::format("SELECT book_id, sum(quantity) AS total FROM {} GROUP BY 1 "
                                               "ORDER BY total DESC, 1 LIMIT {}",
                                               table, kTop))) {
      sc.reference.push_back({row[0].as<I64>(), row[1].as<I64>()});
    }
    const auto keys = tx.exec1(fmt::format("SELECT count(DISTINCT book_id) FROM {}", table))[0].as<I64>();
    fmt::print(stderr, "topk_bench: {}: {} distinct keys on {} shards\n", shape, keys, kBigShards);
    scenarios_.emplace(shape, std::move(sc));
  }

  ClusterConfig config_;
  std::string database_;
  std::vector<std::pair<Dsn, std::string>> created_;
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<ScatterGather> scatter_;
  std::map<std::string, Scenario> scenarios_;
};

}  // namespace shardkit::bench
