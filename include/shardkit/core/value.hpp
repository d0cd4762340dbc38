// shardkit/core/value.hpp — typed SQL values and result sets read from query results.
//
// A Value is what one field of a row holds once its PostgreSQL type is known:
// NULL, boolean, an integer (smallint/integer/bigint/oid), a double (double
// precision, or real: a float kept as such, so that it prints as the server
// prints a real), an exact Decimal (numeric) or text (text, varchar, and
// the types shardkit only carries along: date, timestamp, uuid...). The type
// comes from the column's type OID, never from guessing at the text.
//
//   shardkit::Value v = shardkit::ReadValue(std::string_view("1.50"), 1700);  // numeric's OID
//   v.AsDecimal();                    // exact, as the server printed it
//
// A server's rows are read as Values by ReadResultSet (pg/result_values.hpp).
//
// Ordering (CompareValues) is PostgreSQL's for the supported types, with text
// compared bytewise: that is the C collation, which every shardkit server must
// use (see CheckMergeAssumptions in scatter_merge.hpp). Types whose text does
// not order or compare like their values (character's trailing blanks, BC
// dates) are compared through ComparisonForm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardkit/core/decimal.hpp"

namespace shardkit {

using TypeOid = unsigned int;  // pqxx::oid

class Value {
 public:
  enum class Kind { kNull, kBool, kInt, kDouble, kDecimal, kText };

  Value() = default;  // NULL
  [[nodiscard]] static Value Null() { return Value(); }
  [[nodiscard]] static Value Bool(bool v) { return Value(Storage(std::in_place_index<1>, v)); }
  [[nodiscard]] static Value Int(std::int64_t v) { return Value(Storage(std::in_place_index<2>, v)); }
  [[nodiscard]] static Value Double(double v) { return Value(Storage(std::in_place_index<3>, v)); }
  // A real (float4): of kind kDouble, but printed as float4out prints it.
  [[nodiscard]] static Value Real(float v) { return Value(Storage(std::in_place_index<6>, v)); }
  // Out of line: GCC 12 under AddressSanitizer warns (falsely) about
  // cpp_int's move wherever these are inlined.
  [[nodiscard]] static Value Numeric(Decimal v);
  [[nodiscard]] static Value Numeric(std::string_view text);
  [[nodiscard]] static Value Text(std::string v) { return Value(Storage(std::in_place_index<5>, std::move(v))); }

  [[nodiscard]] Kind kind() const noexcept {
    return storage_.index() == kRealIndex ? Kind::kDouble : static_cast<Kind>(storage_.index());
  }
  [[nodiscard]] bool IsNull() const noexcept { return storage_.index() == 0; }
  [[nodiscard]] bool IsReal() const noexcept { return storage_.index() == kRealIndex; }
  // Accessors throw shardkit::Error when the kind differs.
  [[nodiscard]] bool AsBool() const { return std::get<1>(Checked(Kind::kBool)); }
  [[nodiscard]] std::int64_t AsInt() const { return std::get<2>(Checked(Kind::kInt)); }
  [[nodiscard]] double AsDouble() const {
    if (IsReal()) return static_cast<double>(std::get<kRealIndex>(storage_));  // exact widening
    return std::get<3>(Checked(Kind::kDouble));
  }
  [[nodiscard]] const Decimal& AsDecimal() const { return std::get<4>(Checked(Kind::kDecimal)); }
  [[nodiscard]] const std::string& AsText() const { return std::get<5>(Checked(Kind::kText)); }

  // PostgreSQL's text form ("t"/"f", numeric with its scale, shortest
  // round-trip doubles); "NULL" for NULL. For messages and printing.
  [[nodiscard]] std::string ToString() const;

  // Same kind and same text form (so 1.5 and 1.50 differ, a real and a
  // double differ; NaN equals NaN).
  friend bool operator==(const Value& a, const Value& b);

 private:
  // Indexes 0-5 are the Kinds in order; a real is stored as a float after them.
  using Storage = std::variant<std::monostate, bool, std::int64_t, double, Decimal, std::string, float>;
  static constexpr std::size_t kRealIndex = 6;
  explicit Value(Storage s) : storage_(std::move(s)) {}
  const Storage& Checked(Kind want) const {
    if (kind() != want) ThrowWrongKind(want);
    return storage_;
  }
  [[noreturn]] void ThrowWrongKind(Kind want) const;
  Storage storage_;
};

[[nodiscard]] std::string_view KindName(Value::Kind kind) noexcept;

// What shardkit knows about a PostgreSQL type.
struct PgTypeInfo {
  TypeOid oid = 0;
  std::string name;                       // as format_type() prints it: "bigint", "numeric"
  Value::Kind kind = Value::Kind::kText;  // how its values are held
  // Two values are equal for the server exactly when their ComparisonForms
  // are equal: shardkit may use it as a group key (GROUP BY, DISTINCT).
  bool groupable = false;
  bool orderable = false;  // shardkit orders it exactly as the server (ORDER BY, MIN, MAX)
  bool known = false;      // listed in shardkit's table; unknown types are carried as text
};
[[nodiscard]] PgTypeInfo TypeInfoFor(TypeOid oid);
// The OID of a type shardkit knows by the name format_type() prints (0: not known).
[[nodiscard]] TypeOid TypeOidNamed(std::string_view name);

// For a type that is not groupable: what to write instead, e.g. for
// interval "group by justify_interval(x)::text".
[[nodiscard]] std::string GroupingAdvice(TypeOid oid);

// Whether values of the type compare through ComparisonForm rather than as
// they are read (character, date, timestamp).
[[nodiscard]] bool HasComparisonForm(TypeOid oid) noexcept;
// The value CompareValues and operator== compare in place of `v` so that
// they agree with the server's equality and order for the type: character
// without trailing blanks (bpchar equality ignores them), dates and
// timestamps as text that orders BC years and years past 9999 correctly.
// Other types: `v` itself. Keep the original for output.
[[nodiscard]] Value ComparisonForm(const Value& v, TypeOid oid);
// The form whose order is the server's: ComparisonForm, except that a
// timestamptz (one text per instant for grouping) orders by its instant,
// its text's offset applied. Throws Error for a timestamptz not in ISO.
[[nodiscard]] Value OrderingForm(const Value& v, TypeOid oid);

// SQL ordering of two non-NULL values: integers, decimals and doubles compare
// by number across kinds (a double against an exact number compares as
// double, as PostgreSQL casts numeric to float8); NaN sorts above every other
// double and equals NaN; text compares bytewise (C collation); false < true.
// Throws shardkit::Error for NULLs or kinds that do not compare (text vs int).
[[nodiscard]] int CompareValues(const Value& a, const Value& b);

// A value from PostgreSQL's text form, as its column's type says (see
// TypeInfoFor); nullopt is NULL. Throws shardkit::Error for text that does
// not parse or for non-finite numerics. From a field: pg/result_values.hpp.
[[nodiscard]] Value ReadValue(std::optional<std::string_view> text, TypeOid type);

// Rows with named, typed columns: a server's answer or shardkit's merge.
struct ResultSet {
  std::vector<std::string> column_names;
  std::vector<std::string> column_types;  // PostgreSQL type names
  std::vector<std::vector<Value>> rows;

  // Index of the column, or nullopt.
  [[nodiscard]] std::optional<std::size_t> ColumnIndex(std::string_view name) const;
  // A readable table (for test failures and tools): header, then one line per row.
  [[nodiscard]] std::string Format(std::size_t max_rows = 50) const;
};

}  // namespace shardkit
