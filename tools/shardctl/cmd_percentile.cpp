// shardctl percentile --from orders --value total [--fraction 0.5]... [--disc]
//                     [--group-by status]... [--where "..." -p V...] [--count-distinct]
//                     [--approx] [--json]
//   -> exact percentiles / count(DISTINCT) by distributed selection (the
//      rounds and rows it shipped against every value), or with --approx the
//      sketches' estimate and its error bound.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace {

// A result set as the sql command prints it.
shardkit::SqlResult AsSqlResult(const shardkit::ResultSet& r) {
  shardkit::SqlResult out;
  out.columns = r.column_names;
  for (const auto& type : r.column_types) out.types.push_back(shardkit::TypeOidNamed(type));
  for (const auto& row : r.rows) {
    auto& o = out.rows.emplace_back();
    for (const auto& v : row) o.push_back(v.IsNull() ? std::nullopt : std::optional<std::string>(v.ToString()));
  }
  return out;
}

nlohmann::json RowsJson(const shardkit::ResultSet& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json object = nlohmann::json::object();
    for (std::size_t i = 0; i < row.size(); ++i) {
      object[r.column_names[i]] = row[i].IsNull() ? nlohmann::json(nullptr) : nlohmann::json(row[i].ToString());
    }
    rows.push_back(std::move(object));
  }
  return rows;
}

struct Options {
  std::string from;
  std::string value;
  std::vector<double> fractions;
  bool disc = false;
  bool count_distinct = false;
  bool approx = false;
  std::vector<std::string> group_by;
  std::string where;
  std::vector<std::string> params;
};

void RunExact(const CliContext& context, shardkit::Cluster& cluster, const Options& o) {
  shardkit::PercentileQuery q;
  q.from = o.from;
  q.where = o.where;
  q.params.assign(o.params.begin(), o.params.end());
  q.label = "shardctl percentile";
  for (const std::string& key : o.group_by) {
    q.group_by.push_back({key, key});
    q.order_by.push_back({key});
  }
  if (o.count_distinct) {
    q.columns.push_back({shardkit::OrderStatistic::kCountDistinct, o.value, std::nullopt, "count_distinct"});
  }
  for (const double f : o.fractions) {
    q.columns.push_back({o.disc ? shardkit::OrderStatistic::kPercentileDisc : shardkit::OrderStatistic::kPercentileCont,
                         o.value, f, fmt::format("{}_{}", o.disc ? "percentile_disc" : "percentile_cont", f)});
  }
  const shardkit::PercentileResult r = cluster.Percentiles(q);
  if (context.json) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const auto& round : r.round_stats) {
      rounds.push_back(
          {{"name", round.name}, {"rows", round.rows}, {"bytes", round.bytes}, {"elapsed_us", round.elapsed.count()}});
    }
    fmt::print("{}\n", nlohmann::json{{"exact", true},
                                      {"columns", r.column_names},
                                      {"rows", RowsJson(r)},
                                      {"rounds", r.rounds},
                                      {"rows_shipped", r.rows_shipped},
                                      {"bytes_shipped", r.bytes_shipped},
                                      {"rows_all_values", r.rows_all_values},
                                      {"round_stats", std::move(rounds)}}
                           .dump(2));
    return;
  }
  PrintAligned(AsSqlResult(r));
  fmt::print("exact: {} rounds, {} rows received ({} bytes), against {} rows for every value\n", r.rounds,
             r.rows_shipped, r.bytes_shipped, r.rows_all_values);
}

void RunApproximate(const CliContext& context, shardkit::Cluster& cluster, const Options& o) {
  shardkit::SketchQuery q;
  q.from = o.from;
  q.where = o.where;
  q.params.assign(o.params.begin(), o.params.end());
  q.value = o.value;
  q.label = "shardctl percentile --approx";
  for (const std::string& key : o.group_by) q.group_by.push_back({key, key});
  std::vector<shardkit::ApproximateResult> results;
  if (o.count_distinct) {
    q.name = "approx_count_distinct";
    results.push_back(cluster.ApproxCountDistinct(q));
  }
  for (const double f : o.fractions) {
    q.fraction = f;
    q.name = fmt::format("approx_percentile_{}", f);
    results.push_back(cluster.ApproxPercentile(q));
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : results) {
    if (context.json) {
      out.push_back({{"approximate", true},
                     {"method", r.method},
                     {"relative_error", r.relative_error},
                     {"error_bound", r.error_bound},
                     {"columns", r.column_names},
                     {"rows", RowsJson(r)},
                     {"rounds", r.rounds},
                     {"rows_shipped", r.rows_shipped},
                     {"bytes_shipped", r.bytes_shipped}});
      continue;
    }
    PrintAligned(AsSqlResult(r));
    fmt::print("APPROXIMATE ({}): {}\n", r.method, r.error_bound);
  }
  if (context.json) fmt::print("{}\n", out.dump(2));
}

}  // namespace

void AddPercentileCommand(CLI::App& app, CliContext& context) {
  auto* cmd = app.add_subcommand(
      "percentile",
      "exact percentiles and count(DISTINCT) over every shard by distributed selection (or, with --approx, "
      "HyperLogLog and t-digest estimates with their error bound)");
  auto o = std::make_shared<Options>();
  cmd->add_option("--from", o->from, "FROM clause: a table or a co-located join")->required();
  cmd->add_option("--value", o->value, "the column or expression ranked or counted")->required();
  cmd->add_option("--fraction", o->fractions, "a fraction in [0, 1] (repeat for several; default 0.5: the median)");
  cmd->add_flag("--disc", o->disc, "percentile_disc (a value of the column) instead of percentile_cont");
  cmd->add_flag("--count-distinct", o->count_distinct, "count(DISTINCT value) too (alone without --fraction)");
  cmd->add_flag("--approx", o->approx, "estimate from sketches instead (approximate, with its error bound)");
  cmd->add_option("--group-by", o->group_by, "a GROUP BY expression (repeat for several)");
  cmd->add_option("--where", o->where, "a condition; values as $1, $2... given with -p");
  cmd->add_option("-p,--param", o->params, "a parameter value (repeat for $2, $3...)");
  cmd->final_callback([&context, o] {
    if (o->fractions.empty() && !o->count_distinct) o->fractions.push_back(0.5);
    const auto cluster = shardkit::Cluster::Open(context.LoadConfig());
    if (o->approx) {
      RunApproximate(context, *cluster, *o);
    } else {
      RunExact(context, *cluster, *o);
    }
  });
}
