// Reading a migration file's SQL: its statements (SplitStatements, declared
// in shardkit/schema/migrate.hpp) and, from their first words, which ones
// the migrator's transaction cannot hold.
//
// This is a scanner of its own rather than core/sql_lexer.hpp, the
// aggregate parser's lexer: that one throws UnmergeableQuery for text it
// cannot tokenise (an unterminated quote or comment, a stray '$', '{' or
// '\'), where a migration's text goes to the server as it is, and the
// server reports what is wrong with it when it runs.
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
