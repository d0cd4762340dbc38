// Differential tests of merge plans: the same rows are loaded into the shards
// (each row on the shard its customer_id's bucket maps to) and, unsharded,
// into the reference server; every query shape is answered by shardkit
// (per-shard SQL built from the plan, run through ScatterGather, merged) and
// by the reference server running the plain SQL, and the rows must be equal:
// values (numerics to the last digit and scale), PostgreSQL type names and
// order.
//
// Doubles: a double-precision SUM/AVG is the same sum added in another order
// (per shard, then across shards), and floating-point addition is not
// associative, so those columns are compared with a relative tolerance of
// 1e-12. The generated doubles are non-negative, so the relative error of a
// sum of n values is at most about n * 2^-53 (~1e-13 for the sizes here);
// MIN/MAX of doubles are exact and compared exactly. For the same reason
// random ORDER BY/HAVING never use a double SUM/AVG (a near-tie could order
// differently); they do use every other aggregate.
//
// The random part is property-style: data sets and query shapes come from a
// seed printed with every failure; SHARDKIT_MERGE_SEED=<n> replays it and
// SHARDKIT_MERGE_DATASETS / SHARDKIT_MERGE_QUERIES scale it. Some shapes are
// ones shardkit must refuse (sum(real), a subquery in FILTER, text in a
// non-C collation...): for those the test requires UnmergeableQuery.
//
// The shards' scratch databases deliberately run with other session defaults
// than the reference (TimeZone, extra_float_digits 0, IntervalStyle,
// DateStyle): the pools must override them, or timestamptz keys split and
// doubles arrive rounded. One column is declared in an ICU collation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/decimal.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pg/result_values.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/scatter_merge.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using Text = std::optional<std::string>;

struct DataRow {
  std::int64_t id = 0;
  CustomerId customer_id{};
  Text cat;                         // text, NULLable
  std::optional<int> grp;           // integer, NULLable
  std::optional<int> qty;           // integer, NULLable
  std::optional<std::int64_t> big;  // bigint, NULLable
  Text price;                       // numeric(12,2) as text, NULLable
  std::optional<double> score;      // double precision (>= 0, NaN, Infinity), NULLable
  std::optional<bool> flag;         // boolean, NULLable
  std::optional<float> r;           // real, NULLable
  Text ts;                          // timestamptz as text with an offset, NULLable
  Text note;                        // text COLLATE "en-US-x-icu", NULLable
  // Keys whose equal values print differently (1.5 and 1.50; 'a' and 'a '),
  // or whose text does not order as their values (BC dates), NULLable:
  Text num;  // numeric, any scale
  Text bp;   // bpchar
  Text d;    // date
  Text by;   // bytea (hex input)
  Text u;    // uuid (either case)
  Text iv;   // interval: refused as a key
};

std::string DoubleText(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip
  return std::string(buf, r.ptr);
}

std::string RealText(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);  // shortest that reads back as this float
  return std::string(buf, r.ptr);
}

// Session defaults of the shards' scratch databases, unlike the reference's:
// what a pool must not let through.
const std::vector<std::vector<std::string>> kShardDatabaseSettings = {
    {"TimeZone = 'Asia/Kolkata'", "extra_float_digits = 0", "IntervalStyle = 'iso_8601'"},
    {"TimeZone = 'America/New_York'", "DateStyle = 'SQL, DMY'", "extra_float_digits = -3"}};

// Relative tolerance for double SUM/AVG columns (see the file comment).
constexpr double kDoubleTolerance = 1e-12;

bool SameValue(const Value& a, const Value& b, bool approximate) {
  if (!approximate || a.kind() != Value::Kind::kDouble || b.kind() != Value::Kind::kDouble) return a == b;
  const double x = a.AsDouble();
  const double y = b.AsDouble();
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return std::fabs(x - y) <= kDoubleTolerance * std::max(std::fabs(x), std::fabs(y));
}

std::string RowText(const std::vector<Value>& row) {
  std::string out;
  for (std::size_t i = 0; i < row.size(); ++i) out += (i ? " | " : "") + row[i].ToString();
  return out;
}

// An empty string when equal, else what differs.
// A group key as its equality sees it: the server's choice of text for a
// group whose values print differently (1.5 or 1.50, 'a' or 'a ', -0 or 0)
// is not determined, so keys of those types are compared by value.
Value CanonicalKey(const Value& v, const std::string& type) {
  if (v.IsNull()) return v;
  if (type == "numeric") {
    std::string t = v.ToString();
    if (t.find('.') != std::string::npos) {
      while (t.back() == '0') t.pop_back();
      if (t.back() == '.') t.pop_back();
    }
    if (t == "-0") t = "0";
    return Value::Text(t);
  }
  if (type == "double precision" && v.AsDouble() == 0) return Value::Double(0);  // -0 = 0
  if (type == "character") {
    std::string t = v.AsText();
    while (!t.empty() && t.back() == ' ') t.pop_back();
    return Value::Text(t);
  }
  return v;
}

std::string Diff(const ResultSet& reference, const ResultSet& merged, bool ordered,
                 const std::vector<bool>& approximate, const std::vector<bool>& keys = {}) {
  if (reference.column_names != merged.column_names) return "column names differ";
  if (reference.column_types != merged.column_types) {
    std::string out = "column types differ: reference";
    for (const auto& t : reference.column_types) out += " [" + t + "]";
    out += ", merged";
    for (const auto& t : merged.column_types) out += " [" + t + "]";
    return out;
  }
  auto rows_a = reference.rows;
  auto rows_b = merged.rows;
  for (auto* rows : {&rows_a, &rows_b}) {
    for (auto& row : *rows) {
      for (std::size_t c = 0; c < keys.size() && c < row.size(); ++c) {
        if (keys[c]) row[c] = CanonicalKey(row[c], reference.column_types[c]);
      }
    }
  }
  if (!ordered) {
    // Without ORDER BY the server's order is arbitrary: compare as multisets.
    auto by_text = [](const std::vector<Value>& x, const std::vector<Value>& y) { return RowText(x) < RowText(y); };
    std::sort(rows_a.begin(), rows_a.end(), by_text);
    std::sort(rows_b.begin(), rows_b.end(), by_text);
  }
  if (rows_a.size() != rows_b.size()) {
    return "row counts differ: reference " + std::to_string(rows_a.size()) + ", merged " +
           std::to_string(rows_b.size());
  }
  for (std::size_t r = 0; r < rows_a.size(); ++r) {
    for (std::size_t c = 0; c < rows_a[r].size(); ++c) {
      if (!SameValue(rows_a[r][c], rows_b[r][c], approximate[c])) {
        return "row " + std::to_string(r) + " column " + reference.column_names[c] + ": reference " +
               RowText(rows_a[r]) + " / merged " + RowText(rows_b[r]);
      }
    }
  }
  return {};
}

// ---------------------------------------------------------------------------
// Fixture: one scratch database per cluster server, one scratch table in it.
// ---------------------------------------------------------------------------

class MergePg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("merge_pgtest");
    resolver_ = cluster_->MakeResolver().release();
    scatter_ = new ScatterGather(*resolver_);
    table_ = "merge_diff_" + std::to_string(::getpid());
    directory_ = new BucketDirectory(BucketDirectory::EvenSplit(cluster_->ShardCount()));
    for (int s = 0; s < cluster_->ShardCount(); ++s) {
      servers_.push_back(std::make_unique<pqxx::connection>(cluster_->ShardDsn(s).Reveal()));
    }
    servers_.push_back(std::make_unique<pqxx::connection>(cluster_->ReferenceDsn().Reveal()));
    for (auto& c : servers_) {
      pqxx::nontransaction tx{*c};
      tx.exec("CREATE TABLE " + tx.quote_name(table_) +
              " (id bigint NOT NULL, customer_id integer NOT NULL,"
              "  bucket smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),"
              "  cat text, grp integer, qty integer, big bigint, price numeric(12,2),"
              "  score double precision, flag boolean, r real, ts timestamptz,"
              "  note text COLLATE \"en-US-x-icu\", num numeric, bp bpchar, d date, by bytea, u uuid,"
              "  iv interval, PRIMARY KEY (customer_id, id))");
    }
    // Before the pools open their first connections; the loading connections
    // above keep their own session, and the inserted text does not depend on it.
    for (std::size_t s = 0; s + 1 < servers_.size(); ++s) {
      pqxx::nontransaction tx{*servers_[s]};
      for (const auto& setting : kShardDatabaseSettings[s % kShardDatabaseSettings.size()]) {
        const std::string database = cluster_->ShardDatabaseName(static_cast<int>(s));
        tx.exec("ALTER DATABASE " + tx.quote_name(database) + " SET " + setting);
      }
    }
  }

  static void TearDownTestSuite() {
    for (auto& c : servers_) {
      try {
        pqxx::nontransaction tx{*c};
        tx.exec("DROP TABLE IF EXISTS " + tx.quote_name(table_));
      } catch (const std::exception&) {
        // The scratch database is dropped anyway.
      }
    }
    servers_.clear();
    // Reset: the next suite's SetUpTestSuite may throw before it sets them,
    // and its TearDownTestSuite must not delete them again.
    delete scatter_;
    scatter_ = nullptr;
    delete resolver_;
    resolver_ = nullptr;
    delete directory_;
    directory_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
  }

  static pqxx::connection& Reference() { return *servers_.back(); }
  static std::string Table() { return table_; }

  // Replaces the table's rows: each row on its shard, all rows on the reference.
  static void Load(const std::vector<DataRow>& rows) {
    std::vector<std::vector<const DataRow*>> per_server(servers_.size());
    for (const auto& r : rows) {
      per_server[static_cast<std::size_t>(directory_->ShardFor(r.customer_id))].push_back(&r);
      per_server.back().push_back(&r);
    }
    for (std::size_t s = 0; s < servers_.size(); ++s) {
      pqxx::work tx{*servers_[s]};
      tx.exec("TRUNCATE " + tx.quote_name(table_));
      constexpr std::size_t kBatch = 200;
      constexpr std::size_t kColumns = 19;
      for (std::size_t start = 0; start < per_server[s].size(); start += kBatch) {
        const std::size_t end = std::min(per_server[s].size(), start + kBatch);
        std::vector<Text> values;
        std::string sql = "INSERT INTO " + tx.quote_name(table_) +
                          " (id, customer_id, bucket, cat, grp, qty, big, price, score, flag, r, ts, note, num, bp, d,"
                          " by, u, iv) VALUES ";
        for (std::size_t i = start; i < end; ++i) {
          const DataRow& r = *per_server[s][i];
          sql += i == start ? "(" : ",(";
          for (std::size_t c = 0; c < kColumns; ++c) {
            sql += (c ? ",$" : "$") + std::to_string(values.size() + c + 1);
          }
          sql += ")";
          auto opt = [](const auto& o) -> Text {
            if (!o) return std::nullopt;
            if constexpr (std::is_same_v<std::decay_t<decltype(*o)>, bool>)
              return *o ? "true" : "false";
            else
              return std::to_string(*o);
          };
          values.push_back(std::to_string(r.id));
          values.push_back(std::to_string(ToInt(r.customer_id)));
          values.push_back(std::to_string(ToInt(BucketOf(r.customer_id))));
          values.push_back(r.cat);
          values.push_back(opt(r.grp));
          values.push_back(opt(r.qty));
          values.push_back(opt(r.big));
          values.push_back(r.price);
          values.push_back(r.score ? Text(DoubleText(*r.score)) : std::nullopt);
          values.push_back(opt(r.flag));
          values.push_back(r.r ? Text(RealText(*r.r)) : std::nullopt);
          values.push_back(r.ts);
          values.push_back(r.note);
          for (const Text* t : {&r.num, &r.bp, &r.d, &r.by, &r.u, &r.iv}) values.push_back(*t);
        }
        std::vector<const char*> raw;
        for (const auto& v : values) raw.push_back(v ? v->c_str() : nullptr);
        tx.exec_params(sql, pqxx::prepare::make_dynamic_params(raw));
      }
      tx.exec("ANALYZE " + tx.quote_name(table_));
      tx.commit();
    }
  }

  static ResultSet OnReference(const std::string& sql, const SqlParams& params) {
    pqxx::nontransaction tx{Reference()};
    std::vector<const char*> raw;
    for (const auto& p : params) raw.push_back(p ? p->c_str() : nullptr);
    return ReadResultSet(tx.exec_params(sql, pqxx::prepare::make_dynamic_params(raw)));
  }

  static inline test::ScratchCluster* cluster_ = nullptr;
  static inline BucketShardResolver* resolver_ = nullptr;
  static inline ScatterGather* scatter_ = nullptr;
  static inline BucketDirectory* directory_ = nullptr;
  static inline std::vector<std::unique_ptr<pqxx::connection>> servers_;
  static inline std::string table_;
};

// ---------------------------------------------------------------------------
// A query shape, written twice: as an AggregateQuery for shardkit and as
// plain SQL for the reference server.
// ---------------------------------------------------------------------------

// kOther: keys compared only with their own type (no HAVING constants).
enum class Kind { kInt, kNumeric, kDouble, kReal, kText, kBool, kTimestamptz, kOther };

struct AggSpec {
  std::string sql;  // e.g. "sum(price)"
  Kind kind;        // kind of the aggregate's result
  bool order_safe;  // exact, so fine in ORDER BY / HAVING
};

struct ColumnSpec {
  std::string name;
  bool is_key = false;
  std::string sql;  // key column name or aggregate call
  Kind kind = Kind::kInt;
  bool order_safe = true;
  bool hidden = false;
};

struct HavingSpec {
  std::size_t column;
  CompareOp op;
  Value constant;
};

struct OrderSpec {
  std::size_t column;
  SortDirection direction;
  NullsOrder nulls;
};

struct QueryShape {
  std::vector<ColumnSpec> columns;
  bool must_refuse = false;  // holds a column shardkit cannot merge exactly
  std::string where;         // SQL over the table's columns, may use $1
  SqlParams params;
  std::vector<HavingSpec> having;
  std::vector<OrderSpec> order;
  std::optional<std::int64_t> limit;
  std::int64_t offset = 0;
  bool HasKeys() const {
    return std::any_of(columns.begin(), columns.end(), [](const ColumnSpec& c) { return c.is_key; });
  }
};

std::string OpSql(CompareOp op) {
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
  return "";
}

std::string CastFor(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kInt:
      return "bigint";
    case Value::Kind::kDecimal:
      return "numeric";
    case Value::Kind::kDouble:
      return "double precision";
    case Value::Kind::kBool:
      return "boolean";
    default:
      return "text";
  }
}

// The plain SQL one server runs. Constants travel as parameters after the
// WHERE clause's.
std::pair<std::string, SqlParams> ReferenceSql(const QueryShape& q, const std::string& table) {
  SqlParams params = q.params;
  std::string select;
  std::string group;
  for (const auto& c : q.columns) {
    if (c.hidden) continue;
    select += (select.empty() ? "" : ", ") + c.sql + " AS " + QuoteIdentifier(c.name);
  }
  for (std::size_t i = 0; i < q.columns.size(); ++i) {
    if (q.columns[i].is_key) group += (group.empty() ? "" : ", ") + q.columns[i].sql;
  }
  std::string sql = "SELECT " + select + " FROM " + QuoteIdentifier(table);
  if (!q.where.empty()) sql += " WHERE " + q.where;
  if (!group.empty()) sql += " GROUP BY " + group;
  for (std::size_t i = 0; i < q.having.size(); ++i) {
    const auto& h = q.having[i];
    sql += i == 0 ? " HAVING " : " AND ";
    sql += q.columns[h.column].sql + " " + OpSql(h.op);
    if (h.op != CompareOp::kIsNull && h.op != CompareOp::kIsNotNull) {
      params.push_back(h.constant.ToString());
      sql += " $" + std::to_string(params.size()) + "::" + CastFor(h.constant);
    }
  }
  for (std::size_t i = 0; i < q.order.size(); ++i) {
    const auto& o = q.order[i];
    const auto& c = q.columns[o.column];
    sql += i == 0 ? " ORDER BY " : ", ";
    sql += c.hidden ? c.sql : QuoteIdentifier(c.name);
    sql += o.direction == SortDirection::kDesc ? " DESC" : " ASC";
    if (o.nulls == NullsOrder::kFirst) sql += " NULLS FIRST";
    if (o.nulls == NullsOrder::kLast) sql += " NULLS LAST";
  }
  if (q.limit) sql += " LIMIT " + std::to_string(*q.limit);
  if (q.offset) sql += " OFFSET " + std::to_string(q.offset);
  return {sql, params};
}

MergePlan ShardkitPlan(const QueryShape& q, const std::string& table) {
  auto query = AggregateQuery::From(table);
  if (!q.where.empty()) query.Where(q.where);
  for (const auto& c : q.columns) {
    if (c.is_key) {
      query.GroupBy(c.sql);
    } else {
      query.Select(c.sql, c.name);
    }
    if (c.hidden) query.Hide(c.name);
  }
  for (const auto& h : q.having) query.Having(q.columns[h.column].name, h.op, h.constant);
  for (const auto& o : q.order) query.OrderBy(q.columns[o.column].name, o.direction, o.nulls);
  if (q.limit) query.Limit(*q.limit);
  query.Offset(q.offset);
  return query.Plan();
}

struct Coverage {
  int cases = 0;
  int grouped = 0;
  int scalar = 0;
  int group_on_one_shard_only = 0;
  int shard_without_rows = 0;
  int all_shards_empty = 0;
  int having = 0;
  int limit = 0;
  int offset = 0;
  int text_key = 0;
  int null_group = 0;
  int ordered = 0;
  int unordered = 0;
  int numeric_avg = 0;
  int count_zero = 0;
  int refused = 0;
  int real_values = 0;
  int timestamptz_key = 0;
  int typed_key = 0;  // numeric, bpchar, date, bytea, uuid, double precision, bigint keys
};

// A shape with a column shardkit must refuse: refused when planned or when
// the shards' answers are merged, never answered. Empty when refused. (A
// collation the shards report arrives with their rows, so a grouped shape
// that no shard has rows for merges to the right, empty answer.)
std::string RunRefusedShape(ScatterGather& scatter, const QueryShape& q, const std::string& table, Coverage* coverage) {
  try {
    const MergePlan plan = ShardkitPlan(q, table);
    const ScatterResult partials = scatter.Run(plan.ShardSql(), q.params);
    const MergedResult merged = Merge(plan, partials);
    if (partials.TotalRows() == 0 && merged.rows.empty()) return {};
    return "merged a shape it must refuse:\n  per-shard SQL: " + plan.ShardSql() + "\n  merged rows:\n" +
           merged.Format(20);
  } catch (const UnmergeableQuery&) {
    if (coverage != nullptr) ++coverage->refused;
    return {};
  }
}

// Runs one shape both ways and compares: an empty string when equal.
std::string RunShape(ScatterGather& scatter, pqxx::connection& reference, const QueryShape& q, const std::string& table,
                     Coverage* coverage) {
  if (q.must_refuse) return RunRefusedShape(scatter, q, table, coverage);
  const MergePlan plan = ShardkitPlan(q, table);
  const ScatterResult partials = scatter.Run(plan.ShardSql(), q.params);
  const MergedResult merged = Merge(plan, partials);
  const auto [ref_sql, ref_params] = ReferenceSql(q, table);
  ResultSet expected;
  {
    pqxx::nontransaction tx{reference};
    std::vector<const char*> raw;
    for (const auto& p : ref_params) raw.push_back(p ? p->c_str() : nullptr);
    expected = ReadResultSet(tx.exec_params(ref_sql, pqxx::prepare::make_dynamic_params(raw)));
  }
  std::vector<bool> approximate;
  std::vector<bool> keys;
  for (const auto& c : q.columns) {
    if (!c.hidden) approximate.push_back(c.kind == Kind::kDouble && !c.order_safe);
    if (!c.hidden) keys.push_back(c.is_key);
  }
  const std::string diff = Diff(expected, merged, !q.order.empty(), approximate, keys);
  if (coverage != nullptr) {
    ++coverage->cases;
    const bool grouped = q.HasKeys();
    ++(grouped ? coverage->grouped : coverage->scalar);
    std::size_t empty_shards = 0;
    for (const auto& s : partials.shards) empty_shards += s.rows.empty() ? 1 : 0;
    if (grouped && empty_shards > 0) ++coverage->shard_without_rows;
    if (grouped && partials.TotalRows() == 0) ++coverage->all_shards_empty;
    // With 2 shards, a group present on both contributes 2 partial rows.
    if (grouped && merged.groups * 2 > merged.rows_in && empty_shards == 0) ++coverage->group_on_one_shard_only;
    if (!q.having.empty()) ++coverage->having;
    if (q.limit) ++coverage->limit;
    if (q.offset) ++coverage->offset;
    ++(q.order.empty() ? coverage->unordered : coverage->ordered);
    for (std::size_t c = 0; c < q.columns.size(); ++c) {
      const auto& col = q.columns[c];
      if (col.is_key && col.kind == Kind::kText) ++coverage->text_key;
      if (col.is_key && col.kind == Kind::kTimestamptz) ++coverage->timestamptz_key;
      if (col.is_key && col.kind == Kind::kOther) ++coverage->typed_key;
      if (col.sql.starts_with("avg(") && col.kind == Kind::kNumeric) ++coverage->numeric_avg;
    }
    for (const auto& row : merged.rows) {
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (merged.column_types[c] == "bigint" && row[c] == Value::Int(0) && !grouped) ++coverage->count_zero;
        if (row[c].IsReal()) ++coverage->real_values;
      }
    }
    std::size_t key_index = 0;
    for (const auto& col : q.columns) {
      if (col.hidden) continue;
      if (col.is_key) {
        for (const auto& row : merged.rows) {
          if (row[key_index].IsNull()) {
            ++coverage->null_group;
            break;
          }
        }
      }
      ++key_index;
    }
  }
  if (diff.empty()) return {};
  return diff + "\n  reference SQL: " + ref_sql + "\n  per-shard SQL: " + plan.ShardSql() + "\n  reference rows:\n" +
         expected.Format(20) + "  merged rows:\n" + merged.Format(20);
}

// ---------------------------------------------------------------------------
// Random data and query shapes
// ---------------------------------------------------------------------------

const std::vector<std::string> kCategories = {"a", "b", "B", "\xc3\xa4", "zz", "", "a b", "\xce\xa9"};
// Instants whose local text differs by zone, some around DST changes (Europe
// at 01:00 UTC on 2026-03-29; New York repeats 01:30 on 2026-11-01).
const std::vector<std::string> kInstants = {"2026-03-29 00:30:00+00",   "2026-03-29 01:30:00+00",
                                            "2026-11-01 05:30:00+00",   "2026-11-01 06:30:00+00",
                                            "1999-12-31 23:59:59.5+00", "2026-01-01 00:00:00+00"};

// Values equal for the server written differently, and texts that do not
// order as their values.
const std::vector<std::string> kNumerics = {"1.5", "1.50",  "1.500",  "0",   "0.0", "-0.00",
                                            "2",   "-7.25", "-7.250", "1e2", "100"};
const std::vector<std::string> kBpchars = {"a", "a ", "a   ", "b", " b", "", " ", "ab"};
const std::vector<std::string> kDates = {"0044-03-15 BC", "0001-01-01 BC", "0001-01-01", "2020-02-29",
                                         "10000-01-01",   "infinity",      "-infinity",  "9999-12-31"};
const std::vector<std::string> kBytes = {"\\x00", "\\x0102", "\\xff", "\\x", "\\x0a", "\\x01"};
const std::vector<std::string> kUuids = {"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                                         "00000000-0000-0000-0000-000000000001"};
const std::vector<std::string> kIntervals = {"1 mon", "30 days", "720:00:00", "1 day"};

std::vector<DataRow> RandomData(std::mt19937_64& rng, const BucketDirectory& directory, int shard_count) {
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  // Size: sometimes empty, usually a few hundred rows.
  const std::size_t rows = chance(0.08) ? 0 : pick(400) + 1;
  // Customers: sometimes all on one shard, so the other has no rows at all.
  std::vector<CustomerId> customers;
  const std::size_t customer_count = pick(40) + 1;
  const bool one_shard = chance(0.15);
  const auto only = static_cast<ShardId>(pick(static_cast<std::size_t>(shard_count)));
  while (customers.size() < customer_count) {
    const CustomerId id{static_cast<std::int32_t>(rng())};
    if (one_shard && directory.ShardFor(id) != only) continue;
    customers.push_back(id);
  }
  const double null_rate = chance(0.3) ? 0.0 : std::uniform_real_distribution<double>(0, 0.5)(rng);
  const bool special_doubles = chance(0.1);
  const bool huge = chance(0.2);
  std::vector<DataRow> data;
  data.reserve(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    DataRow r;
    r.id = static_cast<std::int64_t>(i) + 1;
    r.customer_id = customers[pick(customers.size())];
    if (!chance(null_rate)) r.cat = kCategories[pick(kCategories.size())];
    if (!chance(null_rate)) r.grp = static_cast<int>(pick(7)) - 2;
    if (!chance(null_rate)) {
      r.qty = huge && chance(0.3) ? 2000000000 - static_cast<int>(pick(1000)) : static_cast<int>(pick(101000)) - 1000;
    }
    if (!chance(null_rate)) {
      const auto base = static_cast<std::int64_t>(rng() % 2000000000000000ULL) - 1000000000000000LL;
      r.big = huge ? base * 4000 : base / 1000000;
    }
    if (!chance(null_rate)) {
      const auto cents = static_cast<std::int64_t>(rng() % 20000000ULL) - 10000000LL;  // +-100000.00
      r.price = Decimal(Decimal::Mantissa(cents), 2).ToString();
    }
    if (!chance(null_rate)) {
      double v = static_cast<double>(pick(100000)) / 100.0;  // not exact in binary: order matters
      if (huge) v *= 1e10 / 7;
      if (special_doubles && chance(0.05)) v = chance(0.5) ? std::nan("") : HUGE_VAL;
      if (v == 0 && chance(0.5)) v = -0.0;  // -0 = 0: one group

      r.score = v;
    }
    if (!chance(null_rate)) r.flag = chance(0.5);
    if (!chance(null_rate)) {
      // Not exact in binary either; a few with many digits (1/3 as a float).
      r.r = chance(0.2) ? static_cast<float>(pick(1000)) / 3.0F : static_cast<float>(pick(100000)) / 1000.0F;
      if (special_doubles && chance(0.05)) r.r = std::numeric_limits<float>::quiet_NaN();
    }
    if (!chance(null_rate)) r.ts = kInstants[pick(kInstants.size())];
    if (!chance(null_rate)) r.note = kCategories[pick(kCategories.size())];
    for (auto [field, values] :
         std::initializer_list<std::pair<Text*, const std::vector<std::string>*>>{{&r.num, &kNumerics},
                                                                                  {&r.bp, &kBpchars},
                                                                                  {&r.d, &kDates},
                                                                                  {&r.by, &kBytes},
                                                                                  {&r.u, &kUuids},
                                                                                  {&r.iv, &kIntervals}}) {
      if (!chance(null_rate)) *field = (*values)[pick(values->size())];
    }
    data.push_back(std::move(r));
  }
  return data;
}

QueryShape RandomShape(std::mt19937_64& rng, const std::vector<DataRow>& data, const std::string& table) {
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  struct KeySpec {
    const char* column;
    Kind kind;
  };
  static const std::vector<KeySpec> kKeys = {
      {"cat", Kind::kText}, {"grp", Kind::kInt},        {"flag", Kind::kBool}, {"customer_id", Kind::kInt},
      {"r", Kind::kReal},   {"ts", Kind::kTimestamptz}, {"num", Kind::kOther}, {"bp", Kind::kOther},
      {"d", Kind::kOther},  {"by", Kind::kOther},       {"u", Kind::kOther},   {"score", Kind::kOther},
      {"big", Kind::kOther}};
  static const std::vector<AggSpec> kAggregates = {
      {"count(*)", Kind::kInt, true},
      {"count(qty)", Kind::kInt, true},
      {"count(price)", Kind::kInt, true},
      {"count(cat)", Kind::kInt, true},
      {"count(DISTINCT customer_id)", Kind::kInt, true},
      {"count(*) FILTER (WHERE price > 0)", Kind::kInt, true},
      {"sum(qty)", Kind::kInt, true},
      {"sum(grp)", Kind::kInt, true},
      {"sum(big)", Kind::kNumeric, true},
      {"sum(price)", Kind::kNumeric, true},
      {"sum(price * qty)", Kind::kNumeric, true},
      {"sum(price / 7)", Kind::kNumeric, true},
      {"sum(qty) FILTER (WHERE flag)", Kind::kInt, true},
      {"min(qty)", Kind::kInt, true},
      {"max(qty)", Kind::kInt, true},
      {"min(big)", Kind::kInt, true},
      {"max(big)", Kind::kInt, true},
      {"min(price)", Kind::kNumeric, true},
      {"max(price)", Kind::kNumeric, true},
      {"max(price / 7)", Kind::kNumeric, true},
      {"min(score)", Kind::kDouble, true},
      {"max(score)", Kind::kDouble, true},
      {"min(cat)", Kind::kText, true},
      {"max(cat)", Kind::kText, true},
      {"min(flag::int)", Kind::kInt, true},
      {"min(r)", Kind::kReal, true},
      {"max(r)", Kind::kReal, true},
      {"max(cat COLLATE \"C\")", Kind::kText, true},
      {"min(ts)", Kind::kTimestamptz, true},  // ordered by the instant, whatever offset the text shows
      {"max(ts)", Kind::kTimestamptz, true},
      {"avg(qty)", Kind::kNumeric, true},
      {"avg(grp)", Kind::kNumeric, true},
      {"avg(big)", Kind::kNumeric, true},
      {"avg(price)", Kind::kNumeric, true},
      {"avg(price / 7)", Kind::kNumeric, true},
      {"avg(DISTINCT customer_id)", Kind::kNumeric, true},
      {"avg(qty) FILTER (WHERE cat > 'a')", Kind::kNumeric, true},
  };
  // What shardkit must refuse rather than answer: each makes a shape "must refuse".
  static const std::vector<std::string> kRefused = {
      "sum(r)",  // floats added in another order
      "avg(r)",
      "sum(score)",
      "avg(score)",
      "count(*) FILTER (WHERE id IN (SELECT id FROM {table} ORDER BY id LIMIT 3))",  // per-shard subquery
      "sum(qty) FILTER (WHERE random() < 2)",                                        // volatile
      "count(*) FILTER (WHERE ts < now())",                                          // each shard's own clock
      "max(cat COLLATE \"en-US-x-icu\")",                                            // explicit non-C collation
      "max(note)",                                                                   // declared non-C collation
      "min(note)",
  };
  QueryShape q;
  // Ordered shapes order by every key.
  const bool ordered = chance(0.75);
  // Group keys: none (scalar), one or two.
  const std::size_t key_count = chance(0.25) ? 0 : (chance(0.7) ? 1 : 2);
  std::vector<std::size_t> key_order(kKeys.size());
  for (std::size_t k = 0; k < key_order.size(); ++k) key_order[k] = k;
  std::shuffle(key_order.begin(), key_order.end(), rng);
  std::vector<ColumnSpec> keys;
  for (const std::size_t k : key_order) {
    if (keys.size() == key_count) break;
    const auto& spec = kKeys[k];
    keys.push_back({spec.column, true, spec.column, spec.kind, true, false});
  }
  // Aggregates.
  std::vector<ColumnSpec> aggs;
  const std::size_t agg_count = pick(5) + (key_count == 0 ? 1 : 0);
  for (std::size_t a = 0; a < agg_count; ++a) {
    const auto& spec = kAggregates[pick(kAggregates.size())];
    aggs.push_back({"a" + std::to_string(a), false, spec.sql, spec.kind, spec.order_safe, false});
  }
  if (aggs.empty() && keys.empty()) aggs.push_back({"a0", false, "count(*)", Kind::kInt, true, false});
  if (chance(0.08)) {
    std::string sql = kRefused[pick(kRefused.size())];
    if (const auto at = sql.find("{table}"); at != std::string::npos) sql.replace(at, 7, QuoteIdentifier(table));
    aggs.push_back({"refused", false, sql, Kind::kText, false, false});
    q.must_refuse = true;
  } else if (chance(0.02)) {
    keys.push_back({"note", true, "note", Kind::kText, false, false});  // declared non-C collation
    q.must_refuse = true;
  } else if (chance(0.02)) {
    keys.push_back({"iv", true, "iv", Kind::kOther, false, false});  // '1 mon' = '30 days'
    q.must_refuse = true;
  }
  // Keys and aggregates interleaved in a random order.
  std::vector<ColumnSpec> all = keys;
  all.insert(all.end(), aggs.begin(), aggs.end());
  std::shuffle(all.begin(), all.end(), rng);
  // Sometimes an aggregate used only by HAVING / ORDER BY.
  if (chance(0.2)) {
    const auto& spec = kAggregates[pick(kAggregates.size())];
    if (spec.order_safe) all.push_back({"hidden", false, spec.sql, spec.kind, true, true});
  }
  q.columns = all;

  // WHERE
  switch (pick(8)) {
    case 0:
      q.where = "qty > $1";
      q.params = {std::to_string(static_cast<int>(pick(100000)) - 1000)};
      break;
    case 1:
      q.where = "cat = $1";
      q.params = {kCategories[pick(kCategories.size())]};
      break;
    case 2:
      q.where = "false";
      break;  // no shard has matching rows
    case 3:   // one customer: every other shard has no matching rows
      q.where = "customer_id = $1";
      q.params = {data.empty() ? std::string("1") : std::to_string(ToInt(data[pick(data.size())].customer_id))};
      break;
    case 4:
      q.where = "price IS NULL OR flag";
      break;
    default:
      break;
  }

  // HAVING on exact columns, constants near the data.
  const std::size_t having_count = chance(0.35) ? pick(2) + 1 : 0;
  for (std::size_t h = 0; h < having_count; ++h) {
    const std::size_t c = pick(q.columns.size());
    const auto& col = q.columns[c];
    if (!col.order_safe || col.kind == Kind::kBool || col.kind == Kind::kDouble || col.kind == Kind::kReal) continue;
    HavingSpec spec{c, static_cast<CompareOp>(pick(8)), Value()};
    if (spec.op != CompareOp::kIsNull && spec.op != CompareOp::kIsNotNull) {
      switch (col.kind) {
        case Kind::kInt:
          spec.constant = Value::Int(col.sql.starts_with("count") ? static_cast<std::int64_t>(pick(6))
                                                                  : static_cast<std::int64_t>(pick(200000)) - 1000);
          break;
        case Kind::kNumeric:
          spec.constant =
              Value::Numeric(Decimal(Decimal::Mantissa(static_cast<std::int64_t>(pick(2000000)) - 1000000), 2));
          break;
        case Kind::kText:
          spec.constant = Value::Text(kCategories[pick(kCategories.size())]);
          break;
        default:
          continue;
      }
    }
    q.having.push_back(std::move(spec));
  }

  // ORDER BY: exact columns in random order and direction, then every key so
  // that the order is total (the reference's order of ties is arbitrary).
  if (ordered) {
    std::vector<std::size_t> candidates;
    for (std::size_t c = 0; c < q.columns.size(); ++c) {
      if (q.columns[c].order_safe) candidates.push_back(c);
    }
    std::shuffle(candidates.begin(), candidates.end(), rng);
    const std::size_t n = candidates.empty() ? 0 : pick(std::min<std::size_t>(candidates.size(), 3)) + 1;
    std::set<std::size_t> used;
    for (std::size_t i = 0; i < n; ++i) {
      q.order.push_back(
          {candidates[i], chance(0.5) ? SortDirection::kDesc : SortDirection::kAsc, static_cast<NullsOrder>(pick(3))});
      used.insert(candidates[i]);
    }
    for (std::size_t c = 0; c < q.columns.size(); ++c) {
      if (q.columns[c].is_key && !used.contains(c)) q.order.push_back({c, SortDirection::kAsc, NullsOrder::kDefault});
    }
    if (chance(0.5)) q.limit = static_cast<std::int64_t>(pick(6));
    if (chance(0.4)) q.offset = static_cast<std::int64_t>(pick(4));
  }
  return q;
}

std::uint64_t SeedFromEnvironment() {
  if (const char* s = std::getenv("SHARDKIT_MERGE_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 10);
  }
  return std::random_device{}();
}

int IntFromEnvironment(const char* name, int fallback) {
  if (const char* s = std::getenv(name); s != nullptr && *s != '\0') return std::atoi(s);
  return fallback;
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

TEST_F(MergePg, ClusterMeetsTheMergeAssumptions) {
  EXPECT_NO_THROW(CheckMergeAssumptions(*resolver_));
}

TEST_F(MergePg, NonCCollationAndNonIsoDateStyleAreRefusedNamingTheShard) {
  const std::string db = "merge_pgtest_collate_" + std::to_string(::getpid());
  {
    pqxx::connection admin{cluster_->Config().shards[0].dsn.Reveal()};
    pqxx::nontransaction tx{admin};
    tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(db));
    tx.exec("CREATE DATABASE " + tx.quote_name(db) + " LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8' TEMPLATE template0");
  }
  std::string message;
  {
    pqxx::connection c{test::WithDatabase(cluster_->Config().shards[0].dsn, db).Reveal()};
    try {
      CheckMergeAssumptions(c, ShardId{0});
    } catch (const ShardError& e) {
      message = e.what();
      EXPECT_EQ(e.shard(), ShardId{0});
    }
  }
  test::DropDatabase(cluster_->Config().shards[0].dsn, db);
  EXPECT_NE(message.find("shard 0"), std::string::npos) << message;
  EXPECT_NE(message.find("C.UTF-8"), std::string::npos) << message;

  pqxx::connection c{cluster_->ShardDsn(1).Reveal()};
  {
    pqxx::nontransaction tx{c};
    tx.exec("SET DateStyle = 'German'");
  }
  try {
    CheckMergeAssumptions(c, ShardId{1});
    FAIL() << "DateStyle German accepted";
  } catch (const ShardError& e) {
    EXPECT_EQ(e.shard(), ShardId{1});
    EXPECT_NE(std::string(e.what()).find("DateStyle"), std::string::npos) << e.what();
  }
}

// numeric_div on the server against Decimal::DivideLikePostgres, many random pairs.
TEST_F(MergePg, DecimalDivisionMatchesTheServer) {
  std::mt19937_64 rng(SeedFromEnvironment());
  std::string as = "{";
  std::string bs = "{";
  std::vector<std::pair<Decimal, Decimal>> pairs;
  for (int i = 0; i < 3000; ++i) {
    auto random_decimal = [&](bool nonzero) {
      const int digits = static_cast<int>(rng() % 30) + 1;
      std::string m;
      for (int d = 0; d < digits; ++d) m.push_back(static_cast<char>('0' + rng() % 10));
      if (nonzero && m.find_first_not_of('0') == std::string::npos) m.back() = '7';
      const int scale = static_cast<int>(rng() % 12);
      std::string text = (rng() % 3 == 0 ? "-" : "") + m;
      if (scale > 0) text = text + "e-" + std::to_string(scale);
      return Decimal::Parse(text);
    };
    pairs.emplace_back(random_decimal(false), random_decimal(true));
    as += (i ? "," : "") + pairs.back().first.ToString();
    bs += (i ? "," : "") + pairs.back().second.ToString();
  }
  as += "}";
  bs += "}";
  pqxx::nontransaction tx{Reference()};
  const auto r = tx.exec_params(
      "SELECT (a / b)::text FROM unnest($1::numeric[], $2::numeric[]) WITH ORDINALITY AS v(a, b, n) ORDER BY n", as,
      bs);
  ASSERT_EQ(r.size(), pairs.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string mine = pairs[i].first.DivideLikePostgres(pairs[i].second).ToString();
    if (mine != r[static_cast<pqxx::result::size_type>(i)][0].c_str() && ++mismatches <= 5) {
      ADD_FAILURE() << pairs[i].first.ToString() << " / " << pairs[i].second.ToString() << ": server "
                    << r[static_cast<pqxx::result::size_type>(i)][0].c_str() << ", Decimal " << mine;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// A fixed data set with every hand-picked shape.
class MergeShapes : public MergePg {
 protected:
  void SetUp() override {
    std::vector<DataRow> rows;
    std::int64_t id = 0;
    // Customers 1..40 spread over both shards; categories chosen so that
    // some exist on one shard only.
    for (std::int32_t customer = 1; customer <= 40; ++customer) {
      for (int k = 0; k < 1 + customer % 4; ++k) {
        DataRow r;
        r.id = ++id;
        r.customer_id = CustomerId{customer};
        const ShardId shard = directory_->ShardFor(r.customer_id);
        r.cat = shard == ShardId{0} ? (k % 2 ? "only0" : "both") : (customer % 3 ? "both" : "only1");
        if (customer % 11 == 0) r.cat.reset();
        r.grp = customer % 5 == 0 ? std::nullopt : std::optional<int>(customer % 3);
        r.qty = customer % 7 == 0 ? std::nullopt : std::optional<int>(customer * 10 + k);
        r.big = std::int64_t{1} << (40 + customer % 20);
        r.price = customer % 6 == 0 ? Text() : Text(std::to_string(customer) + "." + std::to_string(10 + k * 7));
        r.score = customer % 9 == 0 ? std::nullopt : std::optional<double>(customer / 3.0);
        r.flag = k % 2 == 0;
        if (customer % 8 != 0) r.r = static_cast<float>(customer % 7) + 0.859F;  // 5.859 among them
        r.ts = kInstants[static_cast<std::size_t>(customer) % kInstants.size()];
        r.note = r.cat;
        rows.push_back(std::move(r));
      }
    }
    Load(rows);
  }

  void Check(const QueryShape& q) {
    const std::string diff = RunShape(*scatter_, Reference(), q, Table(), nullptr);
    EXPECT_TRUE(diff.empty()) << diff;
  }

  static ColumnSpec Key(const std::string& column, Kind kind = Kind::kText) {
    return {column, true, column, kind, true, false};
  }
  static ColumnSpec Agg(const std::string& name, const std::string& sql, Kind kind, bool exact = true) {
    return {name, false, sql, kind, exact, false};
  }
};

TEST_F(MergeShapes, ScalarAggregatesOfEveryType) {
  QueryShape q;
  q.columns = {Agg("n", "count(*)", Kind::kInt),        Agg("nq", "count(qty)", Kind::kInt),
               Agg("sq", "sum(qty)", Kind::kInt),       Agg("sb", "sum(big)", Kind::kNumeric),
               Agg("sp", "sum(price)", Kind::kNumeric), Agg("ss", "min(score)", Kind::kDouble),
               Agg("lo", "min(price)", Kind::kNumeric), Agg("hi", "max(cat)", Kind::kText),
               Agg("aq", "avg(qty)", Kind::kNumeric),   Agg("ab", "avg(big)", Kind::kNumeric),
               Agg("ap", "avg(price)", Kind::kNumeric), Agg("as", "max(score)", Kind::kDouble),
               Agg("ag", "avg(grp)", Kind::kNumeric),   Agg("dc", "count(DISTINCT customer_id)", Kind::kInt),
               Agg("lr", "min(r)", Kind::kReal),        Agg("hr", "max(r)", Kind::kReal)};
  Check(q);
}

TEST_F(MergeShapes, GroupsPresentOnOneShardOnly) {
  QueryShape q;
  q.columns = {Key("cat"), Agg("n", "count(*)", Kind::kInt), Agg("s", "sum(price)", Kind::kNumeric),
               Agg("a", "avg(qty)", Kind::kNumeric), Agg("c", "count(DISTINCT customer_id)", Kind::kInt)};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kDefault}};
  Check(q);
}

TEST_F(MergeShapes, NoShardHasMatchingRows) {
  QueryShape scalar;
  scalar.columns = {Agg("n", "count(*)", Kind::kInt), Agg("s", "sum(qty)", Kind::kInt),
                    Agg("a", "avg(price)", Kind::kNumeric), Agg("m", "max(cat)", Kind::kText)};
  scalar.where = "false";
  Check(scalar);  // one row: 0, NULL, NULL, NULL
  QueryShape grouped = scalar;
  grouped.columns.insert(grouped.columns.begin(), Key("cat"));
  Check(grouped);  // no rows
}

TEST_F(MergeShapes, OneShardHasNoMatchingRows) {
  std::int32_t on_shard1 = 1;
  while (directory_->ShardFor(CustomerId{on_shard1}) != ShardId{1}) ++on_shard1;
  QueryShape q;
  q.columns = {Agg("n", "count(*)", Kind::kInt), Agg("nq", "count(qty)", Kind::kInt),
               Agg("s", "sum(price)", Kind::kNumeric), Agg("a", "avg(qty)", Kind::kNumeric)};
  q.where = "customer_id = $1";
  q.params = {std::to_string(on_shard1)};
  Check(q);
  q.columns.insert(q.columns.begin(), Key("grp", Kind::kInt));
  q.order = {{0, SortDirection::kDesc, NullsOrder::kDefault}};  // NULLS FIRST
  Check(q);
}

TEST_F(MergeShapes, HavingOnMergedAggregates) {
  QueryShape q;
  q.columns = {Key("grp", Kind::kInt), Agg("n", "count(*)", Kind::kInt), Agg("s", "sum(price)", Kind::kNumeric),
               Agg("hidden", "sum(qty)", Kind::kInt)};
  q.columns.back().hidden = true;
  q.having = {{1, CompareOp::kGt, Value::Int(10)}, {3, CompareOp::kGe, Value::Int(1000)}};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kFirst}};
  Check(q);
  q.having = {{2, CompareOp::kIsNull, Value()}};
  Check(q);
}

TEST_F(MergeShapes, OrderByAnAggregateWithLimitOffsetAndTies) {
  QueryShape q;
  q.columns = {Key("customer_id", Kind::kInt), Agg("n", "count(*)", Kind::kInt), Agg("total", "sum(qty)", Kind::kInt)};
  // count(*) has many ties (1..4 rows per customer): broken by the key, as the reference does.
  q.order = {{1, SortDirection::kDesc, NullsOrder::kDefault}, {0, SortDirection::kAsc, NullsOrder::kDefault}};
  q.limit = 7;
  q.offset = 3;
  Check(q);
  q.order = {{2, SortDirection::kDesc, NullsOrder::kLast}, {0, SortDirection::kDesc, NullsOrder::kDefault}};
  q.limit = 5;
  q.offset = 0;
  Check(q);
}

TEST_F(MergeShapes, TextKeysInTheCCollation) {
  QueryShape q;
  q.columns = {Key("cat"), Key("flag", Kind::kBool), Agg("n", "count(*)", Kind::kInt),
               Agg("lo", "min(cat)", Kind::kText)};
  q.order = {{0, SortDirection::kDesc, NullsOrder::kLast}, {1, SortDirection::kAsc, NullsOrder::kDefault}};
  Check(q);
}

// The seed-001 lesson: LIMIT pushed into the shards picks the wrong rows when
// the overall top group is nobody's local top; applied after the merge it
// matches the reference.
TEST_F(MergeShapes, LimitPerShardIsWrongLimitAfterMergeIsRight) {
  std::vector<DataRow> rows;
  auto customer_on = [&](ShardId shard) {
    std::int32_t id = 1;
    while (directory_->ShardFor(CustomerId{id}) != shard) ++id;
    return CustomerId{id};
  };
  const CustomerId c0 = customer_on(ShardId{0});
  const CustomerId c1 = customer_on(ShardId{1});
  auto add = [&](CustomerId customer, const char* cat, int qty) {
    DataRow r;
    r.id = static_cast<std::int64_t>(rows.size()) + 1;
    r.customer_id = customer;
    r.cat = cat;
    r.qty = qty;
    rows.push_back(std::move(r));
  };
  add(c0, "local-top-0", 100);  // 100 in total
  add(c0, "split", 60);
  add(c1, "local-top-1", 100);  // 100 in total
  add(c1, "split", 60);         // 120 in total: the real top
  Load(rows);

  QueryShape q;
  q.columns = {Key("cat"), Agg("total", "sum(qty)", Kind::kInt)};
  q.order = {{1, SortDirection::kDesc, NullsOrder::kLast}, {0, SortDirection::kAsc, NullsOrder::kDefault}};
  q.limit = 1;
  Check(q);
  const MergePlan plan = ShardkitPlan(q, Table());
  const MergedResult right = ScatterMerge(*scatter_, plan);
  ASSERT_EQ(right.rows.size(), 1U);
  EXPECT_EQ(RowText(right.rows[0]), "split | 120");
  // Per-shard top-1 by the shard's own partial, then merged: wrong.
  const std::string shortcut = plan.ShardSql() + " ORDER BY 2 DESC NULLS LAST, 1 LIMIT 1";
  const MergedResult wrong = Merge(plan, scatter_->Run(shortcut));
  ASSERT_EQ(wrong.rows.size(), 1U);
  EXPECT_EQ(RowText(wrong.rows[0]), "local-top-0 | 100");
}

TEST_F(MergeShapes, CallerWrittenShardSqlWithDeclaredPartials) {
  MergePlan plan{"SELECT cat, sum(price) AS s, count(price) AS c, min(qty) AS lo FROM " + QuoteIdentifier(Table()) +
                 " GROUP BY cat"};
  plan.Key("cat")
      .Avg("s", "c", "avg_price")
      .Min("lo")
      .Sum("s", "total")
      .Hide("total")
      .OrderBy("total", SortDirection::kDesc)
      .OrderBy("cat");
  const MergedResult merged = ScatterMerge(*scatter_, plan);
  const ResultSet expected = OnReference("SELECT cat, avg(price) AS avg_price, min(qty) AS lo FROM " +
                                             QuoteIdentifier(Table()) + " GROUP BY cat ORDER BY sum(price) DESC, cat",
                                         {});
  const std::string diff = Diff(expected, merged, true, {false, false, false});
  EXPECT_TRUE(diff.empty()) << diff;
}

TEST_F(MergeShapes, UnmergeableAggregatesAreRefusedBeforeAnyShardIsAsked) {
  const auto before = scatter_->Stats().shard_requests;
  for (const char* call : {"median(qty)", "percentile_cont(0.5) WITHIN GROUP (ORDER BY qty)",
                           "percentile_disc(0.5) WITHIN GROUP (ORDER BY price)", "mode() WITHIN GROUP (ORDER BY cat)",
                           "count(DISTINCT cat)", "sum(qty) - sum(grp)", "string_agg(cat, ',' ORDER BY cat)"}) {
    EXPECT_THROW((void)AggregateQuery::From(Table()).GroupBy("grp").Select(call, "x").Plan(), UnmergeableQuery) << call;
  }
  EXPECT_EQ(scatter_->Stats().shard_requests, before);
}

// ---------------------------------------------------------------------------
// The probes of the independent differential test (merge correctness issue):
// each is refused with a reason or answered exactly as the server answers.
// ---------------------------------------------------------------------------

// Probe 1: a subquery in FILTER ran per shard and counted 12 where the server
// says 8. Anything in an aggregate that is not a function of the row alone
// is refused before any shard is asked.
TEST_F(MergeShapes, SubqueriesVolatileFunctionsAndTheClockInAggregatesAreRefused) {
  const std::string table = QuoteIdentifier(Table());
  const std::string probe = "count(*) FILTER (WHERE id IN (SELECT id FROM " + table + " ORDER BY id LIMIT 3))";
  // Why: each shard picks its own three rows.
  const ScatterResult naive = scatter_->Run("SELECT " + probe + " AS n FROM " + table);
  std::int64_t naive_total = 0;
  for (const auto& shard : naive.shards) naive_total += shard.rows[0][0].as<std::int64_t>();
  const ResultSet expected = OnReference("SELECT " + probe + " AS n FROM " + table, {});
  EXPECT_EQ(expected.rows[0][0], Value::Int(3));
  EXPECT_EQ(naive_total, 3 * cluster_->ShardCount()) << "the per-shard answer the merge would have added up";

  const auto before = scatter_->Stats().shard_requests;
  struct Probe {
    std::string call;
    std::string says;
  };
  for (const Probe& p : std::vector<Probe>{
           {probe, "contains a subquery"},
           {"sum(qty) FILTER (WHERE EXISTS (SELECT 1 FROM " + table + " o WHERE o.qty > 100))", "contains a subquery"},
           {"count(*) FILTER (WHERE random() < 0.5)", "calls random()"},
           {"sum(qty * random())", "calls random()"},
           {"count(*) FILTER (WHERE ts > now() - interval '1 year')", "uses now()"},
           {"count(*) FILTER (WHERE ts::date = current_date)", "uses current_date"},
           {"count(*) FILTER (WHERE ts < 'now'::timestamptz)", "uses 'now'"}}) {
    try {
      (void)AggregateQuery::From(Table()).GroupBy("cat").Select(p.call, "x").Plan();
      ADD_FAILURE() << p.call << " was accepted";
    } catch (const UnmergeableQuery& e) {
      EXPECT_NE(std::string(e.what()).find(p.says), std::string::npos) << p.call << " -> " << e.what();
    }
  }
  EXPECT_EQ(scatter_->Stats().shard_requests, before);
  // The same condition with the instant as a parameter is merged, and exactly.
  QueryShape q;
  q.columns = {Key("cat"), Agg("n", "count(*) FILTER (WHERE ts < $1::timestamptz)", Kind::kInt)};
  q.params = {"2026-06-01 00:00:00+00"};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kDefault}};
  Check(q);
}

// Probe 2: an ICU database reports datcollate 'C' and passed the check, and
// text MIN/MAX differed from the server's. It fails the check now, on a raw
// connection and, once per pool, on every merge of a scatter.
TEST_F(MergePg, IcuDatabasesFailTheCollationCheck) {
  const std::string db = "merge_pgtest_icu_" + std::to_string(::getpid());
  const Dsn admin_dsn = cluster_->ShardDsn(1);
  const Dsn icu_dsn = test::WithDatabase(admin_dsn, db);
  {
    test::DropDatabase(admin_dsn, db);
    pqxx::connection admin{admin_dsn.Reveal()};
    pqxx::nontransaction tx{admin};
    tx.exec("CREATE DATABASE " + tx.quote_name(db) +
            " LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C' TEMPLATE template0");
  }
  struct DropAtEnd {
    Dsn admin_dsn;
    std::string db;
    ~DropAtEnd() {
      try {
        test::DropDatabase(admin_dsn, db);
      } catch (const std::exception&) {
        // The next run drops it.
      }
    }
  } drop{admin_dsn, db};
  const char* kCreate = "CREATE TABLE probe (customer_id integer, region text)";
  const char* kRows = "INSERT INTO probe VALUES (1, '\xce\xa9'), (2, '\xf0\x9f\x98\x80 party'), (3, 'zebra')";
  pqxx::connection icu{icu_dsn.Reveal()};
  {
    pqxx::nontransaction tx{icu};
    tx.exec(kCreate);
    tx.exec(kRows);
    // Why: the server orders by ICU, bytewise order says otherwise.
    const auto r = tx.exec("SELECT max(region), max(region COLLATE \"C\") FROM probe");
    EXPECT_NE(std::string(r[0][0].c_str()), std::string(r[0][1].c_str()));
    const auto d = tx.exec("SELECT datcollate FROM pg_database WHERE datname = current_database()");
    EXPECT_EQ(std::string(d[0][0].c_str()), "C") << "the column the old check read";
  }
  try {
    CheckMergeAssumptions(icu, ShardId{1});
    ADD_FAILURE() << "an ICU database passed the check";
  } catch (const ShardError& e) {
    EXPECT_EQ(e.shard(), ShardId{1});
    EXPECT_NE(std::string(e.what()).find("icu locale provider (locale \"en-US\")"), std::string::npos) << e.what();
  }

  // Through pools: shard 0 is the usual scratch database, shard 1 the ICU one.
  cluster_->ExecOnShard(0, kCreate);
  cluster_->ExecOnShard(0, "INSERT INTO probe VALUES (4, 'a')");
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  pools.push_back(std::make_unique<ConnectionPool>(ShardId{0}, cluster_->ShardDsn(0)));
  pools.push_back(std::make_unique<ConnectionPool>(ShardId{1}, icu_dsn));
  ConnectionPool& icu_pool = *pools[1];
  BucketShardResolver resolver(BucketDirectory::EvenSplit(2), std::move(pools));
  ScatterGather scatter(resolver);
  EXPECT_EQ(icu_pool.Facts(), nullptr) << "nothing is read before the first connection";
  try {
    ScatterOptions unmigrated;  // the ICU database has no shardkit schema (no bucket functions)
    unmigrated.directory_buckets = false;
    (void)ScatterMerge(scatter, AggregateQuery::From("probe").Max("region", "m").Plan(), {}, unmigrated);
    ADD_FAILURE() << "merged text from an ICU database";
  } catch (const ShardError& e) {
    EXPECT_EQ(e.shard(), ShardId{1});
    EXPECT_NE(std::string(e.what()).find("icu"), std::string::npos) << e.what();
  }
  const auto facts = icu_pool.Facts();
  ASSERT_NE(facts, nullptr);
  EXPECT_EQ(facts->locale_provider, "icu");
  EXPECT_EQ(facts->icu_locale, "en-US");
  EXPECT_EQ(facts->collate, "C");
  EXPECT_THROW(CheckMergeAssumptions(resolver), ShardError);
  // Read once per pool: later connections do not read them again.
  {
    auto a = icu_pool.Acquire();
    auto b = icu_pool.Acquire();
  }
  EXPECT_EQ(icu_pool.Facts(), facts);
  cluster_->ExecOnShard(0, "DROP TABLE probe");
}

// Probe 3: an explicit COLLATE was merged bytewise (max(note COLLATE
// "en-US-x-icu") gave '한국어' where the server says '日本語'). Explicit
// clauses are refused when planned, declared column collations when the
// shards report them.
TEST_F(MergeShapes, NonCCollationsExplicitOrDeclaredAreRefused) {
  std::vector<DataRow> rows;
  const char* notes[] = {"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "zebra",
                         "\xce\xa9"};  // 한국어 日本語 zebra Ω
  for (int c = 1; c <= 8; ++c) {
    DataRow r;
    r.id = c;
    r.customer_id = CustomerId{c};
    r.cat = notes[c % 4];
    r.note = notes[c % 4];
    rows.push_back(std::move(r));
  }
  Load(rows);
  const ResultSet server =
      OnReference("SELECT max(note) AS icu, max(note COLLATE \"C\") AS bytes FROM " + QuoteIdentifier(Table()), {});
  EXPECT_EQ(server.rows[0][0].ToString(), "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e");  // 日本語
  EXPECT_EQ(server.rows[0][1].ToString(), "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4");  // 한국어

  const auto before = scatter_->Stats().shard_requests;
  EXPECT_THROW((void)AggregateQuery::From(Table()).Select("max(cat COLLATE \"en-US-x-icu\")", "m"), UnmergeableQuery);
  EXPECT_THROW((void)AggregateQuery::From(Table()).GroupByExpr("cat COLLATE \"en-US-x-icu\"", "k"), UnmergeableQuery);
  EXPECT_EQ(scatter_->Stats().shard_requests, before);

  auto refusal = [&](const AggregateQuery& q) {
    try {
      (void)ScatterMerge(*scatter_, q.Plan());
    } catch (const UnmergeableQuery& e) {
      return std::string(e.what());
    }
    return std::string("<merged>");
  };
  std::string m = refusal(AggregateQuery::From(Table()).Max("note", "m"));
  EXPECT_NE(m.find("in collation \"en-US-x-icu\", not C"), std::string::npos) << m;
  m = refusal(AggregateQuery::From(Table()).GroupBy("note").Count("n"));
  EXPECT_NE(m.find("merged column \"note\" (key"), std::string::npos) << m;
  m = refusal(AggregateQuery::From(Table()).GroupBy("cat").Min("note", "m").OrderBy("cat"));
  EXPECT_NE(m.find("en-US-x-icu"), std::string::npos) << m;

  // Byte order asked for explicitly is byte order, on every shard as on the server.
  QueryShape q;
  q.columns = {Agg("m", "max(note COLLATE \"C\")", Kind::kText), Agg("lo", "min(note COLLATE \"POSIX\")", Kind::kText)};
  Check(q);
  q.columns = {Key("cat"), Agg("n", "count(note)", Kind::kInt)};
  q.order = {{0, SortDirection::kDesc, NullsOrder::kDefault}};
  Check(q);
}

// Probe 4: extra_float_digits = 0 on a shard went unnoticed and doubles came
// rounded to 15 digits. The suite's shard 0 database defaults to 0; its pool
// sets 3, and a connection that is not a pool's fails the check.
TEST_F(MergeShapes, ExtraFloatDigitsOfTheShardsDatabaseDoNotReachTheMerge) {
  pqxx::connection raw{cluster_->ShardDsn(0).Reveal()};
  {
    pqxx::nontransaction tx{raw};
    EXPECT_EQ(std::string(tx.exec("SELECT (1/3.0)::float8")[0][0].c_str()), "0.333333333333333");
    tx.exec("SET IntervalStyle = postgres");  // the database's other odd default, checked first
  }
  try {
    CheckMergeAssumptions(raw, ShardId{0});
    ADD_FAILURE() << "extra_float_digits = 0 passed the check";
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("extra_float_digits = '0'"), std::string::npos) << e.what();
  }
  for (ConnectionPool& pool : resolver_->AllShards()) {
    auto lease = pool.Acquire();
    ASSERT_NE(pool.Facts(), nullptr);
    EXPECT_EQ(pool.Facts()->Setting("extra_float_digits"), "3") << "shard " << pool.Shard();
  }
  QueryShape q;
  q.columns = {Key("grp", Kind::kInt), Agg("lo", "min(score)", Kind::kDouble), Agg("hi", "max(score)", Kind::kDouble)};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kDefault}};
  Check(q);  // min/max exactly, to the last digit
}

// Probe 5: min(real) printed 5.859000205993652 where the server prints 5.859,
// and sum(real) was accepted though it differs in the last bits.
TEST_F(MergeShapes, RealResultsAreTheServersAndRealSumsAreRefused) {
  QueryShape q;
  q.columns = {Key("cat"), Agg("lo", "min(r)", Kind::kReal), Agg("hi", "max(r)", Kind::kReal)};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kDefault}};
  Check(q);
  q.columns = {Key("r", Kind::kReal), Agg("n", "count(*)", Kind::kInt)};
  Check(q);
  const MergedResult lowest = ScatterMerge(*scatter_, AggregateQuery::From(Table()).Min("r", "lo").Plan());
  EXPECT_EQ(lowest.column_types, std::vector<std::string>{"real"});
  EXPECT_EQ(lowest.rows[0][0].ToString(), "0.859");
  const MergedResult five = ScatterMerge(*scatter_, AggregateQuery::From(Table()).Where("r > 5").Min("r", "lo").Plan());
  EXPECT_EQ(five.rows[0][0].ToString(), "5.859");

  for (const auto& [call, advice] :
       std::vector<std::pair<std::string, std::string>>{{"sum(r)", "sum(x::numeric)"},
                                                        {"avg(r)", "avg(x::numeric)"},
                                                        {"sum(score)", "sum(x::numeric)"},
                                                        {"avg(score)", "avg(x::numeric)"}}) {
    try {
      (void)ScatterMerge(*scatter_, AggregateQuery::From(Table()).GroupBy("cat").Select(call, "x").Plan());
      ADD_FAILURE() << call << " was merged";
    } catch (const UnmergeableQuery& e) {
      EXPECT_NE(std::string(e.what()).find(advice), std::string::npos) << e.what();
    }
  }
  // The advice works.
  q.columns = {Key("cat"), Agg("s", "sum(r::numeric)", Kind::kNumeric), Agg("a", "avg(r::numeric)", Kind::kNumeric)};
  Check(q);
}

// The session settings the pools set: the suite's shard databases default to
// other time zones (Asia/Kolkata, America/New_York), IntervalStyle iso_8601
// and DateStyle SQL, DMY. timestamptz keys must not split across shards.
TEST_F(MergeShapes, TimestamptzIntervalAndDateKeysDoNotSplitAcrossShards) {
  for (ConnectionPool& pool : resolver_->AllShards()) {
    auto lease = pool.Acquire();
    EXPECT_EQ(pool.Facts()->Setting("TimeZone"), "UTC") << "shard " << pool.Shard();
    EXPECT_EQ(pool.Facts()->Setting("IntervalStyle"), "postgres");
    EXPECT_EQ(pool.Facts()->Setting("DateStyle"), "ISO, MDY");
  }
  EXPECT_NO_THROW(CheckMergeAssumptions(*resolver_));

  const MergePlan by_instant = AggregateQuery::From(Table()).GroupBy("ts").Count("n").Plan();
  const MergedResult merged = ScatterMerge(*scatter_, by_instant);
  const ResultSet expected =
      OnReference("SELECT ts, count(*) AS n FROM " + QuoteIdentifier(Table()) + " GROUP BY ts", {});
  EXPECT_EQ(merged.groups, kInstants.size());
  EXPECT_EQ(merged.rows.size(), expected.rows.size());
  std::string diff = Diff(expected, merged, false, {false, false});
  EXPECT_TRUE(diff.empty()) << diff;

  // Without the pools' settings (the shards' own sessions), the same
  // instants print differently per shard and every group splits.
  std::vector<pqxx::result> raw;
  for (int s = 0; s < cluster_->ShardCount(); ++s) {
    pqxx::connection c{cluster_->ShardDsn(s).Reveal()};
    pqxx::nontransaction tx{c};
    raw.push_back(tx.exec(by_instant.ShardSql()));
  }
  EXPECT_GT(Merge(by_instant, raw).groups, kInstants.size());

  QueryShape q;
  q.columns = {Key("since", Kind::kText), Agg("n", "count(*)", Kind::kInt)};
  q.columns[0].sql = "ts - timestamptz '2026-01-01 00:00:00+00'";
  q.columns[0].order_safe = false;
  // GroupByExpr via the shape: a key expression, named.
  const auto run = [&](const QueryShape& shape) {
    auto query = AggregateQuery::From(Table());
    for (const auto& c : shape.columns) {
      if (c.is_key) {
        query.GroupByExpr(c.sql, c.name);
      } else {
        query.Select(c.sql, c.name);
      }
    }
    for (const auto& o : shape.order) query.OrderBy(shape.columns[o.column].name, o.direction, o.nulls);
    return ScatterMerge(*scatter_, query.Plan());
  };
  // An interval key is refused (equal intervals print differently); the
  // advice, justify_interval(x)::text, gives the reference's groups.
  try {
    (void)run(q);
    ADD_FAILURE() << "an interval group key was merged";
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("justify_interval"), std::string::npos) << e.what();
  }
  q.columns[0].sql = "justify_interval(ts - timestamptz '2026-01-01 00:00:00+00')::text";
  diff = Diff(OnReference("SELECT justify_interval(ts - timestamptz '2026-01-01 00:00:00+00')::text AS since, "
                          "count(*) AS n FROM " +
                              QuoteIdentifier(Table()) + " GROUP BY 1",
                          {}),
              run(q), false, {false, false});
  EXPECT_TRUE(diff.empty()) << diff;
  q.columns[0] = {"day", true, "(ts AT TIME ZONE 'UTC')::date", Kind::kText, true, false};
  q.order = {{0, SortDirection::kAsc, NullsOrder::kDefault}};
  diff = Diff(OnReference("SELECT (ts AT TIME ZONE 'UTC')::date AS day, count(*) AS n FROM " +
                              QuoteIdentifier(Table()) + " GROUP BY 1 ORDER BY 1",
                          {}),
              run(q), true, {false, false});
  EXPECT_TRUE(diff.empty()) << diff;
}

// Property-style: many random data sets, many random shapes each.
TEST_F(MergePg, RandomDataAndShapesMatchTheReference) {
  const std::uint64_t seed = SeedFromEnvironment();
  const int datasets = IntFromEnvironment("SHARDKIT_MERGE_DATASETS", 40);
  const int queries = IntFromEnvironment("SHARDKIT_MERGE_QUERIES", 30);
  std::mt19937_64 rng(seed);
  Coverage coverage;
  int failures = 0;
  for (int d = 0; d < datasets && failures < 5; ++d) {
    const auto data = RandomData(rng, *directory_, cluster_->ShardCount());
    Load(data);
    for (int i = 0; i < queries && failures < 5; ++i) {
      const QueryShape q = RandomShape(rng, data, Table());
      std::string diff;
      try {
        diff = RunShape(*scatter_, Reference(), q, Table(), &coverage);
      } catch (const std::exception& e) {
        diff = std::string("threw: ") + e.what();
      }
      if (!diff.empty()) {
        ++failures;
        ADD_FAILURE() << "SHARDKIT_MERGE_SEED=" << seed << " data set " << d << " (" << data.size() << " rows) query "
                      << i << ": " << diff;
      }
    }
  }
  std::printf(
      "[ merge ] seed %llu: %d cases (%d grouped, %d scalar; %d ordered, %d unordered); groups on one shard "
      "only: %d, a shard without rows: %d, all shards empty: %d, HAVING: %d, LIMIT: %d, OFFSET: %d, text "
      "keys: %d, NULL groups: %d, numeric AVG: %d, scalar zero counts: %d, real values: %d, timestamptz "
      "keys: %d, numeric/bpchar/date/bytea/uuid/double/bigint keys: %d, refused: %d\n",
      static_cast<unsigned long long>(seed), coverage.cases, coverage.grouped, coverage.scalar, coverage.ordered,
      coverage.unordered, coverage.group_on_one_shard_only, coverage.shard_without_rows, coverage.all_shards_empty,
      coverage.having, coverage.limit, coverage.offset, coverage.text_key, coverage.null_group, coverage.numeric_avg,
      coverage.count_zero, coverage.real_values, coverage.timestamptz_key, coverage.typed_key, coverage.refused);
  RecordProperty("seed", std::to_string(seed));
  RecordProperty("cases", coverage.cases);
  if (failures == 0 && datasets * queries >= 600) {
    // The generator must actually reach each of these shapes, or the run proved little.
    EXPECT_GT(coverage.group_on_one_shard_only, 0);
    EXPECT_GT(coverage.shard_without_rows, 0);
    EXPECT_GT(coverage.all_shards_empty, 0);
    EXPECT_GT(coverage.having, 0);
    EXPECT_GT(coverage.limit, 0);
    EXPECT_GT(coverage.offset, 0);
    EXPECT_GT(coverage.text_key, 0);
    EXPECT_GT(coverage.null_group, 0);
    EXPECT_GT(coverage.numeric_avg, 0);
    EXPECT_GT(coverage.count_zero, 0);
    EXPECT_GT(coverage.real_values, 0);
    EXPECT_GT(coverage.timestamptz_key, 0);
    EXPECT_GT(coverage.typed_key, 0);
    EXPECT_GT(coverage.refused, 0);
  }
}

}  // namespace
}  // namespace shardkit
