// shardkit/routing/read_token.hpp — read-your-writes: where a client's writes
// are in each shard's write-ahead log, so that a read on a replica sees them.
//
// Every routed write that commits returns the position of its commit in its
// shard's WAL (RoutedOutcome::token). A read given the token (ReadPolicy::
// after, read_policy.hpp) goes to a replica only if that replica has
// replayed that position, else it waits a little or reads the primary.
// Tokens of several writes, on several shards, combine into one, and as text
// travel in a cookie or a header to the client's next request:
//
//   shardkit::RoutedOutcome outcome;
//   cluster->Run(customer, place_order, {}, &outcome);
//   session_token.Combine(outcome.token);
//   response.set("Shardkit-Token", session_token.ToString());      // "v1_1.3A5F2C8"
//   ... the next request ...
//   shardkit::SqlOptions options;
//   options.read.preference = shardkit::ReadPreference::kReplicaPreferred;
//   options.read.after = shardkit::ReadToken::Parse(request["Shardkit-Token"]);
//   cluster->Execute("SELECT ... WHERE customer_id = $1", {id}, options);
//
// A position is a byte position in the shard's primary's WAL (pg_lsn).
// Plain values: copy freely.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

// "16/B374D848" (pg_lsn's text) <-> its byte position. ParseLsn throws
// ReadTokenError for anything else.
[[nodiscard]] std::string FormatLsn(std::uint64_t lsn);
[[nodiscard]] std::uint64_t ParseLsn(std::string_view text);

class ReadToken {
 public:
  struct Entry {
    ShardId shard{};
    std::uint64_t lsn = 0;  // at or after the commit of the writes
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  ReadToken() = default;
  [[nodiscard]] static ReadToken At(ShardId shard, std::uint64_t lsn);

  // Adds a write's position: per shard the later one.
  void Add(ShardId shard, std::uint64_t lsn);
  void Combine(const ReadToken& other);

  [[nodiscard]] const Entry* Find(ShardId shard) const noexcept;
  [[nodiscard]] bool Empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] const std::vector<Entry>& Entries() const noexcept { return entries_; }  // in shard order

  // "v1" then "_<shard>.<lsn in hex>" per shard: characters fit for
  // a cookie value and a header (no space, comma, semicolon or quote).
  [[nodiscard]] std::string ToString() const;
  // The text of ToString(); throws ReadTokenError naming what is wrong.
  [[nodiscard]] static ReadToken Parse(std::string_view text);

  friend bool operator==(const ReadToken&, const ReadToken&) = default;

 private:
  std::vector<Entry> entries_;
};

}  // namespace shardkit
