// shardctl shards: each shard, its buckets, whether it answers, its pool.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace {

// [0,1,2,5,6] -> "0-2, 5-6"
std::string BucketRanges(const std::vector<shardkit::BucketId>& buckets) {
  std::string text;
  for (std::size_t i = 0; i < buckets.size();) {
    std::size_t j = i;
    while (j + 1 < buckets.size() && shardkit::ToInt(buckets[j + 1]) == shardkit::ToInt(buckets[j]) + 1) ++j;
    if (!text.empty()) text += ", ";
    text += i == j ? fmt::format("{}", buckets[i]) : fmt::format("{}-{}", buckets[i], buckets[j]);
    i = j + 1;
  }
  return text.empty() ? "(none)" : text;
}

struct Probe {
  bool reachable = false;
  double ms = 0;
  std::string server_version;
  std::string error;
};

Probe ProbeShard(shardkit::ConnectionPool& pool) {
  Probe probe;
  const auto started = std::chrono::steady_clock::now();
  try {
    auto lease = pool.Acquire(started + pool.Options().connect_timeout + std::chrono::seconds(1));
    pqxx::nontransaction tx{*lease};
    probe.server_version = tx.exec("SHOW server_version")[0][0].c_str();
    probe.reachable = true;
  } catch (const std::exception& e) {
    probe.error = e.what();
  }
  probe.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return probe;
}

}  // namespace

void AddShardsCommand(CLI::App& app, CliContext& context) {
  auto* shards = app.add_subcommand("shards", "show each shard: buckets, reachability, pool statistics");
  AddShardsEnrollCommand(*shards, context);
  shards->final_callback([shards, &context] {
    if (!shards->get_subcommands().empty()) return;  // shards enroll
    auto resolver = context.MakeResolver();
    const auto directory = resolver->Directory();
    nlohmann::json out = {{"directory_version", directory->Version()}, {"shards", nlohmann::json::array()}};
    bool all_reachable = true;
    if (!context.json) {
      fmt::print("directory version {}, {} shards\n", directory->Version(), resolver->ShardCount());
    }
    for (int index = 0; index < resolver->ShardCount(); ++index) {
      const shardkit::ShardId s{index};
      auto& pool = resolver->Pool(s);
      const auto buckets = directory->BucketsOf(s);
      const Probe probe = ProbeShard(pool);
      all_reachable = all_reachable && probe.reachable;
      const auto stats = pool.Stats();
      if (context.json) {
        out["shards"].push_back({{"shard", s},
                                 {"name", resolver->ShardName(s)},
                                 {"dsn", pool.RedactedDsn()},
                                 {"buckets", buckets},
                                 {"reachable", probe.reachable},
                                 {"probe_ms", probe.ms},
                                 {"server_version", probe.server_version},
                                 {"error", probe.error},
                                 {"pool",
                                  {{"max_size", stats.max_size},
                                   {"in_use", stats.in_use},
                                   {"idle", stats.idle},
                                   {"acquired", stats.acquired},
                                   {"waited", stats.waited},
                                   {"timeouts", stats.timeouts},
                                   {"rejected", stats.rejected},
                                   {"connects", stats.connects},
                                   {"connect_failures", stats.connect_failures},
                                   {"broken", stats.broken},
                                   {"discarded_in_transaction", stats.discarded_in_transaction},
                                   {"discarded_changed_session", stats.discarded_changed_session}}}});
        continue;
      }
      fmt::print("\nshard {} ({})  {}\n", s, resolver->ShardName(s), pool.RedactedDsn());
      fmt::print("  buckets    {} ({} of 64)\n", BucketRanges(buckets), buckets.size());
      if (probe.reachable) {
        fmt::print("  reachable  yes, PostgreSQL {} ({:.1f} ms)\n", probe.server_version, probe.ms);
      } else {
        fmt::print("  reachable  NO ({:.1f} ms): {}\n", probe.ms, probe.error);
      }
      fmt::print(
          "  pool       max {} | in use {} | idle {} | acquired {} | waited {} | timeouts {} | "
          "connects {} | connect failures {} | broken {}\n",
          stats.max_size, stats.in_use, stats.idle, stats.acquired, stats.waited, stats.timeouts, stats.connects,
          stats.connect_failures, stats.broken);
    }
    if (context.json) fmt::print("{}\n", out.dump(2));
    if (!all_reachable) throw shardkit::Error("one or more shards are unreachable (see above)");
  });
}
