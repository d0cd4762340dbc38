// shardkit/routing/replica_monitor.hpp — how far behind its primary each
// replica is, measured in the background, and which replica a read may use.
//
// One thread per server of a shard that has replicas probes it every
// probe_interval over one connection of its own: the primary's WAL insert
// position (pg_current_wal_insert_lsn(): every acknowledged commit, also an
// asynchronous one not yet written, lies before it), each replica's replay
// position (pg_last_wal_replay_lsn()), whether it is in recovery and whether
// its replay is paused. A replica's lag is then
//   bytes:   the primary's position minus the replica's replay position;
//   time:    how long ago the primary was no further than where the replica
//            is now, from the history of the primary's positions: an upper
//            bound of how old the replica's data may be (a replica that has
//            caught up shows at most one probe interval); for a replica
//            behind every position kept, a lower bound instead: how long
//            before its probe the primary was already past it.
// Choose() picks, for one read of one shard, a replica that is reachable,
// in recovery, streaming from the shard's current primary (follows_primary
// below), heard from lately, within the read's max_lag, and (for a
// read token) known or checked to have replayed the token's position; a
// replica that fails a read is skipped until its next successful probe.
//
//   shardkit::ReplicaMonitor monitor{*resolver, config};
//   for (const auto& r : monitor.Status()) log(r.name, r.lag_bytes, r.lag);
//   auto choice = monitor.Choose(shard, policy);   // choice.replica: nullopt -> the primary
//
// Thread-safe; the destructor stops the probes (promptly: a probe never
// waits on a server longer than its timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/read_policy.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

struct ClusterConfig;

struct ReplicaMonitorOptions {
  std::chrono::milliseconds probe_interval{250};
  // Opening a probe connection, and one probe's answer, at most.
  std::chrono::milliseconds probe_timeout{2000};
  // A replica whose last successful probe is older than this is treated as
  // unreachable (its server stopped answering).
  std::chrono::milliseconds silence_limit{2000};
  // How much of the primary's position history is kept: a replica further
  // behind than this has an unknown (hence too large) lag.
  std::chrono::seconds history{120};
};

// One replica as the monitor saw it last.
struct ReplicaStatus {
  ShardId shard{};
  std::string name;
  std::string dsn;         // redacted
  bool reachable = false;  // its last probe answered (and no read failed on it since)
  bool in_recovery = false;
  bool replay_paused = false;
  std::optional<std::uint64_t> replay_lsn;
  std::optional<std::uint64_t> receive_lsn;
  std::optional<std::uint64_t> primary_lsn;  // the primary's insert position at its last probe
  std::optional<std::uint64_t> lag_bytes;
  std::optional<std::chrono::milliseconds> lag;  // the upper bound above; nullopt: not known yet
  // Without `lag`, once the primary's position is known: at its last probe
  // the replica had not replayed a position the primary had reached this
  // long before, so its lag is at least this.
  std::optional<std::chrono::milliseconds> lag_at_least;
  // Now minus the replay timestamp of the last transaction it replayed, on
  // its own clock (PostgreSQL's usual figure; grows while the primary is idle).
  std::optional<std::chrono::milliseconds> replay_age;
  // Whether it streams from the shard's current primary, as its probe and
  // the primary's show: a WAL receiver runs there and streams, through a
  // slot active on the primary, on the primary's timeline (what the probe's
  // role may see: the receiver's status and timeline need a superuser or
  // pg_read_all_stats). Otherwise `not_following` says why, and no read is
  // sent there whatever its lag says: a replica of a deposed primary, or of
  // nobody, may report any position.
  bool follows_primary = false;
  std::string not_following;
  std::string receiver_status;  // its WAL receiver's status: streaming, ...; "none"; "running (...)" when hidden
  std::optional<std::uint32_t> timeline;  // the timeline it receives (hidden without the privilege)
  std::optional<std::uint32_t> primary_timeline;
  std::string slot;                                                  // the slot it streams through
  std::optional<std::chrono::system_clock::time_point> measured_at;  // its last successful probe
  std::string error;                                                 // why it is unreachable
  std::uint64_t probes = 0;
  std::uint64_t probe_failures = 0;
  std::chrono::microseconds probe_time{0};  // the last probe's round trip
};

// Where one read of a shard goes.
struct ReplicaChoice {
  std::optional<ShardServer> replica;  // nullopt: the primary
  // The read must check that the replica shows these writes (the read
  // token's for the shard, not yet known to be replayed there) in its
  // snapshot: replayed the position before it and finished the transaction.
  std::optional<ReadToken::Entry> verify;
  // Replicas passed over and why (for messages and statistics).
  std::vector<ReplicaUnavailable::Skipped> skipped;
};

class ReplicaMonitor {
 public:
  // Starts a probe thread for every server of every shard that has
  // replicas (none without replicas). The resolver must outlive it.
  ReplicaMonitor(BucketShardResolver& resolver, const ClusterConfig& config, ReplicaMonitorOptions options = {});
  ~ReplicaMonitor();
  ReplicaMonitor(const ReplicaMonitor&) = delete;
  ReplicaMonitor& operator=(const ReplicaMonitor&) = delete;

  // Where a read of `shard` goes under `policy`, passing over the replicas
  // in `exclude` (those this read tried and left, with why). Throws
  // ReplicaUnavailable (every replica and why) for kReplicaOnly with none fit.
  [[nodiscard]] ReplicaChoice Choose(ShardId shard, const ReadPolicy& policy,
                                     const std::vector<ReplicaUnavailable::Skipped>& exclude = {}) const;
  // A read on the replica failed for a reason of the replica's (connection
  // lost, a conflict with its recovery): skip it until its next good probe.
  void ReportFailure(ShardId shard, const std::string& replica, const std::string& why);
  // A read saw the replica at least at `lsn` (a lower bound, kept).
  void ReportReplayed(ShardId shard, const std::string& replica, std::uint64_t lsn);
  // Polls the replica on a connection of its pool until it shows the
  // writes of `wanted` (its replay position and transaction); false at the
  // deadline (or if the replica fails).
  bool WaitForReplay(ShardId shard, const ShardServer& replica, const ReadToken::Entry& wanted,
                     std::chrono::steady_clock::time_point deadline);

  // Every configured replica's state.
  [[nodiscard]] std::vector<ReplicaStatus> Status() const;
  // Probes every server once now, in parallel, and returns when all have
  // answered or timed out (tools, tests).
  void ProbeNow();
  // Probes every server now and again every 10 ms until each reachable
  // replica's lag is known, for `bound` at most (the last round starts
  // then): a one-shot tool has no history of the primary's positions, and a
  // replica behind the first one measured has no lag bound until it replays
  // past it. One still behind at the end has lag_at_least >= bound (if its
  // primary answered the first round).
  void ProbeUntilLagKnown(std::chrono::milliseconds bound);
  [[nodiscard]] const ReplicaMonitorOptions& Options() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A WAL position returned by pg_current_wal_insert_lsn() right after a page
// header that nothing was written into yet, moved back to the page's start:
// where a replica's replay position stops when it has everything (the
// insert position skips the header before anything is written there).
[[nodiscard]] std::uint64_t InsertPositionFloor(std::uint64_t lsn) noexcept;

}  // namespace shardkit
