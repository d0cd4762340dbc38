// SqlError for a place in a statement's text: the 1-based character
// position, line and column of a byte offset, and what() as psql prints an
// error with its LINE and caret lines.
#pragma once

#include <string>
#include <string_view>

#include "shardkit/errors.hpp"

namespace shardkit::sql {

// A syntax error: PostgreSQL's message at a 1-based character position (0: none).
[[nodiscard]] SqlError SyntaxError(std::string_view text, const std::string& message, int char_position);

// A refusal of `construct` at byte offset `location` (negative: none):
//   shardkit: <construct> at line L, column C: <reason>; <advice>
[[nodiscard]] SqlError Refusal(std::string_view text, int location, const std::string& construct,
                               const std::string& reason, const std::string& advice);

// A refusal written for the Bookstore's key, customer_id, said of the
// cluster's key column instead (in its construct, reason and advice; the
// statement's text is left as it is). A syntax error is returned as it is.
[[nodiscard]] SqlError ForKeyColumn(std::string_view text, const SqlError& refusal, const std::string& key_column);

// 1-based character position of a byte offset (0 for a negative offset).
[[nodiscard]] int CharPosition(std::string_view text, int byte_offset);
// The byte offset of a 1-based character position (its inverse).
[[nodiscard]] int ByteOffset(std::string_view text, int char_position);

}  // namespace shardkit::sql
