// Demo 5 (the Bookstore case's second exercise): the average order amount per
// category over the last 30 days. An average does not merge; its SUM and
// COUNT do. An order lives on one shard (co-located by customer_id), so the
// per-order amounts are complete on each shard.
#include <fmt/format.h>

#include <map>
#include <pqxx/pqxx>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/core/decimal.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/scatter_merge.hpp"

namespace shardkit::lab {
namespace {

// What each order spent on each category in the last 30 days.
constexpr const char* kPerOrderCategory =
    "SELECT b.category, sum(i.quantity * i.unit_price) AS amount "
    "FROM order_items i "
    "JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
    "JOIN books b ON b.book_id = i.book_id "
    "WHERE o.ordered_at >= $1::timestamptz "
    "GROUP BY i.customer_id, i.order_id, b.category";

struct Partial {
  Decimal sum;
  std::int64_t count = 0;
};

}  // namespace

DemoResult RunCategoryAvg(Lab& lab) {
  DemoResult r;
  r.name = "category-avg";
  const std::string shard_sql = fmt::format(
      "SELECT category, sum(amount) AS amount_sum, count(amount) AS amount_count FROM ({}) per_order GROUP BY category",
      kPerOrderCategory);
  MergePlan plan{shard_sql};
  plan.Key("category")
      .Sum("amount_sum", "sum")
      .Count("amount_count", "orders")
      .Avg("amount_sum", "amount_count", "avg_amount")
      .OrderBy("category");

  ScatterOptions options;
  options.label = "category-avg: SUM and COUNT per category";
  const ScatterResult scatter = lab.Scatter().Run(plan.ShardSql(), {WindowStartParam()}, options);
  lab.Remember(options.label, scatter);
  const MergedResult merged = Merge(plan, scatter);

  // The partials as each shard sent them, for the table and the wrong way.
  std::map<std::string, std::vector<Partial>> partials;
  for (std::size_t s = 0; s < scatter.shards.size(); ++s) {
    for (const auto& row : scatter.shards[s].rows) {
      auto& v = partials[row["category"].as<std::string>()];
      v.resize(scatter.shards.size());
      v[s] = {Decimal::Parse(row["amount_sum"].as<std::string>()), row["amount_count"].as<std::int64_t>()};
    }
  }

  pqxx::nontransaction ref{lab.Reference()};
  std::map<std::string, std::pair<std::string, std::int64_t>> reference;  // category -> (avg text, count)
  for (const auto& row : ref.exec_params(fmt::format("SELECT category, avg(amount) AS avg_amount, count(*) FROM ({}) "
                                                     "per_order GROUP BY category ORDER BY category",
                                                     kPerOrderCategory),
                                         WindowStartParam())) {
    reference[row[0].as<std::string>()] = {row[1].as<std::string>(), row[2].as<std::int64_t>()};
  }

  r.text += fmt::format(
      "average order amount per category, last 30 days (amount = what one order spent on the category)\n"
      "partials each shard sends: SUM(amount) and COUNT(amount) per category ({} rows from {} shards); "
      "AVG = merged SUM / merged COUNT, divided as PostgreSQL's numeric does\n",
      merged.rows_in, merged.shards);
  std::vector<TextTable::Column> columns{{"category", TextTable::Align::kLeft}};
  for (const auto& s : scatter.shards) {
    columns.push_back({lab.ShardLabel(s.shard) + " sum"});
    columns.push_back({lab.ShardLabel(s.shard) + " count"});
  }
  columns.push_back({"merged avg"});
  columns.push_back({"reference avg"});
  columns.push_back({"equal", TextTable::Align::kLeft});
  columns.push_back({"avg of shard avgs (wrong)"});
  TextTable table(columns);

  const auto cat_col = merged.ColumnIndex("category");
  const auto avg_col = merged.ColumnIndex("avg_amount");
  const auto count_col = merged.ColumnIndex("orders");
  std::size_t equal = 0;
  std::size_t wrong_differs = 0;
  Json rows = Json::array();
  for (const auto& row : merged.rows) {
    const std::string category = row[*cat_col].AsText();
    const std::string avg = row[*avg_col].ToString();
    const std::int64_t count = row[*count_col].AsInt();
    const auto it = reference.find(category);
    const std::string ref_avg = it == reference.end() ? "-" : it->second.first;
    const bool same = it != reference.end() && ref_avg == avg && it->second.second == count;
    equal += same ? 1 : 0;
    // The tempting mistake: average the shards' averages.
    std::vector<std::string> cells{category};
    Decimal sum_of_avgs;
    int shards_with_rows = 0;
    for (const auto& p : partials[category]) {
      cells.push_back(p.count > 0 ? p.sum.ToString() : "0");
      cells.push_back(std::to_string(p.count));
      if (p.count > 0) {
        sum_of_avgs = sum_of_avgs + p.sum.DivideLikePostgres(Decimal::FromInt(p.count));
        ++shards_with_rows;
      }
    }
    const std::string wrong =
        shards_with_rows > 0 ? sum_of_avgs.DivideLikePostgres(Decimal::FromInt(shards_with_rows)).ToString() : "-";
    wrong_differs += wrong != ref_avg ? 1 : 0;
    cells.insert(cells.end(), {avg, ref_avg, same ? "yes" : "NO", wrong});
    table.AddRow(cells);
    rows.push_back({{"category", category},
                    {"merged_avg", avg},
                    {"reference_avg", ref_avg},
                    {"orders", count},
                    {"equal", same},
                    {"avg_of_shard_avgs", wrong}});
  }
  r.text += table.Render();
  r.text += fmt::format(
      "merged = reference to the last digit for {} of {} categories; averaging the shards' averages gets {} of them "
      "wrong\n",
      equal, reference.size(), wrong_differs);
  r.Expect("category-avg.equals_reference",
           equal == reference.size() && merged.rows.size() == reference.size() && !reference.empty(),
           fmt::format("{} of {} categories equal (merged {} rows)", equal, reference.size(), merged.rows.size()));
  r.figures = {{"window_start", WindowStartParam()},
               {"plan", plan.Describe()},
               {"partial_rows", merged.rows_in},
               {"categories", rows},
               {"avg_of_averages_wrong", wrong_differs}};
  return r;
}

}  // namespace shardkit::lab
