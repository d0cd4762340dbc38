// One SQL statement parsed by libpg_query (PostgreSQL 15's own parser): its
// tree as JSON and the scanner's tokens (byte ranges), so that a statement
// can be analysed and its text changed at exact places without being
// re-rendered.
//
//   const shardkit::sql::ParsedStatement parsed = shardkit::sql::ParseStatement("SELECT 1");
//   parsed.tree.begin().key();  // "SelectStmt"
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/pg_scan.hpp"

namespace shardkit::sql {

// A token of PostgreSQL's scanner (core/pg_scan.hpp).
using Token = shardkit::detail::PgToken;

// Token numbers used here (pg_query.proto, enum Token).
inline constexpr int kTokenIconst = shardkit::detail::kPgIntegerConst;
inline constexpr int kTokenValues = 703;

struct ParsedStatement {
  std::string text;
  nlohmann::json tree;        // the statement node: {"SelectStmt": {...}}
  std::vector<Token> tokens;  // every token of the text, in order
  [[nodiscard]] std::string_view TokenText(const Token& token) const {
    return std::string_view(text).substr(static_cast<std::size_t>(token.start),
                                         static_cast<std::size_t>(token.end - token.start));
  }
  // The index of the first token starting at or after `byte_offset` (tokens.size(): none).
  [[nodiscard]] std::size_t TokenAt(int byte_offset) const;
};

// Parses exactly one statement. Throws SqlError: PostgreSQL's message and
// position for a syntax error; a refusal for no statement or several.
[[nodiscard]] ParsedStatement ParseStatement(const std::string& text);

// The scanner's tokens of a text (its lexical errors: SqlError).
[[nodiscard]] std::vector<Token> ScanTokens(const std::string& text);

// The statement node of a text that is exactly one statement, or nullopt
// (a syntax error, none, several): for checking a piece of text.
[[nodiscard]] std::optional<nlohmann::json> TryParseTree(const std::string& text);

}  // namespace shardkit::sql
