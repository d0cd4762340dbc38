// Where a node of a parsed statement stands in its text. libpg_query gives
// a node's first byte only (`location`); its end is found by trying the
// token ranges around its located tokens and keeping the first whose text
// PostgreSQL's parser reads back as the same node. So a piece of a
// statement can be cut out or replaced without re-rendering the rest:
//
//   const auto at = ExpressionExtent(parsed, target.at("val"));   // "sum(o.total) - sum(o.refund)"
//   const auto arm = SelectExtent(parsed, select.at("larg"));      // "SELECT ... FROM a"
#pragma once

#include <cstddef>
#include <optional>

#include <nlohmann/json.hpp>

#include "sql/parse.hpp"

namespace shardkit::sql {

// Tokens [begin, end) of a ParsedStatement.
struct TokenRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  friend bool operator==(const TokenRange&, const TokenRange&) = default;
};

// The text of tokens [begin, end), from the first token's first byte to the
// last token's last.
[[nodiscard]] std::string RangeText(const ParsedStatement& parsed, TokenRange range);

// An expression node ({"FuncCall": ...}, {"ColumnRef": ...}, ...): the
// tokens that parse as `SELECT <them>` to the same expression; nullopt when
// none near its located tokens does (the caller refuses).
[[nodiscard]] std::optional<TokenRange> ExpressionExtent(const ParsedStatement& parsed, const nlohmann::json& node);

// A SELECT without set operation of its own (an arm of UNION, INTERSECT or
// EXCEPT, or a VALUES list): the tokens that parse to the same statement,
// parentheses around it excluded.
[[nodiscard]] std::optional<TokenRange> SelectExtent(const ParsedStatement& parsed, const nlohmann::json& select);

// The tree without its byte offsets: two pieces written alike compare equal.
[[nodiscard]] nlohmann::json WithoutLocations(const nlohmann::json& node);

}  // namespace shardkit::sql
