// Decimal: numeric's text I/O, addition and division rules (numeric.c).
#include "shardkit/core/decimal.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <system_error>
#include <utility>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

using Mantissa = Decimal::Mantissa;

// numeric_in refuses exponents beyond NUMERIC_MAX_PRECISION.
constexpr int kMaxExponent = 1000;
// numeric's internal base: select_div_scale() reasons in base-10000 digits.
constexpr int kDecDigits = 4;

Mantissa PowerOfTen(int exponent) {
  // Small powers are hit on every addition and comparison; cache them.
  static const auto kTable = [] {
    std::array<Mantissa, 64> table;
    Mantissa p = 1;
    for (auto& entry : table) {
      entry = p;
      p *= 10;
    }
    return table;
  }();
  if (exponent >= 0 && exponent < static_cast<int>(kTable.size())) {
    return kTable[static_cast<std::size_t>(exponent)];
  }
  return boost::multiprecision::pow(Mantissa(10), static_cast<unsigned>(exponent));
}

Mantissa Scaled(const Mantissa& m, int by) {
  // Spelled out: a ?: over Boost expression templates would bind to temporaries.
  if (by == 0) return m;
  Mantissa out = m;
  out *= PowerOfTen(by);
  return out;
}

int DecimalDigits(const Mantissa& magnitude) {
  // magnitude > 0
  const std::string s = magnitude.str();
  return static_cast<int>(s.size());
}

int FloorDiv(int a, int b) {
  int q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool IsBlank(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// numeric's NumericVar view of a value for select_div_scale(): the weight of
// the first non-zero base-10000 digit and that digit (0 and 0 for zero).
std::pair<int, int> WeightAndFirstDigit(const Decimal& d) {
  if (d.IsZero()) return {0, 0};
  const Mantissa magnitude = abs(d.Unscaled());
  const int leading_exponent = DecimalDigits(magnitude) - 1 - d.Scale();  // 10^e <= |x| < 10^(e+1)
  const int weight = FloorDiv(leading_exponent, kDecDigits);
  const int shift = d.Scale() + kDecDigits * weight;  // |x| / 10000^weight = |m| / 10^shift
  const Mantissa first =
      shift >= 0 ? Mantissa(magnitude / PowerOfTen(shift)) : Mantissa(magnitude * PowerOfTen(-shift));
  return {weight, first.convert_to<int>()};
}

}  // namespace

Decimal::Decimal(Mantissa mantissa, int scale) : mantissa_(std::move(mantissa)), scale_(scale) {
  if (scale < 0) throw Error("numeric: negative scale " + std::to_string(scale));
}

std::optional<Decimal> Decimal::TryParse(std::string_view text) noexcept {
  try {
    std::size_t i = 0;
    const std::size_t n = text.size();
    while (i < n && IsBlank(text[i])) ++i;
    bool negative = false;
    if (i < n && (text[i] == '+' || text[i] == '-')) {
      negative = text[i] == '-';
      ++i;
    }
    std::string digits;
    int fraction_digits = 0;
    bool have_digit = false;
    bool have_point = false;
    for (; i < n; ++i) {
      const char c = text[i];
      if (c >= '0' && c <= '9') {
        digits.push_back(c);
        have_digit = true;
        if (have_point) ++fraction_digits;
      } else if (c == '.' && !have_point) {
        have_point = true;
      } else {
        break;
      }
    }
    if (!have_digit) return std::nullopt;
    long exponent = 0;
    if (i < n && (text[i] == 'e' || text[i] == 'E')) {
      ++i;
      bool exp_negative = false;
      if (i < n && (text[i] == '+' || text[i] == '-')) {
        exp_negative = text[i] == '-';
        ++i;
      }
      const std::size_t start = i;
      while (i < n && text[i] >= '0' && text[i] <= '9') {
        exponent = exponent * 10 + (text[i] - '0');
        if (exponent > kMaxExponent) return std::nullopt;
        ++i;
      }
      if (i == start) return std::nullopt;
      if (exp_negative) exponent = -exponent;
    }
    while (i < n && IsBlank(text[i])) ++i;
    if (i != n) return std::nullopt;

    // cpp_int reads a leading 0 as octal: strip leading zeros first.
    const auto nonzero = digits.find_first_not_of('0');
    Mantissa m;
    if (nonzero == std::string::npos) {
      m = 0;
    } else if (digits.size() - nonzero <= 18) {
      // Fits in 64 bits: much cheaper than cpp_int's string parser (hot when merging).
      std::uint64_t small = 0;
      std::from_chars(digits.data() + nonzero, digits.data() + digits.size(), small);
      m = small;
    } else {
      m = Mantissa(digits.substr(nonzero));
    }
    const int shift = static_cast<int>(exponent) - fraction_digits;  // value = m * 10^shift
    int scale = 0;
    if (shift >= 0) {
      m = Scaled(m, shift);
    } else {
      scale = -shift;
    }
    if (negative) m = -m;
    return Decimal(std::move(m), scale);
  } catch (...) {
    return std::nullopt;
  }
}

Decimal Decimal::Parse(std::string_view text) {
  if (auto d = TryParse(text)) return std::move(*d);
  std::string shown(text.substr(0, 80));
  std::string lowered = shown;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lowered.find("nan") != std::string::npos || lowered.find("inf") != std::string::npos) {
    throw Error("numeric value \"" + shown +
                "\" is not finite: shardkit merges only finite numerics; filter NaN and "
                "Infinity out in the per-shard query");
  }
  throw Error("invalid numeric text \"" + shown + "\"");
}

Decimal Decimal::FromInt(std::int64_t value) {
  return Decimal(Mantissa(value), 0);
}

std::string Decimal::ToString() const {
  std::string digits = Mantissa(abs(mantissa_)).str();
  const auto scale = static_cast<std::size_t>(scale_);
  if (digits.size() <= scale) digits.insert(0, scale + 1 - digits.size(), '0');
  std::string out;
  out.reserve(digits.size() + 2);
  if (mantissa_.sign() < 0) out.push_back('-');
  out.append(digits, 0, digits.size() - scale);
  if (scale > 0) {
    out.push_back('.');
    out.append(digits, digits.size() - scale, scale);
  }
  return out;
}

Decimal Decimal::operator+(const Decimal& other) const {
  const int scale = std::max(scale_, other.scale_);
  return Decimal(Scaled(mantissa_, scale - scale_) + Scaled(other.mantissa_, scale - other.scale_), scale);
}

Decimal Decimal::operator-() const {
  return Decimal(-mantissa_, scale_);
}

Decimal Decimal::operator-(const Decimal& other) const {
  return *this + (-other);
}

int Decimal::DivisionScale(const Decimal& dividend, const Decimal& divisor) {
  const auto [weight1, first1] = WeightAndFirstDigit(dividend);
  const auto [weight2, first2] = WeightAndFirstDigit(divisor);
  // Estimated weight of the quotient; equal first digits are taken as var1 < var2.
  int qweight = weight1 - weight2;
  if (first1 <= first2) --qweight;
  int rscale = kMinSignificantDigits - qweight * kDecDigits;
  rscale = std::max({rscale, dividend.scale_, divisor.scale_, 0});
  return std::min(rscale, kMaxDisplayScale);
}

Decimal Decimal::Divide(const Decimal& divisor, int scale) const {
  if (divisor.IsZero()) throw Error("numeric: division by zero");
  if (scale < 0) throw Error("numeric: negative result scale");
  // (m1 / 10^s1) / (m2 / 10^s2) * 10^scale = m1 * 10^(s2 + scale) / (m2 * 10^s1)
  const Mantissa numerator = Scaled(abs(mantissa_), divisor.scale_ + scale);
  const Mantissa denominator = Scaled(abs(divisor.mantissa_), scale_);
  Mantissa quotient;
  Mantissa remainder;
  boost::multiprecision::divide_qr(numerator, denominator, quotient, remainder);
  if (remainder * 2 >= denominator) ++quotient;  // half away from zero
  if (mantissa_.sign() * divisor.mantissa_.sign() < 0) quotient = -quotient;
  return Decimal(std::move(quotient), scale);
}

Decimal Decimal::DivideLikePostgres(const Decimal& divisor) const {
  if (divisor.IsZero()) throw Error("numeric: division by zero");
  return Divide(divisor, DivisionScale(*this, divisor));
}

Decimal Decimal::Rounded(int scale) const {
  if (scale < 0) throw Error("numeric: negative rounding scale");
  if (scale >= scale_) return Decimal(Scaled(mantissa_, scale - scale_), scale);
  return Divide(Decimal(Mantissa(1), 0), scale);
}

double Decimal::ToDouble() const {
  const std::string text = ToString();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return mantissa_.sign() < 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  (void)ptr;
  return value;
}

std::optional<std::int64_t> Decimal::ToInt64() const {
  Mantissa q;
  Mantissa r;
  boost::multiprecision::divide_qr(mantissa_, PowerOfTen(scale_), q, r);
  if (!r.is_zero()) return std::nullopt;
  if (q > std::numeric_limits<std::int64_t>::max() || q < std::numeric_limits<std::int64_t>::min()) {
    return std::nullopt;
  }
  return q.convert_to<std::int64_t>();
}

std::strong_ordering operator<=>(const Decimal& a, const Decimal& b) {
  if (a.mantissa_.sign() != b.mantissa_.sign()) return a.mantissa_.sign() <=> b.mantissa_.sign();
  const int scale = std::max(a.scale_, b.scale_);
  const int c = Scaled(a.mantissa_, scale - a.scale_).compare(Scaled(b.mantissa_, scale - b.scale_));
  return c <=> 0;
}

}  // namespace shardkit
