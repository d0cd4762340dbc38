// CopyWriter's fields: text format escaping, and the binary form of each
// type it supports.
#include "shardkit/resharding/copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <limits>

#include "resharding/copy_format.hpp"
#include "shardkit/core/decimal.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

using namespace detail::copy_format;  // the format's type oids and byte writers

namespace {

const char* TypeName(unsigned type) {
  switch (type) {
    case kBool:
      return "boolean";
    case kInt8:
      return "bigint";
    case kInt2:
      return "smallint";
    case kInt4:
      return "integer";
    case kText:
      return "text";
    case kBpchar:
      return "character";
    case kVarchar:
      return "character varying";
    case kTimestamp:
      return "timestamp";
    case kTimestamptz:
      return "timestamptz";
    case kNumeric:
      return "numeric";
    default:
      return "?";
  }
}

// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
constexpr std::int64_t kPostgresEpochMicros = 946'684'800'000'000;

// Two digits of 0..99.
void Put2(std::string& out, unsigned v) {
  out.push_back(static_cast<char>('0' + v / 10));
  out.push_back(static_cast<char>('0' + v % 10));
}

}  // namespace

unsigned CopyWriter::NextColumnType(const char* what) {
  if (column_ >= column_types_.size()) {
    throw Error(fmt::format("COPY into {}: row {} has more fields than the {} columns (at {})", label_, rows_ + 1,
                            column_types_.size(), what));
  }
  if (column_ == 0) Put16(buffer_, static_cast<std::uint16_t>(column_types_.size()));
  return column_types_[column_++];
}

void CopyWriter::EndBinaryRow() {
  if (column_ != column_types_.size()) {
    throw Error(fmt::format("COPY into {}: row {} has {} fields for {} columns", label_, rows_ + 1, column_,
                            column_types_.size()));
  }
  column_ = 0;
}

namespace {
[[noreturn]] void WrongType(const std::string& label, const std::string& column, unsigned type, const char* given) {
  throw Error(
      fmt::format("COPY into {}: column \"{}\" is {}, and a {} cannot be written to it in binary format; "
                  "pass a matching value or use CopyFormat::kText",
                  label, column, TypeName(type), given));
}
}  // namespace

CopyWriter& CopyWriter::Null() {
  if (binary_) {
    (void)NextColumnType("NULL");
    Put32(buffer_, 0xFFFFFFFFu);
    return *this;
  }
  Separate();
  buffer_.append("\\N");
  return *this;
}

CopyWriter& CopyWriter::Field(bool value) {
  if (binary_) {
    const unsigned type = NextColumnType("boolean");
    if (type != kBool) WrongType(label_, column_names_[column_ - 1], type, "boolean");
    Put32(buffer_, 1);
    buffer_.push_back(value ? '\1' : '\0');
    return *this;
  }
  Separate();
  buffer_.push_back(value ? 't' : 'f');
  return *this;
}

CopyWriter& CopyWriter::BinaryUnsigned(std::uint64_t value) {
  if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return BinaryInteger(0, true);
  }
  return BinaryInteger(static_cast<std::int64_t>(value), false);
}

CopyWriter& CopyWriter::BinaryInteger(std::int64_t value, bool too_large) {
  const unsigned type = NextColumnType("integer");
  const std::string& column = column_names_[column_ - 1];
  auto out_of_range = [&](const char* range) {
    throw Error(fmt::format("COPY into {}: row {}: {} does not fit column \"{}\" ({}: {})", label_, rows_ + 1,
                            too_large ? std::string("an unsigned value above 2^63") : std::to_string(value), column,
                            TypeName(type), range));
  };
  if (too_large) out_of_range("at most 2^63-1");
  switch (type) {
    case kInt2:
      if (value < -32768 || value > 32767) out_of_range("-32768..32767");
      Put32(buffer_, 2);
      Put16(buffer_, static_cast<std::uint16_t>(static_cast<std::int16_t>(value)));
      return *this;
    case kInt4:
      if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max()) {
        out_of_range("32-bit");
      }
      Put32(buffer_, 4);
      Put32(buffer_, static_cast<std::uint32_t>(static_cast<std::int32_t>(value)));
      return *this;
    case kInt8:
      Put32(buffer_, 8);
      Put64(buffer_, static_cast<std::uint64_t>(value));
      return *this;
    case kNumeric: {
      --column_;  // BinaryNumeric takes the column again
      const bool negative = value < 0;
      const std::uint64_t magnitude =
          negative ? ~static_cast<std::uint64_t>(value) + 1 : static_cast<std::uint64_t>(value);
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, magnitude).ptr;
      return BinaryNumeric(negative, std::string_view(digits, static_cast<std::size_t>(end - digits)), 0);
    }
    default:
      WrongType(label_, column, type, "integer");
  }
}

// numeric's binary form: ndigits, weight, sign, dscale (int16 each), then
// ndigits base-10000 digits. `digits`: the unscaled value's decimal digits.
CopyWriter& CopyWriter::BinaryNumeric(bool negative, std::string_view digits, int scale) {
  const unsigned type = NextColumnType("numeric");
  if (type != kNumeric) WrongType(label_, column_names_[column_ - 1], type, "number with a fraction");
  const auto fraction = static_cast<std::size_t>(scale);
  // Integer part (may be empty) and fraction part padded to `fraction` digits.
  std::string_view int_part;
  std::string frac_part;
  if (digits.size() > fraction) {
    int_part = digits.substr(0, digits.size() - fraction);
    frac_part = std::string(digits.substr(digits.size() - fraction));
  } else {
    frac_part = std::string(fraction - digits.size(), '0') + std::string(digits);
  }
  std::uint16_t groups[64];
  int count = 0;
  const std::size_t int_lead = (4 - int_part.size() % 4) % 4;  // zeros padded on the left
  const int int_groups = static_cast<int>((int_part.size() + int_lead) / 4);
  auto digit_at_int = [&](std::size_t i) -> unsigned {  // i over the padded integer part
    return i < int_lead ? 0U : static_cast<unsigned>(int_part[i - int_lead] - '0');
  };
  for (int g = 0; g < int_groups; ++g) {
    unsigned v = 0;
    for (std::size_t d = 0; d < 4; ++d) v = v * 10 + digit_at_int(static_cast<std::size_t>(g) * 4 + d);
    groups[count++] = static_cast<std::uint16_t>(v);
  }
  const int frac_groups = static_cast<int>((frac_part.size() + 3) / 4);
  for (int g = 0; g < frac_groups; ++g) {
    unsigned v = 0;
    for (std::size_t d = 0; d < 4; ++d) {
      const std::size_t i = static_cast<std::size_t>(g) * 4 + d;
      v = v * 10 + (i < frac_part.size() ? static_cast<unsigned>(frac_part[i] - '0') : 0U);
    }
    groups[count++] = static_cast<std::uint16_t>(v);
  }
  int weight = int_groups - 1;
  int first = 0;
  while (first < count && groups[first] == 0) {
    ++first;
    --weight;
  }
  int last = count;
  while (last > first && groups[last - 1] == 0) --last;
  const int ndigits = last - first;
  if (ndigits == 0) {
    weight = 0;
    negative = false;
  }
  Put32(buffer_, static_cast<std::uint32_t>(8 + 2 * ndigits));
  Put16(buffer_, static_cast<std::uint16_t>(ndigits));
  Put16(buffer_, static_cast<std::uint16_t>(static_cast<std::int16_t>(weight)));
  Put16(buffer_, negative ? 0x4000 : 0x0000);
  Put16(buffer_, static_cast<std::uint16_t>(scale));
  for (int i = first; i < last; ++i) Put16(buffer_, groups[i]);
  return *this;
}

CopyWriter& CopyWriter::Field(std::string_view text) {
  if (binary_) {
    const unsigned type = NextColumnType("text");
    if (type == kText || type == kVarchar || type == kBpchar) {
      if (text.size() > 0x3FFFFFFF) throw Error(fmt::format("COPY into {}: a text field over 1 GB", label_));
      Put32(buffer_, static_cast<std::uint32_t>(text.size()));
      buffer_.append(text);
      return *this;
    }
    if (type == kNumeric) {
      // [+-]digits[.digits]
      --column_;
      std::string_view t = text;
      bool negative = false;
      if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
        negative = t[0] == '-';
        t.remove_prefix(1);
      }
      const auto dot = t.find('.');
      std::string digits(t.substr(0, dot));
      int scale = 0;
      if (dot != std::string_view::npos) {
        digits += t.substr(dot + 1);
        scale = static_cast<int>(t.size() - dot - 1);
      }
      const bool valid = !digits.empty() && digits.size() <= 200 &&
                         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!valid) {
        throw Error(
            fmt::format("COPY into {}: row {}: '{}' is not a plain decimal number for column \"{}\" "
                        "(binary format takes [-]digits[.digits])",
                        label_, rows_ + 1, text, column_names_[column_]));
      }
      const auto nonzero = digits.find_first_not_of('0');
      return BinaryNumeric(
          negative, nonzero == std::string::npos ? std::string_view("0") : std::string_view(digits).substr(nonzero),
          scale);
    }
    WrongType(label_, column_names_[column_ - 1], type, "text");
  }
  Separate();
  // Most text needs no escaping: append runs between special bytes.
  std::size_t run = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char* escape = nullptr;
    switch (c) {
      case '\\':
        escape = "\\\\";
        break;
      case '\t':
        escape = "\\t";
        break;
      case '\n':
        escape = "\\n";
        break;
      case '\r':
        escape = "\\r";
        break;
      default:
        continue;
    }
    buffer_.append(text.data() + run, i - run);
    buffer_.append(escape, 2);
    run = i + 1;
  }
  buffer_.append(text.data() + run, text.size() - run);
  return *this;
}

CopyWriter& CopyWriter::Field(CopyFixed value) {
  if (value.scale < 0 || value.scale > 18) {
    throw Error(fmt::format("COPY into {}: CopyFixed scale {} is outside 0..18", label_, value.scale));
  }
  // Magnitude as unsigned, so INT64_MIN works too.
  const bool negative = value.unscaled < 0;
  const std::uint64_t magnitude =
      negative ? ~static_cast<std::uint64_t>(value.unscaled) + 1 : static_cast<std::uint64_t>(value.unscaled);
  char digits[24];
  char* end = std::to_chars(digits, digits + sizeof digits, magnitude).ptr;
  auto length = static_cast<std::size_t>(end - digits);
  if (binary_) return BinaryNumeric(negative, std::string_view(digits, length), value.scale);
  Separate();
  const auto scale = static_cast<std::size_t>(value.scale);
  if (negative) buffer_.push_back('-');
  if (scale == 0) {
    buffer_.append(digits, length);
    return *this;
  }
  if (length <= scale) {
    buffer_.append("0.");
    buffer_.append(scale - length, '0');
    buffer_.append(digits, length);
    return *this;
  }
  buffer_.append(digits, length - scale);
  buffer_.push_back('.');
  buffer_.append(digits + (length - scale), scale);
  return *this;
}

CopyWriter& CopyWriter::Field(CopyTimestamp value) {
  using namespace std::chrono;
  if (binary_) {
    const unsigned type = NextColumnType("timestamp");
    if (type != kTimestamptz && type != kTimestamp) WrongType(label_, column_names_[column_ - 1], type, "timestamp");
    Put32(buffer_, 8);
    Put64(buffer_, static_cast<std::uint64_t>(value.time.time_since_epoch().count() - kPostgresEpochMicros));
    return *this;
  }
  Separate();
  const auto day = floor<days>(value.time);
  const year_month_day ymd{day};
  const hh_mm_ss<microseconds> tod{value.time - day};
  const int year = static_cast<int>(ymd.year());
  if (year < 1 || year > 9999) {
    throw Error(fmt::format("COPY into {}: timestamp year {} is outside 1..9999", label_, year));
  }
  char y[8];
  const auto yend = std::to_chars(y, y + sizeof y, year).ptr;
  buffer_.append(static_cast<std::size_t>(4 - (yend - y)), '0');
  buffer_.append(y, yend);
  buffer_.push_back('-');
  Put2(buffer_, static_cast<unsigned>(ymd.month()));
  buffer_.push_back('-');
  Put2(buffer_, static_cast<unsigned>(ymd.day()));
  buffer_.push_back(' ');
  Put2(buffer_, static_cast<unsigned>(tod.hours().count()));
  buffer_.push_back(':');
  Put2(buffer_, static_cast<unsigned>(tod.minutes().count()));
  buffer_.push_back(':');
  Put2(buffer_, static_cast<unsigned>(tod.seconds().count()));
  if (const auto micros = tod.subseconds().count(); micros != 0) {
    char frac[8];
    auto v = static_cast<unsigned>(micros);
    for (int i = 5; i >= 0; --i) {
      frac[i] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
    buffer_.push_back('.');
    buffer_.append(frac, 6);
  }
  buffer_.append("+00");
  return *this;
}

CopyWriter& CopyWriter::Field(const Decimal& value) {
  const std::string text = value.ToString();
  if (binary_) return Field(std::string_view(text));
  return Raw(text);
}

}  // namespace shardkit
