// shardkit/topology/replica_rebuild.hpp — make a server of a shard that no
// longer follows the shard's primary (the primary a failover deposed, or a
// replica that replayed past the point where the new primary's timeline
// began) a streaming hot standby of the current primary again, so that the
// shard is back at its replica count.
//
//   shardkit::ReplicaRebuildOptions options;
//   options.from_old_primary = true;                      // or options.server = "shard1-replica2"
//   options.pgdata = "/var/lib/postgresql/15/shard1";     // its data directory, on this host
//   auto report = shardkit::RebuildReplica(config, "shard1", options);
//
// The current primary is the one the catalog's shardkit_primaries names
// (routing/primaries.hpp). The steps, each journaled in the catalog
// (shardkit_replica_rebuilds and shardkit_replica_rebuild_events, sql/041)
// under a per-shard lock there:
//   1. planned    the server, its data directory and the primary checked
//                 (below); the data directory's configuration files
//                 (*.conf, postmaster.opts) saved beside it, in
//                 <pgdata>.shardkit-rebuild/ (with shardkit-rebuild.log,
//                 what PostgreSQL's programs print; removed when done).
//   2. stopped    the server stopped (pg_ctl stop -m fast), if it ran.
//   3. rewound    pg_rewind against the primary (its admin_dsn): only what
//                 changed since the timelines forked is copied. It needs
//                 wal_log_hints = on (or data checksums) on the server and
//                 full_page_writes on the primary; without them, or when
//                 pg_rewind fails, or with `basebackup`:
//      copied     pg_basebackup of the primary into the emptied directory,
//                 through the server's replication slot.
//   4. configured its own configuration files back; standby.signal;
//                 primary_conninfo (postgresql.auto.conf) pointing at the
//                 primary, application_name = the server's name: the one
//                 the primary itself used as a standby (its user, password
//                 or passfile, TLS settings; a Unix socket directory kept
//                 when both are on one host), else the primary's admin_dsn;
//                 primary_slot_name, the physical slot created on the
//                 primary (the server's name, [a-z0-9_]); a fence
//                 (default_transaction_read_only) a failover left removed:
//                 being a standby fences it.
//   5. started    pg_ctl start with the options it ran with (postmaster.opts).
//   6. streaming  its WAL receiver streams on the primary's timeline and the
//                 primary's pg_stat_replication shows it streaming, within
//                 stream_timeout.
// Then done: routers read it as a replica again (ReplicaMonitor: it follows
// the current primary), whichever server the configuration named the
// shard's primary.
//
// A rebuild stopped at any step (its process killed) is finished by running
// it again with the same server and data directory: the journal shows where
// it stopped, and the steps go on from there (a copy that was under way is
// made again, by pg_basebackup: a half-done pg_rewind leaves nothing to
// rewind from).
//
// Refused, with ReplicaRebuildError (the server named, and what to do),
// before anything is changed: the server is the shard's primary; the
// catalog cannot say which server is; a failover of the shard is
// unfinished; the primary is unreachable or not a primary; the data
// directory is not the server's (the server answers and runs from another
// one, a server that is not it runs from it, it belongs to another
// cluster — another system identifier — or to another server of the
// shard). A server that already streams from the primary on its timeline
// is left alone (already_following). ConfigError: an unknown shard or
// server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "shardkit/config.hpp"

namespace shardkit {

struct ReplicaRebuildOptions {
  std::optional<std::string> server;  // the server to rebuild (its name in the configuration)
  bool from_old_primary = false;      // or: the primary the shard's last failover deposed
  std::string pgdata;                 // its data directory, on this host
  // PostgreSQL's programs; unset: pg_rewind's folder in PATH, else /usr/lib/postgresql/15/bin.
  std::optional<std::string> pg_bin;
  bool basebackup = false;  // always a full copy (pg_basebackup), never pg_rewind
  std::chrono::milliseconds stream_timeout{60000};
  std::chrono::milliseconds connect_timeout{2000};
  std::string requested_by;
  // Called after each step is journaled, with its name and what it did.
  std::function<void(const std::string& step, const std::string& detail)> on_step;
};

struct ReplicaRebuildReport {
  std::int64_t rebuild_id = 0;  // 0 when nothing was to be done
  std::string shard;
  std::string server;
  std::string primary;  // the server it follows now
  std::string pgdata;
  std::string method;  // "rewind" or "basebackup": how its data was made
  std::string slot;    // the physical slot it streams through
  std::uint32_t timeline = 0;
  bool already_following = false;  // it streamed from the primary already: nothing done
  std::string detail;              // in words: what was done (why pg_rewind was not used, ...)
  // Set on the primary again once the rebuilt server streamed: the value the
  // failover that made it primary emptied ("" when there was none to restore).
  std::string synchronous_standby_names;
  std::chrono::milliseconds took{0};
  std::optional<std::int64_t> resumed_rebuild_id;  // the stopped rebuild this run finished
};

[[nodiscard]] ReplicaRebuildReport RebuildReplica(const ClusterConfig& config, const std::string& shard,
                                                  const ReplicaRebuildOptions& options);

}  // namespace shardkit
