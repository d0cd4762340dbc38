// Exception messages for reports (error_text.hpp).
#include "schema/error_text.hpp"

#include <algorithm>

#include "shardkit/config.hpp"

namespace shardkit::detail {
namespace {

std::string OneLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

std::string ErrorText(const std::exception& e) { return OneLine(RedactDsn(e.what())); }

}  // namespace shardkit::detail
