// shardkit/core/sql_params.hpp — a statement's positional parameters.
//
//   shardkit::SqlParams params{"4242", std::nullopt, std::int64_t{7}, 2.5, true,
//                              std::vector<std::int64_t>{1, 2, 3},
//                              shardkit::SqlParam::Typed("{a,b}", "text[]")};
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardkit {

// One positional parameter: its PostgreSQL text form (nullopt is NULL) and,
// when the value says it, its type. A string is untyped, as a quoted
// literal is: the server infers its type from where it stands. Numbers,
// booleans, instants and arrays carry theirs, so that the server needs no
// inference where it has none to make (CONCAT('%', $1, '%'), sum($1),
// $1 IS NULL): the statement is sent with `($n::type)` in place of `$n`.
class SqlParam : public std::optional<std::string> {
 public:
  using std::optional<std::string>::optional;
  SqlParam(std::optional<std::string> text)
      : std::optional<std::string>(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) SqlParam(T value)  // NOLINT(google-explicit-constructor)
      : std::optional<std::string>(std::to_string(value)), type_(sizeof(T) <= 4 ? "int4" : "int8") {}
  SqlParam(bool value)
      : std::optional<std::string>(value ? "true" : "false"),
        type_("boolean") {}  // NOLINT(google-explicit-constructor)
  SqlParam(double value);    // NOLINT(google-explicit-constructor) float8, shortest text that reads back exactly
  SqlParam(
      std::chrono::system_clock::time_point at);  // NOLINT(google-explicit-constructor) timestamptz, UTC, microseconds
  SqlParam(const std::vector<std::int64_t>& values);  // NOLINT(google-explicit-constructor) int8[]
  SqlParam(const std::vector<std::string>& values);   // NOLINT(google-explicit-constructor) text[]

  // Any value of any type, by the type's name as SQL writes it ("numeric",
  // "jsonb", "int4[]"); nullopt is a NULL of that type.
  [[nodiscard]] static SqlParam Typed(std::optional<std::string> text, std::string type);

  // The type's name, or empty: the server infers it.
  [[nodiscard]] const std::string& type() const noexcept { return type_; }

 private:
  std::string type_;
};

// Positional parameters $1..$n.
using SqlParams = std::vector<SqlParam>;

// The statement as it is sent: `$n` of a typed parameter becomes
// `($n::type)` (only outside literals, comments and quoted names); the
// text itself when no parameter has a type.
[[nodiscard]] std::string WithParameterTypes(const std::string& sql, const SqlParams& params);

}  // namespace shardkit
