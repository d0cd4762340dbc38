// shardkit/resharding/move.hpp — move one bucket to another shard, live.
//
// A move copies the bucket's rows to the target and carries over the writes
// that arrive meanwhile with PostgreSQL 15 logical replication (a
// publication filtered on the stored bucket column, a slot with an exported
// snapshot for the copy, a subscription on the target), then freezes the
// bucket on the source (waiting for the writers already in it, bounded by
// drain_timeout), waits for a marker written after the freeze to arrive on
// the target (the barrier), drains the bucket's readers, retires the bucket
// on the source (naming the new owner), makes it owned on the target, flips
// the catalog's directory (compare-and-set, NOTIFY), unfreezes, drops the
// replication objects and, after a grace period in which routers learn the
// new directory, deletes the old rows in batches. Writes and reads of the
// bucket stall only between freeze and flip (the journal's 'flipped' event
// says where that time went, step by step); routed transactions
// (routed.hpp) and scatters that follow the directory retry them.
//
// Reads: a bucket is served by exactly one shard at any instant, the one
// holding every acknowledged write of it. The source serves it until it
// retires it (no write is acknowledged anywhere between the freeze and the
// target's ownership), the target from its ownership on; the source refuses
// the bucket's reads from the retirement (SK003, naming the new owner and
// the move), whatever directory the reader has, so a reader learns the new
// owner the way a writer does. (A retired source that kept serving readers
// of the old directory "as of the freeze" would answer without the writes
// the target acknowledged since: a customer not reading its own write.)
// Readers that checked the bucket before the handover are waited for: those
// that checked before the move was marked on the source, before the freeze;
// later ones through their read hold (sql/015), during it.
//
// A mover that dies leaves the bucket fully served by one shard (before the
// retirement: the source; in 'owned' and later: the target, which routed
// transactions reach through the source's refusal) or, in 'retired' alone,
// refused everywhere with a retryable error that names the move and says
// to run `shardctl move resume <id>` or `shardctl move abort <id>`. Between
// 'owned' and 'flipped' the catalog's directory still names the source, so
// a scatter by it is refused (stale directory) until the move is resumed.
//
// Every step is recorded in the catalog's journal (shardkit_moves,
// shardkit_move_events) before the next begins, and is idempotent: a mover
// that dies anywhere is continued with Resume() (shardctl move resume) or
// rolled back with Abort() (shardctl move abort, allowed until the target
// owns the bucket; after that, move the bucket back instead). Neither
// leaves a replication slot, publication or subscription behind. A move is
// refused before it starts when the target is unreachable, its schema
// differs from the source's, or the bucket has another live move.
//
//   shardkit::BucketMover mover{shardkit::LoadConfig("shardkit.toml")};
//   shardkit::MoveRecord done = mover.Move(shardkit::BucketId{44}, shardkit::ShardId{2});
//   // done.rows_copied, done.stall_ms, done.directory_version
//
// States (MoveState, the journal's `state`, the last step completed):
//   planned -> prepared -> copying -> copied -> streaming -> retired -> owned
//   -> flipped -> replication_dropped -> cleaning -> done;  aborting -> aborted.
//
// Thread-safe: one BucketMover may run several moves at once (each on its
// own connections); rebalance.hpp does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/core/bucket.hpp"

namespace shardkit {

enum class MoveState {
  kPlanned,             // journaled; nothing done
  kPrepared,            // checks passed; the source knows the move (new owner named)
  kCopying,             // publication (and slot) on the source; copy under way
  kCopied,              // rows and the 'incoming' ownership committed on the target
  kStreaming,           // subscription on the target: catching up
  kRetired,             // frozen, caught up, readers drained, source retired (reads and writes refused)
  kOwned,               // the target owns the bucket
  kFlipped,             // the catalog's directory says so (new version)
  kReplicationDropped,  // subscription, slot and publication gone
  kCleaning,            // the source's old rows are being deleted
  kDone,
  kAborting,
  kAborted,
};
[[nodiscard]] std::string_view MoveStateName(MoveState state) noexcept;  // "planned", ...
[[nodiscard]] std::optional<MoveState> ParseMoveState(std::string_view name) noexcept;
[[nodiscard]] bool IsLive(MoveState state) noexcept;  // not done, not aborted
// Abort is allowed before the target owns the bucket (up to 'retired').
[[nodiscard]] bool CanAbort(MoveState state) noexcept;

// A row of the journal.
struct MoveRecord {
  std::int64_t move_id = 0;
  BucketId bucket{};
  ShardId source{};
  ShardId target{};
  MoveState state = MoveState::kPlanned;
  std::string token;  // names the slot, publication and subscription
  std::optional<std::int64_t> plan_id;
  std::string requested_by;
  std::string created_at;  // ISO 8601, UTC
  std::string updated_at;
  std::string finished_at;                        // empty while live
  std::optional<std::int64_t> directory_version;  // the flip's
  std::int64_t rows_copied = 0;
  std::optional<double> copy_ms;
  std::optional<double> stall_ms;  // freeze requested -> directory flipped (the catalog says the target owns it)
  std::int64_t rows_deleted = 0;
  std::string error;  // why it was aborted or stopped
};

struct MoveEvent {
  std::string at;
  MoveState state = MoveState::kPlanned;
  std::string detail;
};

// Reported while a move runs (from the moving thread).
struct MoveProgress {
  std::int64_t move_id = 0;
  BucketId bucket{};
  ShardId source{};
  ShardId target{};
  MoveState state = MoveState::kPlanned;
  std::string step;  // what happens now: "copying", "catching up", "frozen", ...
  std::int64_t rows_copied = 0;
  std::optional<std::int64_t> lag_bytes;  // source WAL not yet confirmed by the target
  std::optional<double> stall_ms;
  std::chrono::microseconds elapsed{0};
};

struct MoveOptions {
  // Freeze: how long to wait for the transactions already writing the
  // bucket. Exceeded: the move is aborted (the data untouched).
  std::chrono::milliseconds drain_timeout{2000};
  // Creating the replication slot waits for the transactions running on the
  // source's server at that moment (PostgreSQL needs them finished for a
  // consistent starting point): at most this long, else the move aborts.
  std::chrono::milliseconds slot_timeout{60000};
  // Before the freeze: how long the target may take to catch up.
  std::chrono::milliseconds catchup_timeout{60000};
  // Frozen: how long the marker may take to arrive on the target. Exceeded:
  // unfrozen and aborted. (The bucket's readers are drained within
  // drain_timeout too.)
  std::chrono::milliseconds barrier_timeout{5000};
  // Before the freeze: transactions on the source that began before the
  // move was marked there (they may read the bucket without a read hold)
  // are waited for, this long at most; then the move aborts, naming one.
  std::chrono::milliseconds older_transactions_timeout{60000};
  // After the flip, before the source's rows (and its record of the new
  // owner, which its refusals name) are deleted: routers that do not follow
  // the catalog learn the new owner from those refusals meanwhile.
  std::chrono::milliseconds cleanup_grace{2000};
  // Before deleting: transactions on the source that began before the
  // cleanup (and may still read the old rows) are waited for, this long at
  // most; then the move stops, to be resumed once they have ended.
  std::chrono::milliseconds cleanup_wait_timeout{600000};
  int delete_batch = 5000;
  // Stop after the flip and the replication cleanup (state
  // replication_dropped); a later Resume() waits out the grace and deletes.
  bool defer_cleanup = false;
  std::chrono::milliseconds connect_timeout{5000};
  std::string requested_by;  // recorded in the journal; default "<effective user>@<host> pid N"
  std::function<void(const MoveProgress&)> on_progress;
  // For tests: called after each state is journaled ('planned' included, by
  // Plan()); may throw to simulate the mover dying there (nothing is cleaned
  // up, connections just close).
  std::function<void(std::int64_t move_id, MoveState reached)> after_step;
};

class BucketMover {
 public:
  // `config` names the shards (admin_dsn for privileged steps) and the
  // catalog ([catalog] dsn: the directory and the journal). Throws
  // ConfigError without a catalog.
  explicit BucketMover(ClusterConfig config, MoveOptions options = {});
  ~BucketMover();
  BucketMover(const BucketMover&) = delete;
  BucketMover& operator=(const BucketMover&) = delete;

  // Journals a move of `bucket` from its current shard (the catalog's
  // directory) to `target`. Throws MoveError if the bucket is already there
  // or has a live move (naming it).
  MoveRecord Plan(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id = {});
  // Plan() and Resume(): the whole move. Throws MoveError when it fails
  // (after aborting it when it could, saying so).
  MoveRecord Move(BucketId bucket, ShardId target, std::optional<std::int64_t> plan_id = {});
  // Runs a live move from its journaled state to done. Refused (MoveError)
  // while another process runs it.
  MoveRecord Resume(std::int64_t move_id);
  // Rolls a live move back (allowed until the target owns the bucket):
  // replication objects dropped, copied rows and the target's ownership row
  // deleted, the source unmarked (and owning the bucket again if it had
  // retired it). Throws MoveError when refused or when a
  // server it must clean up is unreachable (the move stays 'aborting': run
  // Abort again).
  MoveRecord Abort(std::int64_t move_id, const std::string& reason = "aborted by request");

  [[nodiscard]] std::optional<MoveRecord> Get(std::int64_t move_id);
  // Newest first; live_only: not done or aborted.
  [[nodiscard]] std::vector<MoveRecord> List(bool live_only = false, int limit = 100);
  [[nodiscard]] std::vector<MoveEvent> Events(std::int64_t move_id);

  [[nodiscard]] const ClusterConfig& Config() const noexcept;

  struct Impl;  // private (src/resharding/move_run.hpp)

 private:
  std::unique_ptr<Impl> impl_;
};

// Replication objects that moves may have left on a server (a slot,
// publication or subscription named shardkit_move_*), for checks and
// tests: "slot shardkit_move_12_ab34 on shard0".
[[nodiscard]] std::vector<std::string> LeftoverReplicationObjects(const ClusterConfig& config);

}  // namespace shardkit
