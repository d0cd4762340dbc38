// The merge engine: per-shard partial rows -> the rows one unsharded server
// returns. Knows plans and rows only, never pools or scatters.
#include "shardkit/queries/merge.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <utility>

#include "queries/merge_internal.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

using detail::NullsFirst;
using detail::OpText;
using detail::RoleName;

constexpr TypeOid kRealOid = 700;
constexpr TypeOid kDoubleOid = 701;

// One shard's rows, whatever they came in.
class RowsView {
 public:
  explicit RowsView(ShardId shard) : shard_(shard) {}
  virtual ~RowsView() = default;
  RowsView(const RowsView&) = delete;
  RowsView& operator=(const RowsView&) = delete;
  [[nodiscard]] ShardId Shard() const noexcept { return shard_; }
  [[nodiscard]] virtual std::size_t Columns() const = 0;
  [[nodiscard]] virtual std::string ColumnName(std::size_t c) const = 0;
  [[nodiscard]] virtual TypeOid ColumnType(std::size_t c) const = 0;
  [[nodiscard]] virtual std::size_t Rows() const = 0;
  [[nodiscard]] virtual std::optional<std::string_view> Field(std::size_t r, std::size_t c) const = 0;

 private:
  ShardId shard_;
};

// pg::Rows or pqxx::result (the same spellings).
template <class Result>
class ResultRows final : public RowsView {
 public:
  ResultRows(ShardId shard, const Result& r) : RowsView(shard), r_(r) {}
  std::size_t Columns() const override { return r_.columns(); }
  std::string ColumnName(std::size_t c) const override { return r_.column_name(static_cast<pqxx::row_size_type>(c)); }
  TypeOid ColumnType(std::size_t c) const override { return r_.column_type(static_cast<pqxx::row_size_type>(c)); }
  std::size_t Rows() const override { return r_.size(); }
  std::optional<std::string_view> Field(std::size_t r, std::size_t c) const override {
    const auto f = r_[static_cast<pqxx::result_size_type>(r)][static_cast<pqxx::row_size_type>(c)];
    if (f.is_null()) return std::nullopt;
    return std::string_view(f.c_str(), f.size());
  }

 private:
  const Result& r_;
};

class TextRows final : public RowsView {
 public:
  explicit TextRows(const PartialRows& p) : RowsView(p.shard), p_(p) {
    if (p.column_types.size() != p.column_names.size()) {
      throw UnmergeableQuery("shard " + std::to_string(ToInt(p.shard)) + ": partial rows have " +
                             std::to_string(p.column_names.size()) + " column names but " +
                             std::to_string(p.column_types.size()) + " column types");
    }
    for (const auto& row : p.rows) {
      if (row.size() != p.column_names.size()) {
        throw UnmergeableQuery("shard " + std::to_string(ToInt(p.shard)) + ": a partial row has " +
                               std::to_string(row.size()) + " fields for " + std::to_string(p.column_names.size()) +
                               " columns");
      }
    }
  }
  std::size_t Columns() const override { return p_.column_names.size(); }
  std::string ColumnName(std::size_t c) const override { return p_.column_names[c]; }
  TypeOid ColumnType(std::size_t c) const override { return p_.column_types[c]; }
  std::size_t Rows() const override { return p_.rows.size(); }
  std::optional<std::string_view> Field(std::size_t r, std::size_t c) const override {
    const auto& f = p_.rows[r][c];
    if (!f) return std::nullopt;
    return std::string_view(*f);
  }

 private:
  const PartialRows& p_;
};

using Inputs = std::vector<std::unique_ptr<RowsView>>;

struct BoundColumn {
  const MergeColumn* spec = nullptr;
  TypeOid oid = 0;        // partial's type (kAvg: the SUM partial's)
  TypeOid count_oid = 0;  // kAvg only
  bool typed = false;     // some shard reported the type
  PgTypeInfo info;
  std::string output_type;
};

struct Accumulator {
  Value value;             // key, SUM, MIN, MAX, AVG's sum
  std::int64_t count = 0;  // COUNT, AVG's count
};

std::optional<std::size_t> FindColumn(const RowsView& r, const std::string& name) {
  for (std::size_t c = 0; c < r.Columns(); ++c) {
    if (name == r.ColumnName(c)) return c;
  }
  return std::nullopt;
}

std::string ColumnList(const RowsView& r) {
  std::string out;
  for (std::size_t c = 0; c < r.Columns(); ++c) {
    if (c) out += ", ";
    out += r.ColumnName(c);
  }
  return out.empty() ? "none" : out;
}

std::int64_t AddChecked(std::int64_t a, std::int64_t b, const std::string& column) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error("merged column \"" + column + "\": bigint out of range (as the server would fail too)");
  }
  return out;
}

Value AddValues(const Value& acc, const Value& v, const std::string& column) {
  if (v.IsNull()) return acc;
  if (acc.IsNull()) return v;
  switch (v.kind()) {
    case Value::Kind::kInt:
      return Value::Int(AddChecked(acc.AsInt(), v.AsInt(), column));
    case Value::Kind::kDecimal:
      return Value::Numeric(acc.AsDecimal() + v.AsDecimal());
    case Value::Kind::kDouble:
      return Value::Double(acc.AsDouble() + v.AsDouble());
    default:
      throw UnmergeableQuery("merged column \"" + column + "\": cannot add " + std::string(KindName(v.kind())) +
                             " values");
  }
}

bool KeyLess(const std::vector<Value>& a, const std::vector<Value>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool an = a[i].IsNull();
    const bool bn = b[i].IsNull();
    if (an != bn) return an;  // NULL keys first; any consistent order groups them
    if (an) continue;
    const int c = CompareValues(a[i], b[i]);
    if (c != 0) return c < 0;
  }
  return false;
}

struct KeyCompare {
  bool operator()(const std::vector<Value>& a, const std::vector<Value>& b) const { return KeyLess(a, b); }
};

// Where each plan column's partials sit in each input: [input][column].
struct Layout {
  std::vector<std::vector<std::size_t>> value;
  std::vector<std::vector<std::size_t>> count;      // kAvg only
  std::vector<std::vector<std::size_t>> collation;  // only with partial_collation
};

// pg_collation_for() prints the name quoted; callers may not.
bool IsBytewiseCollation(std::string_view name) {
  if (name.size() >= 2 && name.front() == '"' && name.back() == '"') name = name.substr(1, name.size() - 2);
  return name == "default" || name == "C" || name == "POSIX";
}

void Bind(const MergePlan& plan, const Inputs& inputs, std::vector<BoundColumn>& bound, Layout& layout) {
  const auto& columns = plan.Columns();
  bound.resize(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) bound[c].spec = &columns[c];
  std::vector<ShardId> first_shard(columns.size(), ShardId{-1});
  layout.value.assign(inputs.size(), std::vector<std::size_t>(columns.size(), 0));
  layout.count.assign(inputs.size(), std::vector<std::size_t>(columns.size(), 0));
  layout.collation.assign(inputs.size(), std::vector<std::size_t>(columns.size(), 0));
  for (std::size_t s = 0; s < inputs.size(); ++s) {
    const RowsView& r = *inputs[s];
    if (r.Columns() == 0 && r.Rows() == 0) continue;  // no answer rows at all
    const ShardId shard = r.Shard();
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const MergeColumn& col = columns[c];
      auto locate = [&](const std::string& partial) -> std::size_t {
        const auto idx = FindColumn(r, partial);
        if (!idx) {
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned no column \"" + partial +
                                 "\" (needed for merged column \"" + col.name + "\"; its columns: " + ColumnList(r) +
                                 "): the plan's partial names must match the per-shard SELECT");
        }
        return *idx;
      };
      const std::size_t idx = locate(col.partial);
      layout.value[s][c] = idx;
      const TypeOid oid = r.ColumnType(idx);
      TypeOid count_oid = 0;
      if (col.role == MergeColumn::Role::kAvg) {
        layout.count[s][c] = locate(col.partial_count);
        count_oid = r.ColumnType(layout.count[s][c]);
      }
      if (!col.partial_collation.empty()) layout.collation[s][c] = locate(col.partial_collation);
      if (!bound[c].typed) {
        bound[c].typed = true;
        bound[c].oid = oid;
        bound[c].count_oid = count_oid;
        first_shard[c] = shard;
      } else if (bound[c].oid != oid || bound[c].count_oid != count_oid) {
        throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned column \"" + col.partial +
                               "\" as " + TypeInfoFor(oid).name + ", shard " + std::to_string(ToInt(first_shard[c])) +
                               " as " + TypeInfoFor(bound[c].oid).name +
                               ": the shards' schemas differ; align them before merging");
      }
    }
  }
  // Output types, and what cannot be merged for its type.
  for (auto& b : bound) {
    const MergeColumn& col = *b.spec;
    b.info = TypeInfoFor(b.oid);
    const std::string where =
        "merged column \"" + col.name + "\" (" + RoleName(col.role) + " of \"" + col.partial + "\")";
    if (!b.typed) {
      // No shard sent column metadata: only COUNT's type is certain.
      b.output_type = col.role == MergeColumn::Role::kCount ? "bigint" : "unknown";
      continue;
    }
    const Value::Kind kind = b.info.kind;
    switch (col.role) {
      case MergeColumn::Role::kGroupKey:
        if (!b.info.groupable) {
          throw UnmergeableQuery(where + ": shardkit cannot tell which " + b.info.name +
                                 " values the server holds equal, so groups from different shards could "
                                 "not be matched: " +
                                 GroupingAdvice(b.oid));
        }
        b.output_type = b.info.name;
        break;
      case MergeColumn::Role::kCount:
        if (kind != Value::Kind::kInt) {
          throw UnmergeableQuery(where + ": a partial count must be an integer, got " + b.info.name);
        }
        b.output_type = "bigint";
        break;
      case MergeColumn::Role::kSum:
        if (b.oid == kRealOid) {
          throw UnmergeableQuery(where +
                                 ": the server adds real values in single precision, rounding after "
                                 "every row, so per-shard sums added in another order differ from "
                                 "its sum in the last bits; write sum(x::numeric) for an exact sum");
        }
        if (b.oid == kDoubleOid) {
          throw UnmergeableQuery(where +
                                 ": the server adds double precision values rounding after every row, so "
                                 "per-shard sums added in another order differ from its sum in the last bits "
                                 "(4743.13 against 4743.130000000001); write sum(x::numeric) for an exact sum");
        }
        if (kind == Value::Kind::kInt) {
          b.output_type = "bigint";
        } else if (kind == Value::Kind::kDecimal || kind == Value::Kind::kDouble) {
          b.output_type = b.info.name;
        } else {
          throw UnmergeableQuery(where + ": shardkit cannot add " + b.info.name +
                                 " values exactly; sum a numeric expression instead");
        }
        break;
      case MergeColumn::Role::kMin:
      case MergeColumn::Role::kMax:
        if (!b.info.orderable) {
          throw UnmergeableQuery(where + ": shardkit cannot order " + b.info.name +
                                 " values exactly as the server does; cast to an orderable type (text in "
                                 "the C collation, numeric, timestamp without time zone)");
        }
        b.output_type = b.info.name;
        break;
      case MergeColumn::Role::kAvg:
        if (TypeInfoFor(b.count_oid).kind != Value::Kind::kInt) {
          throw UnmergeableQuery(where + ": the partial count \"" + col.partial_count + "\" must be an integer, got " +
                                 TypeInfoFor(b.count_oid).name);
        }
        if (b.oid == kRealOid || b.oid == kDoubleOid) {
          throw UnmergeableQuery(where + ": the server adds " + b.info.name +
                                 " values rounding after every row, so per-shard sums added in another order "
                                 "give another average in the last bits; write avg(x::numeric) for an exact "
                                 "average");
        }
        if (kind == Value::Kind::kInt || kind == Value::Kind::kDecimal) {
          b.output_type = "numeric";
        } else {
          throw UnmergeableQuery(where + ": shardkit averages integer and numeric values, not " + b.info.name);
        }
        break;
    }
  }
}

Value Finalize(const BoundColumn& b, const Accumulator& acc) {
  switch (b.spec->role) {
    case MergeColumn::Role::kCount:
      return Value::Int(acc.count);
    case MergeColumn::Role::kAvg: {
      if (acc.count == 0) return Value::Null();  // AVG of no values is NULL
      if (acc.value.IsNull()) {
        throw UnmergeableQuery("merged column \"" + b.spec->name + "\": count \"" + b.spec->partial_count +
                               "\" is positive but sum \"" + b.spec->partial +
                               "\" is NULL: they must be SUM(x) and COUNT(x) of the same x");
      }
      switch (acc.value.kind()) {
        case Value::Kind::kInt:
          return Value::Numeric(Decimal::FromInt(acc.value.AsInt()).DivideLikePostgres(Decimal::FromInt(acc.count)));
        case Value::Kind::kDecimal:
          return Value::Numeric(acc.value.AsDecimal().DivideLikePostgres(Decimal::FromInt(acc.count)));
        case Value::Kind::kDouble:
          return Value::Double(acc.value.AsDouble() / static_cast<double>(acc.count));
        default:
          throw UnmergeableQuery("merged column \"" + b.spec->name + "\": cannot average " + b.info.name);
      }
    }
    default:
      return acc.value;
  }
}

// text, character varying, character and name: their values are their text
// (character's without trailing blanks: ComparisonForm).
bool IsCharacterString(TypeOid oid) {
  constexpr TypeOid kName = 19, kText = 25, kBpchar = 1042, kVarchar = 1043;
  return oid == kText || oid == kVarchar || oid == kBpchar || oid == kName;
}

bool HavingHolds(const HavingTerm& term, const Value& v, const BoundColumn& b) {
  if (term.op == CompareOp::kIsNull) return v.IsNull();
  if (term.op == CompareOp::kIsNotNull) return !v.IsNull();
  if (v.IsNull() || term.constant.IsNull()) return false;  // unknown is not true
  if (term.constant.kind() == Value::Kind::kText && b.typed && !IsCharacterString(b.oid)) {
    // SQL reads a quoted constant as the column's type: '2026-1-5 5:00' is the
    // timestamp the shards print as 2026-01-05 05:00:00, 'A0EE...' a uuid
    // printed in lower case. Compared as text they differ.
    throw UnmergeableQuery("HAVING \"" + term.column + "\" " + OpText(term.op) + " '" + term.constant.ToString() +
                           "': the column is " + b.info.name +
                           ", and the server reads a text constant as that type, which shardkit's text comparison "
                           "cannot do exactly (equal values are written in several ways); compare text columns with "
                           "text constants only, filter the rows with WHERE, or filter the merged rows yourself");
  }
  if (!b.info.orderable && b.spec->role == MergeColumn::Role::kGroupKey && b.typed) {
    throw UnmergeableQuery("HAVING on \"" + term.column + "\": shardkit cannot compare " + b.info.name +
                           " values exactly as the server does");
  }
  int c = 0;
  try {
    c = HasComparisonForm(b.oid) ? CompareValues(ComparisonForm(v, b.oid), ComparisonForm(term.constant, b.oid))
                                 : CompareValues(v, term.constant);
  } catch (const UnmergeableQuery&) {
    throw;
  } catch (const Error& e) {
    throw UnmergeableQuery("HAVING " + term.column + " " + OpText(term.op) + " " + term.constant.ToString() + ": " +
                           e.what());
  }
  switch (term.op) {
    case CompareOp::kEq:
      return c == 0;
    case CompareOp::kNe:
      return c != 0;
    case CompareOp::kLt:
      return c < 0;
    case CompareOp::kLe:
      return c <= 0;
    case CompareOp::kGt:
      return c > 0;
    case CompareOp::kGe:
      return c >= 0;
    default:
      return false;
  }
}

std::size_t IndexOf(const MergePlan& plan, const std::string& name) {
  const auto& cols = plan.Columns();
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i].name == name) return i;
  }
  throw UnmergeableQuery("no merged column named \"" + name + "\"");
}

MergedResult MergeInputs(const MergePlan& plan, const Inputs& inputs) {
  plan.Validate();
  const auto& columns = plan.Columns();
  std::vector<BoundColumn> bound;
  Layout layout;
  Bind(plan, inputs, bound, layout);
  std::vector<std::size_t> collated;  // columns whose collation the shards report
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!columns[c].partial_collation.empty()) collated.push_back(c);
  }

  std::vector<std::size_t> key_columns;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].role == MergeColumn::Role::kGroupKey) key_columns.push_back(c);
  }
  const bool scalar = key_columns.empty();
  std::vector<bool> comparison_form(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c)
    comparison_form[c] = bound[c].typed && HasComparisonForm(bound[c].oid);
  // Three-way comparison as the server orders column c's values.
  auto compare = [&](std::size_t c, const Value& a, const Value& b) {
    return bound[c].typed ? CompareValues(OrderingForm(a, bound[c].oid), OrderingForm(b, bound[c].oid))
                          : CompareValues(a, b);
  };

  MergedResult out;
  out.shards = inputs.size();
  std::map<std::vector<Value>, std::size_t, KeyCompare> index;
  std::vector<std::vector<Accumulator>> groups;
  std::vector<std::size_t> last_input;  // per group: the input that last contributed
  if (scalar) groups.emplace_back(columns.size());

  for (std::size_t s = 0; s < inputs.size(); ++s) {
    const RowsView& r = *inputs[s];
    const ShardId shard = r.Shard();
    if (r.Columns() == 0 && r.Rows() == 0) continue;
    if (scalar && r.Rows() > 1) {
      throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned " + std::to_string(r.Rows()) +
                             " rows for a plan without group keys: declare the per-shard GROUP BY columns "
                             "as keys (MergePlan::Key)");
    }
    for (std::size_t row = 0; row < r.Rows(); ++row) {
      ++out.rows_in;
      auto read = [&](std::size_t c, std::size_t pos, TypeOid oid, const std::string& partial) {
        try {
          return ReadValue(r.Field(row, pos), oid);
        } catch (const Error& e) {
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + ", column \"" + partial + "\" (merged \"" +
                                 columns[c].name + "\"): " + e.what());
        }
      };
      for (const std::size_t c : collated) {
        const auto collation = r.Field(row, layout.collation[s][c]);
        if (collation && !IsBytewiseCollation(*collation)) {
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " compared merged column \"" +
                                 columns[c].name + "\" (" + RoleName(columns[c].role) + " of \"" + columns[c].partial +
                                 "\") in collation " + std::string(*collation) +
                                 ", not C: shardkit merges text in byte order, so the answer would differ from "
                                 "the server's. Write the expression with COLLATE \"C\" if byte order is what "
                                 "you want, or order by that collation in one place");
        }
      }
      std::size_t g = 0;
      if (!scalar) {
        // Groups are matched by the keys' comparison forms (the server's
        // equality); the first value seen stands for its group.
        std::vector<Value> key;
        std::vector<Value> values;
        key.reserve(key_columns.size());
        for (const std::size_t c : key_columns) {
          Value v = read(c, layout.value[s][c], bound[c].oid, columns[c].partial);
          key.push_back(comparison_form[c] ? ComparisonForm(v, bound[c].oid) : v);
          values.push_back(std::move(v));
        }
        auto [it, inserted] = index.try_emplace(std::move(key), groups.size());
        if (inserted) {
          groups.emplace_back(columns.size());
          last_input.push_back(s);
          for (std::size_t k = 0; k < key_columns.size(); ++k) {
            groups.back()[key_columns[k]].value = std::move(values[k]);
          }
        } else if (last_input[it->second] == s) {
          // Inputs are read one after another, so a group seen last in this input came twice from it.
          std::string shown;
          for (const auto& v : values) shown += (shown.empty() ? "" : ", ") + v.ToString();
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned the group (" + shown +
                                 ") twice: the per-shard query must GROUP BY exactly the plan's keys");
        } else {
          last_input[it->second] = s;
        }
        g = it->second;
      }
      auto& acc = groups[g];
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const MergeColumn& col = columns[c];
        if (col.role == MergeColumn::Role::kGroupKey) continue;
        const Value v = read(c, layout.value[s][c], bound[c].oid, col.partial);
        switch (col.role) {
          case MergeColumn::Role::kCount:
            if (!v.IsNull()) acc[c].count = AddChecked(acc[c].count, v.AsInt(), col.name);
            break;
          case MergeColumn::Role::kSum:
            acc[c].value = AddValues(acc[c].value, v, col.name);
            break;
          case MergeColumn::Role::kMin:
          case MergeColumn::Role::kMax:
            if (!v.IsNull()) {
              const bool better =
                  acc[c].value.IsNull() || (col.role == MergeColumn::Role::kMin ? compare(c, v, acc[c].value) < 0
                                                                                : compare(c, v, acc[c].value) > 0);
              if (better) acc[c].value = v;
            }
            break;
          case MergeColumn::Role::kAvg: {
            acc[c].value = AddValues(acc[c].value, v, col.name);
            const Value n = read(c, layout.count[s][c], bound[c].count_oid, col.partial_count);
            if (!n.IsNull()) acc[c].count = AddChecked(acc[c].count, n.AsInt(), col.name);
            break;
          }
          case MergeColumn::Role::kGroupKey:
            break;
        }
      }
    }
  }
  out.groups = groups.size();

  // Groups in key order (std::map order): the tie-break for equal sort keys.
  std::vector<std::size_t> order;
  order.reserve(groups.size());
  if (scalar) {
    order.push_back(0);
  } else {
    for (const auto& [key, g] : index) order.push_back(g);
  }

  // Only the columns HAVING and ORDER BY read are finalized for every group;
  // the others (an AVG's division, say) only for the rows returned.
  std::vector<std::pair<std::size_t, const HavingTerm*>> terms;
  for (const auto& t : plan.HavingTerms()) terms.emplace_back(IndexOf(plan, t.column), &t);
  std::vector<std::pair<std::size_t, const SortKey*>> sort_keys;
  for (const auto& k : plan.SortKeys()) {
    const std::size_t c = IndexOf(plan, k.column);
    if (bound[c].typed && !bound[c].info.orderable) {
      throw UnmergeableQuery("ORDER BY \"" + k.column + "\": shardkit cannot order " + bound[c].info.name +
                             " values exactly as the server does; cast to an orderable type");
    }
    sort_keys.emplace_back(c, &k);
  }
  std::vector<bool> early(columns.size(), false);
  for (const auto& [c, t] : terms) early[c] = true;
  for (const auto& [c, k] : sort_keys) early[c] = true;

  std::vector<std::vector<Value>> rows(order.size(), std::vector<Value>(columns.size()));
  for (std::size_t r = 0; r < order.size(); ++r) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (early[c]) rows[r][c] = Finalize(bound[c], groups[order[r]][c]);
    }
  }

  // HAVING
  std::vector<std::size_t> kept;  // positions in `rows`, in group-key order
  kept.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    bool holds = true;
    for (const auto& [c, t] : terms) {
      if (!HavingHolds(*t, rows[r][c], bound[c])) {
        holds = false;
        break;
      }
    }
    if (holds) kept.push_back(r);
  }

  // ORDER BY, then OFFSET and LIMIT. Equal sort keys keep group-key order
  // (the position breaks ties), so a partial sort of the first
  // offset + limit rows returns what a full stable sort would.
  const auto offset = static_cast<std::size_t>(plan.OffsetCount());
  std::size_t end = kept.size();
  if (plan.LimitCount()) end = std::min(end, offset + static_cast<std::size_t>(*plan.LimitCount()));
  if (!sort_keys.empty() && offset < end) {
    auto less = [&](std::size_t x, std::size_t y) {
      const auto& a = rows[x];
      const auto& b = rows[y];
      for (const auto& [c, k] : sort_keys) {
        const bool an = a[c].IsNull();
        const bool bn = b[c].IsNull();
        if (an && bn) continue;
        if (an != bn) return NullsFirst(*k) ? an : bn;
        int cmp = compare(c, a[c], b[c]);
        if (k->direction == SortDirection::kDesc) cmp = -cmp;
        if (cmp != 0) return cmp < 0;
      }
      return x < y;
    };
    if (end < kept.size()) {
      std::partial_sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(end), kept.end(), less);
    } else {
      std::sort(kept.begin(), kept.end(), less);
    }
  }
  std::vector<std::size_t> selected;
  for (std::size_t i = offset; i < end; ++i) selected.push_back(kept[i]);

  // Visible columns only.
  std::vector<std::size_t> visible;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!columns[c].hidden) visible.push_back(c);
  }
  for (const std::size_t c : visible) {
    out.column_names.push_back(columns[c].name);
    out.column_types.push_back(bound[c].output_type);
  }
  out.rows.reserve(selected.size());
  for (const std::size_t r : selected) {
    std::vector<Value> shown;
    shown.reserve(visible.size());
    for (const std::size_t c : visible) {
      shown.push_back(early[c] ? std::move(rows[r][c]) : Finalize(bound[c], groups[order[r]][c]));
    }
    out.rows.push_back(std::move(shown));
  }
  out.rows_out = out.rows.size();
  return out;
}

template <class Result>
MergedResult MergeResults(const MergePlan& plan, const std::vector<Result>& shard_results) {
  Inputs inputs;
  inputs.reserve(shard_results.size());
  for (std::size_t i = 0; i < shard_results.size(); ++i) {
    inputs.push_back(std::make_unique<ResultRows<Result>>(ShardId{static_cast<int>(i)}, shard_results[i]));
  }
  return MergeInputs(plan, inputs);
}

}  // namespace

MergedResult Merge(const MergePlan& plan, const std::vector<pg::Rows>& shard_results) {
  return MergeResults(plan, shard_results);
}

MergedResult Merge(const MergePlan& plan, const std::vector<pqxx::result>& shard_results) {
  return MergeResults(plan, shard_results);
}

MergedResult Merge(const MergePlan& plan, const std::vector<PartialRows>& shard_rows) {
  Inputs inputs;
  inputs.reserve(shard_rows.size());
  for (const auto& p : shard_rows) inputs.push_back(std::make_unique<TextRows>(p));
  return MergeInputs(plan, inputs);
}

namespace detail {

MergedResult MergeTagged(const MergePlan& plan, const std::vector<std::pair<ShardId, const pg::Rows*>>& results) {
  Inputs inputs;
  inputs.reserve(results.size());
  for (const auto& [shard, rows] : results) inputs.push_back(std::make_unique<ResultRows<pg::Rows>>(shard, *rows));
  return MergeInputs(plan, inputs);
}

}  // namespace detail
}  // namespace shardkit
