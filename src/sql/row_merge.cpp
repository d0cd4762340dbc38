#include "sql/row_merge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "shardkit/core/value.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pg/result_values.hpp"
#include "shardkit/queries/scatter_merge.hpp"

namespace shardkit::sql {
namespace {

struct Row {
  const pg::Row* row = nullptr;
  std::vector<Value> keys;  // comparison forms of the sort keys
};

bool IsBytewise(std::string_view collation) {
  return collation == "\"C\"" || collation == "\"POSIX\"" || collation == "C" || collation == "POSIX";
}

}  // namespace

SqlResult MergeSortedRows(const ScatterResult& scattered, const RowOrder& order) {
  SqlResult result;
  std::vector<pg::Row> rows;  // owned copies keep the results' rows addressable
  std::vector<Row> sorted;
  std::size_t columns = 0;
  for (const ShardResult& shard : scattered.shards) {
    const pg::Rows& r = shard.rows;
    if (r.columns() == 0) continue;
    if (shard.session) CheckMergeAssumptions(*shard.session, shard.shard);
    columns = r.columns();
    if (order.hidden_columns > columns) throw UnmergeableQuery("a shard returned fewer columns than the plan added");
    const std::size_t visible = columns - order.hidden_columns;
    if (result.columns.empty()) {
      for (std::size_t c = 0; c < visible; ++c) {
        result.columns.emplace_back(r.column_name(static_cast<pg::Row::size_type>(c)));
        result.types.push_back(static_cast<unsigned>(r.column_type(static_cast<pg::Row::size_type>(c))));
      }
    }
    for (const auto& row : r) rows.push_back(row);
  }
  const std::size_t visible = columns - order.hidden_columns;
  const auto index_of = [&](const SortColumn& k, bool collation) {
    return collation ? visible + k.collation_column : (k.hidden ? visible + k.column : k.column);
  };
  sorted.reserve(rows.size());
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const pg::Row& row = rows[n];
    Row out{&row, {}};
    for (const SortColumn& k : order.keys) {
      const auto c = static_cast<pg::Row::size_type>(index_of(k, false));
      const TypeOid type = static_cast<TypeOid>(row[c].type());
      const PgTypeInfo info = TypeInfoFor(type);
      if (!info.orderable) {
        throw UnmergeableQuery(
            fmt::format("ORDER BY column {} ({}): shardkit cannot order {} values exactly as the "
                        "server does; cast it to an orderable type (text in the C collation, "
                        "numeric, timestamp without time zone)",
                        c + 1, info.name, info.name));
      }
      const auto collation = row[static_cast<pg::Row::size_type>(index_of(k, true))];
      if (!collation.is_null() && !IsBytewise(collation.c_str())) {
        throw UnmergeableQuery(
            fmt::format("ORDER BY column {} is sorted in collation {}, not C: shardkit merges text "
                        "in byte order; write the key with COLLATE \"C\" if byte order is what you "
                        "want",
                        c + 1, collation.c_str()));
      }
      const Value v = ReadValue(row[c], type);
      out.keys.push_back(OrderingForm(v, type));
    }
    sorted.push_back(std::move(out));
  }
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Row& a, const Row& b) {
    for (std::size_t i = 0; i < order.keys.size(); ++i) {
      const SortColumn& k = order.keys[i];
      const Value& x = a.keys[i];
      const Value& y = b.keys[i];
      if (x.IsNull() || y.IsNull()) {
        if (x.IsNull() && y.IsNull()) continue;
        // PostgreSQL's default: NULLS LAST ascending, NULLS FIRST descending.
        const bool nulls_first =
            k.nulls == NullsOrder::kFirst || (k.nulls == NullsOrder::kDefault && k.direction == SortDirection::kDesc);
        return x.IsNull() == nulls_first;
      }
      const int c = CompareValues(x, y);
      if (c != 0) return k.direction == SortDirection::kAsc ? c < 0 : c > 0;
    }
    return false;
  });
  const auto begin = std::min(sorted.size(), static_cast<std::size_t>(order.offset));
  const auto end =
      order.limit ? std::min(sorted.size(), begin + static_cast<std::size_t>(*order.limit)) : sorted.size();
  for (std::size_t n = begin; n < end; ++n) {
    auto& out = result.rows.emplace_back();
    out.reserve(visible);
    for (std::size_t c = 0; c < visible; ++c) {
      const auto field = (*sorted[n].row)[static_cast<pg::Row::size_type>(c)];
      out.push_back(field.is_null() ? std::nullopt
                                    : std::optional<std::string>(std::string(field.c_str(), field.size())));
    }
  }
  return result;
}

}  // namespace shardkit::sql
