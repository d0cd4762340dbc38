// The pieces of RedactDsn (shardkit/core/dsn.hpp) that the configuration
// parser uses too: it hides the passwords of its file wherever a message
// quotes them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardkit::detail {

using TextSpans = std::vector<std::pair<std::size_t, std::size_t>>;

// [begin, end) of every value to hide in a key=value connection string, in
// libpq's syntax: spaces may surround '='; a value is single-quoted
// (backslash escapes) or runs to the next space. Text that does not parse
// is hidden from there to the end. A dbname holding '=' or a URI is itself
// a connection string (libpq expands it): hidden whole.
[[nodiscard]] TextSpans SecretSpansOfKeyValue(std::string_view text);

// The same for a URI: the password of the user info, and the value of every
// query parameter that is not a public keyword.
[[nodiscard]] TextSpans SecretSpansOfUri(std::string_view text);

// A message may quote connection strings, passwords included: hides them as
// RedactDsn does, wherever they stand in the text (an unterminated string
// runs to the end of the line, so a password may end at a quote, a space or
// nothing).
[[nodiscard]] std::string RedactSecrets(std::string text);

}  // namespace shardkit::detail
