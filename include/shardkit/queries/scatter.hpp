// shardkit/queries/scatter.hpp — run one statement on many shards in parallel.
//
// Each shard's statement runs on a connection from that shard's pool, all at
// once, so the total time is the slowest shard's, not the sum: shards whose
// pool has a connection idle are driven from the caller's thread
// (non-blocking), the others (a connection to open, or a busy pool to wait
// for) on worker threads. Each shard costs one round trip: the
// transaction's BEGIN, its timeout, the statement and COMMIT go out
// together (libpq pipeline mode). Every scatter has a deadline that bounds connection
// acquisition and execution alike: each statement runs with a server-side
// statement_timeout set to the time left, is cancelled when the deadline
// passes, and the caller gets control back by the deadline (plus a short
// grace for the cancelled shards to report why) whatever a shard does.
// By default one failing shard fails the whole scatter (ScatterError naming
// every failed shard and its cause); with allow_partial the result carries
// the missing shards and a warning instead. Each shard's statement holds
// exactly one connection and never waits for a second one, so concurrent
// scatters over small pools cannot deadlock on each other.
//
//   shardkit::ScatterGather scatter{*resolver};
//   shardkit::ScatterOptions options;
//   options.deadline = std::chrono::steady_clock::now() + 2s;
//   options.label = "best-sellers";
//   auto result = scatter.Run("SELECT book_id, sum(quantity) FROM order_items "
//                             "WHERE created_at >= $1 GROUP BY 1", {"2026-01-01"}, options);
//   for (const auto& shard : result.shards) use(shard.shard, shard.rows);   // pg::Rows
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/sql_params.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pg/rows.hpp"
#include "shardkit/pg/session.hpp"
#include "shardkit/routing/read_policy.hpp"

namespace shardkit {

class BucketShardResolver;
class DirectoryWatcher;
class ReplicaMonitor;

struct ScatterOptions {
  // Absolute deadline for the whole scatter (acquire + execute). Default:
  // now + 30 s at the time Run is called; at most now + 7 days.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Run only on these shards (default: all shards of the resolver). Each
  // shard at most once; an unknown shard throws UnknownShard.
  std::optional<std::vector<ShardId>> shards;
  // Run only on the shards that own these buckets in the scatter's
  // directory snapshot, the one each shard's bucket step fences with (so
  // every row of these buckets is read exactly once); picked again from the
  // newer directory when a stale one makes the scatter run again
  // (FollowDirectory). With `shards`, only those of them. An empty list
  // runs on no shard (an empty result). Ignored with directory_buckets
  // false (no snapshot assigns the buckets then).
  std::optional<std::vector<BucketId>> buckets;
  // Return what the healthy shards answered instead of failing. A scatter
  // in which no shard answered still throws ScatterError.
  bool allow_partial = false;
  // Statements run in a READ ONLY transaction. Set false for writes; note
  // that a scatter is never atomic across shards (each commits on its own).
  bool read_only = true;
  // A label for statistics and messages, e.g. "best-sellers".
  std::string label;
  // Each shard sees only the rows of the buckets that the scatter's
  // directory snapshot assigns to it (SET LOCAL shardkit.buckets, in the
  // BEGIN round trip; see ownership.hpp), so a bucket whose rows a move has
  // copied to a second shard is still counted once. false: each shard
  // answers for the buckets it owns itself: only for servers that are not
  // shardkit shards (no fence: nothing to set); on shards, keep the default.
  bool directory_buckets = true;
  // Where each shard's statement may run (read_policy.hpp; read-only
  // scatters only, once a ReplicaMonitor is set: ReadReplicas). On a
  // replica it runs in a REPEATABLE READ READ ONLY transaction with the same
  // bucket step, so a bucket a move is handing over is still counted once:
  // a replica that has not replayed the handover the directory knows of
  // refuses the bucket. With kReplicaPreferred a shard whose replica fails,
  // refuses or has not replayed the read token runs again on its primary,
  // with the same directory snapshot; with kReplicaOnly it fails the
  // scatter, and a shard with no fit replica throws ReplicaUnavailable.
  ReadPolicy read;
};

struct ShardResult {
  ShardId shard{};
  pg::Rows rows;                         // what the shard returned (shardkit/pg/rows.hpp)
  std::chrono::microseconds elapsed{0};  // acquire + execute on this shard
  std::chrono::microseconds queued{0};   // scatter start -> a worker thread took the statement
  std::size_t bytes = 0;                 // payload bytes received (sum of field sizes)
  // What the shard's pool read from its server once: collation and session
  // settings, for the merge's checks (scatter_merge.hpp).
  std::shared_ptr<const SessionFacts> session;
  std::string server;       // which server answered: the shard's primary, or a replica (by name)
  bool on_replica = false;  // a replica answered
};

struct ScatterResult {
  std::vector<ShardResult> shards;              // one per shard that answered, in shard order
  std::vector<ScatterError::Failure> failures;  // only with allow_partial, in shard order
  std::optional<std::string> warning;           // set when failures is not empty
  std::chrono::microseconds elapsed{0};         // wall time of the whole scatter
  std::optional<ShardId> slowest_shard;         // of the shards that answered
  std::chrono::microseconds slowest_elapsed{0};
  std::int64_t directory_version = 0;  // the directory snapshot the buckets were assigned by
  int directory_retries = 0;           // reruns after a shard said that directory was stale
  int replica_fallbacks = 0;           // shards whose replica failed or refused, answered by their primary
  [[nodiscard]] std::size_t TotalRows() const noexcept;
  [[nodiscard]] std::size_t TotalBytes() const noexcept;
};

// Cumulative cross-shard statistics. A growing count of cross-shard queries
// is how a wrong shard key shows (the Bookstore case).
struct ScatterStats {
  std::uint64_t scatters = 0;        // statements sent to more than one shard
  std::uint64_t single_shard = 0;    // calls that touched exactly one shard (not cross-shard)
  std::uint64_t shard_requests = 0;  // sum of fan-out over all calls
  std::uint64_t max_fanout = 0;
  std::uint64_t failed = 0;                    // calls that threw ScatterError
  std::uint64_t partial = 0;                   // calls answered with missing shards
  std::uint64_t shard_failures = 0;            // shards that failed or missed the deadline, over all calls
  std::uint64_t rows = 0;                      // rows received
  std::uint64_t bytes = 0;                     // payload bytes received
  std::chrono::microseconds total_slowest{0};  // sum of slowest-shard times
  std::chrono::microseconds max_slowest{0};
  std::uint64_t replica_requests = 0;   // shards' statements answered by a replica
  std::uint64_t replica_fallbacks = 0;  // shards' statements a replica failed, run again on the primary
};

// What a ScatterGather has measured of the link to one shard, from the
// statements it ran there (the last 16 of each kind count): the round trip
// (a transaction's BEGIN, whose reply the server sends at once; the median)
// and the rate at which a result's rows arrive once they start (results of
// 16 KB or more: server output, network and libpq's parsing together; the
// fastest sample, as a busy server slows a transfer but no link is faster
// than itself). Zero samples:
// nothing measured yet. Exact top-k's kAuto prices its two methods with it.
struct ShardLink {
  std::chrono::microseconds round_trip{0};  // median of the samples
  double bytes_per_second = 0;              // payload bytes over transfer time, the fastest sample
  int round_trip_samples = 0;               // recorded so far
  int transfer_samples = 0;
};

// Thread-safe: any number of threads may Run() scatters at once; they share
// the worker threads and the shards' pools.
class ScatterGather {
 public:
  // threads: how many statements may run at once on worker threads
  // (default: the shard count); statements on connections that were idle
  // run on the caller's thread and need none. Statements beyond that wait
  // for a free worker (their wait counts against the deadline). Destroy the ScatterGather before the resolver: its
  // destructor waits for statements still running past a deadline (cut by
  // their statement_timeout or the cancel sent at the deadline).
  explicit ScatterGather(BucketShardResolver& resolver, std::optional<int> threads = {});
  ~ScatterGather();
  ScatterGather(const ScatterGather&) = delete;
  ScatterGather& operator=(const ScatterGather&) = delete;

  // The same statement on every selected shard. Throws ScatterError (see
  // above), UnknownShard or Error (a shard listed twice).
  [[nodiscard]] ScatterResult Run(const std::string& sql, const SqlParams& params = {},
                                  const ScatterOptions& options = {});
  // A different statement (or parameters) per shard; options.shards is
  // ignored, the statements name their shards (each at most once).
  struct Statement {
    std::string sql;
    SqlParams params;
  };
  [[nodiscard]] ScatterResult RunPerShard(const std::vector<std::pair<ShardId, Statement>>& statements,
                                          const ScatterOptions& options = {});

  [[nodiscard]] ScatterStats Stats() const;
  // The link to `shard` as measured so far (see ShardLink).
  [[nodiscard]] ShardLink Link(ShardId shard) const;
  [[nodiscard]] BucketShardResolver& Resolver() const noexcept { return resolver_; }

  // When a shard refuses a bucket the scatter's directory assigned to it
  // (the directory is stale: a move finished), refresh through `watcher`
  // and run the whole scatter again with the new directory (at most 3 times,
  // within the deadline; while the catalog has nothing newer, as during a
  // move's cutover, again after short pauses, for up to 250 ms). Without a
  // watcher such a scatter throws ScatterError (its failures say
  // stale_directory). The watcher also confirms a primary that reports
  // itself read-only (a failover fenced it): its rows count only while the
  // catalog still names it, else the scatter runs again on its successor;
  // without a watcher such a shard fails the scatter. Set before use.
  void FollowDirectory(DirectoryWatcher* watcher) noexcept;
  [[nodiscard]] DirectoryWatcher* FollowedDirectory() const noexcept { return watcher_; }
  // Read-only scatters may go to replicas that `monitor` finds fit, as
  // ScatterOptions::read asks (null: primaries only). Set before use.
  void ReadReplicas(ReplicaMonitor* monitor) noexcept;

  struct Impl;

 private:
  friend class ScatterSession;
  ScatterResult ExecuteFollowingDirectory(std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements,
                                          const ScatterOptions& options);

  BucketShardResolver& resolver_;
  DirectoryWatcher* watcher_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

struct SessionOptions {
  // Bounds acquiring the connections and every fan-out of the session.
  // Default: now + 30 s when the session opens.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // The shards of the session (default: all), each at most once.
  std::optional<std::vector<ShardId>> shards;
  // Run right after BEGIN on every shard, before the transaction is made
  // read-only: e.g. "CREATE TEMP TABLE t (...) ON COMMIT DROP" (temporary
  // tables may be written in a read-only transaction, not created). SQL
  // text without parameters, written by the application, one statement per
  // entry (they go out in one pipeline with the BEGIN).
  std::vector<std::string> setup;
  std::string label;
  // As ScatterOptions::directory_buckets, for the session's whole
  // transaction: a shard that cannot serve a bucket any more fails the
  // session's first fan-out there (ScatterError, stale_directory): open a
  // new session.
  bool directory_buckets = true;
};

// Several fan-outs over the same connections, each shard in one REPEATABLE
// READ READ ONLY transaction: every statement of the session sees the same
// snapshot of its shard (consistent per shard; shards are not synchronised
// with each other), and a temporary table made in `setup` carries results
// from one fan-out to the next (exact top-k aggregates once per shard this
// way). One thread at a time uses a session.
//
// Deadlocks: a session holds several connections at once, so it acquires
// them in ascending shard order — first without waiting (idle connections,
// the common case), then, from the first shard that has none free, waiting
// for each in order while holding only lower-numbered shards. Every holder
// that waits for shard s holds only shards below s, so no cycle of waits
// can form among sessions; ordinary scatters never wait while holding, so
// they cannot close one either. A session's statements are driven from the
// caller's thread on the connections it holds (one pipeline per shard,
// non-blocking), never behind scatter workers that wait for a pool; only
// its COMMITs run on threads of their own. All-or-nothing acquisition (release
// everything and retry on a miss) was not chosen: it livelocks under
// contention and needs a back-off policy, while ordered acquisition always
// makes progress and is bounded by the deadline anyway.
//
//   shardkit::ScatterSession session{scatter, {.setup = {"CREATE TEMP TABLE t (k bigint, s numeric) ON COMMIT DROP"}}};
//   session.Run("INSERT INTO t SELECT ...", params);
//   auto top = session.Run("SELECT k, s FROM t ORDER BY s DESC LIMIT 10");
//   session.Finish();   // commits (drops the temp tables); the connections are idle again
//
// Destroy (or Finish) every session before its ScatterGather.
class ScatterSession {
 public:
  // Acquires the connections. Each shard's transaction begins with its first
  // statement, in the same pipeline (BEGIN, the timeout, the setup, the
  // bucket step and READ ONLY, then the statement): no round trip of its
  // own. Throws ScatterError naming the shards whose connection failed
  // (nothing is held then), UnknownShard or Error.
  ScatterSession(ScatterGather& scatter, SessionOptions options = {});
  // Finish() if not done yet (errors are swallowed).
  ~ScatterSession();
  ScatterSession(const ScatterSession&) = delete;
  ScatterSession& operator=(const ScatterSession&) = delete;

  // A statement on every shard of the session / a statement per shard on
  // some of them. Each statement runs with statement_timeout = the time left
  // to the deadline and is cancelled at it. A failure on any shard fails
  // the session: this call throws ScatterError and so does every later one.
  [[nodiscard]] ScatterResult Run(const std::string& sql, const SqlParams& params = {});
  [[nodiscard]] ScatterResult RunPerShard(const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements);
  // As RunPerShard, with the statements of `then` (SQL without parameters)
  // sent right after each shard's statement in the same round trip; the
  // rows returned are the last one's. E.g. a cursor declared with
  // parameters and its first rows:
  //   session.RunPerShardThen({{ShardId{0}, {"DECLARE c NO SCROLL CURSOR FOR SELECT ...", params}}},
  //                           {"FETCH FORWARD 10 FROM c"});
  //   session.Run("FETCH FORWARD 100 FROM c");   // later fan-outs go on reading it
  [[nodiscard]] ScatterResult RunPerShardThen(
      const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements,
      const std::vector<std::string>& then);

  // Ends every shard's transaction and gives the connections back: the
  // COMMITs go out together (one round trip), so the connections are idle
  // in their pools when it returns. After the session's deadline the
  // COMMITs run on the scatter's workers instead and the caller does not
  // wait (read-only transactions: nothing to confirm). A failed session's
  // connections are closed.
  void Finish() noexcept;

  [[nodiscard]] const std::vector<ShardId>& Shards() const noexcept;
  // The time acquiring the connections took.
  [[nodiscard]] std::chrono::microseconds OpenTime() const noexcept;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace shardkit
