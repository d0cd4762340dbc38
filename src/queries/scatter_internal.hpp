// What the scatter's parts share (scatter.cpp and the scatter_*.cpp beside
// it): one fan-out's state and tasks, the inline calls, ScatterGather::Impl
// and ScatterSession::State.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pg/pipelined_statement.hpp"
#include "queries/link_estimates.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit::detail::scatter {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr auto kDefaultTimeout = std::chrono::seconds(30);
// After the deadline: time for cancelled shards to report their cause.
constexpr auto kCancelGrace = milliseconds(50);
// statement_timeout fits in an int of milliseconds; a week is plenty.
constexpr auto kMaxTimeout = std::chrono::hours(24 * 7);

using Statement = ScatterGather::Statement;

// Thrown inside a worker when the deadline passed before a step could start.
class DeadlineMissed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Phase : int { kQueued, kAcquiring, kExecuting, kDone };

const char* PhaseName(Phase phase);
std::string Trim(std::string text);
long long Millis(Clock::duration d);

struct ShardTask {
  ShardId shard{};
  ConnectionPool* pool = nullptr;
  std::shared_ptr<const Statement> statement;
  // In a session: the session's connection for this shard (its transaction
  // is open, or opened by `before`; no BEGIN/COMMIT around the statement).
  ConnectionPool::Lease* pinned = nullptr;
  // In a session: statements without parameters sent before the statement
  // (the session's BEGIN and setup) and after it (whose last one's rows are
  // returned), in the same round trip; empty: none.
  std::vector<std::string> before;
  std::vector<std::string> then;
  std::string where;  // "shard 1 (shard1)"
  // The buckets the scatter's directory gives this shard, as the statement
  // that sets shardkit.buckets and checks it (ownership.hpp); null: none.
  // Points into ScatterState::bucket_setups, or at replica_setup.
  const std::string* bucket_setup = nullptr;

  // On a replica (ScatterOptions::read): its name, and the bucket step with
  // the read token's check (and the statement that reads its replay
  // position first, or empty). Cleared when the statement falls back to the
  // primary (`primary` is its pool).
  std::optional<std::string> replica;
  std::string replica_setup;
  std::string replica_presync;
  const std::string* primary_setup = nullptr;
  ConnectionPool* primary = nullptr;
  bool fell_back = false;
  // The server reported default_transaction_read_only = on after the
  // statement (a failover's fence): ConfirmReadOnlyPrimaries.
  bool read_only_server = false;

  std::atomic<Phase> phase{Phase::kQueued};

  // Cancellation. While `active` is set the connection belongs to this
  // task, so a cancel can never hit a statement of whoever leases the
  // connection next: a task whose cancel was requested discards its
  // connection instead of returning it. The cancel handle was built by the
  // pool on the thread that opened the connection; PQcancel through it is
  // thread-safe and is sent outside the mutex, so neither the worker nor
  // another scatter waits for a cancel in flight.
  std::mutex cancel_mutex;
  std::shared_ptr<const ConnectionPool::CancelHandle> active;
  bool cancel_requested = false;

  // Outcome, guarded by ScatterState::mutex.
  bool done = false;
  std::optional<pg::Rows> rows;
  std::string cause;
  std::string sqlstate;
  bool stale_directory = false;
  microseconds elapsed{0};
  microseconds queued{0};
  std::size_t bytes = 0;
  detail::PipelinedStatement::Timing timing;  // set before Complete

  void Cancel() noexcept {
    std::shared_ptr<const ConnectionPool::CancelHandle> handle;
    {
      std::lock_guard lock(cancel_mutex);
      cancel_requested = true;
      handle = active;
    }
    // The server may be gone; statement_timeout and the caller's own
    // deadline still hold.
    if (handle) (void)handle->Send();
  }
};

// Every shard's bucket step for one directory snapshot, made once per
// directory (ScatterGather::Impl keeps the latest): formatting each shard's
// bucket list on every scatter was a visible part of its client CPU.
struct BucketSetups {
  std::shared_ptr<const BucketDirectory> directory;
  std::vector<std::string> by_shard;

  BucketSetups(std::shared_ptr<const BucketDirectory> d, int shards) : directory(std::move(d)) {
    for (int s = 0; s < shards; ++s) {
      by_shard.push_back(BucketSet::Of(*directory, ShardId{s}).FenceSql());
    }
  }
};

struct ScatterState {
  // A session's fan-out keeps the session's connections alive until its
  // last task is done, even after the caller gave up on it.
  std::shared_ptr<ScatterSession::State> session;
  // Replica reads: the monitor to tell of a replica's failure, and whether
  // a failed replica's statement runs again on its primary.
  ReplicaMonitor* replicas = nullptr;
  bool fall_back_to_primary = false;
  std::shared_ptr<const BucketSetups> bucket_setups;  // null: no bucket step
  detail::LinkEstimates* links = nullptr;             // the ScatterGather's, fed by Complete
  Clock::time_point start;
  Clock::time_point deadline;
  bool read_only = true;
  std::vector<std::unique_ptr<ShardTask>> tasks;  // in shard order

  std::mutex mutex;
  std::condition_variable finished;
  std::size_t remaining = 0;
  std::atomic<bool> abandoned{false};  // the caller has returned
};

detail::PipelineRequest Request(const ScatterState& state, const ShardTask& task,
                                const std::vector<const char*>& values, milliseconds left);
std::vector<const char*> ParameterValues(const ShardTask& task);
std::string DescribeFailure(const ShardTask& task, const std::exception& error, bool cancelled,
                            Clock::duration elapsed);
std::string SqlStateOf(const std::exception& error);
void Describe(ShardTask& task, const std::exception& error, Clock::time_point started, std::string& cause,
              std::string& sqlstate);
void Complete(ScatterState& state, ShardTask& task, Clock::time_point started, std::optional<pg::Rows> rows,
              std::string cause, std::string sqlstate, std::size_t bytes);
void RunShard(ScatterState& state, ShardTask& task);
// Points a task at the replica chosen for it (its primary stays in
// task.primary, for a fall back).
void ChooseReplica(ShardTask& task, const ReplicaChoice& choice);
// A replica's failure that its primary may not share (connection lost,
// refused or not replayed, a conflict with its recovery): the task then
// runs again on the primary (FallBack) if the scatter allows it.
bool ReplicaTrouble(const std::exception& error);
// Points the task at its shard's primary; true if it was on a replica.
bool FallBack(ScatterState& state, ShardTask& task, const std::exception& error);

// A statement driven from the caller's thread on a connection that was
// idle when the scatter began, or on a session's connection: no worker
// thread, no wake-ups, the sockets of all such shards read in turn
// (non-blocking libpq).
struct InlineCall {
  ShardTask* task = nullptr;
  ConnectionPool::Lease* lease = nullptr;  // null once let go
  // The lease when the call took it from the pool (null for a session's):
  // shared, as a ROLLBACK may finish it on a worker.
  std::shared_ptr<ConnectionPool::Lease> owned;
  std::vector<const char*> values;
  const std::vector<const char*>* shared_values = nullptr;  // this call's, or an earlier call's for the same statement
  std::optional<detail::PipelinedStatement> call;
  Clock::time_point started;
  bool open = false;  // sent, not yet finished
};

void DriveInline(const std::shared_ptr<ScatterState>& shared_state, std::deque<InlineCall>& calls,
                 boost::asio::thread_pool& workers, boost::asio::thread_pool& canceller);

std::string JoinFailures(const std::vector<ScatterError::Failure>& failures, const BucketShardResolver& resolver);
std::string ShardList(const std::vector<ScatterError::Failure>& failures);

std::size_t SessionIndex(const ScatterSession::State& session, ShardId shard, const std::string& label);
std::vector<std::string> SessionBegin(const ScatterSession::State& session, std::size_t i, milliseconds left);

}  // namespace shardkit::detail::scatter

namespace shardkit {

struct ScatterSession::State {
  ScatterGather::Impl* impl = nullptr;
  std::vector<ShardId> shards;                // ascending
  std::vector<ConnectionPool::Lease> leases;  // leases[i] serves shards[i]
  // What begins shards[i]'s transaction, sent before its first statement in
  // the same pipeline: the setup statements, then the bucket step (empty:
  // none). begun[i]: sent.
  std::vector<std::string> setup;
  std::vector<std::string> bucket_steps;
  std::vector<bool> begun;
  detail::scatter::Clock::time_point deadline;
  std::string label;
  std::optional<std::string> failure;  // set once a fan-out failed: the session is unusable
  bool finished = false;
  std::chrono::microseconds open_time{0};
};

struct ScatterGather::Impl {
  Impl(BucketShardResolver& r, int threads)
      : resolver(r),
        workers(static_cast<std::size_t>(threads)),
        session_workers(static_cast<std::size_t>(threads)),
        canceller(static_cast<std::size_t>(threads)) {}
  ~Impl() {
    // Let queued statements see they are abandoned and stuck ones reach
    // their statement_timeout, so no thread outlives the pools it uses.
    workers.join();
    session_workers.join();
    canceller.join();
  }

  ScatterResult Execute(std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements,
                        const ScatterOptions& options, const std::shared_ptr<ScatterSession::State>& session = {},
                        const std::vector<std::string>& then = {});
  // Shards whose primary answered while reporting itself read-only (a
  // failover's fence): see scatter_fenced.cpp.
  struct ReadOnlyPrimary {
    ShardId shard;
    const ConnectionPool* pool;
  };
  void ConfirmReadOnlyPrimaries(const std::vector<ReadOnlyPrimary>& read_only, ScatterResult& result);
  void Record(const ScatterResult* result, std::size_t fanout, std::size_t failures, std::chrono::microseconds slowest,
              bool threw);

  // The bucket steps for `directory`, made again only when the resolver's
  // directory has changed since the last scatter.
  std::shared_ptr<const detail::scatter::BucketSetups> SetupsFor(
      const std::shared_ptr<const BucketDirectory>& directory) {
    std::lock_guard lock(setups_mutex);
    if (!setups || setups->directory->Version() != directory->Version()) {
      setups = std::make_shared<const detail::scatter::BucketSetups>(directory, resolver.ShardCount());
    }
    return setups;
  }

  BucketShardResolver& resolver;
  ReplicaMonitor* replicas = nullptr;
  DirectoryWatcher* watcher = nullptr;
  std::mutex setups_mutex;
  std::shared_ptr<const detail::scatter::BucketSetups> setups;
  boost::asio::thread_pool workers;
  boost::asio::thread_pool session_workers;  // COMMITs of sessions (ScatterSession)
  // As many as the workers: one scatter's cancels go out in parallel, and a
  // cancel stuck on an unreachable server (bounded by tcp_user_timeout) holds
  // up others no more than the stuck statement holds up a worker.
  boost::asio::thread_pool canceller;
  mutable std::mutex stats_mutex;
  ScatterStats stats;
  detail::LinkEstimates links;
};

}  // namespace shardkit
