// Demo 2: hash by customer_id spreads new orders evenly; range by date
// sends every new order to the newest shard.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <pqxx/pqxx>

#include "dataset.hpp"
#include "demos.hpp"

namespace shardkit::lab {
namespace {

// Years in UTC whatever the session's TimeZone.
constexpr const char* kPerYear =
    "SELECT extract(year FROM ordered_at AT TIME ZONE 'UTC')::int AS year, count(*) AS orders, "
    "count(*) FILTER (WHERE ordered_at >= $1::timestamptz) AS last_30_days "
    "FROM orders GROUP BY 1 ORDER BY 1";

struct YearCounts {
  std::int64_t orders = 0;
  std::int64_t last_30_days = 0;
};
using PerYear = std::map<int, YearCounts>;

// A shard's pg::Rows or the reference's pqxx::result.
template <class Rows>
PerYear Read(const Rows& rows) {
  PerYear out;
  for (const auto& row : rows) {
    out[row[0].template as<int>()] = {row[1].template as<std::int64_t>(), row[2].template as<std::int64_t>()};
  }
  return out;
}

std::string SeedTable(const PerYear& years) {
  TextTable t({{"year"}, {"orders"}, {"last_30_days"}});
  for (const auto& [year, c] : years)
    t.AddRow({std::to_string(year), std::to_string(c.orders), std::to_string(c.last_30_days)});
  return t.Render();
}

}  // namespace

std::string WindowStartParam() {
  return FormatTimestamp(kWindowStart);
}

DemoResult RunShardKey(Lab& lab) {
  DemoResult r;
  r.name = "shard-key";
  const ScatterResult scatter = lab.Run("shard-key: orders per year", kPerYear, {WindowStartParam()});
  std::vector<PerYear> shards;
  for (const auto& s : scatter.shards) {
    shards.push_back(Read(s.rows));
    r.text += fmt::format("== {}\n", lab.ShardLabel(s.shard));
    r.text += SeedTable(shards.back());
  }
  pqxx::nontransaction ref{lab.Reference()};
  const PerYear reference = Read(ref.exec_params(kPerYear, WindowStartParam()));

  // Every shard's counts add up to the reference's, year by year.
  PerYear summed;
  std::vector<std::int64_t> window_per_shard;
  for (const auto& s : shards) {
    std::int64_t window = 0;
    for (const auto& [year, c] : s) {
      summed[year].orders += c.orders;
      summed[year].last_30_days += c.last_30_days;
      window += c.last_30_days;
    }
    window_per_shard.push_back(window);
  }
  std::int64_t total = 0;
  std::int64_t window_total = 0;
  std::string mismatches;
  for (const auto& [year, c] : reference) {
    total += c.orders;
    window_total += c.last_30_days;
    const auto it = summed.find(year);
    const YearCounts got = it == summed.end() ? YearCounts{} : it->second;
    if (got.orders != c.orders || got.last_30_days != c.last_30_days) {
      mismatches += fmt::format(" {}: shards {}/{} vs reference {}/{};", year, got.orders, got.last_30_days, c.orders,
                                c.last_30_days);
    }
  }
  for (const auto& [year, c] : summed) {
    if (!reference.contains(year)) mismatches += fmt::format(" {}: only on the shards;", year);
  }
  r.Expect("shard-key.shards_add_up_to_reference", mismatches.empty() && !reference.empty(),
           mismatches.empty() ? fmt::format("{} years, {} orders, {} in the last 30 days: shards = reference",
                                            reference.size(), total, window_total)
                              : "differences:" + mismatches);
  std::string split;
  for (std::size_t i = 0; i < window_per_shard.size(); ++i) {
    split += fmt::format("{}{}", i == 0 ? "" : " / ", Thousands(window_per_shard[i]));
  }
  r.text += fmt::format("shards added up = reference server, every year: {} orders, {} in the last 30 days ({})\n",
                        Thousands(total), Thousands(window_total), mismatches.empty() ? "ok" : "MISMATCH");

  // The same orders range-sharded by year: each year's orders on its own shard.
  r.text += "\nthe same orders range-sharded by ordered_at, one shard per year:\n";
  TextTable range(
      {{"year shard"}, {"orders"}, {"last_30_days"}, {"share of last 30 days"}, {"", TextTable::Align::kLeft, true}});
  std::int64_t hot_window = 0;
  int hot_year = 0;
  for (const auto& [year, c] : reference) {
    if (c.last_30_days > hot_window) {
      hot_window = c.last_30_days;
      hot_year = year;
    }
  }
  Json range_json = Json::array();
  for (const auto& [year, c] : reference) {
    const double share = window_total > 0 ? static_cast<double>(c.last_30_days) / static_cast<double>(window_total) : 0;
    range.AddRow({std::to_string(year), std::to_string(c.orders), std::to_string(c.last_30_days), Percent(share),
                  year == hot_year ? "<- hot shard: every new order lands here" : ""});
    range_json.push_back({{"year", year}, {"orders", c.orders}, {"last_30_days", c.last_30_days}, {"share", share}});
  }
  r.text += range.Render();
  const double hot_share = window_total > 0 ? static_cast<double>(hot_window) / static_cast<double>(window_total) : 0;
  double hash_max = 0;
  std::string hash_shares;
  for (std::size_t i = 0; i < window_per_shard.size(); ++i) {
    const double share =
        window_total > 0 ? static_cast<double>(window_per_shard[i]) / static_cast<double>(window_total) : 0;
    hash_max = std::max(hash_max, share);
    hash_shares += fmt::format("{}{}", i == 0 ? "" : " / ", Percent(share));
  }
  const auto first_year = reference.empty() ? YearCounts{} : reference.begin()->second;
  r.text += fmt::format(
      "last 30 days: hash by customer_id {} ({}); range by year {} on the {} shard ({}), while the {} shard holds "
      "{} orders in all\n",
      split, hash_shares, Thousands(hot_window), hot_year, Percent(hot_share),
      reference.empty() ? 0 : reference.begin()->first, Thousands(first_year.orders));

  // Even within binomial noise: n new orders over m shards.
  const double m = static_cast<double>(std::max<std::size_t>(window_per_shard.size(), 1));
  const double sigma = window_total > 0 ? std::sqrt((1 / m) * (1 - 1 / m) / static_cast<double>(window_total)) : 0;
  const double even_bound = 1 / m + 6 * sigma + 0.01;
  r.Expect("shard-key.hash_spreads_new_orders", hash_max <= even_bound,
           fmt::format("largest shard's share of the last 30 days {} (even: {}, allowed up to {})",
                       Percent(hash_max, 2), Percent(1 / m, 2), Percent(even_bound, 2)));
  r.Expect("shard-key.range_makes_a_hot_shard", window_total > 0 && hot_share == 1.0 && hot_year == kLastYear,
           fmt::format("{} of the last 30 days' orders on the {} shard", Percent(hot_share), hot_year));

  Json per_shard = Json::array();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    Json years = Json::array();
    for (const auto& [year, c] : shards[i]) {
      years.push_back({{"year", year}, {"orders", c.orders}, {"last_30_days", c.last_30_days}});
    }
    per_shard.push_back({{"shard", scatter.shards[i].shard}, {"years", years}, {"last_30_days", window_per_shard[i]}});
  }
  Json ref_years = Json::array();
  for (const auto& [year, c] : reference) {
    ref_years.push_back({{"year", year}, {"orders", c.orders}, {"last_30_days", c.last_30_days}});
  }
  r.figures = {{"window_start", WindowStartParam()},
               {"hash_by_customer", per_shard},
               {"reference", ref_years},
               {"orders", total},
               {"last_30_days", window_total},
               {"range_by_year", range_json},
               {"hot_year", hot_year},
               {"hot_share", hot_share},
               {"hash_max_share", hash_max},
               {"scatter_ms", MsValue(scatter.elapsed)}};
  return r;
}

}  // namespace shardkit::lab
