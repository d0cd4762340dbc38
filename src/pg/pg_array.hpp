// Small libpqxx 6 helpers: integer and text arrays as PostgreSQL array literals, for
// parameters cast with $n::int[], $n::bigint[] or $n::numeric[] (libpqxx 6 has no array
// parameters), and nullable fields as std::optional (Debian's libpqxx 6.4
// is built without std::optional support).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <pqxx/field>
#include <span>
#include <string>

namespace shardkit::detail {

template <class Int>
[[nodiscard]] std::string PgArray(std::span<const Int> values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format("{}", values[i]);
  }
  out += '}';
  return out;
}

template <class Container>
[[nodiscard]] std::string PgArrayOf(const Container& values) {
  return PgArray(std::span<const typename Container::value_type>(values.data(), values.size()));
}

// Elements in PostgreSQL's text form as an array literal for $n::type[]:
// each quoted (backslash before " and \\), nullopt as NULL.
[[nodiscard]] inline std::string PgTextArray(std::span<const std::optional<std::string>> values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    if (!values[i]) {
      out += "NULL";
      continue;
    }
    out += '"';
    for (const char c : *values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

template <class T>
[[nodiscard]] std::optional<T> OptionalField(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<T>();
}

}  // namespace shardkit::detail
