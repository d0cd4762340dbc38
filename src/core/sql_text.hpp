// Pieces of SQL text that shardkit writes itself.
#pragma once

#include <string>
#include <string_view>

namespace shardkit::detail {

// "a""b" for a"b, as PostgreSQL's quote_ident always may. No check of the
// name: the public QuoteIdentifier (aggregate_query.hpp) refuses an empty
// one or a NUL byte, with the error its callers expect.
[[nodiscard]] std::string QuoteIdentifier(std::string_view name);

// ASCII letters upper-cased (SQL keywords), everything else as it is.
[[nodiscard]] std::string Upper(std::string_view word);

}  // namespace shardkit::detail
