// Reading a migration file's SQL (migration_statements.hpp).
#include "schema/migration_statements.hpp"

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/schema/migrate.hpp"

namespace shardkit {
namespace {

bool IsIdentStart(char c) noexcept {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool IsIdentChar(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$';
}

std::string Upper(std::string_view word) {
  std::string out(word);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The first position from `i` on that is neither whitespace nor inside a
// comment (-- to the end of the line, /* to the first */).
std::size_t SkipSpaceAndComments(std::string_view statement, std::size_t i) {
  while (i < statement.size()) {
    const char c = statement[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '-' && i + 1 < statement.size() && statement[i + 1] == '-') {
      while (i < statement.size() && statement[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < statement.size() && statement[i + 1] == '*') {
      const auto end = statement.find("*/", i + 2);
      i = end == std::string_view::npos ? statement.size() : end + 2;
    } else {
      break;
    }
  }
  return i;
}

// Anything but whitespace and comments?
bool HasCode(std::string_view statement) {
  return SkipSpaceAndComments(statement, 0) < statement.size();
}

// The position after the /* comment at `i`, nested comments included (to
// the end of `sql` if it is not closed).
std::size_t SkipBlockComment(std::string_view sql, std::size_t i) {
  int depth = 1;
  i += 2;
  while (i < sql.size() && depth > 0) {
    if (sql[i] == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      ++depth;
      i += 2;
    } else if (sql[i] == '*' && i + 1 < sql.size() && sql[i + 1] == '/') {
      --depth;
      i += 2;
    } else {
      ++i;
    }
  }
  return i;
}

// The position after the string or quoted identifier that `quote` opens at
// `i`: a doubled quote is part of it, and so is the character after a
// backslash with `backslash_escapes`.
std::size_t SkipQuoted(std::string_view sql, std::size_t i, char quote, bool backslash_escapes) {
  ++i;
  while (i < sql.size()) {
    if (backslash_escapes && sql[i] == '\\') {
      i += 2;
    } else if (sql[i] == quote) {
      if (i + 1 < sql.size() && sql[i + 1] == quote) {
        i += 2;
      } else {
        ++i;
        break;
      }
    } else {
      ++i;
    }
  }
  return i;
}

// The position after the $tag$ ... $tag$ quote at `i` (to the end of `sql`
// if it is not closed), or after the would-be tag if no '$' ends it.
std::size_t SkipDollarQuote(std::string_view sql, std::size_t i) {
  std::size_t j = i + 1;
  while (j < sql.size() && sql[j] != '$' && (std::isalnum(static_cast<unsigned char>(sql[j])) != 0 || sql[j] == '_')) {
    ++j;
  }
  if (j < sql.size() && sql[j] == '$') {
    const std::string_view tag = sql.substr(i, j - i + 1);
    const auto end = sql.find(tag, j + 1);
    return end == std::string_view::npos ? sql.size() : end + tag.size();
  }
  return j;  // not a dollar quote after all ($1 inside an identifier, say)
}

bool StartsWithWords(const std::string& keywords, std::string_view prefix) {
  return keywords == prefix ||
         (keywords.starts_with(prefix) && keywords.size() > prefix.size() && keywords[prefix.size()] == ' ');
}

}  // namespace

namespace detail {

std::string LeadingKeywords(std::string_view statement, std::size_t max_words) {
  std::string out;
  std::size_t i = 0;
  for (std::size_t words = 0; words < max_words; ++words) {
    i = SkipSpaceAndComments(statement, i);
    // The end, or a quote, a parenthesis...: the keywords are over.
    if (i >= statement.size() || !IsIdentStart(statement[i])) break;
    const std::size_t start = i;
    while (i < statement.size() && IsIdentChar(statement[i])) ++i;
    out += (out.empty() ? "" : " ") + Upper(statement.substr(start, i - start));
  }
  return out;
}

std::optional<std::string> NeedsNoTransaction(const std::string& keywords) {
  static const std::vector<std::string_view> kOutside{"CREATE INDEX CONCURRENTLY",
                                                      "CREATE UNIQUE INDEX CONCURRENTLY",
                                                      "DROP INDEX CONCURRENTLY",
                                                      "VACUUM",
                                                      "CREATE DATABASE",
                                                      "DROP DATABASE",
                                                      "ALTER SYSTEM",
                                                      "CREATE TABLESPACE",
                                                      "DROP TABLESPACE",
                                                      "CREATE SUBSCRIPTION",
                                                      "REINDEX DATABASE",
                                                      "REINDEX SYSTEM"};
  for (const auto prefix : kOutside) {
    if (StartsWithWords(keywords, prefix)) return std::string(prefix);
  }
  if (StartsWithWords(keywords, "REINDEX") && keywords.find("CONCURRENTLY") != std::string::npos) {
    return std::string("REINDEX CONCURRENTLY");
  }
  return std::nullopt;
}

bool EndsTransaction(const std::string& keywords) {
  for (const std::string_view prefix : {"BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "END", "ABORT", "SAVEPOINT",
                                        "RELEASE", "PREPARE TRANSACTION"}) {
    if (StartsWithWords(keywords, prefix)) return true;
  }
  return false;
}

std::string Trim(std::string_view text) {
  std::size_t first = 0, last = text.size();
  while (first < last && std::isspace(static_cast<unsigned char>(text[first])) != 0) ++first;
  while (last > first && std::isspace(static_cast<unsigned char>(text[last - 1])) != 0) --last;
  return std::string(text.substr(first, last - first));
}

}  // namespace detail

std::vector<std::string> SplitStatements(std::string_view sql) {
  std::vector<std::string> statements;
  std::size_t start = 0;
  std::size_t i = 0;
  int atomic_depth = 0;  // inside BEGIN ATOMIC ... END (CASE ... END nests)
  std::string previous_word;
  auto flush = [&](std::size_t end) {
    std::string statement = detail::Trim(sql.substr(start, end - start));
    if (HasCode(statement)) statements.push_back(std::move(statement));
    start = end + 1;
  };
  while (i < sql.size()) {
    const char c = sql[i];
    const char next = i + 1 < sql.size() ? sql[i + 1] : '\0';
    if (c == '-' && next == '-') {
      while (i < sql.size() && sql[i] != '\n') ++i;
    } else if (c == '/' && next == '*') {
      i = SkipBlockComment(sql, i);
    } else if (c == '\'') {
      // E'...' allows backslash escapes; standard strings double the quote.
      const bool escapes = i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && (i < 2 || !IsIdentChar(sql[i - 2]));
      i = SkipQuoted(sql, i, '\'', escapes);
    } else if (c == '"') {
      i = SkipQuoted(sql, i, '"', false);
    } else if (c == '$' && (i == 0 || !IsIdentChar(sql[i - 1])) && (next == '$' || IsIdentStart(next))) {
      i = SkipDollarQuote(sql, i);
    } else if (IsIdentStart(c) && (i == 0 || !IsIdentChar(sql[i - 1]))) {
      const std::size_t word_start = i;
      while (i < sql.size() && IsIdentChar(sql[i])) ++i;
      const std::string word = Upper(sql.substr(word_start, i - word_start));
      if (word == "ATOMIC" && previous_word == "BEGIN") {
        ++atomic_depth;
      } else if (atomic_depth > 0 && word == "CASE") {
        ++atomic_depth;
      } else if (atomic_depth > 0 && word == "END") {
        --atomic_depth;
      }
      previous_word = word;
    } else if (c == ';' && atomic_depth == 0) {
      flush(i);
      ++i;
      previous_word.clear();
    } else {
      ++i;
    }
  }
  if (start < sql.size()) flush(sql.size());
  return statements;
}

}  // namespace shardkit
