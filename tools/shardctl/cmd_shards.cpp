// shardctl shards: each shard, its buckets, whether it answers, its pool.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/read_token.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/in_doubt.hpp"

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

std::string Iso8601(std::chrono::system_clock::time_point at) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count() % 1000;
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", fmt::gmtime(std::chrono::system_clock::to_time_t(at)), ms);
}

nlohmann::json ReplicaJson(const shardkit::ReplicaStatus& r) {
  const auto lsn = [](const std::optional<std::uint64_t>& v) -> nlohmann::json {
    return v ? nlohmann::json(shardkit::FormatLsn(*v)) : nlohmann::json(nullptr);
  };
  const auto ms = [](const std::optional<std::chrono::milliseconds>& v) -> nlohmann::json {
    return v ? nlohmann::json(v->count()) : nlohmann::json(nullptr);
  };
  return {{"name", r.name},
          {"dsn", r.dsn},
          {"reachable", r.reachable},
          {"in_recovery", r.in_recovery},
          {"replay_paused", r.replay_paused},
          {"replay_lsn", lsn(r.replay_lsn)},
          {"receive_lsn", lsn(r.receive_lsn)},
          {"primary_lsn", lsn(r.primary_lsn)},
          {"lag_bytes", r.lag_bytes ? nlohmann::json(*r.lag_bytes) : nlohmann::json(nullptr)},
          {"lag_ms", ms(r.lag)},
          {"lag_at_least_ms", ms(r.lag_at_least)},
          {"replay_age_ms", ms(r.replay_age)},
          {"follows_primary", r.follows_primary},
          {"not_following", r.not_following},
          {"receiver_status", r.receiver_status},
          {"timeline", r.timeline ? nlohmann::json(*r.timeline) : nlohmann::json(nullptr)},
          {"primary_timeline", r.primary_timeline ? nlohmann::json(*r.primary_timeline) : nlohmann::json(nullptr)},
          {"slot", r.slot},
          {"measured_at", r.measured_at ? nlohmann::json(Iso8601(*r.measured_at)) : nlohmann::json(nullptr)},
          {"probe_ms", static_cast<double>(r.probe_time.count()) / 1000.0},
          {"error", r.error}};
}

// "0 bytes, at most 12 ms behind", a lower bound, or why neither is known.
std::string LagText(const shardkit::ReplicaStatus& r) {
  std::string text = r.lag_bytes ? fmt::format("{} bytes", *r.lag_bytes) : std::string("? bytes");
  if (r.lag) {
    text += fmt::format(", at most {} ms behind", r.lag->count());
  } else if (r.lag_at_least) {
    text += fmt::format(", at least {0} ms behind (short of the primary's position of {0} ms before)",
                        r.lag_at_least->count());
  } else {
    text += r.primary_lsn ? ", time unknown (its replay position is unknown)"
                          : ", time unknown (the primary's position was not measured)";
  }
  if (r.replay_age) text += fmt::format("; last replayed commit {} ms ago", r.replay_age->count());
  if (r.replay_paused) text += "; REPLAY PAUSED";
  return text;
}

// One shard's prepared parts of cross-shard transactions.
struct InDoubtOfShard {
  nlohmann::json parts = nlohmann::json::array();
  int count = 0;
  std::chrono::milliseconds oldest{0};
};

InDoubtOfShard InDoubtOf(const std::vector<shardkit::InDoubtPart>& in_doubt, shardkit::ShardId shard) {
  InDoubtOfShard out;
  for (const auto& part : in_doubt) {
    if (part.shard != shard) continue;
    ++out.count;
    out.oldest = std::max(out.oldest, part.age);
    out.parts.push_back({{"gid", part.gid}, {"age_ms", part.age.count()}, {"decision", part.decision}});
  }
  return out;
}

// How long shardctl shards waits for a replica's lag in time to be known
// (docs/replicas.md); one still behind is shown as at least this far behind.
constexpr std::chrono::milliseconds kLagWait{2000};

}  // namespace

void AddShardsCommand(CLI::App& app, CliContext& context) {
  auto* shards = app.add_subcommand("shards", "show each shard: buckets, reachability, pool statistics");
  AddShardsEnrollCommand(*shards, context);
  shards->final_callback([shards, &context] {
    if (!shards->get_subcommands().empty()) return;  // shards enroll
    const shardkit::ClusterConfig config = context.LoadConfig();
    auto resolver = shardkit::BucketShardResolver::FromConfig(config);
    const auto directory = resolver->Directory();
    // The replicas' lag, measured now (the same probes a Cluster runs),
    // waiting at most kLagWait for a replica to replay past the primary's
    // first position measured.
    std::vector<shardkit::ReplicaStatus> replicas;
    if (resolver->HasReplicas()) {
      shardkit::ReplicaMonitor monitor{*resolver, config};
      monitor.ProbeUntilLagKnown(kLagWait);
      replicas = monitor.Status();
    }
    // Prepared parts of cross-shard transactions (hold locks and vacuum).
    std::vector<std::string> in_doubt_failures;
    const std::vector<shardkit::InDoubtPart> in_doubt =
        shardkit::ListInDoubt(*resolver, config.catalog_dsn, in_doubt_failures);
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
      const InDoubtOfShard doubt = InDoubtOf(in_doubt, s);
      std::vector<const shardkit::ReplicaStatus*> mine;
      for (const auto& r : replicas) {
        if (r.shard == s) mine.push_back(&r);
        if (r.shard == s && !r.reachable) all_reachable = false;
      }
      if (context.json) {
        nlohmann::json replica_list = nlohmann::json::array();
        for (const auto* r : mine) replica_list.push_back(ReplicaJson(*r));
        out["shards"].push_back({{"shard", s},
                                 {"name", resolver->ShardName(s)},
                                 {"primary", resolver->Servers(s).primary.name},
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
                                   {"discarded_changed_session", stats.discarded_changed_session}}},
                                 {"replicas", replica_list},
                                 {"in_doubt", doubt.parts}});
        continue;
      }
      fmt::print("\nshard {} ({})  {}\n", s, resolver->ShardName(s), pool.RedactedDsn());
      if (const auto& primary = resolver->Servers(s).primary.name; primary != resolver->ShardName(s)) {
        fmt::print("  primary    {} (after a failover: shardctl failover)\n", primary);
      }
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
      if (doubt.count > 0) {
        fmt::print("  in doubt   {} prepared cross-shard part(s), the oldest {} ms (shardctl recover settles them)\n",
                   doubt.count, doubt.oldest.count());
      }
      for (const auto* r : mine) {
        fmt::print("  replica    {}  {}\n", r->name, r->dsn);
        if (r->reachable) {
          fmt::print("             reachable yes | lag {} | measured {} ({:.1f} ms probe)\n", LagText(*r),
                     r->measured_at ? Iso8601(*r->measured_at) : "never",
                     static_cast<double>(r->probe_time.count()) / 1000.0);
          if (r->follows_primary) {
            fmt::print("             follows the primary: yes (WAL receiver {}{}{}); reads may go there\n",
                       r->receiver_status, r->slot.empty() ? "" : ", slot " + r->slot,
                       r->timeline ? fmt::format(", timeline {}", *r->timeline) : "");
          } else {
            fmt::print("             follows the primary: NO, {}; no read goes there\n", r->not_following);
          }
        } else {
          fmt::print("             reachable NO: {}\n", r->error);
        }
      }
    }
    for (const auto& failure : in_doubt_failures) {
      if (!context.json) fmt::print("\nin doubt: {}\n", failure);
    }
    if (context.json) fmt::print("{}\n", out.dump(2));
    if (!all_reachable) throw shardkit::Error("one or more shards or replicas are unreachable (see above)");
  });
}
