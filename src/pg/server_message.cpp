#include "pg/server_message.hpp"

#include <string>

#include "shardkit/config.hpp"

namespace shardkit::detail {

std::string FirstLine(std::string text) {
  for (const char* prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.erase(0, std::char_traits<char>::length(prefix));
  }
  if (const auto end = text.find('\n'); end != std::string::npos) text.resize(end);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return RedactDsn(text);
}

}  // namespace shardkit::detail
