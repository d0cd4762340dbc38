// An exception's message as the migrator and verify report it (in a
// report, a history row, a finding).
#pragma once

#include <exception>
#include <string>

namespace shardkit::detail {

// One line (trailing newlines and spaces dropped, the other newlines made
// spaces), any password in a connection string redacted.
[[nodiscard]] std::string ErrorText(const std::exception& e);

}  // namespace shardkit::detail
