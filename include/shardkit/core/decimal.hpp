// shardkit/core/decimal.hpp — exact decimal numbers that behave like PostgreSQL's numeric.
//
// Merging AVG(numeric) or AVG(integer) from per-shard SUM and COUNT must give
// the very digits one server gives. PostgreSQL computes those averages as
// numeric division sum / count, whose result scale is chosen by
// select_div_scale() (numeric.c: at least 16 significant digits, never fewer
// fractional digits than either input) and rounded half away from zero.
// Decimal reproduces that, plus numeric's text input and output.
//
//   auto sum = shardkit::Decimal::Parse("1234.50") + shardkit::Decimal::Parse("10.25");
//   auto avg = sum.DivideLikePostgres(shardkit::Decimal::FromInt(7));
//   avg.ToString();   // "177.8214285714285714", as SELECT 1244.75 / 7 prints it
//
// Only finite values: NaN and ±Infinity are refused by Parse (they cannot be
// summed or averaged exactly without PostgreSQL's special-value rules).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/multiprecision/cpp_int.hpp>

namespace shardkit {

class Decimal {
 public:
  using Mantissa = boost::multiprecision::cpp_int;

  // PostgreSQL's limits on a computed result's scale (numeric.c).
  static constexpr int kMinSignificantDigits = 16;  // NUMERIC_MIN_SIG_DIGITS
  static constexpr int kMaxDisplayScale = 1000;     // NUMERIC_MAX_DISPLAY_SCALE

  Decimal() = default;  // 0 (scale 0)
  // mantissa * 10^-scale; scale must be >= 0.
  Decimal(Mantissa mantissa, int scale);

  // numeric's input syntax: [+-]digits[.digits][e[+-]digits], surrounding
  // blanks allowed. The display scale follows numeric_in: fractional digits
  // minus the exponent, at least 0 ("1.50" -> scale 2, "1.5e3" -> 1500).
  // Throws shardkit::Error for NaN, Infinity or malformed text.
  [[nodiscard]] static Decimal Parse(std::string_view text);
  [[nodiscard]] static std::optional<Decimal> TryParse(std::string_view text) noexcept;
  [[nodiscard]] static Decimal FromInt(std::int64_t value);

  // numeric's output: exactly Scale() fractional digits, no exponent,
  // "-" only for non-zero values.
  [[nodiscard]] std::string ToString() const;
  [[nodiscard]] int Scale() const noexcept { return scale_; }
  [[nodiscard]] const Mantissa& Unscaled() const noexcept { return mantissa_; }
  [[nodiscard]] int Sign() const noexcept { return mantissa_.sign(); }
  [[nodiscard]] bool IsZero() const noexcept { return mantissa_.is_zero(); }

  // Exact; the result's scale is the larger input scale (numeric_add).
  [[nodiscard]] Decimal operator+(const Decimal& other) const;
  [[nodiscard]] Decimal operator-(const Decimal& other) const;
  [[nodiscard]] Decimal operator-() const;

  // numeric_div: the quotient at scale DivisionScale(*this, divisor), rounded
  // half away from zero. Throws shardkit::Error on division by zero.
  [[nodiscard]] Decimal DivideLikePostgres(const Decimal& divisor) const;
  // The quotient rounded half away from zero at `scale` fractional digits.
  [[nodiscard]] Decimal Divide(const Decimal& divisor, int scale) const;
  // select_div_scale() of numeric.c.
  [[nodiscard]] static int DivisionScale(const Decimal& dividend, const Decimal& divisor);

  // round(x, scale) for scale >= 0: half away from zero; a larger scale pads.
  [[nodiscard]] Decimal Rounded(int scale) const;

  // The nearest double (through correctly rounded text conversion).
  [[nodiscard]] double ToDouble() const;
  // The value if it is an integer that fits (any scale: "12.00" -> 12).
  [[nodiscard]] std::optional<std::int64_t> ToInt64() const;

  // Numeric value only: 1.5 == 1.50 (as in SQL).
  friend std::strong_ordering operator<=>(const Decimal& a, const Decimal& b);
  friend bool operator==(const Decimal& a, const Decimal& b) { return (a <=> b) == 0; }
  // Same value and same scale: the same text output.
  [[nodiscard]] bool IdenticalTo(const Decimal& other) const noexcept {
    return scale_ == other.scale_ && mantissa_ == other.mantissa_;
  }

 private:
  Mantissa mantissa_ = 0;
  int scale_ = 0;
};

}  // namespace shardkit
