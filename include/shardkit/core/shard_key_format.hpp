// shardkit/core/shard_key_format.hpp — fmt formats a ShardKey as its value.
//
//   fmt::format("tenant {}", shardkit::ShardKey::Int8(9'000'000'000));   // "tenant 9000000000"
//
// Apart from shard_key.hpp because shardkit's other headers do not need fmt
// (see dsn_format.hpp).
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "shardkit/core/shard_key.hpp"

template <>
struct fmt::formatter<shardkit::ShardKey> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const shardkit::ShardKey& key, FormatContext& context) const -> decltype(context.out()) {
    return fmt::formatter<std::string_view>::format(key.ToString(), context);
  }
};
