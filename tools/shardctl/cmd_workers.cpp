// shardctl workers [--group G] [--window S]
//
// The worker groups of the catalog: live workers, the partitions each holds
// (lease ages, claim versions = fencing tokens), and per partition the
// backlog and throughput read from the shards' shardkit_jobs — per
// partition, because an average hides a stuck one.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/workers/job_queue.hpp"
#include "shardkit/workers/partition_lease.hpp"

namespace {

// The catalog holds the worker partition leases.
shardkit::Dsn CatalogDsn(const shardkit::ClusterConfig& config) {
  if (config.catalog_dsn) return shardkit::WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
  throw shardkit::ConfigError("catalog.dsn",
                              fmt::format("{} has no [catalog]: the worker partition leases live in the catalog "
                                          "database",
                                          config.origin));
}

// [0,1,2,5] -> "0-2, 5"
std::string Ranges(const std::vector<int>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += i == j ? fmt::format("{}", values[i]) : fmt::format("{}-{}", values[i], values[j]);
    i = j + 1;
  }
  return text.empty() ? "-" : text;
}

std::string Seconds(double s) {
  return fmt::format("{:.1f} s", s);
}

}  // namespace

void AddWorkersCommand(CLI::App& app, CliContext& context) {
  auto* workers = app.add_subcommand("workers",
                                     "show worker groups: live workers, their partitions and leases, "
                                     "per-partition backlog and throughput");
  auto group = std::make_shared<std::string>();
  auto window = std::make_shared<int>(60);
  workers->add_option("--group", *group, "only this worker group (a job queue's name)");
  workers->add_option("--window", *window, "throughput window in seconds (default 60)")->check(CLI::Range(1, 86400));
  workers->final_callback([&context, group, window] {
    const auto config = context.LoadConfig();
    const shardkit::Dsn catalog_dsn = CatalogDsn(config);
    std::vector<shardkit::PartitionGroupView> groups;
    try {
      pqxx::connection catalog{catalog_dsn.Reveal()};
      groups = shardkit::ReadPartitionGroups(catalog, group->empty() ? std::nullopt : std::optional(*group));
    } catch (const shardkit::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw shardkit::LeaseError(
          fmt::format("cannot read the catalog {}: {}", catalog_dsn, shardkit::RedactDsn(e.what())));
    }
    if (groups.empty() && !group->empty()) {
      throw shardkit::Error(
          fmt::format("no worker group '{}' in the catalog (groups appear when their first "
                      "worker joins)",
                      *group));
    }
    auto resolver = shardkit::BucketShardResolver::FromConfig(config);
    nlohmann::json out = nlohmann::json::array();
    if (groups.empty() && !context.json) fmt::print("no worker groups in the catalog yet\n");
    for (const auto& g : groups) {
      const auto backlog = shardkit::ReadBacklog(*resolver, g.group, g.partition_count, std::chrono::seconds(*window));
      std::map<std::string, std::vector<int>> held;
      std::map<std::string, std::int64_t> pending_of, done_of;
      for (const auto& p : g.partitions) {
        if (!p.owner || p.expired) continue;
        held[*p.owner].push_back(p.partition);
        const auto& b = backlog[static_cast<std::size_t>(p.partition)];
        pending_of[*p.owner] += b.pending;
        done_of[*p.owner] += b.done_recently;
      }
      int live = 0;
      for (const auto& w : g.workers) live += w.live ? 1 : 0;
      if (context.json) {
        nlohmann::json j = {
            {"group", g.group},    {"partition_count", g.partition_count}, {"live_workers", live},
            {"window_s", *window}, {"workers", nlohmann::json::array()},   {"partitions", nlohmann::json::array()}};
        for (const auto& w : g.workers) {
          j["workers"].push_back({{"owner", w.owner},
                                  {"live", w.live},
                                  {"joined_ago_s", w.joined_ago_s},
                                  {"lease_remaining_s", w.lease_remaining_s},
                                  {"partitions", held[w.owner]},
                                  {"pending", pending_of[w.owner]},
                                  {"done_per_s", static_cast<double>(done_of[w.owner]) / *window}});
        }
        for (const auto& p : g.partitions) {
          const auto& b = backlog[static_cast<std::size_t>(p.partition)];
          j["partitions"].push_back({{"partition", p.partition},
                                     {"owner", p.owner && !p.expired ? nlohmann::json(*p.owner) : nlohmann::json()},
                                     {"claim_version", p.version},
                                     {"lease_age_s", p.lease_age_s ? nlohmann::json(*p.lease_age_s) : nlohmann::json()},
                                     {"lease_remaining_s", p.lease_remaining_s},
                                     {"pending", b.pending},
                                     {"running", b.running},
                                     {"dead", b.dead},
                                     {"done_per_s", static_cast<double>(b.done_recently) / *window},
                                     {"oldest_pending_s", b.oldest_pending_s}});
        }
        out.push_back(std::move(j));
        continue;
      }
      fmt::print("worker group '{}': {} partitions, {} live worker{}\n\n", g.group, g.partition_count, live,
                 live == 1 ? "" : "s");
      fmt::print("  {:<28} {:>9} {:>11} {:>5} {:>8} {:>8}  {}\n", "worker", "joined", "lease left", "held", "pending",
                 "done/s", "partitions");
      for (const auto& w : g.workers) {
        fmt::print("  {:<28} {:>9} {:>11} {:>5} {:>8} {:>8.1f}  {}\n", w.owner + (w.live ? "" : " (expired)"),
                   Seconds(w.joined_ago_s) + " ago", Seconds(w.lease_remaining_s), held[w.owner].size(),
                   pending_of[w.owner], static_cast<double>(done_of[w.owner]) / *window, Ranges(held[w.owner]));
      }
      std::vector<int> unowned;
      for (const auto& p : g.partitions) {
        if (!p.owner || p.expired) unowned.push_back(p.partition);
      }
      if (!unowned.empty())
        fmt::print("  {:<28} {:>9} {:>11} {:>5} {:>8} {:>8}  {}\n", "(unowned)", "", "", unowned.size(), "", "",
                   Ranges(unowned));
      fmt::print("\n  per partition (done/s over the last {} s):\n", *window);
      fmt::print("  {:>9}  {:<28} {:>7} {:>9} {:>10} {:>8} {:>7} {:>5} {:>7} {:>14}\n", "partition", "owner", "version",
                 "lease age", "lease left", "pending", "running", "dead", "done/s", "oldest pending");
      for (const auto& p : g.partitions) {
        const auto& b = backlog[static_cast<std::size_t>(p.partition)];
        fmt::print("  {:>9}  {:<28} {:>7} {:>9} {:>10} {:>8} {:>7} {:>5} {:>7.1f} {:>14}\n", p.partition,
                   p.owner && !p.expired ? *p.owner : "-", p.version,
                   p.lease_age_s && p.owner ? Seconds(*p.lease_age_s) : "-",
                   p.owner && !p.expired ? Seconds(p.lease_remaining_s) : "-", b.pending, b.running, b.dead,
                   static_cast<double>(b.done_recently) / *window, b.pending > 0 ? Seconds(b.oldest_pending_s) : "-");
      }
      fmt::print("\n");
    }
    if (context.json) fmt::print("{}\n", out.dump(2));
  });
}
