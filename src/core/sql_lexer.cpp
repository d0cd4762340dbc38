// The SQL lexer behind the aggregate parser (sql_lexer.hpp).
#include "core/sql_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

bool IsDigit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool IsIdentChar(char c) {
  return IsIdentStart(c) || IsDigit(c) || c == '$';
}
bool IsOperatorChar(char c) {
  return std::string_view("+-*/<>=~!@#%^&|`?").find(c) != std::string_view::npos;
}

[[noreturn]] void Unreadable(std::string_view what, std::string_view text, const std::string& why) {
  throw UnmergeableQuery("cannot read " + std::string(what) + " \"" + std::string(text) + "\": " + why);
}

// The length of the operator starting at s[i], by PostgreSQL's rules: "--"
// and "/*" start comments even inside an operator, and a multi-character
// operator cannot end in + or - unless it contains one of ~ ! @ # % ^ & | ` ?
// (so "*-1" is "*" then "-").
std::size_t OperatorLength(std::string_view s, std::size_t i) {
  std::size_t j = i;
  while (j < s.size() && (IsOperatorChar(s[j]) || s[j] == ':')) {
    if (j > i && ((s[j] == '-' && s[j - 1] == '-') || (s[j] == '*' && s[j - 1] == '/'))) {
      --j;  // the comment starts at j - 1
      break;
    }
    ++j;
  }
  std::size_t len = j - i;
  if (len > 1) {
    const std::string_view op = s.substr(i, len);
    if (op.find_first_of("~!@#%^&|`?") == std::string_view::npos) {
      while (len > 1 && (op[len - 1] == '+' || op[len - 1] == '-')) --len;
    }
  }
  return std::max<std::size_t>(len, 1);
}

}  // namespace

std::vector<Token> Lex(std::string_view s, std::string_view what) {
  std::vector<Token> out;
  std::size_t i = 0;
  const std::size_t n = s.size();
  // A quoted string or identifier from the quote at `start`: its end and body.
  auto quoted = [&](std::size_t start, char quote, bool backslash_escapes) {
    std::size_t j = start + 1;
    std::string body;
    while (true) {
      if (j >= n) Unreadable(what, s, "unterminated quote");
      if (backslash_escapes && s[j] == '\\' && j + 1 < n) {
        body.push_back(s[j + 1]);
        j += 2;
        continue;
      }
      if (s[j] == quote) {
        if (j + 1 < n && s[j + 1] == quote) {
          body.push_back(quote);
          j += 2;
          continue;
        }
        return std::make_pair(j + 1, body);
      }
      body.push_back(s[j]);
      ++j;
    }
  };
  while (i < n) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '-' && i + 1 < n && s[i + 1] == '-') {
      while (i < n && s[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      // Comments nest in PostgreSQL (unlike the SQL standard's C heritage).
      int depth = 0;
      do {
        if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
          ++depth;
          i += 2;
        } else if (i + 1 < n && s[i] == '*' && s[i + 1] == '/') {
          --depth;
          i += 2;
        } else if (i >= n) {
          Unreadable(what, s, "unterminated comment");
        } else {
          ++i;
        }
      } while (depth > 0);
    } else if (c == '\'') {
      auto [end, body] = quoted(i, '\'', false);
      out.push_back({Token::Type::kString, body, i, end});
      i = end;
    } else if (c == '"') {
      auto [end, body] = quoted(i, '"', false);
      out.push_back({Token::Type::kQuotedIdent, body, i, end});
      i = end;
    } else if (c == '$' && i + 1 < n && IsDigit(s[i + 1])) {
      std::size_t j = i + 1;
      while (j < n && IsDigit(s[j])) ++j;
      out.push_back({Token::Type::kParam, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else if (c == '$') {
      // Dollar quoting: $tag$ ... $tag$, the body taken literally.
      std::size_t j = i + 1;
      while (j < n && s[j] != '$' && IsIdentChar(s[j])) ++j;
      if (j >= n || s[j] != '$') Unreadable(what, s, "stray '$'");
      const std::string_view tag = s.substr(i, j - i + 1);
      const std::size_t close = s.find(tag, j + 1);
      if (close == std::string_view::npos) Unreadable(what, s, "unterminated dollar quote");
      out.push_back({Token::Type::kString, std::string(s.substr(j + 1, close - j - 1)), i, close + tag.size()});
      i = close + tag.size();
    } else if (IsIdentStart(c)) {
      std::size_t j = i;
      while (j < n && IsIdentChar(s[j])) ++j;
      std::string lower(s.substr(i, j - i));
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      // E'..' (backslash escapes), B'..', X'..', N'..' string constants.
      if (j < n && s[j] == '\'' && (lower == "e" || lower == "b" || lower == "x" || lower == "n")) {
        auto [end, body] = quoted(j, '\'', lower == "e");
        out.push_back({Token::Type::kString, body, i, end});
        i = end;
        continue;
      }
      out.push_back({Token::Type::kIdent, lower, i, j});
      i = j;
    } else if (IsDigit(c) || (c == '.' && i + 1 < n && IsDigit(s[i + 1]))) {
      std::size_t j = i;
      while (j < n && (IsDigit(s[j]) || s[j] == '.')) ++j;
      if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < n && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < n && IsDigit(s[k])) {
          j = k;
          while (j < n && IsDigit(s[j])) ++j;
        }
      }
      out.push_back({Token::Type::kNumber, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else if (c == '(' || c == ')' || c == ',' || c == '[' || c == ']' || c == ';' || c == '.') {
      out.push_back({Token::Type::kPunct, std::string(1, c), i, i + 1});
      ++i;
    } else if (c == ':' && i + 1 < n && s[i + 1] == ':') {
      out.push_back({Token::Type::kOperator, "::", i, i + 2});
      i += 2;
    } else if (IsOperatorChar(c) || c == ':') {
      const std::size_t len = OperatorLength(s, i);
      out.push_back({Token::Type::kOperator, std::string(s.substr(i, len)), i, i + len});
      i += len;
    } else {
      Unreadable(what, s, std::string("unexpected character '") + c + "'");
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
