// The report's charts of the query demos (report.hpp): shard key, the wrong
// top-10, the average per category and the third shard, from their figures.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "report.hpp"

namespace shardkit::lab {
namespace {

// Clustered bars, one cluster per data row; kHistogram from 0 up.
constexpr const char* kClusteredBars =
    "set style data histogram\n"
    "set style histogram clustered gap 1\n"
    "set style fill solid 0.85 border rgb '#333333'\n";
const std::string kHistogram = std::string(kClusteredBars) + "set yrange [0:*]\nset offsets 0,0,graph 0.08,0\n";

// Bars of one value per label, with the value above each bar.
constexpr const char* kLabelledBars = "set style fill solid 0.85 border rgb '#333333'\nset boxwidth 0.7\n";

bool Has(const Json& f, const char* key) {
  return f.is_object() && f.contains(key);
}

double Decimal(const Json& text) {
  if (text.is_number()) return text.get<double>();
  if (!text.is_string()) return 0;
  try {
    return std::stod(text.get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}

std::string FormatRounds(const Json& rounds) {
  return rounds.is_number() ? std::to_string(rounds.get<int>()) : "several";
}

// "TPUT" for auto's "TPUT (exact)".
std::string AutoChoice(const Json& automatic) {
  std::string chosen = automatic.value("chosen", std::string("?"));
  if (const auto paren = chosen.find(" ("); paren != std::string::npos) chosen.resize(paren);
  return chosen;
}

}  // namespace

std::vector<Chart> ShardKeyCharts(const Json& f) {
  if (!Has(f, "hash_by_customer") || !Has(f, "range_by_year")) return {};
  const Json& shards = f["hash_by_customer"];
  std::vector<std::vector<std::string>> years;
  for (const Json& y : f["range_by_year"]) {
    const int year = y.value("year", 0);
    std::vector<std::string> row{std::to_string(year)};
    for (const Json& s : shards) {
      std::int64_t orders = 0;
      for (const Json& sy : s["years"]) {
        if (sy.value("year", 0) == year) orders = sy.value("orders", std::int64_t{0});
      }
      row.push_back(std::to_string(orders));
    }
    row.push_back(NumberCell(y["orders"]));
    years.push_back(std::move(row));
  }
  Chart per_year{"shard-key-years", "Orders per year on each shard: hash by customer_id vs range by year"};
  per_year.data = {{"shard-key-years.tsv", DataFile(years)}};
  std::string plot = "plot 'shard-key-years.tsv' using 2:xtic(1) title 'hash: shard0'";
  for (std::size_t i = 1; i < shards.size(); ++i) {
    plot += fmt::format(", '' using {} title 'hash: shard{}'", i + 2, shards[i].value("shard", static_cast<int>(i)));
  }
  plot += fmt::format(", '' using {} title 'range: the year''s own shard'", shards.size() + 2);
  per_year.script = kHistogram + "set xlabel 'year ordered'\nset ylabel 'orders'\nset key top left\n" + plot;

  // The last 30 days: even under hash, all on one shard under range.
  std::vector<std::vector<std::string>> window;
  for (const Json& s : shards) {
    const std::string n = NumberCell(s["last_30_days"]);
    window.push_back({fmt::format("hash shard{}", s.value("shard", 0)), n, "-", n});
  }
  for (const Json& y : f["range_by_year"]) {
    const std::string n = NumberCell(y["last_30_days"]);
    window.push_back({fmt::format("range {} shard", y.value("year", 0)), "-", n, n});
  }
  Chart hot{"shard-key-window",
            "Orders of the last 30 days per shard: hash spreads them, range puts them on one shard"};
  hot.data = {{"shard-key-window.tsv", DataFile(window)}};
  hot.script = std::string(kLabelledBars) +
               "set yrange [0:*]\nset offsets 0.5,0.5,graph 0.1,0\nset xtics rotate by -30\n"
               "set ylabel 'orders in the last 30 days'\nset key top left\n"
               "plot 'shard-key-window.tsv' using 0:2:xtic(1) with boxes lt 1 title 'hash by customer_id', "
               "'' using 0:3 with boxes lt 4 title 'range by year', "
               "'' using 0:4:(sprintf('%d', $4)) with labels offset 0,0.8 notitle";
  return {per_year, hot};
}

std::vector<Chart> Top10Charts(const Json& f) {
  if (!Has(f, "exact") || !Has(f, "shortcut") || !Has(f, "tput")) return {};
  const Json& exact = f["exact"]["top"];
  const Json& shortcut = f["shortcut"]["top"];
  std::vector<std::vector<std::string>> ranks;
  for (std::size_t i = 0; i < exact.size() || i < shortcut.size(); ++i) {
    const Json none = Json::object();
    const Json& e = i < exact.size() ? exact[i] : none;
    const Json& s = i < shortcut.size() ? shortcut[i] : none;
    ranks.push_back(
        {fmt::format("{}. {} | {}", i + 1, NumberCell(Field(e, "book_id")), NumberCell(Field(s, "book_id"))),
         NumberCell(Field(e, "sold")), NumberCell(Field(s, "really")), NumberCell(Field(s, "sold"))});
  }
  Chart ten{"top10-lists",
            "The wrong top-10: the shortcut's ten best sellers vs the exact ten, with their real totals"};
  ten.data = {{"top10-lists.tsv", DataFile(ranks)}};
  ten.script = kHistogram +
               "set xtics rotate by -35 font ',10'\n"
               "set xlabel 'rank: the exact ten''s book | the shortcut''s book'\n"
               "set ylabel 'copies sold in the last 30 days'\nset key inside top left vertical Left reverse\nset "
               "offsets 0,0,graph 0.3,0\n"
               "plot 'top10-lists.tsv' using 2:xtic(1) title 'exact ten (real total)', "
               "'' using 3 title 'shortcut''s ten: real total', "
               "'' using 4 title 'shortcut''s ten: what the shortcut summed'";

  std::vector<std::vector<std::string>> methods;
  auto method = [&](const std::string& label, const Json& m, const Json& ms) {
    if (!m.is_object()) return;
    methods.push_back({label, NumberCell(Field(m, "rows")), NumberCell(ms)});
  };
  const Json& timing = Field(f, "timing");
  method("all partials", f["exact"], Field(timing, "all_partials_ms"));
  method("TPUT", f["tput"], Field(timing, "tput_ms"));
  if (Has(f, "auto")) {
    method("auto (" + AutoChoice(f["auto"]) + ")", f["auto"], Field(timing, "auto_ms"));
  }
  method("shortcut (wrong)", f["shortcut"], Field(f["shortcut"], "ms"));
  Chart rows{"top10-rows", "Rows shipped from the shards per top-10 method (log scale)"};
  rows.data = {{"top10-methods.tsv", DataFile(methods)}};
  rows.height = 380;
  rows.script = std::string(kLabelledBars) +
                "set logscale y\nset yrange [1:*]\nset offsets 0.5,0.5,0,0\nset format y '%g'\n"
                "set ylabel 'rows shipped to the router (log scale)'\nset key off\n"
                "plot 'top10-methods.tsv' using 0:2:xtic(1) with boxes lt 1, "
                "'' using 0:2:(sprintf('%d', $2)) with labels offset 0,0.8";
  Chart time{"top10-time", fmt::format("Time per top-10 method (exact methods: median of {} rounds; shortcut: one run)",
                                       FormatRounds(Field(timing, "rounds")))};
  time.height = 380;
  time.script = std::string(kLabelledBars) +
                "set yrange [0:*]\nset offsets 0.5,0.5,graph 0.1,0\n"
                "set ylabel 'milliseconds'\nset key off\n"
                "plot 'top10-methods.tsv' using 0:3:xtic(1) with boxes lt 2, "
                "'' using 0:3:(sprintf('%.1f ms', $3)) with labels offset 0,0.8";
  return {ten, rows, time};
}

std::vector<Chart> CategoryAvgCharts(const Json& f) {
  if (!Has(f, "categories") || f["categories"].empty()) return {};
  std::vector<std::vector<std::string>> rows;
  for (const Json& c : f["categories"]) {
    const double merged = Decimal(c["merged_avg"]), reference = Decimal(c["reference_avg"]),
                 wrong = Decimal(c["avg_of_shard_avgs"]);
    rows.push_back({c.value("category", std::string("?")), NumberCell(merged), NumberCell(reference), NumberCell(wrong),
                    NumberCell(100 * (merged - reference)), NumberCell(100 * (wrong - reference))});
  }
  Chart values{"category-avg-values", "Average order amount per category: merged vs the reference vs shard averages"};
  values.data = {{"category-avg.tsv", DataFile(rows)}};
  values.script = kHistogram +
                  "set xtics rotate by -30\nset ylabel 'average order amount (the data''s price unit)'\n"
                  "set key inside top left vertical Left reverse\nset offsets 0,0,graph 0.3,0\n"
                  "plot 'category-avg.tsv' using 2:xtic(1) title 'merged SUM / COUNT (shardkit)', "
                  "'' using 3 title 'reference avg()', '' using 4 title 'average of the shards'' averages (wrong)'";
  Chart error{"category-avg-error", "The error: each average minus the reference's, per category"};
  error.height = 380;
  error.script = std::string(kClusteredBars) +
                 "set xtics rotate by -30\nset ylabel 'difference from the reference (hundredths of a price unit)'\n"
                 "set key inside top left vertical Left reverse\nset offsets 0,0,graph 0.3,0\nset xzeroaxis lt -1\n"
                 "plot 'category-avg.tsv' using 5:xtic(1) lt 1 title 'merged - reference', "
                 "'' using 6 lt 3 title 'average of averages - reference'";
  return {values, error};
}

std::vector<Chart> PercentilesCharts(const Json& f) {
  if (!Has(f, "queries") || f["queries"].empty()) return {};
  // Rows shipped: exact selection vs a gather of every value (log scale).
  std::vector<std::vector<std::string>> totals;
  // Rows per round, one cluster per query.
  std::vector<std::vector<std::string>> rounds;
  std::size_t most_rounds = 0;
  for (const Json& q : f["queries"]) most_rounds = std::max(most_rounds, Field(q, "round_stats").size());
  for (const Json& q : f["queries"]) {
    const std::string name = q.value("name", std::string("?"));
    totals.push_back({name, NumberCell(q["rows_shipped"]), NumberCell(q["rows_all_values"])});
    std::vector<std::string> row{name};
    for (std::size_t i = 0; i < most_rounds; ++i) {
      const Json& rs = Field(q, "round_stats");
      row.push_back(i < rs.size() ? NumberCell(rs[i]["rows"]) : "0");
    }
    rounds.push_back(std::move(row));
  }
  Chart shipped{"percentiles-rows", "Rows shipped: exact distributed selection vs gathering every value (log scale)"};
  shipped.data = {{"percentiles-rows.tsv", DataFile(totals)}};
  shipped.script = std::string(kClusteredBars) +
                   "set logscale y\nset format y '%g'\nset yrange [1:*]\nset ylabel 'rows received from the shards'\n"
                   "set key inside top right\nset offsets 0,0,graph 0.2,0\n"
                   "plot 'percentiles-rows.tsv' using 2:xtic(1) title 'exact selection (shardkit)', "
                   "'' using 3 title 'every value (naive gather)'";
  Chart per_round{"percentiles-rounds", "Rows received in each round of the selection"};
  per_round.data = {{"percentiles-rounds.tsv", DataFile(rounds)}};
  std::string plot = "plot 'percentiles-rounds.tsv' using 2:xtic(1) title 'round 1'";
  for (std::size_t i = 1; i < most_rounds; ++i) plot += fmt::format(", '' using {} title 'round {}'", i + 2, i + 1);
  per_round.script = kHistogram + "set ylabel 'rows received'\nset key inside top right\n" + plot;
  return {shipped, per_round};
}

std::vector<Chart> ThirdShardCharts(const Json& f) {
  if (!Has(f, "measured") || !Has(f, "buckets_moved")) return {};
  const Json& m = f["measured"];
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"buckets (64)", NumberCell(100.0 * f["buckets_moved"].get<double>() / 64.0), "-",
                  fmt::format("{} buckets", f["buckets_moved"].get<std::int64_t>()), ""});
  for (const char* what : {"customers", "orders"}) {
    if (!m.contains(what)) continue;
    const Json& w = m[what];
    rows.push_back({fmt::format("{} ({})", what, NumberCell(Field(w, "rows"))),
                    NumberCell(100 * w.value("bucket_share", 0.0)), NumberCell(100 * w.value("modulo_share", 0.0)),
                    NumberCell(Field(w, "bucket_moves")), NumberCell(Field(w, "modulo_moves"))});
  }
  Chart moved{"third-shard-moved",
              fmt::format("Adding a third shard: what moves with {} of 64 buckets vs with customer_id % 2 -> % 3",
                          f["buckets_moved"].get<std::int64_t>())};
  moved.data = {{"third-shard.tsv", DataFile(rows)}};
  moved.script = kHistogram +
                 "set yrange [0:100]\nset ylabel 'moved to another shard (% of all)'\n"
                 "set key top right\n"
                 "plot 'third-shard.tsv' using 2:xtic(1) title 'bucket directory (fewest bucket moves)', "
                 "'' using 3 title 'modulo: customer_id % 2 -> % 3', "
                 "'' using ($0-0.17):2:4 with labels offset 0,0.8 font ',10' notitle, "
                 "'' using ($0+0.17):3:5 with labels offset 0,0.8 font ',10' notitle, "
                 "100.0/3 with lines dt 2 lc rgb '#444444' title 'the least possible: 1/3'";
  return {moved};
}

}  // namespace shardkit::lab
