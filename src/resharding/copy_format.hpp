// PostgreSQL's binary COPY format as CopyWriter writes it: the type oids it
// has a binary form for, and big-endian integers (copy.cpp, copy_fields.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace shardkit::detail::copy_format {

// PostgreSQL type oids with a binary form here.
constexpr unsigned kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23, kText = 25, kBpchar = 1042, kVarchar = 1043,
                   kTimestamp = 1114, kTimestamptz = 1184, kNumeric = 1700;

inline void Put16(std::string& out, std::uint16_t v) {
  const char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 2);
}
inline void Put32(std::string& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  out.append(b, 4);
}
inline void Put64(std::string& out, std::uint64_t v) {
  Put32(out, static_cast<std::uint32_t>(v >> 32));
  Put32(out, static_cast<std::uint32_t>(v));
}

}  // namespace shardkit::detail::copy_format
