// PlanStatement runs the routing analysis (analyzer.hpp); BindRoute, RequireOneShard and StatementText apply a plan.
#include "sql/router.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <limits>

#include "shardkit/errors.hpp"
#include "sql/analyzer.hpp"
#include "sql/parse.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

std::int32_t KeyValue(const SqlPlan& plan, const KeySource& key, const SqlParams& params) {
  const auto refuse = [&](const std::string& construct, const std::string& reason) {
    throw Refusal(plan.text, key.location, construct, reason, "pass the customer's id as an integer");
  };
  std::int64_t value = 0;
  if (key.literal) {
    value = *key.literal;
  } else {
    const std::string construct = fmt::format("the parameter ${}", key.param);
    if (static_cast<std::size_t>(key.param) > params.size()) {
      refuse(construct, fmt::format("it has no value ({} parameter(s) given)", params.size()));
    }
    const std::optional<std::string>& text = params[static_cast<std::size_t>(key.param - 1)];
    if (!text) refuse(construct, "it is NULL, so the statement names no customer");
    const bool negative = !text->empty() && (*text)[0] == '-';
    const std::optional<std::int64_t> parsed =
        detail::ParseInteger(std::string_view(*text).substr(negative ? 1 : 0), negative);
    if (!parsed) refuse(construct, fmt::format("\"{}\" is not an integer customer_id", *text));
    value = *parsed;
  }
  if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max()) {
    refuse(fmt::format("customer_id {}", value), "it is out of range for a customer_id (integer)");
  }
  return static_cast<std::int32_t>(value);
}

}  // namespace

std::shared_ptr<const SqlPlan> PlanStatement(const std::string& text, const SqlCatalog& catalog) {
  return PlanStatement(ParseStatement(text), catalog);
}

std::shared_ptr<const SqlPlan> PlanStatement(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  return detail::Analyzer(parsed, catalog).Run();
}

BoundRoute BindRoute(const SqlPlan& plan, const SqlParams& params) {
  BoundRoute route;
  std::optional<std::pair<std::int32_t, const KeySource*>> first;
  const auto agree = [&](const KeySource& key, std::int32_t value) {
    if (!first) {
      first.emplace(value, &key);
      return;
    }
    if (first->first != value) {
      throw Refusal(
          plan.text, key.location, fmt::format("customer_id {}", value),
          fmt::format("the statement also names customer {}, and their rows may be on different shards", first->first),
          "run one statement per customer");
    }
  };
  for (const KeySource& key : plan.keys) agree(key, KeyValue(plan, key, params));
  for (const InsertRow& row : plan.rows) {
    const std::int32_t value = KeyValue(plan, row.key, params);
    route.row_customers.push_back(CustomerId{value});
    if (!plan.keys.empty()) agree(row.key, value);
  }
  if (first) {
    route.customer = CustomerId{first->first};
  } else if (!route.row_customers.empty()) {
    route.customer = route.row_customers.front();
  }
  return route;
}

void RequireOneShard(const SqlPlan& plan, const BoundRoute& route, const BucketDirectory& directory) {
  const auto& rows = route.row_customers;
  if (rows.size() < 2) return;
  const ShardId first = directory.ShardOf(BucketOf(rows.front()));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const ShardId shard = directory.ShardOf(BucketOf(rows[i]));
    if (shard == first) continue;
    throw Refusal(plan.text, plan.rows.at(i).key.location, fmt::format("row {} of the VALUES", i + 1),
                  fmt::format("customer {} is on shard {} and customer {} on shard {}, and one INSERT is atomic on "
                              "one shard only",
                              ToInt(rows.front()), ToInt(first), ToInt(rows[i]), ToInt(shard)),
                  "insert each customer's rows with a statement of its own");
  }
}

std::string StatementText(const SqlPlan& plan, const BoundRoute& route) {
  if (!plan.AddsBucket()) return plan.text;
  std::vector<std::pair<int, std::string>> inserts;
  inserts.emplace_back(plan.columns_close_paren, std::string(", ") + kBucketColumn);
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    inserts.emplace_back(plan.rows[i].close_paren, fmt::format(", {}", ToInt(BucketOf(route.row_customers.at(i)))));
  }
  std::sort(inserts.begin(), inserts.end());
  std::string text;
  text.reserve(plan.text.size() + inserts.size() * 5);
  std::size_t at = 0;
  for (const auto& [offset, piece] : inserts) {
    text.append(plan.text, at, static_cast<std::size_t>(offset) - at);
    text += piece;
    at = static_cast<std::size_t>(offset);
  }
  text.append(plan.text, at, std::string::npos);
  return text;
}

}  // namespace shardkit::sql
