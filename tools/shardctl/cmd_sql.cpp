// shardctl sql "SELECT ..." [-p VALUE]... [--explain] [--json]
//   -> the rows as psql aligns them, or as JSON; --explain: where it would run.
// A syntax error or a refusal exits 1 with the message (psql's form) on stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace {

// Display width of UTF-8 text (one column a code point).
std::size_t Width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string Pad(const std::string& text, std::size_t width, bool right) {
  const std::string fill(width > Width(text) ? width - Width(text) : 0, ' ');
  return right ? fill + text : text + fill;
}

// Numeric types print right-aligned, as psql does.
bool IsNumeric(unsigned oid) {
  return oid == 20 || oid == 21 || oid == 23 || oid == 26 || oid == 700 || oid == 701 || oid == 1700;
}

nlohmann::json PlanJson(const shardkit::SqlPlanInfo& plan) {
  nlohmann::json out{{"plan", plan.Describe()},
                     {"kind", plan.kind == shardkit::SqlPlanInfo::Kind::kRouted    ? "routed"
                              : plan.kind == shardkit::SqlPlanInfo::Kind::kScatter ? "scatter"
                                                                                   : "any_shard"},
                     {"shard", shardkit::ToInt(plan.shard)},
                     {"statement", plan.statement},
                     {"read_only", plan.read_only},
                     {"sharded_tables", plan.sharded_tables},
                     {"reference_tables", plan.reference_tables}};
  if (plan.kind == shardkit::SqlPlanInfo::Kind::kScatter) {
    out["shard_count"] = plan.shard_count;
    out["shard_sql"] = plan.shard_sql;
    out["merge"] = plan.merge;
  }
  // The key under its column's name: a number for integer keys.
  if (plan.key) {
    if (const auto value = plan.key->Integer()) {
      out[plan.key_column] = *value;
    } else {
      out[plan.key_column] = plan.key->ToString();
    }
  }
  if (plan.bucket) out["bucket"] = shardkit::ToInt(*plan.bucket);
  return out;
}

}  // namespace

void PrintAligned(const shardkit::SqlResult& result) {
  if (result.columns.empty()) {
    fmt::print("{} {}\n", result.plan.statement, result.affected);
    return;
  }
  std::vector<std::size_t> widths;
  for (const auto& c : result.columns) widths.push_back(Width(c));
  for (const auto& row : result.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], Width(row[i].value_or("")));
  }
  std::string header;
  std::string rule;
  for (std::size_t i = 0; i < widths.size(); ++i) {
    const std::size_t left = (widths[i] - Width(result.columns[i])) / 2;
    header += (i ? " | " : " ") + Pad(std::string(left, ' ') + result.columns[i], widths[i], false);
    rule += (i ? "-+-" : "-") + std::string(widths[i], '-');
  }
  fmt::print("{}\n{}-\n", header, rule);
  for (const auto& row : result.rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += (i ? " | " : " ") + Pad(row[i].value_or(""), widths[i], IsNumeric(result.types[i]));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
  fmt::print("({} row{})\n", result.rows.size(), result.rows.size() == 1 ? "" : "s");
}

void AddSqlCommand(CLI::App& app, CliContext& context) {
  auto* sql = app.add_subcommand("sql",
                                 "run one SQL statement: on its customer's shard, or over every shard merged into the "
                                 "unsharded answer (or say why not)");
  auto text = std::make_shared<std::string>();
  auto params = std::make_shared<std::vector<std::string>>();
  auto explain = std::make_shared<bool>(false);
  sql->add_option("statement", *text, "the statement; $1, $2... are the -p values in order")->required();
  sql->add_option("-p,--param", *params, "a parameter value (repeat for $2, $3...)");
  sql->add_flag("--explain", *explain, "say where it would run, without running it");
  sql->final_callback([&context, text, params, explain] {
    const shardkit::SqlParams values(params->begin(), params->end());
    const auto cluster = shardkit::Cluster::Open(context.LoadConfig());
    if (*explain) {
      const shardkit::SqlPlanInfo plan = cluster->Explain(*text, values);
      if (context.json) {
        fmt::print("{}\n", PlanJson(plan).dump(2));
      } else {
        fmt::print("{}\n", plan.Describe());
      }
      return;
    }
    const shardkit::SqlResult result = cluster->Execute(*text, values);
    if (!context.json) {
      PrintAligned(result);
      return;
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : result.rows) {
      nlohmann::json object = nlohmann::json::object();
      for (std::size_t i = 0; i < row.size(); ++i) {
        object[result.columns[i]] = row[i] ? nlohmann::json(*row[i]) : nlohmann::json(nullptr);
      }
      rows.push_back(std::move(object));
    }
    nlohmann::json out = PlanJson(result.plan);
    out["columns"] = result.columns;
    out["types"] = result.types;
    out["rows"] = std::move(rows);
    out["affected"] = result.affected;
    fmt::print("{}\n", out.dump(2));
  });
}
