#include "core/sql_text.hpp"

#include <string>
#include <string_view>

namespace shardkit::detail {

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace shardkit::detail
