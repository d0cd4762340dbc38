// PlanStatement runs the routing analysis (analyzer.hpp); BindRoute, RequireOneShard and StatementText apply a plan.
#include "sql/router.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <iterator>
#include <limits>

#include "shardkit/core/shard_key_format.hpp"
#include "shardkit/errors.hpp"
#include "sql/analyzer.hpp"
#include "sql/gather_plan.hpp"
#include "sql/parse.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

ShardKey KeyValue(const SqlPlan& plan, const KeySource& key, const SqlParams& params) {
  const std::string type{SqlTypeName(plan.key_type)};
  const auto refuse = [&](const std::string& construct, const std::string& reason) {
    throw Refusal(plan.text, key.location, construct, reason, fmt::format("pass the {} as {}", plan.key_column, type));
  };
  if (key.literal) return *key.literal;
  const std::string construct = fmt::format("the parameter ${}", key.param);
  if (static_cast<std::size_t>(key.param) > params.size()) {
    refuse(construct, fmt::format("it has no value ({} parameter(s) given)", params.size()));
  }
  const std::optional<std::string>& text = params[static_cast<std::size_t>(key.param - 1)];
  if (!text) refuse(construct, fmt::format("it is NULL, so the statement names no {}", plan.KeyNoun()));
  std::optional<ShardKey> parsed = ShardKey::Parse(plan.key_type, *text);
  if (!parsed) refuse(construct, fmt::format("\"{}\" is not a valid {} ({})", *text, plan.key_column, type));
  return std::move(*parsed);
}

// The keys one key set names, NULLs dropped.
std::vector<ShardKey> SetValues(const SqlPlan& plan, const KeySet& set, const SqlParams& params) {
  std::vector<ShardKey> values;
  for (const KeySource& key : set.elements) {
    if (!key.literal && static_cast<std::size_t>(key.param) <= params.size() &&
        !params[static_cast<std::size_t>(key.param - 1)]) {
      continue;  // NULL matches nothing
    }
    values.push_back(KeyValue(plan, key, params));
  }
  if (set.array_param == 0 && !set.array_text) return values;
  const std::string type{SqlTypeName(plan.key_type)};
  const std::string advice = fmt::format("pass the {} values as an array of {}, e.g. {{{}}}", plan.key_column, type,
                                         plan.key_type == ShardKeyType::kUuid   ? "0189a0c2-...,0189a0c3-..."
                                         : plan.key_type == ShardKeyType::kText ? "a,b,c"
                                                                                : "1,2,3");
  std::string construct = "the array literal";
  std::optional<std::string> text = set.array_text;
  if (set.array_param > 0) {
    construct = fmt::format("the parameter ${}", set.array_param);
    if (static_cast<std::size_t>(set.array_param) > params.size()) {
      throw Refusal(plan.text, set.location, construct,
                    fmt::format("it has no value ({} parameter(s) given)", params.size()), advice);
    }
    text = params[static_cast<std::size_t>(set.array_param - 1)];
    if (!text) return values;  // = ANY(NULL) matches nothing
  }
  auto elements = ParseKeyArray(*text, plan.key_type);
  if (!elements && plan.key_type == ShardKeyType::kInt4 && ParseKeyArray(*text, ShardKeyType::kInt8)) {
    throw Refusal(plan.text, set.location, construct,
                  fmt::format("an element of \"{}\" is out of range for a {} (integer)", *text, plan.key_column),
                  advice);
  }
  if (!elements) {
    const bool integers = plan.key_type == ShardKeyType::kInt4 || plan.key_type == ShardKeyType::kInt8;
    const std::string what = integers ? "integers" : plan.key_type == ShardKeyType::kUuid ? "uuids" : "text values";
    throw Refusal(plan.text, set.location, construct,
                  fmt::format("\"{}\" is not a list of {} the router reads (braces, commas, unquoted {} and NULL "
                              "only), so the shards of its {}s are not known",
                              *text, what, what, plan.KeyNoun()),
                  advice);
  }
  for (auto& element : *elements) {
    if (element) values.push_back(std::move(*element));
  }
  return values;
}

}  // namespace

std::vector<BucketId> BoundRoute::Buckets() const {
  std::vector<BucketId> buckets;
  if (key_values) {
    for (const ShardKey& k : *key_values) buckets.push_back(BucketOf(k));
  }
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (buckets.empty()) buckets.push_back(BucketId{0});
  return buckets;
}

std::optional<std::vector<std::optional<ShardKey>>> ParseKeyArray(std::string_view text, ShardKeyType type) {
  // array_in's whitespace.
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  std::vector<std::optional<ShardKey>> out;
  std::size_t at = 0;
  const auto skip = [&] {
    while (at < text.size() && space(text[at])) ++at;
  };
  skip();
  if (at >= text.size() || text[at] != '{') return std::nullopt;
  int depth = 0;
  // After '{' or ',' an element (or a nested '{') is expected; after an element, ',' or '}'.
  bool expect_element = true;
  bool first_in_braces = true;
  while (at < text.size()) {
    skip();
    if (at >= text.size()) return std::nullopt;
    const char c = text[at];
    if (expect_element) {
      if (c == '{') {
        ++depth;
        ++at;
        first_in_braces = true;
        continue;
      }
      if (c == '}' && first_in_braces) {  // {} (empty)
        --depth;
        ++at;
        expect_element = false;
        first_in_braces = false;
        if (depth == 0) break;
        continue;
      }
      if (depth == 0) return std::nullopt;
      std::size_t end = at;
      while (end < text.size() && !space(text[end]) && text[end] != ',' && text[end] != '}' && text[end] != '{' &&
             text[end] != '"' && text[end] != '\\') {
        ++end;
      }
      const std::string_view token = text.substr(at, end - at);
      if (token.empty()) return std::nullopt;
      if (token.size() == 4 && (token[0] == 'N' || token[0] == 'n') && (token[1] == 'U' || token[1] == 'u') &&
          (token[2] == 'L' || token[2] == 'l') && (token[3] == 'L' || token[3] == 'l')) {
        out.emplace_back(std::nullopt);
      } else {
        std::optional<ShardKey> value = ShardKey::Parse(type, token);
        if (!value) return std::nullopt;
        out.emplace_back(std::move(value));
      }
      at = end;
      expect_element = false;
      first_in_braces = false;
      continue;
    }
    if (c == ',') {
      expect_element = true;
      ++at;
      continue;
    }
    if (c == '}') {
      --depth;
      ++at;
      if (depth == 0) break;
      continue;
    }
    return std::nullopt;
  }
  if (depth != 0) return std::nullopt;
  skip();
  if (at != text.size()) return std::nullopt;
  return out;
}

std::shared_ptr<const SqlPlan> PlanStatement(const std::string& text, const SqlCatalog& catalog, Gathering gathering) {
  return PlanStatement(ParseStatement(text), catalog, gathering);
}

namespace {

// A set operation's arms planned one by one (set_operation.hpp).
std::shared_ptr<const SqlPlan> PlanArmByArm(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  auto set_operation = std::make_shared<const SetOperationPlan>(PlanSetOperation(parsed, catalog));
  SqlPlan plan;
  plan.text = parsed.text;
  plan.key_column = catalog.KeyColumn();
  plan.key_type = catalog.KeyType();
  plan.kind = SqlPlanInfo::Kind::kScatter;
  plan.statement = "SELECT";
  for (const SetOperationArm& arm : set_operation->arms) {
    for (const auto* tables : {&arm.plan->sharded_tables, &arm.plan->reference_tables}) {
      auto& into = tables == &arm.plan->sharded_tables ? plan.sharded_tables : plan.reference_tables;
      for (const std::string& table : *tables) {
        if (std::find(into.begin(), into.end(), table) == into.end()) into.push_back(table);
      }
    }
  }
  plan.set_operation = std::move(set_operation);
  detail::CountParameters(parsed.tree, plan);
  return std::make_shared<const SqlPlan>(std::move(plan));
}

std::shared_ptr<const SqlPlan> PlanAnyStatement(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  if (!IsSetOperation(parsed)) return detail::Analyzer(parsed, catalog).Run();
  // Whole on one shard when every arm is pinned to one customer (or reads
  // reference tables only); otherwise arm by arm.
  try {
    std::shared_ptr<const SqlPlan> whole = detail::Analyzer(parsed, catalog).Run();
    if (whole->keys.size() < 2) return whole;
    // Pinned by parameters that may name different customers: arm by arm then.
    auto routed = std::make_shared<SqlPlan>(*whole);
    try {
      routed->arm_by_arm = PlanArmByArm(parsed, catalog);
    } catch (const SqlError& e) {
      if (e.kind() != SqlError::Kind::kRefused) throw;
      return whole;  // an arm alone is refused: the values must name one customer
    }
    return routed;
  } catch (const SqlError& e) {
    if (e.kind() != SqlError::Kind::kRefused) throw;
  }
  return PlanArmByArm(parsed, catalog);
}

}  // namespace

std::shared_ptr<const SqlPlan> PlanStatement(const ParsedStatement& parsed, const SqlCatalog& catalog,
                                             Gathering gathering) {
  try {
    return PlanAnyStatement(parsed, catalog);
  } catch (const OtherKeyRefusal&) {
    throw;
  } catch (const NotInCatalog& e) {
    throw NotInCatalog(ForKeyColumn(parsed.text, e, catalog.KeyColumn()));
  } catch (const SqlError& e) {
    // Refused as a routed or merged statement: a SELECT may still be
    // answered by gathering its tables' rows onto one server.
    const SqlError refusal = ForKeyColumn(parsed.text, e, catalog.KeyColumn());
    if (e.kind() == SqlError::Kind::kRefused && gathering == Gathering::kAllowed) {
      if (std::shared_ptr<const SqlPlan> gathered = PlanGather(parsed, catalog, refusal)) return gathered;
    }
    throw refusal;
  }
}

void RequireParameterCount(const SqlPlan& plan, const SqlParams& params) {
  const auto given = static_cast<int>(params.size());
  if (given == plan.parameter_count) return;
  if (plan.parameter_count == 0) {
    throw Refusal(plan.text, -1, fmt::format("{} parameter value{}", given, given == 1 ? "" : "s"),
                  "the statement has no parameters ($1, $2, ...)", "pass no values, or write $n where each goes");
  }
  throw Refusal(plan.text, plan.last_parameter_location, fmt::format("${}", plan.parameter_count),
                fmt::format("the statement's parameters go up to ${} and {} value{} {} given", plan.parameter_count,
                            given, given == 1 ? "" : "s", given == 1 ? "was" : "were"),
                fmt::format("pass exactly {} values, one per $n (NULL as std::nullopt)", plan.parameter_count));
}

BoundRoute BindRoute(const SqlPlan& plan, const SqlParams& params) {
  BoundRoute route;
  std::optional<std::pair<ShardKey, const KeySource*>> first;
  const auto agree = [&](const KeySource& key, const ShardKey& value) {
    if (!first) {
      first.emplace(value, &key);
      return;
    }
    if (!(first->first == value)) {
      throw Refusal(plan.text, key.location, fmt::format("{} {}", plan.key_column, value),
                    fmt::format("the statement also names {} {}, and their rows may be on different shards",
                                plan.key_column, first->first),
                    fmt::format("run one statement per {}", plan.key_column));
    }
  };
  for (const KeySource& key : plan.keys) agree(key, KeyValue(plan, key, params));
  for (const InsertRow& row : plan.rows) {
    ShardKey value = KeyValue(plan, row.key, params);
    if (!plan.keys.empty()) agree(row.key, value);
    route.row_keys.push_back(std::move(value));
  }
  if (first) {
    route.key = first->first;
  } else if (!route.row_keys.empty()) {
    route.key = route.row_keys.front();
  }
  if (!plan.key_sets.empty()) {
    // Each set bounds the rows: their keys are in all of them.
    std::vector<ShardKey> common;
    for (std::size_t i = 0; i < plan.key_sets.size(); ++i) {
      std::vector<ShardKey> values = SetValues(plan, plan.key_sets[i], params);
      std::sort(values.begin(), values.end());
      values.erase(std::unique(values.begin(), values.end()), values.end());
      if (i == 0) {
        common = std::move(values);
      } else {
        std::vector<ShardKey> both;
        std::set_intersection(common.begin(), common.end(), values.begin(), values.end(), std::back_inserter(both));
        common = std::move(both);
      }
    }
    auto& keys = route.key_values.emplace(std::move(common));
    if (plan.kind == SqlPlanInfo::Kind::kRouted && !route.key) {
      if (keys.empty()) {
        throw Refusal(plan.text, plan.key_sets.front().location, fmt::format("{} ... IN", plan.statement),
                      fmt::format("its {} list names no {} (NULL matches none), so there is no shard to run on",
                                  plan.key_column, plan.KeyNoun()),
                      fmt::format("give at least one {}", plan.key_column));
      }
      route.key = keys.front();
    }
  }
  return route;
}

void RequireOneShard(const SqlPlan& plan, const BoundRoute& route, const BucketDirectory& directory) {
  if (plan.kind == SqlPlanInfo::Kind::kRouted && route.key_values && plan.keys.empty()) {
    const std::vector<ShardKey>& keys = *route.key_values;
    const ShardKey& first = keys.front();
    for (const ShardKey& c : keys) {
      if (BucketOf(c) == BucketOf(first)) continue;
      const ShardId a = directory.ShardOf(BucketOf(first));
      const ShardId b = directory.ShardOf(BucketOf(c));
      const std::string where =
          fmt::format("{0} {1} is in bucket {2} on shard {3} and {0} {4} in bucket {5} on shard {6}", plan.key_column,
                      first, ToInt(BucketOf(first)), ToInt(a), c, ToInt(BucketOf(c)), ToInt(b));
      throw Refusal(plan.text, plan.key_sets.front().location, fmt::format("{} ... IN", plan.statement),
                    a != b ? where + ", and one statement is atomic on one shard only"
                           : where +
                                 ": a routed statement sees one bucket's rows (the bucket fence), so the other "
                                 "rows would be missed",
                    fmt::format("run one statement per {} (in one Cluster::Transact per key)", plan.key_column));
    }
    return;
  }
  const auto& rows = route.row_keys;
  if (rows.size() < 2) return;
  const ShardId first = directory.ShardOf(BucketOf(rows.front()));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const ShardId shard = directory.ShardOf(BucketOf(rows[i]));
    if (shard == first) continue;
    throw Refusal(plan.text, plan.rows.at(i).key.location, fmt::format("row {} of the VALUES", i + 1),
                  fmt::format("{0} {1} is on shard {2} and {0} {3} on shard {4}, and one INSERT is atomic on "
                              "one shard only",
                              plan.key_column, rows.front(), ToInt(first), rows[i], ToInt(shard)),
                  fmt::format("insert each {}'s rows with a statement of its own", plan.key_column));
  }
}

std::string StatementText(const SqlPlan& plan, const BoundRoute& route) {
  if (!plan.AddsBucket()) return plan.text;
  std::vector<std::pair<int, std::string>> inserts;
  inserts.emplace_back(plan.columns_close_paren, std::string(", ") + kBucketColumn);
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    inserts.emplace_back(plan.rows[i].close_paren, fmt::format(", {}", ToInt(BucketOf(route.row_keys.at(i)))));
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
