// The aggregate parser behind AggregateQuery: reads one aggregate call (or
// a key expression, or a WHERE condition) and refuses what per-shard
// partials cannot answer exactly, saying why and what to do instead.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/sql_lexer.hpp"

namespace shardkit::detail {

// A parsed, mergeable aggregate call.
struct ParsedAggregate {
  std::string function;  // count, sum, min, max, avg
  bool count_star = false;
  bool distinct = false;
  std::string argument;  // SQL text
  std::string filter;    // " FILTER (WHERE ...)" or empty
  std::vector<Token> argument_tokens;
};

// count(*), count(x), count(DISTINCT <shard key>), sum(x), min(x), max(x),
// avg(x), optionally with FILTER (WHERE ...). Throws UnmergeableQuery for
// anything else, including arguments and filters that are not a function of
// the current row alone (see RequireRowLocal).
[[nodiscard]] ParsedAggregate ParseAggregateCall(std::string_view text, const std::string& shard_key);

// A group key expression: row-local, and no COLLATE other than C/POSIX.
void CheckKeyExpression(std::string_view expression, const std::string& name);
// A WHERE condition: row-local (COLLATE there only decides which rows
// match, on every shard alike, so it is fine).
void CheckCondition(std::string_view condition);

// What a merged expression must be: a function of the current row alone,
// computed the same on every shard as on one server. Refuses, naming
// `subject`, any subquery (it sees only its shard's rows), volatile
// functions (random(), nextval(), ...) and the current time (now(),
// current_date, 'now'::timestamptz: each shard has its own moment); with
// `merged_text`, also COLLATE clauses other than "C", "POSIX" and
// "default" (shardkit merges text bytewise). Looks at tokens[begin, end).
void RequireRowLocal(const std::vector<Token>& tokens, std::size_t begin, std::size_t end, const std::string& subject,
                     bool merged_text);

}  // namespace shardkit::detail
