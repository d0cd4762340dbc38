// Demo 10: medians, percentiles and distinct counts over shards, exactly,
// without shipping every value. "Median and 95th percentile of order amount
// per category, last 30 days" and "distinct books sold, last 30 days" by
// distributed selection (shardkit/queries/percentile.hpp), next to the
// reference server's percentile_cont / count(DISTINCT), the rows a naive
// gather of every value would ship, and the sketches' estimates (t-digest,
// HyperLogLog) with their error.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <pqxx/pqxx>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/queries/percentile.hpp"
#include "shardkit/queries/sketches.hpp"

namespace shardkit::lab {
namespace {

// What each order spent on each category in the last 30 days (as the
// category-avg demo): complete on its shard, orders being co-located.
constexpr const char* kPerOrderCategory =
    "(SELECT b.category, sum(i.quantity * i.unit_price) AS amount "
    "FROM order_items i "
    "JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
    "JOIN books b ON b.book_id = i.book_id "
    "WHERE o.ordered_at >= $1::timestamptz "
    "GROUP BY i.customer_id, i.order_id, b.category) per_order";

constexpr const char* kItemsLast30Days =
    "order_items i JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id";

double Number(const Value& v) {
  return v.IsNull() ? std::nan("") : std::stod(v.ToString());
}

Json RoundsJson(const PercentileResult& r) {
  Json rounds = Json::array();
  for (const auto& round : r.round_stats) {
    rounds.push_back(
        {{"name", round.name}, {"rows", round.rows}, {"bytes", round.bytes}, {"ms", MsValue(round.elapsed)}});
  }
  return rounds;
}

}  // namespace

DemoResult RunPercentiles(Lab& lab) {
  DemoResult r;
  r.name = "percentiles";
  const SqlParams window{WindowStartParam()};
  pqxx::nontransaction ref{lab.Reference()};
  Json queries = Json::array();

  // 1. Median and 95th percentile of order amount per category.
  PercentileQuery q;
  q.from = kPerOrderCategory;
  q.params = window;
  q.group_by = {{"category", "category"}};
  q.order_by = {{"category"}};
  q.columns = {{OrderStatistic::kPercentileCont, "amount", 0.5, "median"},
               {OrderStatistic::kPercentileCont, "amount", 0.95, "p95"}};
  q.label = "percentiles: median and p95 per category";
  const auto start = std::chrono::steady_clock::now();
  const PercentileResult exact = ExactPercentiles(lab.Scatter(), q);
  const auto exact_time = Micros(std::chrono::steady_clock::now() - start);

  std::map<std::string, std::pair<std::string, std::string>> reference;
  for (const auto& row :
       ref.exec_params(fmt::format("SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), "
                                   "percentile_cont(0.95) WITHIN GROUP (ORDER BY amount) FROM {} GROUP BY category",
                                   kPerOrderCategory),
                       WindowStartParam())) {
    reference[row[0].as<std::string>()] = {row[1].as<std::string>(), row[2].as<std::string>()};
  }
  // The sketches' estimates of the same, per category.
  SketchQuery sketch;
  sketch.from = kPerOrderCategory;
  sketch.params = window;
  sketch.group_by = {{"category", "category"}};
  sketch.value = "amount";
  sketch.label = "percentiles: t-digest";
  std::map<std::string, std::pair<double, double>> approx;
  double digest_error = 0;
  int digest_rounds = 0;
  std::size_t digest_rows = 0;
  for (const double f : {0.5, 0.95}) {
    sketch.fraction = f;
    const ApproximateResult a = ApproxPercentile(lab.Scatter(), sketch);
    digest_error = std::max(digest_error, a.relative_error);
    digest_rounds += a.rounds;
    digest_rows += a.rows_shipped;
    for (const auto& row : a.rows) {
      auto& e = approx[row[0].ToString()];
      (f == 0.5 ? e.first : e.second) = Number(row[1]);
    }
  }

  r.text += fmt::format(
      "median and 95th percentile of order amount per category, last 30 days (amount = what one order spent on the "
      "category)\nexact by distributed selection in one snapshot per shard: {} rounds, {} rows received ({} bytes, "
      "{} ms); a gather of every value would ship {} rows\n",
      exact.rounds, Thousands(static_cast<std::int64_t>(exact.rows_shipped)),
      Thousands(static_cast<std::int64_t>(exact.bytes_shipped)), Ms(exact_time), Thousands(exact.rows_all_values));
  TextTable table({{"category", TextTable::Align::kLeft},
                   {"median"},
                   {"reference"},
                   {"p95"},
                   {"reference"},
                   {"equal", TextTable::Align::kLeft},
                   {"t-digest median"},
                   {"t-digest p95"}});
  std::size_t equal = 0;
  double worst_relative = 0;
  Json rows = Json::array();
  for (const auto& row : exact.rows) {
    const std::string category = row[0].ToString();
    const std::string median = row[1].ToString();
    const std::string p95 = row[2].ToString();
    const auto it = reference.find(category);
    const bool same = it != reference.end() && it->second.first == median && it->second.second == p95;
    equal += same ? 1 : 0;
    const auto& [a50, a95] = approx[category];
    for (const auto& [estimate, truth] : {std::pair{a50, Number(row[1])}, std::pair{a95, Number(row[2])}}) {
      if (truth != 0 && std::isfinite(estimate))
        worst_relative = std::max(worst_relative, std::fabs(estimate - truth) / truth);
    }
    table.AddRow({category, median, it == reference.end() ? "-" : it->second.first, p95,
                  it == reference.end() ? "-" : it->second.second, same ? "yes" : "NO", fmt::format("{:.2f}", a50),
                  fmt::format("{:.2f}", a95)});
    rows.push_back({{"category", category},
                    {"median", median},
                    {"p95", p95},
                    {"reference_median", it == reference.end() ? "" : it->second.first},
                    {"reference_p95", it == reference.end() ? "" : it->second.second},
                    {"equal", same},
                    {"tdigest_median", a50},
                    {"tdigest_p95", a95}});
  }
  r.text += table.Render();
  r.text += fmt::format(
      "exact = reference to the last digit for {} of {} categories; APPROXIMATE t-digest (compression {}): largest "
      "relative error {} (rank error bound ±{} of the rows)\n",
      equal, reference.size(), sketch.tdigest_compression, Percent(worst_relative, 2), Percent(digest_error, 2));
  const bool percentiles_equal =
      equal == reference.size() && exact.rows.size() == reference.size() && !reference.empty();
  r.Expect("percentiles.median_p95_equal_reference", percentiles_equal,
           fmt::format("{} of {} categories equal", equal, reference.size()));
  r.Expect("percentiles.rounds_at_most_4", exact.rounds <= 4, fmt::format("{} rounds", exact.rounds));
  // Small groups come whole in round 1 (then no more than a gather ships,
  // plus one row per shard saying the value's type); larger ones far fewer.
  const auto meta_rows = static_cast<std::int64_t>(lab.ShardCount());
  r.Expect("percentiles.ships_no_more_than_a_gather",
           static_cast<std::int64_t>(exact.rows_shipped) <= exact.rows_all_values + meta_rows,
           fmt::format("{} rows shipped, {} for every value", exact.rows_shipped, exact.rows_all_values));
  queries.push_back({{"name", "median and p95 of order amount per category"},
                     {"rounds", exact.rounds},
                     {"rows_shipped", exact.rows_shipped},
                     {"bytes_shipped", exact.bytes_shipped},
                     {"rows_all_values", exact.rows_all_values},
                     {"equal_to_reference", percentiles_equal},
                     {"ms", MsValue(exact_time)},
                     {"round_stats", RoundsJson(exact)},
                     {"rows", rows},
                     {"approximate",
                      {{"method", fmt::format("t-digest (compression {})", sketch.tdigest_compression)},
                       {"rounds", digest_rounds},
                       {"rows_shipped", digest_rows},
                       {"max_relative_error", worst_relative},
                       {"rank_error_bound", digest_error}}}});

  // 2. Distinct books sold in the last 30 days.
  PercentileQuery d;
  d.from = kItemsLast30Days;
  d.where = "o.ordered_at >= $1::timestamptz";
  d.params = window;
  d.columns = {{OrderStatistic::kCountDistinct, "i.book_id", std::nullopt, "books"}};
  d.label = "percentiles: distinct books sold";
  const PercentileResult books = ExactPercentiles(lab.Scatter(), d);
  const std::string exact_books = books.rows.at(0).at(0).ToString();
  const auto ref_books = ref.exec_params1(
      fmt::format("SELECT count(DISTINCT i.book_id), count(*) FROM {} WHERE {}", kItemsLast30Days, d.where),
      WindowStartParam());
  SketchQuery h;
  h.from = kItemsLast30Days;
  h.where = d.where;
  h.params = window;
  h.value = "i.book_id";
  h.label = "percentiles: HyperLogLog";
  const ApproximateResult hll = ApproxCountDistinct(lab.Scatter(), h);
  const double estimate = static_cast<double>(hll.rows.at(0).at(0).AsInt());
  const double truth = std::stod(exact_books);
  const bool books_equal = exact_books == ref_books[0].as<std::string>();
  r.text += fmt::format(
      "distinct books sold, last 30 days: exact {} (reference {}: {}), each shard's distinct values merged: {} rounds, "
      "{} rows received; a gather of every sold item would ship {} rows\n"
      "APPROXIMATE HyperLogLog: {} ({} off; {})\n",
      exact_books, ref_books[0].as<std::string>(), books_equal ? "equal" : "DIFFERENT", books.rounds,
      Thousands(static_cast<std::int64_t>(books.rows_shipped)), Thousands(books.rows_all_values),
      static_cast<std::int64_t>(estimate), Percent(truth > 0 ? std::fabs(estimate - truth) / truth : 0, 2),
      hll.error_bound);
  r.Expect("percentiles.distinct_books_equal_reference", books_equal,
           fmt::format("exact {} vs reference {}", exact_books, ref_books[0].as<std::string>()));
  queries.push_back({{"name", "distinct books sold"},
                     {"rounds", books.rounds},
                     {"rows_shipped", books.rows_shipped},
                     {"bytes_shipped", books.bytes_shipped},
                     {"rows_all_values", books.rows_all_values},
                     {"equal_to_reference", books_equal},
                     {"round_stats", RoundsJson(books)},
                     {"exact", exact_books},
                     {"reference", ref_books[0].as<std::string>()},
                     {"approximate",
                      {{"method", hll.method},
                       {"estimate", static_cast<std::int64_t>(estimate)},
                       {"relative_error", truth > 0 ? std::fabs(estimate - truth) / truth : 0},
                       {"standard_error", hll.relative_error},
                       {"rows_shipped", hll.rows_shipped},
                       {"bytes_shipped", hll.bytes_shipped}}}});
  r.figures = {{"window_start", WindowStartParam()}, {"queries", queries}};
  return r;
}

}  // namespace shardkit::lab
