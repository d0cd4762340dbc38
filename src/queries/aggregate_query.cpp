// AggregateQuery: an aggregate query -> a MergePlan and its per-shard SQL.
#include "shardkit/queries/aggregate_query.hpp"

#include <utility>

#include "core/sql_text.hpp"
#include "queries/aggregate_parser.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

std::string QuoteIdentifier(std::string_view identifier) {
  if (identifier.empty()) throw UnmergeableQuery("empty identifier: name the column");
  if (identifier.find('\0') != std::string_view::npos) throw UnmergeableQuery("identifier contains a NUL byte");
  return detail::QuoteIdentifier(identifier);
}

AggregateQuery AggregateQuery::From(std::string table, std::string schema) {
  std::string from = schema.empty() ? QuoteIdentifier(table) : QuoteIdentifier(schema) + "." + QuoteIdentifier(table);
  return AggregateQuery(std::move(from));
}

AggregateQuery AggregateQuery::FromSql(std::string from_clause) {
  if (from_clause.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw UnmergeableQuery("empty FROM clause: name a table or a co-located join");
  }
  return AggregateQuery(std::move(from_clause));
}

AggregateQuery& AggregateQuery::Where(std::string condition) {
  if (condition.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw UnmergeableQuery("empty WHERE condition: leave Where() out to take every row");
  }
  detail::CheckCondition(condition);
  where_.push_back(std::move(condition));
  return *this;
}
AggregateQuery& AggregateQuery::ShardKey(std::string column) {
  shard_key_ = std::move(column);
  return *this;
}

AggregateQuery& AggregateQuery::GroupBy(std::string column) {
  Item item;
  item.is_key = true;
  item.expression = QuoteIdentifier(column);
  item.name = std::move(column);
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::GroupByExpr(std::string sql_expression, std::string name) {
  detail::CheckKeyExpression(sql_expression, name);
  Item item;
  item.is_key = true;
  item.expression = std::move(sql_expression);
  item.name = std::move(name);
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::AddAggregate(Item item) {
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::Select(std::string_view aggregate_call, std::string name) {
  const detail::ParsedAggregate p = detail::ParseAggregateCall(aggregate_call, shard_key_);
  Item item;
  item.name = std::move(name);
  item.count_star = p.count_star;
  item.distinct = p.distinct;
  item.expression = p.argument;
  item.filter = p.filter;
  if (p.function == "count") item.role = MergeColumn::Role::kCount;
  if (p.function == "sum") item.role = MergeColumn::Role::kSum;
  if (p.function == "min") item.role = MergeColumn::Role::kMin;
  if (p.function == "max") item.role = MergeColumn::Role::kMax;
  if (p.function == "avg") item.role = MergeColumn::Role::kAvg;
  return AddAggregate(std::move(item));
}

AggregateQuery& AggregateQuery::Count(std::string name) {
  return Select("count(*)", std::move(name));
}
AggregateQuery& AggregateQuery::Count(std::string column, std::string name) {
  return Select("count(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::CountDistinct(std::string column, std::string name) {
  return Select("count(DISTINCT " + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Sum(std::string column, std::string name) {
  return Select("sum(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Min(std::string column, std::string name) {
  return Select("min(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Max(std::string column, std::string name) {
  return Select("max(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Avg(std::string column, std::string name) {
  return Select("avg(" + QuoteIdentifier(column) + ")", std::move(name));
}

AggregateQuery& AggregateQuery::Hide(std::string_view name) {
  for (auto& item : items_) {
    if (item.name == name) {
      item.hidden = true;
      return *this;
    }
  }
  throw UnmergeableQuery("Hide(\"" + std::string(name) + "\"): no such column");
}

AggregateQuery& AggregateQuery::Having(std::string column, CompareOp op, Value constant) {
  having_.push_back({std::move(column), op, std::move(constant)});
  return *this;
}
AggregateQuery& AggregateQuery::OrderBy(std::string column, SortDirection direction, NullsOrder nulls) {
  order_by_.push_back({std::move(column), direction, nulls});
  return *this;
}
AggregateQuery& AggregateQuery::Limit(std::int64_t count) {
  limit_ = count;
  return *this;
}
AggregateQuery& AggregateQuery::Offset(std::int64_t count) {
  offset_ = count;
  return *this;
}

AggregateQuery& AggregateQuery::PercentileCont(double fraction, const std::string& column, std::string name) {
  Item item;
  item.order_statistic = OrderStatisticColumn{OrderStatistic::kPercentileCont, QuoteIdentifier(column), fraction, name};
  item.name = std::move(name);
  return AddAggregate(std::move(item));
}
AggregateQuery& AggregateQuery::PercentileDisc(double fraction, const std::string& column, std::string name) {
  Item item;
  item.order_statistic = OrderStatisticColumn{OrderStatistic::kPercentileDisc, QuoteIdentifier(column), fraction, name};
  item.name = std::move(name);
  return AddAggregate(std::move(item));
}
AggregateQuery& AggregateQuery::Median(const std::string& column, std::string name) {
  return PercentileCont(0.5, column, std::move(name));
}
AggregateQuery& AggregateQuery::CountDistinctValues(const std::string& column, std::string name) {
  Item item;
  item.order_statistic =
      OrderStatisticColumn{OrderStatistic::kCountDistinct, QuoteIdentifier(column), std::nullopt, name};
  item.name = std::move(name);
  return AddAggregate(std::move(item));
}

PercentileQuery AggregateQuery::Percentiles() const {
  PercentileQuery q;
  q.from = from_;
  for (std::size_t i = 0; i < where_.size(); ++i) q.where += (i == 0 ? "(" : " AND (") + where_[i] + ")";
  for (const Item& item : items_) {
    if (item.hidden) {
      throw UnmergeableQuery("Percentiles(): column \"" + item.name +
                             "\" is hidden; exact percentiles return every column asked for");
    }
    if (item.is_key) {
      q.group_by.push_back({item.expression, item.name});
    } else if (item.order_statistic) {
      q.columns.push_back(*item.order_statistic);
    } else {
      throw UnmergeableQuery("Percentiles(): column \"" + item.name +
                             "\" is an aggregate merged from partials; run it as its own Plan() through Merge, or "
                             "ask for order statistics only here");
    }
  }
  if (!having_.empty()) {
    throw UnmergeableQuery(
        "Percentiles(): HAVING is not supported next to exact percentiles; filter the rows returned");
  }
  q.order_by = order_by_;
  q.limit = limit_;
  q.offset = offset_;
  return q;
}

MergePlan AggregateQuery::Plan() const {
  for (const Item& item : items_) {
    if (item.order_statistic) {
      throw UnmergeableQuery("column \"" + item.name +
                             "\" is a percentile or count(DISTINCT) off the shard key, which per-shard partials "
                             "cannot answer; build the exact query with Percentiles() and run it with "
                             "Cluster::Percentiles (or ExactPercentiles)");
    }
  }
  std::vector<std::string> select;
  std::vector<std::string> collations;  // appended after the items: GROUP BY positions stay put
  std::vector<std::size_t> group_by;    // 1-based positions of the keys
  std::vector<MergeColumn> columns;
  auto add = [&](const std::string& expr, const std::string& alias) {
    select.push_back(expr + " AS " + QuoteIdentifier(alias));
    return select.size();
  };
  // The collation the shard compares a merged value in, NULL for the
  // database default (whose collation the pools check) and for types that
  // have none (the cast to text gives those the default).
  auto collation_of = [&](const std::string& expr, const std::string& alias) {
    collations.push_back("NULLIF(pg_collation_for((" + expr + ")::text), '\"default\"') AS " +
                         QuoteIdentifier(alias + "_collation"));
    return alias + "_collation";
  };
  for (std::size_t i = 0; i < items_.size(); ++i) {
    const Item& item = items_[i];
    const std::string alias = (item.is_key ? "_k" : "_p") + std::to_string(i);
    MergeColumn column{item.name, item.role, alias, {}, item.hidden, {}};
    if (item.is_key) {
      group_by.push_back(add(item.expression, alias));
      column.partial_collation = collation_of(item.expression, alias);
      columns.push_back(std::move(column));
      continue;
    }
    const std::string arg = (item.distinct ? "DISTINCT " : "") + item.expression;
    switch (item.role) {
      case MergeColumn::Role::kCount:
        add(std::string("count(") + (item.count_star ? "*" : arg) + ")" + item.filter, alias);
        break;
      case MergeColumn::Role::kSum:
        add("sum(" + arg + ")" + item.filter, alias);
        break;
      case MergeColumn::Role::kMin:
      case MergeColumn::Role::kMax: {
        const std::string partial = (item.role == MergeColumn::Role::kMin ? "min(" : "max(") + arg + ")" + item.filter;
        add(partial, alias);
        column.partial_collation = collation_of(partial, alias);
        break;
      }
      case MergeColumn::Role::kAvg:
        add("sum(" + arg + ")" + item.filter, alias);
        add("count(" + arg + ")" + item.filter, alias + "_n");
        column.partial_count = alias + "_n";
        break;
      case MergeColumn::Role::kGroupKey:
        break;
    }
    columns.push_back(std::move(column));
  }
  std::string list;
  for (const auto& part : select) list += (list.empty() ? "" : ", ") + part;
  for (const auto& part : collations) list += ", " + part;
  std::string sql = "SELECT " + list + " FROM " + from_;
  for (std::size_t i = 0; i < where_.size(); ++i) sql += (i == 0 ? " WHERE (" : " AND (") + where_[i] + ")";
  for (std::size_t i = 0; i < group_by.size(); ++i) {
    sql += (i == 0 ? " GROUP BY " : ", ") + std::to_string(group_by[i]);
  }
  MergePlan plan(std::move(sql));
  for (auto& c : columns) {
    switch (c.role) {
      case MergeColumn::Role::kGroupKey:
        plan.Key(c.partial, c.name);
        break;
      case MergeColumn::Role::kCount:
        plan.Count(c.partial, c.name);
        break;
      case MergeColumn::Role::kSum:
        plan.Sum(c.partial, c.name);
        break;
      case MergeColumn::Role::kMin:
        plan.Min(c.partial, c.name);
        break;
      case MergeColumn::Role::kMax:
        plan.Max(c.partial, c.name);
        break;
      case MergeColumn::Role::kAvg:
        plan.Avg(c.partial, c.partial_count, c.name);
        break;
    }
    if (!c.partial_collation.empty()) plan.Collation(c.name, c.partial_collation);
    if (c.hidden) plan.Hide(c.name);
  }
  for (const auto& t : having_) plan.Having(t.column, t.op, t.constant);
  for (const auto& k : order_by_) plan.OrderBy(k.column, k.direction, k.nulls);
  if (limit_) plan.Limit(*limit_);
  plan.Offset(offset_);
  plan.Validate();
  return plan;
}

}  // namespace shardkit
