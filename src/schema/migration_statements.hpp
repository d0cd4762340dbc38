// Reading a migration file's SQL: its statements (SplitStatements, declared
// in shardkit/schema/migrate.hpp) and, from their first words, which ones
// the migrator's transaction cannot hold.
//
// The statements are split by libpg_query's parser (PostgreSQL 15's
// grammar), so a file with a syntax error is refused, with its line and
// column, before any statement runs; the keywords are read from the
// statement's text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shardkit::detail {

// The statement without leading whitespace and comments, its first
// `max_words` words upper-cased and separated by single spaces: enough to
// recognise "CREATE INDEX CONCURRENTLY".
[[nodiscard]] std::string LeadingKeywords(std::string_view statement, std::size_t max_words);

// Of a statement's LeadingKeywords: what PostgreSQL refuses inside a
// transaction block ("CREATE INDEX CONCURRENTLY", "VACUUM", ...), if it is
// one of those.
[[nodiscard]] std::optional<std::string> NeedsNoTransaction(const std::string& keywords);

// Of a statement's LeadingKeywords: does it begin, end or split the
// migrator's transaction (BEGIN, COMMIT, SAVEPOINT, ...)?
[[nodiscard]] bool EndsTransaction(const std::string& keywords);

// `text` without leading and trailing whitespace.
[[nodiscard]] std::string Trim(std::string_view text);

}  // namespace shardkit::detail
