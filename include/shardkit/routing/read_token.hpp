// shardkit/routing/read_token.hpp — read-your-writes: where a client's writes
// are in each shard's write-ahead log, so that a read on a replica sees them.
//
// Every routed write that commits returns what a replica must have replayed
// to show it (RoutedOutcome::token). A routed write reads it in the
// statement that checks its bucket (nothing more on its round trip): its
// transaction id, the oldest transaction still running then (its horizon)
// and the WAL position; a cross-shard write, the position after its commit.
// A read given the token (ReadPolicy::after, read_policy.hpp) goes to a
// replica only if that replica has replayed the position and shows the
// transaction finished (sql/046), else it waits a little or reads the
// primary.
// Tokens of several writes, on several shards, combine into one, and as text
// travel in a cookie or a header to the client's next request:
//
//   shardkit::RoutedOutcome outcome;
//   cluster->Run(customer, place_order, {}, &outcome);
//   session_token.Combine(outcome.token);
//   response.set("Shardkit-Token", session_token.ToString());  // "v2_1.3A5F2C8.9B1.9AF"
//   ... the next request ...
//   shardkit::SqlOptions options;
//   options.read.preference = shardkit::ReadPreference::kReplicaPreferred;
//   options.read.after = shardkit::ReadToken::Parse(request["Shardkit-Token"]);
//   cluster->Execute("SELECT ... WHERE customer_id = $1", {id}, options);
//
// A position is a byte position in the shard's primary's WAL (pg_lsn), a
// transaction id a full one (xid8). Plain values: copy freely.
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
    // With no transaction: at or after the commit of the writes. With one:
    // a position the replica must have replayed too (the latest write's,
    // read before its commit).
    std::uint64_t lsn = 0;
    // The latest of the writes' transactions (pg_current_xact_id()), 0 for
    // none. A replica shows it finished once its commit is replayed, or
    // once every transaction up to it is: the first says that the earlier
    // writes are replayed too only if each finished before it began, which
    // `horizon` records.
    std::uint64_t xid = 0;
    // The oldest transaction running when `xid` began, if every other write
    // of the token finished before that (they are older than this); 0 when
    // one was still running (concurrent writes combined): then the replica
    // must show every transaction up to `xid` finished.
    std::uint64_t horizon = 0;
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  ReadToken() = default;
  // A write that commits at or before `lsn` (a cross-shard write's).
  [[nodiscard]] static ReadToken At(ShardId shard, std::uint64_t lsn);
  // A routed write: its transaction, the horizon and position read in it.
  [[nodiscard]] static ReadToken Of(ShardId shard, std::uint64_t lsn, std::uint64_t xid, std::uint64_t horizon);

  // Adds a write (an entry of a token): per shard the later position and
  // transaction.
  void Add(const Entry& write);
  void Combine(const ReadToken& other);

  [[nodiscard]] const Entry* Find(ShardId shard) const noexcept;
  [[nodiscard]] bool Empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] const std::vector<Entry>& Entries() const noexcept { return entries_; }  // in shard order

  // "v2" then "_<shard>.<lsn>[.<xid>.<horizon>]" per shard, numbers in hex
  // ("v1" and positions only when no entry has a transaction, as earlier
  // versions wrote it): characters fit for a cookie value and a header (no
  // space, comma, semicolon or quote).
  [[nodiscard]] std::string ToString() const;
  // The text of ToString(); throws ReadTokenError naming what is wrong.
  [[nodiscard]] static ReadToken Parse(std::string_view text);

  friend bool operator==(const ReadToken&, const ReadToken&) = default;

 private:
  std::vector<Entry> entries_;
};

}  // namespace shardkit
