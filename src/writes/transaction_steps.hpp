// The pieces a routed transaction (routed_call.cpp) and a cross-shard one
// (cross_shard.cpp) both send or wait: BEGIN at an isolation level, the
// WAL position read after a commit (the read token), the back-off between
// attempts.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "shardkit/errors.hpp"
#include "shardkit/routing/read_token.hpp"
#include "shardkit/writes/routed.hpp"

namespace shardkit::detail {

// A cross-shard write's WAL insert position right after its COMMIT: at or
// after the commit record, its read token.
inline const std::string kWalPosition = "SELECT pg_current_wal_insert_lsn()::text";

// A routed write's read token as its bucket check returns it
// (BucketSet::FenceSql(true), the last value of its SELECT, sql/046): "<its
// transaction> <the oldest one running then> <the WAL position>". The
// check assigns the transaction id if the write has none yet, so a write
// that changes no row still commits a record.
inline ReadToken TokenOfCheck(ShardId shard, std::string_view text) {
  const auto first = text.find(' ');
  const auto second = first == std::string_view::npos ? first : text.find(' ', first + 1);
  if (second == std::string_view::npos) {
    throw ReadTokenError(std::string(text), fmt::format("the bucket check returned \"{}\", not a read token "
                                                        "(\"<xid> <horizon> <position>\", sql/046)",
                                                        text));
  }
  return ReadToken::Of(shard, ParseLsn(text.substr(second + 1)), std::stoull(std::string(text.substr(0, first))),
                       std::stoull(std::string(text.substr(first + 1, second - first - 1))));
}

inline const char* BeginSql(Isolation isolation) {
  switch (isolation) {
    case Isolation::kReadCommitted:
      return "BEGIN ISOLATION LEVEL READ COMMITTED";
    case Isolation::kRepeatableRead:
      return "BEGIN ISOLATION LEVEL REPEATABLE READ";
    case Isolation::kSerializable:
      return "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  return "BEGIN";
}

// Starts at 1 ms, doubles each round, capped, with jitter.
inline std::chrono::milliseconds Backoff(int round, std::chrono::milliseconds cap) {
  thread_local std::minstd_rand random{std::random_device{}()};
  const auto base = std::min<long long>(cap.count(), 1LL << std::min(round, 10));
  std::uniform_int_distribution<long long> jitter(base / 2, std::max<long long>(base, 1));
  return std::chrono::milliseconds(jitter(random));
}

}  // namespace shardkit::detail
