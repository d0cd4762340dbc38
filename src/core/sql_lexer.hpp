// The tokens of one select item, key or condition as the aggregate parser
// reads them: PostgreSQL's own scanner (core/pg_scan.hpp) decides where
// strings, quoted identifiers, comments and operators end; this gives each
// token a type and its text (identifiers and keywords lowercased, quoted
// identifiers and strings unquoted), comments dropped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardkit::detail {

struct Token {
  enum class Type { kIdent, kQuotedIdent, kNumber, kString, kParam, kPunct, kOperator };
  Type type;
  std::string text;   // identifiers lowercased; quoted identifiers and strings unquoted
  std::size_t begin;  // byte range in the lexed text
  std::size_t end;
};

// Throws UnmergeableQuery "cannot read <what> "<text>": <why>" for text the
// scanner refuses (PostgreSQL's message: "unterminated quoted string") or a
// character no SQL token starts with.
[[nodiscard]] std::vector<Token> Lex(std::string_view text, std::string_view what = "the SQL text");

[[nodiscard]] inline bool IsPunct(const Token& t, char c) {
  return t.type == Token::Type::kPunct && t.text.size() == 1 && t.text[0] == c;
}
[[nodiscard]] inline bool IsWord(const Token& t, std::string_view word) {
  return t.type == Token::Type::kIdent && t.text == word;
}

// Index of the ')' matching the '(' at `open`; throws UnmergeableQuery
// (naming `what` and `text`) when there is none.
[[nodiscard]] std::size_t MatchingParen(const std::vector<Token>& tokens, std::size_t open, std::string_view text,
                                        std::string_view what = "the SQL text");

}  // namespace shardkit::detail
