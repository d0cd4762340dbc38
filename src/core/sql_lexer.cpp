// The SQL lexer behind the aggregate parser (sql_lexer.hpp), on PostgreSQL's own scanner.
#include "core/sql_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "core/pg_scan.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

[[noreturn]] void Unreadable(std::string_view what, std::string_view text, const std::string& why) {
  throw UnmergeableQuery("cannot read " + std::string(what) + " \"" + std::string(text) + "\": " + why);
}

std::string Lower(std::string_view word) {
  std::string out(word);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

// The text between `quote`s, each doubled quote one; with backslash
// escapes (E'...'), a backslash takes the next character as it is.
std::string Unquote(std::string_view quoted, char quote, bool backslash_escapes) {
  std::string body;
  const std::size_t open = quoted.find(quote);
  const std::size_t close = quoted.rfind(quote);
  if (open == std::string_view::npos || close <= open) return std::string(quoted);
  for (std::size_t i = open + 1; i < close; ++i) {
    if (backslash_escapes && quoted[i] == '\\' && i + 1 < close) {
      body.push_back(quoted[++i]);
    } else {
      body.push_back(quoted[i]);
      if (quoted[i] == quote && i + 1 < close && quoted[i + 1] == quote) ++i;
    }
  }
  return body;
}

// A string constant's value: '...', E'...', B'...', X'...', U&'...', $tag$...$tag$.
std::string StringBody(std::string_view raw) {
  if (!raw.empty() && raw.front() == '$') {
    const std::size_t tag_end = raw.find('$', 1);
    const std::size_t tag_size = tag_end + 1;
    if (tag_end == std::string_view::npos || raw.size() < 2 * tag_size) return std::string(raw);
    return std::string(raw.substr(tag_size, raw.size() - 2 * tag_size));
  }
  const bool escapes = !raw.empty() && (raw.front() == 'e' || raw.front() == 'E');
  return Unquote(raw, '\'', escapes);
}

}  // namespace

std::vector<Token> Lex(std::string_view s, std::string_view what) {
  const PgScan scan = ScanSql(std::string(s));
  if (scan.error) Unreadable(what, s, *scan.error);
  std::vector<Token> out;
  for (const PgToken& t : scan.tokens) {
    const auto begin = static_cast<std::size_t>(t.start);
    const auto end = static_cast<std::size_t>(t.end);
    const std::string_view raw = s.substr(begin, end - begin);
    const auto add = [&](Token::Type type, std::string text) { out.push_back({type, std::move(text), begin, end}); };
    switch (t.kind) {
      case kPgSqlComment:
      case kPgCComment:
        continue;
      case kPgIdent:
        if (!raw.empty() && raw.front() == '"') {
          add(Token::Type::kQuotedIdent, Unquote(raw, '"', false));
        } else {
          add(Token::Type::kIdent, Lower(raw));
        }
        continue;
      case kPgUnicodeIdent:
        add(Token::Type::kQuotedIdent, Unquote(raw, '"', false));
        continue;
      case kPgIntegerConst:
      case kPgFloatConst:
        add(Token::Type::kNumber, std::string(raw));
        continue;
      case kPgStringConst:
      case kPgUnicodeStringConst:
      case kPgBitConst:
      case kPgHexConst:
        add(Token::Type::kString, StringBody(raw));
        continue;
      case kPgParam:
        add(Token::Type::kParam, std::string(raw));
        continue;
      case kPgOperator:
      case kPgTypecast:
      case kPgDotDot:
      case kPgColonEquals:
      case kPgEqualsGreater:
      case kPgLessEquals:
      case kPgGreaterEquals:
      case kPgNotEquals:
        add(Token::Type::kOperator, std::string(raw));
        continue;
      default:
        break;
    }
    if (t.keyword) {
      add(Token::Type::kIdent, Lower(raw));
    } else if (raw.size() == 1 && std::string_view("(),[];.").find(raw.front()) != std::string_view::npos) {
      add(Token::Type::kPunct, std::string(raw));
    } else if (raw.size() == 1 && std::string_view("+-*/<>=%^:").find(raw.front()) != std::string_view::npos) {
      add(Token::Type::kOperator, std::string(raw));
    } else {
      // What the scanner passes on for the grammar to refuse: '{', a lone '$', '\\'...
      Unreadable(what, s, "unexpected character '" + std::string(raw) + "'");
    }
  }
  return out;
}

std::size_t MatchingParen(const std::vector<Token>& tokens, std::size_t open, std::string_view text,
                          std::string_view what) {
  int depth = 0;
  for (std::size_t i = open; i < tokens.size(); ++i) {
    if (IsPunct(tokens[i], '(')) ++depth;
    if (IsPunct(tokens[i], ')')) {
      if (--depth == 0) return i;
    }
  }
  Unreadable(what, text, "unbalanced parentheses");
}

}  // namespace shardkit::detail
