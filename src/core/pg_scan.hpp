// PostgreSQL's own scanner (libpg_query's pg_query_scan, PostgreSQL 15's
// scan.l): the tokens of a piece of SQL text with their byte ranges, so that
// nothing in shardkit decides by itself where a string, a quoted
// identifier, a comment or an operator ends.
//
//   const PgScan scan = ScanSql("sum(x) FILTER (WHERE note <> $$a$$)");
//   scan.tokens[0].kind;  // kPgIdent
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardkit::detail {

struct PgToken {
  int start = 0;  // byte offsets into the text: [start, end)
  int end = 0;
  int kind = 0;          // libpg_query's Token number: a character's code for single-character tokens
  bool keyword = false;  // a keyword of any kind (reserved or not)
};

// Token numbers (pg_query.proto, enum Token).
inline constexpr int kPgIdent = 258;
inline constexpr int kPgUnicodeIdent = 259;  // U&"..."
inline constexpr int kPgFloatConst = 260;
inline constexpr int kPgStringConst = 261;
inline constexpr int kPgUnicodeStringConst = 262;  // U&'...'
inline constexpr int kPgBitConst = 263;            // B'...'
inline constexpr int kPgHexConst = 264;            // X'...'
inline constexpr int kPgOperator = 265;
inline constexpr int kPgIntegerConst = 266;
inline constexpr int kPgParam = 267;
inline constexpr int kPgTypecast = 268;  // ::
inline constexpr int kPgDotDot = 269;
inline constexpr int kPgColonEquals = 270;
inline constexpr int kPgEqualsGreater = 271;
inline constexpr int kPgLessEquals = 272;
inline constexpr int kPgGreaterEquals = 273;
inline constexpr int kPgNotEquals = 274;
inline constexpr int kPgSqlComment = 275;  // -- ...
inline constexpr int kPgCComment = 276;    // /* ... */

struct PgScan {
  std::vector<PgToken> tokens;       // comments included, as the scanner reports them
  std::optional<std::string> error;  // PostgreSQL's message ("unterminated quoted string")
  int error_position = 0;            // 1-based character position of the error (0: none)
};

[[nodiscard]] PgScan ScanSql(const std::string& text);

}  // namespace shardkit::detail
