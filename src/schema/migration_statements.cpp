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

bool IsIdentStart(char c) noexcept { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
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
bool HasCode(std::string_view statement) { return SkipSpaceAndComments(statement, 0) < statement.size(); }

bool StartsWithWords(const std::string& keywords, std::string_view prefix) {
  return keywords == prefix || (keywords.starts_with(prefix) && keywords.size() > prefix.size() &&
                                keywords[prefix.size()] == ' ');
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
  static const std::vector<std::string_view> kOutside{
      "CREATE INDEX CONCURRENTLY", "CREATE UNIQUE INDEX CONCURRENTLY", "DROP INDEX CONCURRENTLY",
      "VACUUM",                    "CREATE DATABASE",                  "DROP DATABASE",
      "ALTER SYSTEM",              "CREATE TABLESPACE",                "DROP TABLESPACE",
      "CREATE SUBSCRIPTION",       "REINDEX DATABASE",                 "REINDEX SYSTEM"};
  for (const auto prefix : kOutside) {
    if (StartsWithWords(keywords, prefix)) return std::string(prefix);
  }
  if (StartsWithWords(keywords, "REINDEX") && keywords.find("CONCURRENTLY") != std::string::npos) {
    return std::string("REINDEX CONCURRENTLY");
  }
  return std::nullopt;
}

bool EndsTransaction(const std::string& keywords) {
  for (const std::string_view prefix : {"BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "END", "ABORT",
                                        "SAVEPOINT", "RELEASE", "PREPARE TRANSACTION"}) {
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
    } else if (c == '\'') {
      // E'...' allows backslash escapes; standard strings double the quote.
      const bool escapes = i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && (i < 2 || !IsIdentChar(sql[i - 2]));
      ++i;
      while (i < sql.size()) {
        if (escapes && sql[i] == '\\') {
          i += 2;
        } else if (sql[i] == '\'') {
          if (i + 1 < sql.size() && sql[i + 1] == '\'') {
            i += 2;
          } else {
            ++i;
            break;
          }
        } else {
          ++i;
        }
      }
    } else if (c == '"') {
      ++i;
      while (i < sql.size()) {
        if (sql[i] == '"') {
          if (i + 1 < sql.size() && sql[i + 1] == '"') {
            i += 2;
          } else {
            ++i;
            break;
          }
        } else {
          ++i;
        }
      }
    } else if (c == '$' && (i == 0 || !IsIdentChar(sql[i - 1])) && (next == '$' || IsIdentStart(next))) {
      std::size_t j = i + 1;
      while (j < sql.size() && sql[j] != '$' && (std::isalnum(static_cast<unsigned char>(sql[j])) != 0 || sql[j] == '_')) ++j;
      if (j < sql.size() && sql[j] == '$') {
        const std::string_view tag = sql.substr(i, j - i + 1);
        const auto end = sql.find(tag, j + 1);
        i = end == std::string_view::npos ? sql.size() : end + tag.size();
      } else {
        i = j;  // not a dollar quote after all ($1 inside an identifier, say)
      }
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
