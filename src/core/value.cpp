// Value: typed fields, PostgreSQL type table, SQL ordering.
#include "shardkit/core/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <system_error>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

[[noreturn]] void WrongKind(Value::Kind have, std::string_view want) {
  throw Error("value is " + std::string(KindName(have)) + ", not " + std::string(want));
}

// Shortest round-trip digits, laid out the way float8out and float4out do
// (PostgreSQL 12+ with extra_float_digits >= 1): exponent form below 1e-4
// and from 1e15 on for double precision, from 1e6 on for real (printf's %g
// thresholds, DBL_DIG and FLT_DIG). std::to_chars on a float gives the
// shortest digits that round-trip as a float, as float4out does.
template <class Float>
std::string FormatShortest(Float v, int fixed_below) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e(+|-)xx
  const auto e_pos = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (std::size_t i = sign.size(); i < e_pos; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  if (exponent < -4 || exponent >= fixed_below) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int abs_exp = exponent < 0 ? -exponent : exponent;
    out += exponent < 0 ? "e-" : "e+";
    if (abs_exp < 10) out += "0";
    out += std::to_string(abs_exp);
    return out;
  }
  if (exponent < 0) {
    return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  }
  const auto int_digits = static_cast<std::size_t>(exponent + 1);
  if (digits.size() <= int_digits) return sign + digits + std::string(int_digits - digits.size(), '0');
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

constexpr TypeOid kRealOid = 700;
constexpr TypeOid kBpcharOid = 1042;
constexpr TypeOid kDateOid = 1082;
constexpr TypeOid kTimestampOid = 1114;
constexpr TypeOid kTimestamptzOid = 1184;
constexpr TypeOid kIntervalOid = 1186;
constexpr TypeOid kJsonOid = 114;
constexpr TypeOid kJsonbOid = 3802;

struct TypeRow {
  TypeOid oid;
  const char* name;
  Value::Kind kind;
  bool groupable;
  bool orderable;
};

// How each type the merge knows is compared; merge.hpp lists the same in
// words. A type is groupable when equal values always have one
// ComparisonForm (with the session settings every pool pins: session.hpp),
// orderable when ComparisonForms order like the values.
constexpr TypeRow kTypes[] = {
    {16, "boolean", Value::Kind::kBool, true, true},
    {17, "bytea", Value::Kind::kText, true, true},  // hex text orders as the bytes do
    // Bytes from 128 up print as octal escapes, which sort below letters.
    {18, "\"char\"", Value::Kind::kText, true, false},
    {19, "name", Value::Kind::kText, true, true},
    {20, "bigint", Value::Kind::kInt, true, true},
    {21, "smallint", Value::Kind::kInt, true, true},
    {23, "integer", Value::Kind::kInt, true, true},
    {25, "text", Value::Kind::kText, true, true},
    {26, "oid", Value::Kind::kInt, true, true},
    {kJsonOid, "json", Value::Kind::kText, false, false},  // no equality at all
    {kRealOid, "real", Value::Kind::kDouble, true, true},  // -0 = 0, NaN = NaN
    {701, "double precision", Value::Kind::kDouble, true, true},
    {kBpcharOid, "character", Value::Kind::kText, true, true},
    {1043, "character varying", Value::Kind::kText, true, true},
    {kDateOid, "date", Value::Kind::kText, true, true},
    {1083, "time without time zone", Value::Kind::kText, true, true},
    {kTimestampOid, "timestamp without time zone", Value::Kind::kText, true, true},
    // One text per instant in the one TimeZone every shard runs with;
    // ordered by the instant (ComparisonForm applies the text's offset).
    {kTimestamptzOid, "timestamp with time zone", Value::Kind::kText, true, true},
    {kIntervalOid, "interval", Value::Kind::kText, false, false},  // '1 mon' = '30 days'
    {1700, "numeric", Value::Kind::kDecimal, true, true},          // 1.5 = 1.50
    {2950, "uuid", Value::Kind::kText, true, true},
    {kJsonbOid, "jsonb", Value::Kind::kText, false, false},  // {"k": 0} = {"k": 0.00}
};

// Names of types shardkit carries but never compares, for messages.
struct TypeName {
  TypeOid oid;
  const char* name;
};
constexpr TypeName kOtherTypeNames[] = {
    {142, "xml"},
    {600, "point"},
    {650, "cidr"},
    {790, "money"},
    {829, "macaddr"},
    {869, "inet"},
    {1000, "boolean[]"},
    {1001, "bytea[]"},
    {1005, "smallint[]"},
    {1007, "integer[]"},
    {1009, "text[]"},
    {1014, "character[]"},
    {1015, "character varying[]"},
    {1016, "bigint[]"},
    {1021, "real[]"},
    {1022, "double precision[]"},
    {1115, "timestamp without time zone[]"},
    {1182, "date[]"},
    {1185, "timestamp with time zone[]"},
    {1187, "interval[]"},
    {1231, "numeric[]"},
    {1266, "time with time zone"},
    {2249, "record"},
    {2951, "uuid[]"},
    {3614, "tsvector"},
    {3807, "jsonb[]"},
    {3904, "int4range"},
    {3926, "int8range"},
    {3906, "numrange"},
    {3908, "tsrange"},
    {3910, "tstzrange"},
    {3912, "daterange"},
    {4451, "int4multirange"},
};

// TypeInfoFor without building the name: this runs for every field read.
Value::Kind KindOf(TypeOid oid) {
  for (const auto& row : kTypes) {
    if (row.oid == oid) return row.kind;
  }
  return Value::Kind::kText;
}

bool IsNumberKind(Value::Kind k) {
  return k == Value::Kind::kInt || k == Value::Kind::kDouble || k == Value::Kind::kDecimal;
}

int CompareDoubles(double a, double b) {
  // float8 ordering: NaN is above everything and equal to itself.
  const bool a_nan = std::isnan(a);
  const bool b_nan = std::isnan(b);
  if (a_nan || b_nan) return a_nan == b_nan ? 0 : (a_nan ? 1 : -1);
  return a < b ? -1 : (a > b ? 1 : 0);
}

double ToDouble(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kInt:
      return static_cast<double>(v.AsInt());
    case Value::Kind::kDouble:
      return v.AsDouble();
    case Value::Kind::kDecimal:
      return v.AsDecimal().ToDouble();
    default:
      WrongKind(v.kind(), "a number");
  }
}

}  // namespace

std::string_view KindName(Value::Kind kind) noexcept {
  switch (kind) {
    case Value::Kind::kNull:
      return "NULL";
    case Value::Kind::kBool:
      return "boolean";
    case Value::Kind::kInt:
      return "integer";
    case Value::Kind::kDouble:
      return "double";
    case Value::Kind::kDecimal:
      return "numeric";
    case Value::Kind::kText:
      return "text";
  }
  return "?";
}

Value Value::Numeric(Decimal v) {
  return Value(Storage(std::in_place_index<4>, std::move(v)));
}

Value Value::Numeric(std::string_view text) {
  return Numeric(Decimal::Parse(text));
}

void Value::ThrowWrongKind(Kind want) const {
  WrongKind(kind(), KindName(want));
}

std::string Value::ToString() const {
  switch (kind()) {
    case Kind::kNull:
      return "NULL";
    case Kind::kBool:
      return AsBool() ? "t" : "f";
    case Kind::kInt:
      return std::to_string(AsInt());
    case Kind::kDouble:
      return IsReal() ? FormatShortest(std::get<kRealIndex>(storage_), 6) : FormatShortest(AsDouble(), 15);
    case Kind::kDecimal:
      return AsDecimal().ToString();
    case Kind::kText:
      return AsText();
  }
  return {};
}

bool operator==(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kNull:
      return true;
    case Value::Kind::kBool:
      return a.AsBool() == b.AsBool();
    case Value::Kind::kInt:
      return a.AsInt() == b.AsInt();
    case Value::Kind::kDouble: {
      if (a.IsReal() != b.IsReal()) return false;
      const double x = a.AsDouble();
      const double y = b.AsDouble();
      return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y));
    }
    case Value::Kind::kDecimal:
      return a.AsDecimal().IdenticalTo(b.AsDecimal());
    case Value::Kind::kText:
      return a.AsText() == b.AsText();
  }
  return false;
}

PgTypeInfo TypeInfoFor(TypeOid oid) {
  for (const auto& row : kTypes) {
    if (row.oid == oid) return PgTypeInfo{oid, row.name, row.kind, row.groupable, row.orderable, true};
  }
  for (const auto& row : kOtherTypeNames) {
    if (row.oid == oid) return PgTypeInfo{oid, row.name, Value::Kind::kText, false, false, false};
  }
  return PgTypeInfo{oid, "type oid " + std::to_string(oid), Value::Kind::kText, false, false, false};
}

TypeOid TypeOidNamed(std::string_view name) {
  for (const auto& row : kTypes) {
    if (row.name == name) return row.oid;
  }
  for (const auto& row : kOtherTypeNames) {
    if (row.name == name) return row.oid;
  }
  return 0;
}

std::string GroupingAdvice(TypeOid oid) {
  switch (oid) {
    case kIntervalOid:
      return "equal intervals print differently ('1 mon', '30 days', '720:00:00'); group by "
             "justify_interval(x)::text, which prints equal intervals alike";
    case kJsonbOid:
      return "equal jsonb values print differently ({\"k\": 0} and {\"k\": 0.00}); group by the scalars "
             "inside, cast to a groupable type, e.g. (x->>'k')::numeric, or by x::text if equal text is "
             "what you mean";
    case kJsonOid:
      return "json has no equality; group by x::text if equal text is what you mean, or by scalars "
             "inside, cast to a groupable type";
    default:
      return "its text is not known to be one per value (containers of numbers, records, ranges and "
             "types shardkit does not list); group by the element or field columns, or by x::text if "
             "equal text is what you mean";
  }
}

bool HasComparisonForm(TypeOid oid) noexcept {
  return oid == kBpcharOid || oid == kDateOid || oid == kTimestampOid;
}

namespace {

// Reads `digits` (at most max_digits, at least one) from the front of text.
std::optional<std::int64_t> TakeNumber(std::string_view& text, std::size_t max_digits) {
  std::size_t n = 0;
  while (n < text.size() && n < max_digits && text[n] >= '0' && text[n] <= '9') ++n;
  if (n == 0) return std::nullopt;
  std::int64_t value = 0;
  for (std::size_t i = 0; i < n; ++i) value = value * 10 + (text[i] - '0');
  text.remove_prefix(n);
  return value;
}

bool Take(std::string_view& text, char c) {
  if (text.empty() || text.front() != c) return false;
  text.remove_prefix(1);
  return true;
}

// Days from 1970-01-01 of a proleptic Gregorian date (astronomical years:
// 1 BC is 0), after H. Hinnant's days_from_civil.
std::int64_t DaysFromCivil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// A timestamptz in DateStyle ISO ("2026-01-05 05:00:00.25+05:30", "... BC"):
// microseconds since 2000-01-01 00:00 UTC, as the server stores it, so
// that instants order whatever offset their text shows.
std::optional<std::int64_t> TimestamptzMicros(std::string_view text) {
  const bool bc = text.ends_with(" BC");
  if (bc) text.remove_suffix(3);
  const auto year = TakeNumber(text, 9);
  if (!year || !Take(text, '-')) return std::nullopt;
  const auto month = TakeNumber(text, 2);
  if (!month || !Take(text, '-')) return std::nullopt;
  const auto day = TakeNumber(text, 2);
  if (!day || !Take(text, ' ')) return std::nullopt;
  const auto hour = TakeNumber(text, 2);
  if (!hour || !Take(text, ':')) return std::nullopt;
  const auto minute = TakeNumber(text, 2);
  if (!minute || !Take(text, ':')) return std::nullopt;
  const auto second = TakeNumber(text, 2);
  if (!second) return std::nullopt;
  std::int64_t micros = 0;
  if (Take(text, '.')) {
    const std::size_t before = text.size();
    const auto fraction = TakeNumber(text, 6);
    if (!fraction) return std::nullopt;
    micros = *fraction;
    for (std::size_t n = before - text.size(); n < 6; ++n) micros *= 10;
  }
  if (text.empty() || (text.front() != '+' && text.front() != '-')) return std::nullopt;
  const std::int64_t sign = text.front() == '-' ? -1 : 1;
  text.remove_prefix(1);
  std::int64_t offset = 0;
  for (const std::int64_t unit : {3600, 60, 1}) {
    if (unit != 3600 && !Take(text, ':')) break;
    const auto part = TakeNumber(text, 2);
    if (!part) return std::nullopt;
    offset += *part * unit;
  }
  if (!text.empty() || *month < 1 || *month > 12 || *day < 1 || *day > 31) return std::nullopt;
  const std::int64_t astronomical_year = bc ? 1 - *year : *year;
  const std::int64_t days = DaysFromCivil(astronomical_year, *month, *day) - 10957;  // from 2000-01-01
  const std::int64_t seconds = days * 86400 + *hour * 3600 + *minute * 60 + *second - sign * offset;
  return seconds * 1'000'000 + micros;
}

}  // namespace

Value OrderingForm(const Value& v, TypeOid oid) {
  if (oid != kTimestamptzOid || v.kind() != Value::Kind::kText) return ComparisonForm(v, oid);
  const std::string_view text = v.AsText();
  if (text == "-infinity") return Value::Int(std::numeric_limits<std::int64_t>::min());
  if (text == "infinity") return Value::Int(std::numeric_limits<std::int64_t>::max());
  const std::optional<std::int64_t> micros = TimestamptzMicros(text);
  if (!micros) {
    throw Error("cannot order \"" + std::string(text.substr(0, 80)) +
                "\" as the server does: not an ISO timestamp with time zone (DateStyle ISO)");
  }
  return Value::Int(*micros);
}

Value ComparisonForm(const Value& v, TypeOid oid) {
  if (v.kind() != Value::Kind::kText || !HasComparisonForm(oid)) return v;
  std::string_view text = v.AsText();
  if (oid == kBpcharOid) {
    while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
    return Value::Text(std::string(text));
  }
  // ISO dates and timestamps: [-]infinity, or YYYY[Y..]-MM-DD[ time][ BC].
  // The year gets a fixed width (BC years count down), then the rest orders
  // as text does.
  if (text == "-infinity") return Value::Text("0");
  if (text == "infinity") return Value::Text("3");
  const bool bc = text.ends_with(" BC");
  if (bc) text.remove_suffix(3);
  const auto dash = text.find('-');
  std::uint64_t year = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + std::min(dash, text.size()), year);
  constexpr std::uint64_t kYearSpan = 9'999'999'999;
  if (dash == std::string_view::npos || dash == 0 || ec != std::errc() || ptr != text.data() + dash ||
      year > kYearSpan) {
    throw Error("cannot read \"" + std::string(v.AsText().substr(0, 80)) + "\" as an ISO " + TypeInfoFor(oid).name +
                " (DateStyle ISO)");
  }
  std::string form = bc ? "1" : "2";
  const std::string digits = std::to_string(bc ? kYearSpan - year : year);
  form.append(10 - digits.size(), '0');
  form += digits;
  form += text.substr(dash);
  return Value::Text(std::move(form));
}

int CompareValues(const Value& a, const Value& b) {
  const auto ka = a.kind();
  const auto kb = b.kind();
  if (ka == Value::Kind::kInt && kb == Value::Kind::kInt) {  // the common case first
    return a.AsInt() < b.AsInt() ? -1 : (a.AsInt() > b.AsInt() ? 1 : 0);
  }
  if (a.IsNull() || b.IsNull()) throw Error("CompareValues: NULL has no order of its own");
  if (IsNumberKind(ka) && IsNumberKind(kb)) {
    if (ka == Value::Kind::kDouble || kb == Value::Kind::kDouble) {
      return CompareDoubles(ToDouble(a), ToDouble(b));
    }
    if (ka == Value::Kind::kInt && kb == Value::Kind::kInt) {
      return a.AsInt() < b.AsInt() ? -1 : (a.AsInt() > b.AsInt() ? 1 : 0);
    }
    // No copies when both are decimals: this runs for every group-key comparison.
    const auto c = ka == Value::Kind::kDecimal && kb == Value::Kind::kDecimal ? a.AsDecimal() <=> b.AsDecimal()
                   : ka == Value::Kind::kInt ? Decimal::FromInt(a.AsInt()) <=> b.AsDecimal()
                                             : a.AsDecimal() <=> Decimal::FromInt(b.AsInt());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (ka != kb) {
    throw Error("cannot compare a " + std::string(KindName(ka)) + " value with a " + std::string(KindName(kb)) +
                " value");
  }
  if (ka == Value::Kind::kText) {
    // Bytewise, shorter first on a common prefix: the C collation (memcmp on unsigned bytes).
    const int c = a.AsText().compare(b.AsText());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  // booleans
  return static_cast<int>(a.AsBool()) - static_cast<int>(b.AsBool());
}

Value ReadValue(std::optional<std::string_view> maybe_text, TypeOid type) {
  if (!maybe_text) return Value::Null();
  const std::string_view text = *maybe_text;
  switch (KindOf(type)) {
    case Value::Kind::kBool:
      if (text == "t") return Value::Bool(true);
      if (text == "f") return Value::Bool(false);
      break;
    case Value::Kind::kInt: {
      std::int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc() && ptr == text.data() + text.size()) return Value::Int(v);
      break;
    }
    case Value::Kind::kDouble: {
      if (type == kRealOid) {
        // real: the float the server holds, printed back as it prints it.
        if (text == "NaN") return Value::Real(std::numeric_limits<float>::quiet_NaN());
        if (text == "Infinity") return Value::Real(std::numeric_limits<float>::infinity());
        if (text == "-Infinity") return Value::Real(-std::numeric_limits<float>::infinity());
        float f = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), f);
        if (ec == std::errc() && ptr == text.data() + text.size()) return Value::Real(f);
        break;
      }
      if (text == "NaN") return Value::Double(std::numeric_limits<double>::quiet_NaN());
      if (text == "Infinity") return Value::Double(std::numeric_limits<double>::infinity());
      if (text == "-Infinity") return Value::Double(-std::numeric_limits<double>::infinity());
      double v = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc() && ptr == text.data() + text.size()) return Value::Double(v);
      break;
    }
    case Value::Kind::kDecimal:
      return Value::Numeric(Decimal::Parse(text));
    case Value::Kind::kText:
    case Value::Kind::kNull:
      return Value::Text(std::string(text));
  }
  throw Error("cannot read \"" + std::string(text.substr(0, 80)) + "\" as " + TypeInfoFor(type).name);
}

std::optional<std::size_t> ResultSet::ColumnIndex(std::string_view name) const {
  for (std::size_t i = 0; i < column_names.size(); ++i) {
    if (column_names[i] == name) return i;
  }
  return std::nullopt;
}

std::string ResultSet::Format(std::size_t max_rows) const {
  std::string out;
  for (std::size_t i = 0; i < column_names.size(); ++i) {
    if (i) out += " | ";
    out += column_names[i] + " (" + (i < column_types.size() ? column_types[i] : "?") + ")";
  }
  out += "\n";
  for (std::size_t r = 0; r < rows.size() && r < max_rows; ++r) {
    for (std::size_t i = 0; i < rows[r].size(); ++i) {
      if (i) out += " | ";
      out += rows[r][i].ToString();
    }
    out += "\n";
  }
  if (rows.size() > max_rows) out += "... (" + std::to_string(rows.size()) + " rows)\n";
  return out;
}

}  // namespace shardkit
