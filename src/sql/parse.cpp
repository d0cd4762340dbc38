// libpg_query behind RAII: the parse tree (JSON) and the scanner's tokens
// (core/pg_scan.hpp).
#include "sql/parse.hpp"

#include <pg_query.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/pg_scan.hpp"
#include "shardkit/errors.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

struct ParseResultDeleter {
  void operator()(PgQueryParseResult* r) const {
    pg_query_free_parse_result(*r);
    delete r;
  }
};
}  // namespace

std::size_t ParsedStatement::TokenAt(int byte_offset) const {
  const auto it = std::lower_bound(tokens.begin(), tokens.end(), byte_offset,
                                   [](const Token& t, int offset) { return t.start < offset; });
  return static_cast<std::size_t>(it - tokens.begin());
}

std::vector<Token> ScanTokens(const std::string& text) {
  shardkit::detail::PgScan scan = shardkit::detail::ScanSql(text);
  if (scan.error) throw SyntaxError(text, *scan.error, scan.error_position);
  return std::move(scan.tokens);
}

std::optional<nlohmann::json> TryParseTree(const std::string& text) {
  std::unique_ptr<PgQueryParseResult, ParseResultDeleter> result(new PgQueryParseResult(pg_query_parse(text.c_str())));
  if (result->error != nullptr) return std::nullopt;
  nlohmann::json tree = nlohmann::json::parse(result->parse_tree);
  const auto stmts = tree.find("stmts");
  if (stmts == tree.end() || stmts->size() != 1) return std::nullopt;
  return std::move((*stmts)[0]["stmt"]);
}

ParsedStatement ParseStatement(const std::string& text) {
  std::unique_ptr<PgQueryParseResult, ParseResultDeleter> result(new PgQueryParseResult(pg_query_parse(text.c_str())));
  if (result->error != nullptr) throw SyntaxError(text, result->error->message, result->error->cursorpos);
  ParsedStatement parsed;
  parsed.text = text;
  nlohmann::json tree = nlohmann::json::parse(result->parse_tree);
  result.reset();
  const auto stmts = tree.find("stmts");
  if (stmts == tree.end() || stmts->empty()) {
    throw Refusal(text, -1, "an empty statement", "there is nothing to run", "give one SQL statement");
  }
  if (stmts->size() > 1) {
    int location = (*stmts)[1].value("stmt_location", 0);
    while (location < static_cast<int>(text.size()) &&
           (text[static_cast<std::size_t>(location)] == ' ' || text[static_cast<std::size_t>(location)] == '\n' ||
            text[static_cast<std::size_t>(location)] == '\t' || text[static_cast<std::size_t>(location)] == '\r')) {
      ++location;
    }
    throw Refusal(text, location, "a second statement",
                  "one call runs one statement (several would not be one transaction on one shard)",
                  "send each statement in a call of its own");
  }
  parsed.tree = std::move((*stmts)[0]["stmt"]);
  parsed.tokens = ScanTokens(text);
  return parsed;
}

}  // namespace shardkit::sql
