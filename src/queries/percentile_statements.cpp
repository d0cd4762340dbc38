// The SQL of exact distributed selection: one temporary table per session
// (the matching rows' group, keys and values, copied once), then each
// round's statement over it. Every comparison of values happens here, in
// the column's own type, so ties, NaN and BC dates order as PostgreSQL
// orders them.
#include "queries/percentile_statements.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "pg/pg_array.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

constexpr const char* kTable = "pg_temp.shardkit_pct";

// The temporary table's column of domain d.
std::string Column(std::size_t d) {
  return fmt::format("v{}", d);
}

std::string KeyColumns(std::size_t keys, const char* prefix = "") {
  std::string out;
  for (std::size_t k = 0; k < keys; ++k) out += fmt::format(", {}k{}", prefix, k);
  return out;
}

// Rows strictly inside a range r(lo, hi) of the table t's column.
std::string Inside(const std::string& v) {
  return fmt::format("t.{0} IS NOT NULL AND (r.lo IS NULL OR t.{0} > r.lo) AND (r.hi IS NULL OR t.{0} < r.hi)", v);
}

// The evenly spaced rows of n ordered ones (rn = 1..n): the first, the last
// and every K-th in between; all of them when n <= K.
std::string Spaced(int k) {
  return fmt::format("(n <= {0} OR rn = 1 OR rn = n OR (rn * {0}) / n <> ((rn - 1) * {0}) / n)", k);
}

std::optional<std::string> Text(std::int64_t v) {
  return std::to_string(v);
}

}  // namespace

PercentileStatements::PercentileStatements(const PercentileQuery& query, std::vector<PercentileDomain> domains)
    : domains_(std::move(domains)), keys_(query.group_by.size()), samples_(query.samples_per_shard) {
  std::string keys;
  std::string row = "''::text";
  if (!query.group_by.empty()) {
    row.clear();
    for (std::size_t k = 0; k < keys_; ++k) {
      keys += fmt::format(", ({}) AS k{}", query.group_by[k].expression, k);
      row += fmt::format("{}({})", k == 0 ? "" : ", ", query.group_by[k].expression);
    }
    // The group's name on this shard: its keys as a record's text.
    row = fmt::format("ROW({})::text", row);
  }
  std::string values;
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    values += fmt::format(", ({}) AS {}", domains_[d].expression, Column(d));
  }
  const std::string select = fmt::format("SELECT {} AS gk{}{} FROM {}", row, keys, values, query.from);
  if (query.params.empty()) {
    setup_ = {fmt::format("CREATE TEMP TABLE shardkit_pct ON COMMIT DROP AS {} WITH NO DATA", select)};
  } else {
    // A FROM with parameters (a subquery's WHERE) is typed through a
    // prepared statement, executed WITH NO DATA (nothing runs); the
    // parameters' types come from where they are used, as in the fill.
    std::string nulls;
    for (std::size_t i = 0; i < query.params.size(); ++i) nulls += i == 0 ? "NULL" : ", NULL";
    const std::string where = query.where.empty() ? std::string() : fmt::format(" WHERE ({})", query.where);
    setup_ = {
        fmt::format("PREPARE shardkit_pct_shape AS {}{}", select, where),
        fmt::format("CREATE TEMP TABLE shardkit_pct ON COMMIT DROP AS EXECUTE shardkit_pct_shape({}) WITH NO DATA",
                    nulls),
        "DEALLOCATE shardkit_pct_shape"};
  }
  fill_ = fmt::format("INSERT INTO {} {}{}", kTable, select,
                      query.where.empty() ? std::string() : fmt::format(" WHERE ({})", query.where));

  // Round 1's read: per domain a meta row (its type, even with no rows),
  // then per group either evenly spaced values (percentiles: the first
  // row of a group always, so that a group of NULLs shows) or the count of
  // distinct values. Columns: gk, keys, rows, d, n, t, v.
  std::string arms;
  const std::string nulls = [&] {
    std::string out;
    for (std::size_t k = 0; k < keys_; ++k) out += ", NULL";
    return out;
  }();
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    const std::string v = Column(d);
    const std::string type = fmt::format(
        "(SELECT atttypid FROM pg_attribute WHERE attrelid = '{}'::regclass AND attname = '{}')", kTable, v);
    if (!arms.empty()) arms += " UNION ALL ";
    arms += fmt::format("SELECT NULL::text{}, NULL::bigint, {}, NULL::bigint, {}, NULL::text", nulls, d, type);
    if (domains_[d].distinct) {
      arms += fmt::format(
          " UNION ALL SELECT gk{0}, count(*), {1}, count(DISTINCT {2}), NULL::oid, NULL::text FROM {3} GROUP BY "
          "gk{0}",
          KeyColumns(keys_), d, v, kTable);
    } else {
      // The group's counts by one aggregation (a whole-partition window
      // count spooled every row: 2 s for 200,000), the ranks by a
      // streaming row_number(), the text only for the rows kept.
      arms += fmt::format(
          " UNION ALL SELECT s.gk{5}, g.c, {1}, g.n, NULL::oid, s.{2}::text FROM (SELECT gk{0}, {2}, row_number() "
          "OVER (PARTITION BY gk ORDER BY {2}) AS rn FROM {3}) s JOIN (SELECT gk, count(*) AS c, count({2}) AS n FROM "
          "{3} GROUP BY gk) g ON g.gk = s.gk WHERE rn = 1 OR (s.{2} IS NOT NULL AND {4})",
          KeyColumns(keys_), d, v, kTable, Spaced(samples_), KeyColumns(keys_, "s."));
    }
  }
  first_ = arms;
}

namespace {

// The unnest() of the ranges of one domain, from parameter `p` on.
struct RangeArrays {
  std::vector<std::optional<std::string>> gk, id, lo, hi, all;
};

// The columns of domain d's ranges, for unnest().
RangeArrays RangesOf(const std::vector<PercentileStatements::RangeParam>& ranges, std::size_t d) {
  RangeArrays r;
  for (const PercentileStatements::RangeParam& range : ranges) {
    if (range.domain != d) continue;
    r.gk.push_back(range.gk);
    r.id.push_back(Text(range.id));
    r.lo.push_back(range.lo);
    r.hi.push_back(range.hi);
    r.all.emplace_back(range.all ? "t" : "f");
  }
  return r;
}

}  // namespace

std::pair<std::string, SqlParams> PercentileStatements::CountRound(
    const std::vector<RangeParam>& ranges, const std::vector<CandidateParam>& candidates) const {
  std::string sql;
  SqlParams params;
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    RangeArrays r = RangesOf(ranges, d);
    std::vector<std::optional<std::string>> c_range, c_value, c_id;
    for (const CandidateParam& c : candidates) {
      if (c.domain != d) continue;
      c_range.push_back(Text(c.range));
      c_value.push_back(c.value);
      c_id.push_back(Text(c.id));
    }
    if (c_id.empty()) continue;
    const std::size_t p = params.size() + 1;
    for (const auto* a : {&r.gk, &r.id, &r.lo, &r.hi, &c_range, &c_value, &c_id}) params.emplace_back(PgTextArray(*a));
    const std::string& type = domains_[d].type_name;
    const std::string v = Column(d);
    if (!sql.empty()) sql += " UNION ALL ";
    // The range's rows grouped by value (ties counted once), the candidates
    // among them: a running sum over the values up to each candidate's
    // (its peers included) is what lies at or below it; minus the rows
    // equal to it, below it. One sort, sums carried forward (a frame that
    // excludes peers re-aggregated per row: minutes on 180,000 ties).
    sql += fmt::format(
        "SELECT cid, (le - eq)::bigint AS lt, le::bigint AS le FROM (SELECT cid, "
        "sum(n) OVER (PARTITION BY rid ORDER BY v) AS le, sum(n) OVER (PARTITION BY rid, v) AS eq FROM ("
        "SELECT r.rid, t.{0} AS v, count(*) AS n, NULL::bigint AS cid FROM unnest(${1}::text[], ${2}::bigint[], "
        "${3}::{8}[], ${4}::{8}[]) AS r(gk, rid, lo, hi) JOIN {9} t ON t.gk = r.gk WHERE {10} GROUP BY 1, 2 "
        "UNION ALL SELECT c.rid, c.v, 0, c.cid FROM unnest(${5}::bigint[], ${6}::{8}[], ${7}::bigint[]) AS c(rid, v, "
        "cid)) u) w WHERE cid IS NOT NULL",
        v, p, p + 1, p + 2, p + 3, p + 4, p + 5, p + 6, type, kTable, Inside(v));
  }
  return {sql, params};
}

std::pair<std::string, SqlParams> PercentileStatements::SampleRound(const std::vector<RangeParam>& ranges) const {
  std::string sql;
  SqlParams params;
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    RangeArrays r = RangesOf(ranges, d);
    if (r.id.empty()) continue;
    const std::size_t p = params.size() + 1;
    for (const auto* a : {&r.gk, &r.id, &r.lo, &r.hi, &r.all}) params.emplace_back(PgTextArray(*a));
    const std::string v = Column(d);
    if (!sql.empty()) sql += " UNION ALL ";
    sql += fmt::format(
        "SELECT DISTINCT rid, v::text AS v FROM (SELECT s.rid, s.a, s.v, "
        "row_number() OVER (PARTITION BY s.rid ORDER BY s.v) AS rn, g.n FROM (SELECT r.rid, r.a, t.{0} AS v "
        "FROM unnest(${1}::text[], ${2}::bigint[], ${3}::{6}[], ${4}::{6}[], ${5}::boolean[]) AS r(gk, rid, lo, hi, a) "
        "JOIN {7} t ON t.gk = r.gk WHERE {8}) s JOIN (SELECT r.rid, count(*) AS n FROM unnest(${1}::text[], "
        "${2}::bigint[], ${3}::{6}[], ${4}::{6}[]) AS r(gk, rid, lo, hi) JOIN {7} t ON t.gk = r.gk WHERE {8} GROUP BY "
        "1) g ON g.rid = s.rid) x WHERE a OR {9}",
        v, p, p + 1, p + 2, p + 3, p + 4, domains_[d].type_name, kTable, Inside(v), Spaced(samples_));
  }
  return {sql, params};
}

std::string PercentileStatements::DistinctValues() const {
  std::string sql;
  for (std::size_t d = 0; d < domains_.size(); ++d) {
    if (!domains_[d].distinct) continue;
    if (!sql.empty()) sql += " UNION ALL ";
    // Distinct by the type's equality on the shard, then as text.
    sql += fmt::format(
        "SELECT {0} AS d, gk, v::text AS v FROM (SELECT DISTINCT gk, {1} AS v FROM {2} WHERE {1} IS NOT "
        "NULL) x",
        d, Column(d), kTable);
  }
  return sql;
}

Value ReadResultValue(std::optional<std::string_view> text, TypeOid type) {
  constexpr TypeOid kNumeric = 1700;
  if (text && type == kNumeric) {
    if (*text == "NaN") return Value::Double(std::numeric_limits<double>::quiet_NaN());
    if (*text == "Infinity") return Value::Double(std::numeric_limits<double>::infinity());
    if (*text == "-Infinity") return Value::Double(-std::numeric_limits<double>::infinity());
  }
  return ReadValue(text, type);
}

ResultSet OrderedResult(std::vector<std::string> names, const std::vector<TypeOid>& types,
                        std::vector<std::vector<Value>> rows, const std::vector<SortKey>& order_by,
                        std::optional<std::int64_t> limit, std::int64_t offset) {
  if (offset < 0 || (limit && *limit < 0)) throw UnmergeableQuery("LIMIT and OFFSET must not be negative");
  std::vector<std::pair<std::size_t, const SortKey*>> keys;
  for (const SortKey& key : order_by) {
    const auto it = std::find(names.begin(), names.end(), key.column);
    if (it == names.end()) throw UnmergeableQuery(fmt::format("ORDER BY \"{}\": no such column", key.column));
    const auto c = static_cast<std::size_t>(it - names.begin());
    const PgTypeInfo info = TypeInfoFor(types[c]);
    if (!info.orderable) {
      throw UnmergeableQuery(
          fmt::format("ORDER BY \"{}\": shardkit cannot order {} values exactly as the server "
                      "does; cast to an orderable type",
                      key.column, info.name));
    }
    keys.emplace_back(c, &key);
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const std::vector<Value>& a, const std::vector<Value>& b) {
    for (const auto& [c, key] : keys) {
      const bool an = a[c].IsNull();
      const bool bn = b[c].IsNull();
      if (an && bn) continue;
      if (an != bn) {
        const bool nulls_first = key->nulls == NullsOrder::kFirst ||
                                 (key->nulls == NullsOrder::kDefault && key->direction == SortDirection::kDesc);
        return nulls_first ? an : bn;
      }
      int cmp = CompareValues(OrderingForm(a[c], types[c]), OrderingForm(b[c], types[c]));
      if (key->direction == SortDirection::kDesc) cmp = -cmp;
      if (cmp != 0) return cmp < 0;
    }
    return false;
  });
  ResultSet out;
  out.column_names = std::move(names);
  for (const TypeOid t : types) out.column_types.push_back(TypeInfoFor(t).name);
  const auto first = std::min(rows.size(), static_cast<std::size_t>(offset));
  auto last = rows.size();
  if (limit) last = std::min(last, first + static_cast<std::size_t>(*limit));
  for (std::size_t r = first; r < last; ++r) out.rows.push_back(std::move(rows[r]));
  return out;
}

}  // namespace shardkit::detail
