#include "pg/server_message.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "shardkit/core/dsn.hpp"

namespace shardkit::detail {

std::string FirstLine(std::string text) {
  for (const char* prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.erase(0, std::char_traits<char>::length(prefix));
  }
  if (const auto end = text.find('\n'); end != std::string::npos) text.resize(end);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return RedactDsn(text);
}

std::string ErrorText(const std::exception& e) {
  std::string text = RedactDsn(e.what());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace shardkit::detail
