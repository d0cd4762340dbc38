// shardkit/routing/read_policy.hpp — where a read may run: the shard's
// primary, or one of its streaming replicas that is close enough behind.
//
// Routed reads (RoutedTransactions::Read, and Run with read_only), scatters
// (ScatterOptions::read) and plain SQL (SqlOptions::read) take a ReadPolicy.
// The default reads the primary, as before replicas existed. With
// kReplicaPreferred a read goes to a replica that the cluster's replica
// monitor (replica_monitor.hpp) last saw reachable and at most max_lag behind
// its primary, and that has replayed the writes of `after` (read-your-writes,
// read_token.hpp); with none such, it reads the primary. kReplicaOnly never
// reads the primary: with no replica fit, it throws ReplicaUnavailable naming
// each replica and why it was skipped.
//
//   shardkit::ReadPolicy read;
//   read.preference = shardkit::ReadPreference::kReplicaPreferred;
//   read.max_lag = std::chrono::seconds(1);
//   read.after = token;                              // the client's own writes
//   auto rows = cluster->Transactions().Read(customer, "SELECT ...", params, {.read = read});
//
// What a replica read guarantees: the rows of a snapshot the replica had
// replayed (one REPEATABLE READ snapshot for the whole read, as a replica
// cannot hold a bucket for a move the way a primary does), at most max_lag
// older than the primary when the read began, including every write of
// `after`; a bucket the replica has not yet received or no longer holds
// (a move's cutover it has not replayed) is never answered from it: the
// replica refuses, and the read goes to the primary.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "shardkit/routing/read_token.hpp"

namespace shardkit {

enum class ReadPreference {
  kPrimary,           // the primary only (the default)
  kReplicaPreferred,  // a fit replica, else the primary
  kReplicaOnly,       // a fit replica, else ReplicaUnavailable
};
[[nodiscard]] std::string_view ReadPreferenceName(ReadPreference preference) noexcept;  // "primary", ...

struct ReadPolicy {
  ReadPreference preference = ReadPreference::kPrimary;
  // A replica further behind its primary than this is skipped until it
  // catches up: the time since the primary was where the replica is now
  // (an upper bound, measured by the monitor's probes).
  std::chrono::milliseconds max_lag{1000};
  // And, if set, a replica more than this many WAL bytes behind.
  std::optional<std::uint64_t> max_lag_bytes;
  // The writes the read must see (read-your-writes): a replica is used for
  // a shard only if it has replayed the token's position there.
  ReadToken after;
  // A replica that has not replayed `after` yet when the read reaches it:
  // wait up to this long for it (polling its replay position), then read
  // the primary (kReplicaPreferred) or fail (kReplicaOnly). Zero: read the
  // primary at once.
  std::chrono::milliseconds replay_wait{0};

  [[nodiscard]] bool UsesReplicas() const noexcept { return preference != ReadPreference::kPrimary; }
};

// SQLSTATE of a replica's refusal to serve a read whose token it has not
// replayed (sql/036_replica_reads.sql): the read goes elsewhere.
inline constexpr std::string_view kSqlStateNotReplayed = "SK005";

}  // namespace shardkit
