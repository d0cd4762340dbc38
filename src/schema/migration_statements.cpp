// Reading a migration file's SQL (migration_statements.hpp).
#include "schema/migration_statements.hpp"

#include <fmt/format.h>
#include <pg_query.h>

#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sql_text.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit {
namespace {

bool IsIdentStart(char c) noexcept {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool IsIdentChar(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$';
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

struct SplitResultDeleter {
  void operator()(PgQuerySplitResult* r) const {
    pg_query_free_split_result(*r);
    delete r;
  }
};

// Line and column (1-based) of PostgreSQL's cursor position: characters
// from 1, UTF-8 continuation bytes not counted.
std::pair<int, int> LineAndColumn(std::string_view text, int char_position) {
  int line = 1, column = 1, chars = 1;
  for (const char c : text) {
    if (chars >= char_position) break;
    if ((static_cast<unsigned char>(c) & 0xC0) == 0x80) continue;
    ++chars;
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
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
    out += (out.empty() ? "" : " ") + detail::Upper(statement.substr(start, i - start));
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

std::vector<std::string> SplitStatements(std::string_view sql, std::string_view source) {
  const std::string text(sql);
  const std::unique_ptr<PgQuerySplitResult, SplitResultDeleter> result(
      new PgQuerySplitResult(pg_query_split_with_parser(text.c_str())));
  if (result->error != nullptr) {
    // The whole file is refused before any of it runs.
    const auto [line, column] = LineAndColumn(text, result->error->cursorpos);
    throw MigrationError(fmt::format("{} line {}, column {}: {} (PostgreSQL 15's grammar); nothing was applied", source,
                                     line, column, result->error->message));
  }
  std::vector<std::string> statements;
  for (int i = 0; i < result->n_stmts; ++i) {
    const PgQuerySplitStmt& stmt = *result->stmts[i];
    const auto begin = static_cast<std::size_t>(stmt.stmt_location);
    // A length of 0: to the end of the text.
    const std::size_t length = stmt.stmt_len > 0 ? static_cast<std::size_t>(stmt.stmt_len) : std::string::npos;
    std::string statement = detail::Trim(sql.substr(begin, length));
    if (HasCode(statement)) statements.push_back(std::move(statement));
  }
  return statements;
}

}  // namespace shardkit
