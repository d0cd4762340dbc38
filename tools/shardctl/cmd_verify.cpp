// shardctl verify [--json]: every row where the directory says, reference
// tables identical, every server at one migration version. Exit 1 on any
// finding.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/schema/verify.hpp"

namespace {

std::string Thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

// Buckets with rows, as ranges: "0-20, 44"
std::string BucketsWithRows(const shardkit::ServerCounts& server) {
  std::vector<int> buckets;
  for (int b = 0; b < shardkit::kBucketCount; ++b) {
    for (const auto& t : server.tables) {
      if (t.by_bucket[static_cast<std::size_t>(b)] > 0) {
        buckets.push_back(b);
        break;
      }
    }
  }
  std::string text;
  for (std::size_t i = 0; i < buckets.size();) {
    std::size_t j = i;
    while (j + 1 < buckets.size() && buckets[j + 1] == buckets[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") +
            (i == j ? fmt::format("{}", buckets[i]) : fmt::format("{}-{}", buckets[i], buckets[j]));
    i = j + 1;
  }
  return text.empty() ? "none" : text;
}

nlohmann::json ReportJson(const shardkit::VerifyReport& report, const std::string& where) {
  nlohmann::json servers = nlohmann::json::array();
  for (const auto& s : report.servers) {
    nlohmann::json tables = nlohmann::json::object();
    for (const auto& t : s.tables) {
      nlohmann::json buckets = nlohmann::json::object();
      for (int b = 0; b < shardkit::kBucketCount; ++b) {
        const auto n = t.by_bucket[static_cast<std::size_t>(b)];
        if (n != 0) buckets[std::to_string(b)] = n;
      }
      tables[t.table] = {{"rows", t.rows}, {"by_bucket", buckets}};
    }
    servers.push_back({{"server", s.server},
                       {"shard", s.shard ? nlohmann::json(shardkit::ToInt(*s.shard)) : nlohmann::json(nullptr)},
                       {"reachable", s.reachable},
                       {"elapsed_ms", static_cast<double>(s.elapsed.count()) / 1000.0},
                       {"tables", tables}});
  }
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : report.findings) {
    findings.push_back({{"kind", std::string(shardkit::FindingName(f.kind))},
                        {"server", f.server},
                        {"table", f.table},
                        {"bucket", f.bucket ? nlohmann::json(shardkit::ToInt(*f.bucket)) : nlohmann::json(nullptr)},
                        {"rows", f.rows},
                        {"sample_key", f.sample_key},
                        {"detail", f.detail}});
  }
  return {{"ok", report.Ok()},
          {"migrations", where},
          {"directory", {{"source", report.directory_source}, {"version", report.directory_version}}},
          {"shards", report.shard_count},
          {"sharded_tables", report.sharded_tables},
          {"reference_tables", report.reference_tables},
          {"schema_version", report.schema_version ? nlohmann::json(*report.schema_version) : nlohmann::json(nullptr)},
          {"elapsed_ms", static_cast<double>(report.elapsed.count()) / 1000.0},
          {"servers", servers},
          {"findings", findings}};
}

}  // namespace

void AddVerifyCommand(CLI::App& app, CliContext& context) {
  auto* verify = app.add_subcommand(
      "verify",
      "check the cluster against its directory: rows on the shard their bucket maps to, bucket = "
      "bucket_of(customer_id), no orphans, reference tables identical, one migration version; exit 1 on "
      "any finding");
  auto reference_tables = std::make_shared<std::vector<std::string>>();
  auto no_migrations = std::make_shared<bool>(false);
  verify->add_option("--reference-table", *reference_tables,
                     "a table that must be identical on every shard (repeatable; default: the configuration's [sql] "
                     "reference_tables)");
  auto mirrored_tables = std::make_shared<std::vector<std::string>>();
  auto no_counts = std::make_shared<bool>(false);
  verify->add_option("--mirrored-table", *mirrored_tables,
                     "a sharded table the [reference] server holds in full, compared per bucket (repeatable; "
                     "default: customers, orders, order_items; read only with a [reference] server)");
  verify->add_flag("--no-reference-counts", *no_counts, "do not compare bucket counts with the [reference] server");
  verify->add_flag("--skip-migrations", *no_migrations, "do not compare migration versions");
  verify->final_callback([&context, reference_tables, mirrored_tables, no_counts, no_migrations] {
    const auto config = context.LoadConfig();
    shardkit::VerifyOptions options;
    if (!reference_tables->empty()) options.reference_tables = *reference_tables;
    if (!mirrored_tables->empty()) options.mirrored_tables = *mirrored_tables;
    if (*no_counts) options.mirrored_tables.clear();
    std::string where = "not compared (--skip-migrations)";
    if (!*no_migrations) {
      options.migrations = context.LoadMigrations();
      where.clear();
      for (const auto& set : options.migrations) {
        where += fmt::format("{}{} ({})", where.empty() ? "" : ", ", set.Name(), set.Origin());
      }
    }
    const auto report = shardkit::VerifyCluster(config, options);
    if (context.json) {
      fmt::print("{}\n", ReportJson(report, where).dump(2));
    } else {
      std::string tables;
      for (const auto& t : report.sharded_tables) tables += (tables.empty() ? "" : ", ") + t;
      std::string refs;
      for (const auto& t : report.reference_tables) refs += (refs.empty() ? "" : ", ") + t;
      fmt::print("verify: directory version {} from the {}, {} shards; sharded tables {}; reference tables {}\n",
                 report.directory_version, report.directory_source, report.shard_count,
                 tables.empty() ? "none" : tables, refs.empty() ? "none" : refs);
      fmt::print("migrations {}\n", where);
      for (const auto& s : report.servers) {
        std::string line = fmt::format("  {:<10}", s.server);
        if (!s.reachable) {
          fmt::print("{} not checked\n", line);
          continue;
        }
        for (const auto& t : s.tables) line += fmt::format("  {} {}", t.table, Thousands(t.rows));
        if (s.shard) line += fmt::format("  (rows in buckets {})", BucketsWithRows(s));
        fmt::print("{}  {:.2f} s\n", line, static_cast<double>(s.elapsed.count()) / 1e6);
      }
      if (report.Ok()) {
        fmt::print(
            "verify: clean: every row on the shard its bucket maps to, buckets right, {} identical on every "
            "shard{}{} ({:.2f} s)\n",
            refs.empty() ? "no reference tables" : refs,
            report.schema_version ? fmt::format(", every server at schema version {:03}", *report.schema_version)
                                  : std::string(),
            config.reference_dsn && !options.mirrored_tables.empty() ? ", bucket counts equal the reference server's"
                                                                     : "",
            static_cast<double>(report.elapsed.count()) / 1e6);
      } else {
        fmt::print("findings:\n");
        for (const auto& f : report.findings) fmt::print("  [{}] {}\n", shardkit::FindingName(f.kind), f.detail);
        fmt::print("verify: {} finding{} ({:.2f} s)\n", report.findings.size(), report.findings.size() == 1 ? "" : "s",
                   static_cast<double>(report.elapsed.count()) / 1e6);
      }
    }
    if (!report.Ok())
      throw shardkit::Error(fmt::format("verify found {} problem(s) (see above)", report.findings.size()));
  });
}
