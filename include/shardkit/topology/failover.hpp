// shardkit/topology/failover.hpp — replace a shard's primary by one of its
// replicas, without losing a write a client was told is committed.
//
//   auto report = shardkit::Failover(config, "shard1");                  // the most caught-up replica
//   auto report = shardkit::Failover(config, "shard1", {.to = "shard1-replica1", .force = true});
//
// The steps, each journaled in the catalog (shardkit_failovers and
// shardkit_failover_events, sql/037) under a per-shard lock there:
//   1. planned   the replica to promote: the one named, else the reachable
//                standby that has received the most WAL (a deposed primary
//                too, once rebuilt as a standby: topology/replica_rebuild.hpp).
//   2. fenced    the old primary, when reachable, takes no more writes:
//                default_transaction_read_only = on (ALTER SYSTEM: it
//                survives a restart), every other session terminated; its
//                last WAL position is read. shardkit's routed writes refused
//                there (read-only transaction) refresh the catalog and go to
//                the new primary. Unreachable, the failover stops unless
//                `force`: the operator must first make sure it cannot come
//                back as a primary (keep it down, or rebuild it as a
//                standby). With primary leases on (routing/
//                primary_leases.hpp), the promotion waits until every
//                lease it was granted has run out (journal: leases): it
//                then commits no shardkit write if it comes back.
//   3. caught_up the replica has replayed the fenced primary's last position
//                (nothing acknowledged is lost), within catch_up_timeout;
//                otherwise the old primary is unfenced and nothing changed.
//   4. promoted  pg_promote() on the replica (its admin_dsn), and its
//                synchronous_standby_names emptied: it has no standby yet,
//                and a commit waiting for one would wait forever.
//   5. published the catalog's shardkit_primaries row for the shard, by
//                compare-and-set of its epoch, with a NOTIFY: every Cluster's
//                directory watcher switches its pools to the new primary.
//   6. repointed every other replica of the shard (neither the promoted one
//                nor the deposed primary) follows the new primary: its
//                primary_conninfo (ALTER SYSTEM, pg_reload_conf(): no
//                restart) names the new primary's host and port, from its
//                configured dsn (a Unix socket directory the replica used
//                is kept when both servers share the host), its user,
//                password and application_name kept; the physical slot it
//                streams through (primary_slot_name) is created there; with
//                recovery_target_timeline 'latest' it switches to the new
//                timeline. One event per replica: following (its WAL
//                receiver streams from the new primary on its timeline,
//                checked for a few seconds), re-pointed but not yet
//                streaming, unreachable (it still follows the old primary),
//                or past the promotion point (it replayed WAL of the old
//                timeline the new primary never had: it needs pg_rewind or a
//                new base backup). Routers never read a replica that does
//                not follow the current primary (ReplicaMonitor).
// Unreachable and forced, what the replica had not received is lost unless
// the shard replicated synchronously to it (synchronous_standby_names):
// then no acknowledged write is, and a commit on the old primary after a
// restart waits for a standby that never comes (shardkit reports it as
// OutcomeUnknown, never as committed).
//
// A failover stopped at any step (its process killed) is finished by
// running it again: the journal shows it unfinished, and the new run takes
// over its replica and does its steps again (each is idempotent; a replica
// already promoted is only published; one already published only has the
// other replicas re-pointed and its journal closed; re-pointing a replica
// that follows the new primary already changes nothing). Without `to`, a
// replica found promoted but not published is the one chosen: promoting
// another would make two primaries. Until the rerun, a stopped failover may
// leave the old primary fenced (no writes).
//
// Needs the catalog ([catalog] dsn, migrated); throws FailoverError (what
// failed, and what to do), ConfigError (an unknown shard or replica).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/config.hpp"

namespace shardkit {

struct FailoverOptions {
  std::optional<std::string> to;  // the replica to promote (its name); unset: the most caught-up one
  bool force = false;             // go on when the old primary is unreachable (it is then not fenced)
  std::chrono::milliseconds catch_up_timeout{30000};
  std::chrono::milliseconds connect_timeout{2000};
  std::string requested_by;
  // Called after each step with its name and what it found.
  std::function<void(const std::string& step, const std::string& detail)> on_step;
};

// What the failover did with one of the shard's other replicas.
struct ReplicaRepointed {
  std::string name;
  bool follows = false;  // its WAL receiver streams from the new primary on its timeline
  std::string detail;    // what was done, or why it does not follow and what to do
};

struct FailoverReport {
  std::int64_t failover_id = 0;
  std::string shard;
  std::string from_server;  // the old primary
  std::string to_server;    // the promoted replica, the primary now
  std::int64_t epoch = 0;   // shardkit_primaries' epoch published
  bool old_primary_fenced = false;
  std::optional<std::uint64_t> old_primary_lsn;  // its last WAL position (reachable only)
  std::uint64_t promoted_at_lsn = 0;             // what the replica had replayed when promoted
  std::string loss;                              // what the failover may have lost, in words
  std::chrono::milliseconds writes_paused{0};    // from the fence to the publish: writes waited this long
  std::chrono::milliseconds took{0};
  // The shard's other replicas (step 6), in configuration order.
  std::vector<ReplicaRepointed> replicas;
  // The stopped failover this run finished (its id), if any.
  std::optional<std::int64_t> resumed_failover_id;
};

[[nodiscard]] FailoverReport Failover(const ClusterConfig& config, const std::string& shard,
                                      const FailoverOptions& options = {});

}  // namespace shardkit
