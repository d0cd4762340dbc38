// shardkit/writes/in_doubt.hpp — settling the prepared parts of cross-shard
// transactions (cross_shard.hpp) whose coordinator stopped: the recovery pass.
//
// A pass lists every shard primary's prepared transactions named by shardkit
// (pg_prepared_xacts, gid 'shardkit:<id>:<shard>', this database only) and
// settles each by the catalog's coordinator log:
//   decided 'commit'                 -> COMMIT PREPARED (at once)
//   decided 'abort'                  -> ROLLBACK PREPARED (at once)
//   still 'preparing', or no row,
//   and prepared longer ago than
//   `settle_after`                   -> the row is decided 'abort' first (so a
//                                       coordinator still alive cannot decide
//                                       'commit' after it), then rolled back
//   younger                          -> left for its coordinator
// It then decides 'abort' on rows left 'preparing' past the bound, and
// deletes decided rows older than the bound of which no shard holds a part
// (only when every shard could be asked).
//
// Prepared transactions hold their locks (and a move's cutover of their
// buckets) and hold back vacuum: every Cluster with a catalog runs a pass
// periodically (InDoubtRecovery), `shardctl recover` runs one, and
// `shardctl shards` shows the in-doubt parts and their ages.
//
// Idempotent and safe to run from many processes at once: two passes (or a
// pass and the coordinator) racing on a part both follow the one decision
// in the catalog; a part someone else finished is skipped.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/core/thread_annotations.hpp"

namespace shardkit {

class BucketShardResolver;

// One shard's prepared part of a cross-shard transaction.
struct InDoubtPart {
  ShardId shard{};
  std::string gid;                   // shardkit:<transaction id>:<shard name>
  std::string transaction_id;        // the catalog row's id
  std::chrono::milliseconds age{0};  // since its PREPARE, by the shard's clock
  // The catalog's state of it: "commit", "abort", "preparing", or "none"
  // (no row; empty when the catalog was not asked).
  std::string decision;
};

struct InDoubtOptions {
  // A part whose transaction is not decided is rolled back once it was
  // prepared this long ago (its coordinator is taken as gone).
  std::chrono::milliseconds settle_after{std::chrono::seconds(30)};
  // Each statement of a pass (shards and catalog) waits at most this long.
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
};

struct InDoubtReport {
  std::vector<InDoubtPart> committed;    // COMMIT PREPARED by this pass
  std::vector<InDoubtPart> rolled_back;  // ROLLBACK PREPARED by this pass
  std::vector<InDoubtPart> waiting;      // undecided and younger than settle_after: left
  int rows_aborted = 0;                  // 'preparing' rows this pass decided 'abort'
  int rows_forgotten = 0;                // decided rows deleted (no part left anywhere)
  // What could not be done: an unreachable shard or catalog, a statement
  // that failed (named, with the server's words).
  std::vector<std::string> failures;
};

// The prepared parts on every shard's primary (decision read from the
// catalog when one is given), for `shardctl shards`. Unreachable shards are
// reported in `failures`.
[[nodiscard]] std::vector<InDoubtPart> ListInDoubt(BucketShardResolver& resolver, const std::optional<Dsn>& catalog,
                                                   std::vector<std::string>& failures,
                                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));

// One recovery pass (above).
[[nodiscard]] InDoubtReport RecoverInDoubt(BucketShardResolver& resolver, const Dsn& catalog,
                                           const InDoubtOptions& options = {});

struct InDoubtRecoveryStats {
  std::uint64_t passes = 0;
  std::uint64_t committed = 0;
  std::uint64_t rolled_back = 0;
  std::uint64_t failed_passes = 0;  // passes with a failure
  std::string last_failure;
};

// A recovery pass every `interval` on a thread of its own, until destroyed.
class InDoubtRecovery {
 public:
  InDoubtRecovery(BucketShardResolver& resolver, Dsn catalog, std::chrono::milliseconds interval,
                  InDoubtOptions options = {});
  ~InDoubtRecovery();  // stops the thread (waits for a pass under way)
  InDoubtRecovery(const InDoubtRecovery&) = delete;
  InDoubtRecovery& operator=(const InDoubtRecovery&) = delete;

  // One pass now, on the calling thread (the periodic ones go on).
  InDoubtReport RunNow();
  [[nodiscard]] InDoubtRecoveryStats Stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit
