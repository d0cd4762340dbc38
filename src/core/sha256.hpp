// SHA-256 (FIPS 180-4): the checksum of a migration file (schema/migrate.hpp).
#pragma once

#include <string>
#include <string_view>

namespace shardkit {

// SHA-256 of `bytes` as 64 lowercase hex digits; public through
// shardkit/schema/migrate.hpp, which declares it too.
[[nodiscard]] std::string Sha256Hex(std::string_view bytes);

}  // namespace shardkit
