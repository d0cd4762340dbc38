// Error text from PostgreSQL and libpq, shaped for shardkit's own messages.
#pragma once

#include <string>

namespace shardkit::detail {

// Server messages start with "ERROR:  " and may quote a DSN: the first line, unprefixed, redacted (RedactDsn).
[[nodiscard]] std::string FirstLine(std::string text);

}  // namespace shardkit::detail
