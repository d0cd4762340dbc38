#include "sql/sql_error_text.hpp"

#include <fmt/format.h>
#include <algorithm>

namespace shardkit::sql {
namespace {

bool IsContinuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

struct Place {
  int line = 0;
  int column = 0;
  std::string_view line_text;
};

// Line and column (1-based, in characters) of a 1-based character position.
Place PlaceOf(std::string_view text, int char_position) {
  Place place{1, 1, {}};
  std::size_t line_start = 0;
  std::size_t at = 0;
  int chars = 1;
  while (at < text.size() && chars < char_position) {
    if (text[at] == '\n') {
      ++place.line;
      place.column = 1;
      line_start = at + 1;
    } else {
      ++place.column;
    }
    ++at;
    while (at < text.size() && IsContinuation(text[at])) ++at;
    ++chars;
  }
  std::size_t line_end = text.find('\n', line_start);
  if (line_end == std::string_view::npos) line_end = text.size();
  place.line_text = text.substr(line_start, line_end - line_start);
  if (!place.line_text.empty() && place.line_text.back() == '\r') place.line_text.remove_suffix(1);
  return place;
}

// "LINE 2: <text>" and the caret under the column, as libpq formats them.
std::string CaretLines(const Place& place) {
  const std::string prefix = fmt::format("LINE {}: ", place.line);
  std::string line(place.line_text);
  std::replace(line.begin(), line.end(), '\t', ' ');
  return fmt::format("\n{}{}\n{}^", prefix, line,
                     std::string(prefix.size() + static_cast<std::size_t>(place.column - 1), ' '));
}

}  // namespace

int CharPosition(std::string_view text, int byte_offset) {
  if (byte_offset < 0) return 0;
  const auto end = std::min(text.size(), static_cast<std::size_t>(byte_offset));
  int chars = 0;
  for (std::size_t i = 0; i < end; ++i) {
    if (!IsContinuation(text[i])) ++chars;
  }
  return chars + 1;
}

int ByteOffset(std::string_view text, int char_position) {
  int chars = 1;
  std::size_t at = 0;
  while (at < text.size() && chars < char_position) {
    ++at;
    while (at < text.size() && IsContinuation(text[at])) ++at;
    ++chars;
  }
  return static_cast<int>(at);
}

SqlError SyntaxError(std::string_view text, const std::string& message, int char_position) {
  SqlError::Details details;
  details.kind = SqlError::Kind::kSyntax;
  details.message = message;
  std::string what = "ERROR:  " + message;
  if (char_position > 0) {
    const Place place = PlaceOf(text, char_position);
    details.position = char_position;
    details.line = place.line;
    details.column = place.column;
    what += CaretLines(place);
  }
  return SqlError(what, std::move(details));
}

SqlError ForKeyColumn(std::string_view text, const SqlError& refusal, const std::string& key_column) {
  if (refusal.kind() != SqlError::Kind::kRefused || key_column == "customer_id") return refusal;
  const auto rewrite = [&](std::string s) {
    for (std::size_t at = s.find("customer_id"); at != std::string::npos; at = s.find("customer_id", at)) {
      s.replace(at, std::string_view("customer_id").size(), key_column);
      at += key_column.size();
    }
    return s;
  };
  const int location = refusal.position() > 0 ? ByteOffset(text, refusal.position()) : -1;
  return Refusal(text, location, rewrite(refusal.construct()), rewrite(refusal.reason()), rewrite(refusal.advice()));
}

SqlError Refusal(std::string_view text, int location, const std::string& construct, const std::string& reason,
                 const std::string& advice) {
  SqlError::Details details;
  details.kind = SqlError::Kind::kRefused;
  details.construct = construct;
  details.reason = reason;
  details.advice = advice;
  const int position = CharPosition(text, location);
  std::string caret;
  std::string where;
  if (position > 0) {
    const Place place = PlaceOf(text, position);
    details.position = position;
    details.line = place.line;
    details.column = place.column;
    where = fmt::format(" at line {}, column {}", place.line, place.column);
    caret = CaretLines(place);
  }
  details.message = fmt::format("{}{}: {}{}{}", construct, where, reason, advice.empty() ? "" : "; ", advice);
  const std::string what = "shardkit: " + details.message + caret;
  return SqlError(what, std::move(details));
}

}  // namespace shardkit::sql
