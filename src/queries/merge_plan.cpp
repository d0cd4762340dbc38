// MergePlan: how merged columns come from the shards' partial columns.
#include "shardkit/queries/merge.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "queries/merge_internal.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace detail {

std::string RoleName(MergeColumn::Role role) {
  switch (role) {
    case MergeColumn::Role::kGroupKey:
      return "key";
    case MergeColumn::Role::kCount:
      return "COUNT";
    case MergeColumn::Role::kSum:
      return "SUM";
    case MergeColumn::Role::kMin:
      return "MIN";
    case MergeColumn::Role::kMax:
      return "MAX";
    case MergeColumn::Role::kAvg:
      return "AVG";
  }
  return "?";
}

std::string OpText(CompareOp op) {
  switch (op) {
    case CompareOp::kEq:
      return "=";
    case CompareOp::kNe:
      return "<>";
    case CompareOp::kLt:
      return "<";
    case CompareOp::kLe:
      return "<=";
    case CompareOp::kGt:
      return ">";
    case CompareOp::kGe:
      return ">=";
    case CompareOp::kIsNull:
      return "IS NULL";
    case CompareOp::kIsNotNull:
      return "IS NOT NULL";
  }
  return "?";
}

bool NullsFirst(const SortKey& key) {
  if (key.nulls == NullsOrder::kDefault) return key.direction == SortDirection::kDesc;
  return key.nulls == NullsOrder::kFirst;
}

}  // namespace detail

using detail::NullsFirst;
using detail::OpText;
using detail::RoleName;

MergePlan& MergePlan::Add(MergeColumn column) {
  if (column.name.empty()) column.name = column.partial;
  columns_.push_back(std::move(column));
  return *this;
}

MergePlan& MergePlan::Key(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kGroupKey, std::move(partial), {}, false, {}});
}
MergePlan& MergePlan::Count(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kCount, std::move(partial), {}, false, {}});
}
MergePlan& MergePlan::Sum(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kSum, std::move(partial), {}, false, {}});
}
MergePlan& MergePlan::Min(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kMin, std::move(partial), {}, false, {}});
}
MergePlan& MergePlan::Max(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kMax, std::move(partial), {}, false, {}});
}
MergePlan& MergePlan::Avg(std::string partial_sum, std::string partial_count, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kAvg, std::move(partial_sum), std::move(partial_count), false, {}});
}

MergePlan& MergePlan::Hide(std::string_view name) {
  for (auto& c : columns_) {
    if (c.name == name) {
      c.hidden = true;
      return *this;
    }
  }
  throw UnmergeableQuery("Hide(\"" + std::string(name) + "\"): no such merged column");
}

MergePlan& MergePlan::Collation(std::string_view name, std::string partial_collation) {
  for (auto& c : columns_) {
    if (c.name == name) {
      c.partial_collation = std::move(partial_collation);
      return *this;
    }
  }
  throw UnmergeableQuery("Collation(\"" + std::string(name) + "\"): no such merged column");
}

MergePlan& MergePlan::Having(std::string column, CompareOp op, Value constant) {
  having_.push_back({std::move(column), op, std::move(constant)});
  return *this;
}
MergePlan& MergePlan::OrderBy(std::string column, SortDirection direction, NullsOrder nulls) {
  order_by_.push_back({std::move(column), direction, nulls});
  return *this;
}
MergePlan& MergePlan::Limit(std::int64_t count) {
  limit_ = count;
  return *this;
}
MergePlan& MergePlan::Offset(std::int64_t count) {
  offset_ = count;
  return *this;
}

bool MergePlan::IsScalar() const noexcept {
  return std::none_of(columns_.begin(), columns_.end(),
                      [](const MergeColumn& c) { return c.role == MergeColumn::Role::kGroupKey; });
}

void MergePlan::Validate() const {
  if (columns_.empty()) throw UnmergeableQuery("the merge plan has no columns: declare keys and aggregates");
  std::set<std::string> names;
  bool any_visible = false;
  for (const auto& c : columns_) {
    if (c.name.empty() || c.partial.empty())
      throw UnmergeableQuery("a merged column needs a name and a partial column");
    if (!names.insert(c.name).second) {
      throw UnmergeableQuery("two merged columns are named \"" + c.name + "\": give each its own name");
    }
    if (c.role == MergeColumn::Role::kAvg && c.partial_count.empty()) {
      throw UnmergeableQuery("merged column \"" + c.name + "\": AVG needs the partial COUNT column too");
    }
    any_visible = any_visible || !c.hidden;
  }
  if (!any_visible) throw UnmergeableQuery("every merged column is hidden: nothing would be returned");
  for (const auto& t : having_) {
    if (!names.contains(t.column)) {
      throw UnmergeableQuery("HAVING on \"" + t.column +
                             "\": no merged column has that name (hidden "
                             "columns count; declare the aggregate and Hide it)");
    }
    if (t.op != CompareOp::kIsNull && t.op != CompareOp::kIsNotNull && t.constant.IsNull()) {
      throw UnmergeableQuery("HAVING " + t.column + " " + OpText(t.op) +
                             " NULL is never true; use CompareOp::kIsNull / kIsNotNull");
    }
  }
  for (const auto& k : order_by_) {
    if (!names.contains(k.column)) {
      throw UnmergeableQuery("ORDER BY \"" + k.column + "\": no merged column has that name");
    }
  }
  if (limit_ && *limit_ < 0) throw UnmergeableQuery("LIMIT must not be negative");
  if (offset_ < 0) throw UnmergeableQuery("OFFSET must not be negative");
}

std::string MergePlan::Describe() const {
  std::string out;
  if (!shard_sql_.empty()) out += "per shard: " + shard_sql_ + "\n";
  for (const auto& c : columns_) {
    out += c.name + " = ";
    switch (c.role) {
      case MergeColumn::Role::kGroupKey:
        out += "key " + c.partial;
        break;
      case MergeColumn::Role::kAvg:
        out += "SUM(" + c.partial + ") / SUM(" + c.partial_count + ")";
        break;
      case MergeColumn::Role::kCount:
        out += "SUM(" + c.partial + ")";
        break;
      default:
        out += RoleName(c.role) + "(" + c.partial + ")";
        break;
    }
    if (!c.partial_collation.empty()) out += " [collation " + c.partial_collation + "]";
    if (c.hidden) out += " [hidden]";
    out += "\n";
  }
  if (!having_.empty()) {
    out += "HAVING";
    for (std::size_t i = 0; i < having_.size(); ++i) {
      out += (i ? " AND " : " ") + having_[i].column + " " + OpText(having_[i].op);
      if (having_[i].op != CompareOp::kIsNull && having_[i].op != CompareOp::kIsNotNull) {
        out += " " + having_[i].constant.ToString();
      }
    }
    out += "\n";
  }
  if (!order_by_.empty()) {
    out += "ORDER BY";
    for (std::size_t i = 0; i < order_by_.size(); ++i) {
      out += (i ? ", " : " ") + order_by_[i].column +
             (order_by_[i].direction == SortDirection::kDesc ? " DESC" : " ASC") +
             (NullsFirst(order_by_[i]) ? " NULLS FIRST" : " NULLS LAST");
    }
    out += "\n";
  }
  if (limit_) out += "LIMIT " + std::to_string(*limit_) + "\n";
  if (offset_) out += "OFFSET " + std::to_string(offset_) + "\n";
  return out;
}

}  // namespace shardkit
