// Error text from PostgreSQL and libpq, shaped for shardkit's own messages.
#pragma once

#include <exception>
#include <string>

namespace shardkit::detail {

// Server messages start with "ERROR:  " and may quote a DSN: the first line, unprefixed, redacted (RedactDsn).
[[nodiscard]] std::string FirstLine(std::string text);
// The whole message on one line, redacted: a report's line per server keeps the server's DETAIL and HINT.
[[nodiscard]] std::string ErrorText(const std::exception& e);

}  // namespace shardkit::detail
