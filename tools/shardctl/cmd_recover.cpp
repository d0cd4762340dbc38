// shardctl recover [--settle-after-ms N] [--json]: one recovery pass over
// the prepared parts of cross-shard transactions (shardkit/writes/in_doubt.hpp):
// decided ones finished, undecided ones older than the bound rolled back.
// Exit 1 when a shard or the catalog could not be asked or a part not
// settled.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/in_doubt.hpp"

namespace {

nlohmann::json PartsJson(const std::vector<shardkit::InDoubtPart>& parts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : parts) {
    out.push_back({{"shard", p.shard},
                   {"gid", p.gid},
                   {"transaction_id", p.transaction_id},
                   {"age_ms", p.age.count()},
                   {"decision", p.decision}});
  }
  return out;
}

void PrintParts(const char* what, const std::vector<shardkit::InDoubtPart>& parts) {
  for (const auto& p : parts) {
    fmt::print("  {:<11} shard {}  {}  prepared {} ms ago, decision {}\n", what, p.shard, p.gid, p.age.count(),
               p.decision);
  }
}

}  // namespace

void AddRecoverCommand(CLI::App& app, CliContext& context) {
  auto* recover = app.add_subcommand(
      "recover", "settle the prepared parts of cross-shard transactions whose coordinator stopped (by the catalog)");
  auto settle_after_ms = std::make_shared<std::int64_t>(30000);
  recover
      ->add_option("--settle-after-ms", *settle_after_ms,
                   "roll back an undecided part prepared longer ago than this (its coordinator is taken as gone)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  recover->callback([&context, settle_after_ms] {
    const shardkit::ClusterConfig config = context.LoadConfig();
    if (!config.catalog_dsn) {
      throw shardkit::ConfigError("catalog", "shardctl recover reads the decisions in the catalog: add [catalog] dsn");
    }
    auto resolver = shardkit::BucketShardResolver::FromConfig(config);
    shardkit::InDoubtOptions options;
    options.settle_after = std::chrono::milliseconds(*settle_after_ms);
    const shardkit::InDoubtReport report = shardkit::RecoverInDoubt(*resolver, *config.catalog_dsn, options);
    if (context.json) {
      fmt::print("{}\n", nlohmann::json{{"committed", PartsJson(report.committed)},
                                        {"rolled_back", PartsJson(report.rolled_back)},
                                        {"waiting", PartsJson(report.waiting)},
                                        {"rows_aborted", report.rows_aborted},
                                        {"rows_forgotten", report.rows_forgotten},
                                        {"failures", report.failures}}
                             .dump(2));
    } else {
      fmt::print(
          "committed {}, rolled back {}, left to their coordinators {} (younger than {} ms); coordinator log: "
          "{} aborted, {} deleted\n",
          report.committed.size(), report.rolled_back.size(), report.waiting.size(), *settle_after_ms,
          report.rows_aborted, report.rows_forgotten);
      PrintParts("committed", report.committed);
      PrintParts("rolled back", report.rolled_back);
      PrintParts("waiting", report.waiting);
      for (const auto& failure : report.failures) fmt::print("  FAILED      {}\n", failure);
    }
    if (!report.failures.empty()) {
      throw shardkit::Error(
          fmt::format("{} part(s) or server(s) could not be settled (see above); run shardctl "
                      "recover again once they answer",
                      report.failures.size()));
    }
  });
}
