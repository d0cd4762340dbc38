// shardkit/core/dsn_format.hpp — fmt formats a Dsn redacted.
//
//   fmt::format("cannot reach {}", dsn);   // "cannot reach host=db1 password=***"
//
// Apart from dsn.hpp because shardkit's other headers do not need fmt: a
// program that includes this one builds against fmt itself (the fmt::fmt
// target, which find_package(shardkit) finds). Without it, formatting a Dsn
// does not compile, so the connection string cannot slip out unredacted.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "shardkit/core/dsn.hpp"

template <>
struct fmt::formatter<shardkit::Dsn> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const shardkit::Dsn& dsn, FormatContext& context) const -> decltype(context.out()) {
    return fmt::formatter<std::string_view>::format(dsn.Redacted(), context);
  }
};
