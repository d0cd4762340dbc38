// shardkit/core/sql_params.hpp — a statement's positional parameters.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardkit {

// Positional parameters $1..$n, in PostgreSQL text form; nullopt is NULL.
using SqlParams = std::vector<std::optional<std::string>>;

}  // namespace shardkit
