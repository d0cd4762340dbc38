// core/integer_text.hpp — an integer's text read as PostgreSQL 15's
// int4in/int8in read it: white space around it, one sign, decimal digits
// (' 1259', '+1259', '-9223372036854775808'). One reader for shard keys,
// key literals and LIMIT parameters.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace shardkit::detail {

// Decimal digits only (the sign given apart), within int64's range.
inline std::optional<std::int64_t> ParseIntegerDigits(std::string_view digits, bool negative) {
  if (digits.empty()) return std::nullopt;
  std::uint64_t magnitude = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (magnitude > (negative ? kMax + 1 : kMax)) return std::nullopt;
  return negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
}

inline std::optional<std::int64_t> ParseIntegerText(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return ParseIntegerDigits(text, negative);
}

}  // namespace shardkit::detail
