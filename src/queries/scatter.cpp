#include "shardkit/queries/scatter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <deque>
#include <mutex>
#include <pqxx/except>
#include <string>

#include "pg/libpq_handle.hpp"
#include "pg/pipelined_statement.hpp"
#include "queries/scatter_internal.hpp"
#include "routing/replica_reads.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/routing/resolver.hpp"

// How the fan-out works and why:
//
// * Shards whose pool has a connection idle right away (the steady state)
//   are driven from the caller's thread: their pipelines are sent back to
//   back and read with non-blocking libpq, each socket polled with the
//   deadline as timeout. A thread per shard cost a wake-up and a context
//   switch or two per request, which at width 32 doubled the client CPU of
//   a cheap scatter (bench/scatter_bench.cpp). Every other shard's statement
//   (a connection to open, or a busy pool to wait for) is posted to a
//   thread pool first, so that it starts at once; it occupies one worker
//   thread from acquisition to COMMIT, and the caller then waits on a
//   condition variable, which is how it keeps control of the deadline
//   whatever a shard does.
// * Deadlock: each shard's statement acquires exactly one connection (from
//   its own shard's pool), runs, and returns it; it never waits for a second
//   connection while holding one. The caller's own (inline) statements take
//   only connections that are idle, never wait for one, and are finished
//   and given back before the caller waits for its workers. Without
//   hold-and-wait there is no cycle, so two scatters over pools of size 1
//   cannot deadlock; the worst they do is
//   queue behind each other, bounded by the deadline. It beats
//   acquiring every pool in ascending shard order (which also avoids cycles)
//   because ordered acquisition holds shard 0's connection idle while it waits
//   for shard 1's, and opens new connections one after another instead of in
//   parallel. Read-only fan-out needs no cross-shard snapshot, so nothing
//   requires holding all connections at once. Worker threads are not a
//   hidden second resource either: a statement holds a connection only while
//   it runs on a thread, so every holder can make progress. Sessions
//   (ScatterSession) hold connections between statements, so their
//   statements are driven from the caller's thread and their COMMITs run
//   on threads of their own (session_workers), where nothing ever waits
//   for a pool: a worker blocked in Acquire cannot stop the session that
//   holds the connection it waits for from finishing.
// * The deadline is enforced three ways. Acquisition waits until it at most.
//   Each statement runs in a transaction with SET LOCAL statement_timeout =
//   the time left, so the server stops the work itself. At the deadline the
//   caller has the canceller threads send a cancel request for the shards
//   still running (PQcancel opens a connection and may block, so not on the
//   caller's thread), waits a short grace for them to report why, and
//   returns; a statement still stuck (e.g. a server that stopped answering)
//   finishes in the background and its connection is discarded (an inline
//   one's connection is closed at once; its server stops the statement on
//   the cancel or at its statement_timeout).
// * One round trip per shard: BEGIN READ ONLY, SET LOCAL statement_timeout,
//   the statement and COMMIT go out together in libpq pipeline mode
//   (src/pg/pipelined_statement.hpp) and their results are read in order.
//   The statement uses the extended protocol (parameters are never spliced
//   into SQL, and a single statement is enforced). libpqxx's blocking
//   exec() would cost a round trip per step, and for cheap statements the
//   round trips and their client CPU were most of a scatter's time
//   (bench/scatter_bench.cpp). A failed step leaves the transaction aborted
//   and costs one more trip (ROLLBACK) before the connection goes back.
//   The pool's connections have libpqxx's reconnect-and-retry disabled, so a
//   broken connection cannot silently run the statement outside the
//   transaction. The pipeline also carries the buckets the scatter's
//   directory snapshot assigns to the shard (shardkit.buckets, ownership.hpp)
//   and their check: rows a bucket move has copied to its target, or not yet
//   deleted from its source, are seen on one shard only, and a shard that
//   cannot serve a bucket any more refuses (SK003), so the scatter runs again
//   with a refreshed directory (FollowDirectory) instead of answering short.
//
// Here: a shard's statement on a worker and the fan-out itself
// (ScatterGather::Impl::Execute). Beside it: the inline driver
// (scatter_inline.cpp), the failures' text (scatter_failure.cpp), sessions
// (scatter_session.cpp), statistics (scatter_stats.cpp), the run again on a
// newer directory (scatter_retry.cpp), and what they share in
// scatter_internal.hpp.

namespace shardkit::detail::scatter {

// Points a task at the replica chosen for it.
void ChooseReplica(ShardTask& task, const ReplicaChoice& choice) {
  task.replica = choice.replica->name;
  task.pool = choice.replica->pool;
  if (choice.verify) {
    const std::string check = detail::RequireReplayed(*choice.verify);
    task.replica_setup = task.bucket_setup != nullptr ? *task.bucket_setup + ", " + check : "SELECT " + check;
    task.bucket_setup = &task.replica_setup;
    task.replica_presync = detail::CaptureReplayed(*choice.verify);
  }
}

// What goes out for a task. Inside a session's transaction: the statement by
// itself (the caller's cancel at the deadline cuts it). Otherwise in a
// transaction of its own with the timeout and the bucket step.
detail::PipelineRequest Request(const ScatterState& state, const ShardTask& task,
                                const std::vector<const char*>& values, milliseconds left) {
  detail::PipelineRequest request;
  request.sql = &task.statement->sql;
  request.values = &values;
  const bool alone = task.pinned != nullptr;
  request.wrap = alone ? detail::PipelineRequest::Wrap::kStatementOnly : detail::PipelineRequest::Wrap::kTransaction;
  request.read_only = state.read_only;
  request.statement_timeout_ms = left.count();
  request.setup = task.bucket_setup;
  request.time_round_trip = true;
  if (task.replica) {
    request.begin = &detail::kReplicaBegin;
    if (!task.replica_presync.empty()) request.presync = &task.replica_presync;
  }
  if (!task.before.empty()) request.before = &task.before;
  if (!task.then.empty()) request.then = &task.then;
  return request;
}

// Parameters as C strings: a null pointer is sent as SQL NULL.
std::vector<const char*> ParameterValues(const ShardTask& task) {
  std::vector<const char*> values;
  values.reserve(task.statement->params.size());
  for (const auto& p : task.statement->params) values.push_back(p ? p->c_str() : nullptr);
  return values;
}

// Runs the statement on an acquired connection: BEGIN + SET LOCAL, the
// statement, COMMIT. Throws on failure; the lease is marked for discard when
// its session can no longer be trusted. `bytes`: the rows' payload.
pg::Rows ExecuteOn(ScatterState& state, ShardTask& task, ConnectionPool::Lease& lease, std::size_t& bytes) {
  pqxx::connection_base& connection = lease.Connection();
  {
    std::lock_guard lock(task.cancel_mutex);
    if (task.cancel_requested) throw DeadlineMissed("the deadline passed before the statement could start");
    task.active = lease.Canceller();
  }
  struct Deactivate {
    ShardTask& task;
    ConnectionPool::Lease& lease;
    ~Deactivate() {
      std::lock_guard lock(task.cancel_mutex);
      task.active.reset();
      // A cancel request may still be in flight to the server; never hand
      // this session to someone else.
      if (task.cancel_requested) lease.Discard();
    }
  } deactivate{task, lease};

  const auto left = std::chrono::ceil<milliseconds>(state.deadline - Clock::now());
  if (left.count() <= 0) throw DeadlineMissed("the deadline passed before the statement could start");

  const auto values = ParameterValues(task);
  const auto request = Request(state, task, values, left);
  bool reusable = true;
  try {
    pg::Rows rows = detail::RunPipelined(connection, request, reusable, &bytes, &task.timing);
    task.read_only_server = detail::ReportsReadOnly(connection);
    if (!reusable) lease.Discard();
    return rows;
  } catch (...) {
    if (!reusable) lease.Discard();
    throw;
  }
}

// Publishes a task's outcome to the caller.
void Complete(ScatterState& state, ShardTask& task, Clock::time_point started, std::optional<pg::Rows> rows,
              std::string cause, std::string sqlstate, std::size_t bytes) {
  if (!rows) bytes = 0;
  const auto finished = Clock::now();
  if (rows && state.links != nullptr)
    state.links->Record(task.shard, task.timing.round_trip, bytes, task.timing.transfer);
  std::lock_guard lock(state.mutex);
  task.phase = Phase::kDone;
  task.done = true;
  task.rows = std::move(rows);
  task.cause = std::move(cause);
  task.sqlstate = std::move(sqlstate);
  task.bytes = bytes;
  task.elapsed = duration_cast<microseconds>(finished - started);
  task.queued = duration_cast<microseconds>(started - state.start);
  --state.remaining;
  // Only the last one wakes the caller: one wake-up per scatter, not per shard.
  if (state.remaining == 0) state.finished.notify_all();
}

void RunShard(ScatterState& state, ShardTask& task) {
  const auto started = Clock::now();
  std::optional<pg::Rows> rows;
  std::size_t bytes = 0;
  std::string cause;
  std::string sqlstate;
  if (state.abandoned.load() || started >= state.deadline) {
    cause = fmt::format(
        "not started before the deadline ({} ms): every worker thread was busy; give the "
        "scatter a later deadline or more threads",
        Millis(state.deadline - state.start));
  } else {
    for (;;) {
      try {
        task.phase = Phase::kAcquiring;
        auto lease = task.pool->Acquire(state.deadline);
        task.phase = Phase::kExecuting;
        rows = ExecuteOn(state, task, lease, bytes);
      } catch (const std::exception& error) {
        // A replica's failure: its primary answers instead.
        if (FallBack(state, task, error)) continue;
        Describe(task, error, started, cause, sqlstate);
        rows.reset();
      }
      break;
    }
  }
  Complete(state, task, started, std::move(rows), std::move(cause), std::move(sqlstate), bytes);
}

}  // namespace shardkit::detail::scatter

namespace shardkit {

using detail::scatter::Clock;
using detail::scatter::DriveInline;
using detail::scatter::InlineCall;
using detail::scatter::JoinFailures;
using detail::scatter::kCancelGrace;
using detail::scatter::kDefaultTimeout;
using detail::scatter::kMaxTimeout;
using detail::scatter::Millis;
using detail::scatter::PhaseName;
using detail::scatter::RunShard;
using detail::scatter::ScatterState;
using detail::scatter::SessionBegin;
using detail::scatter::SessionIndex;
using detail::scatter::ShardList;
using detail::scatter::ShardTask;
using detail::scatter::Statement;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

ScatterGather::ScatterGather(BucketShardResolver& resolver, std::optional<int> threads) : resolver_(resolver) {
  const int count = threads.value_or(std::max(1, resolver.ShardCount()));
  if (count < 1) {
    throw Error(fmt::format("ScatterGather: threads must be at least 1 (got {})", count));
  }
  impl_ = std::make_unique<Impl>(resolver, count);
}

ScatterGather::~ScatterGather() = default;

void ScatterGather::FollowDirectory(DirectoryWatcher* watcher) noexcept {
  watcher_ = watcher;
  impl_->watcher = watcher;
}

void ScatterGather::ReadReplicas(ReplicaMonitor* monitor) noexcept {
  impl_->replicas = monitor;
}

ScatterResult ScatterGather::Run(const std::string& sql, const SqlParams& params, const ScatterOptions& options) {
  std::vector<ShardId> shards;
  if (options.shards) {
    shards = *options.shards;
  } else {
    for (int s = 0; s < resolver_.ShardCount(); ++s) shards.push_back(ShardId{s});
  }
  auto statement = std::make_shared<const Statement>(Statement{sql, params});
  std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements;
  statements.reserve(shards.size());
  for (ShardId s : shards) statements.emplace_back(s, statement);
  return ExecuteFollowingDirectory(std::move(statements), options);
}

ScatterResult ScatterGather::RunPerShard(const std::vector<std::pair<ShardId, Statement>>& statements,
                                         const ScatterOptions& options) {
  std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> copies;
  copies.reserve(statements.size());
  for (const auto& [shard, statement] : statements) {
    copies.emplace_back(shard, std::make_shared<const Statement>(statement));
  }
  return ExecuteFollowingDirectory(std::move(copies), options);
}

ScatterResult ScatterGather::Impl::Execute(std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements,
                                           const ScatterOptions& options,
                                           const std::shared_ptr<ScatterSession::State>& session,
                                           const std::vector<std::string>& then) {
  const auto start = Clock::now();
  const auto deadline = std::min(options.deadline.value_or(start + kDefaultTimeout), start + kMaxTimeout);
  const std::string label = options.label.empty() ? std::string() : fmt::format(" '{}'", options.label);

  std::sort(statements.begin(), statements.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < statements.size(); ++i) {
    (void)resolver.Pool(statements[i].first);  // throws UnknownShard
    if (i > 0 && statements[i].first == statements[i - 1].first) {
      throw Error(fmt::format("scatter{}: shard {} is listed twice; list each shard once", label, statements[i].first));
    }
  }
  ScatterResult result;
  if (statements.empty()) return result;

  // One directory snapshot assigns every bucket to exactly one shard.
  const auto directory = resolver.Directory();
  auto state = std::make_shared<ScatterState>();
  state->start = start;
  state->deadline = deadline;
  state->read_only = options.read_only;
  state->remaining = statements.size();
  state->session = session;
  state->links = &links;
  // Replicas for read-only scatters outside sessions (a session's
  // temporary tables cannot be made on a hot standby).
  const bool on_replicas = replicas != nullptr && options.read.UsesReplicas() && options.read_only && !session;
  state->replicas = replicas;
  state->fall_back_to_primary = options.read.preference == ReadPreference::kReplicaPreferred;
  if (options.directory_buckets && session == nullptr) {
    state->bucket_setups = SetupsFor(directory);
    if (options.buckets) {
      // The shards this snapshot gives the buckets to: the same snapshot
      // fences them, so a retry with a newer one picks them again.
      std::vector<ShardId> owners;
      for (const BucketId bucket : *options.buckets) owners.push_back(directory->ShardOf(bucket));
      std::erase_if(statements,
                    [&](const auto& s) { return std::find(owners.begin(), owners.end(), s.first) == owners.end(); });
      state->remaining = statements.size();
      if (statements.empty()) {
        result.directory_version = directory->Version();
        return result;
      }
    }
  }
  // Every shard is checked to be in the session before any is marked begun.
  std::vector<std::size_t> session_index;
  if (session) {
    for (const auto& [shard, statement] : statements) session_index.push_back(SessionIndex(*session, shard, label));
  }
  for (auto& [shard, statement] : statements) {
    auto task = std::make_unique<ShardTask>();
    task->shard = shard;
    task->pool = &resolver.Pool(shard);
    task->statement = std::move(statement);
    if (session) {
      const std::size_t index = session_index[state->tasks.size()];
      task->pinned = &session->leases[index];
      task->then = then;
      if (!session->begun[index]) {
        // The session's transaction begins in this shard's first pipeline.
        task->before = SessionBegin(*session, index, std::chrono::ceil<milliseconds>(deadline - Clock::now()));
        session->begun[index] = true;
      }
    }
    if (state->bucket_setups) {
      task->bucket_setup = &state->bucket_setups->by_shard[static_cast<std::size_t>(ToInt(shard))];
    }
    task->primary = task->pool;
    task->primary_setup = task->bucket_setup;
    if (on_replicas) {
      // Throws ReplicaUnavailable (replicas only, none fit): before any
      // statement went out.
      ReplicaChoice choice = replicas->Choose(shard, options.read);
      if (choice.replica) ChooseReplica(*task, choice);
    }
    state->tasks.push_back(std::move(task));
  }
  // Shards with a connection idle right now, and a session's statements on
  // its own connections, are driven from this thread; the others
  // (connecting, or waiting for a busy pool) go to the workers first, so
  // that they start at once.
  std::deque<InlineCall> inline_calls;  // stays put: calls point at each other's parameters
  for (std::size_t i = 0; i < state->tasks.size(); ++i) {
    ShardTask& task = *state->tasks[i];
    if (task.pinned != nullptr) {
      InlineCall& c = inline_calls.emplace_back();
      c.task = &task;
      c.lease = task.pinned;
      continue;
    }
    if (!session) {
      if (auto lease = task.pool->TryAcquireIdle()) {
        InlineCall& c = inline_calls.emplace_back();
        c.task = &task;
        c.owned = std::make_shared<ConnectionPool::Lease>(std::move(*lease));
        c.lease = c.owned.get();
        continue;
      }
    }
    boost::asio::post(workers, [state, i] { RunShard(*state, *state->tasks[i]); });
  }
  if (!inline_calls.empty()) DriveInline(state, inline_calls, workers, canceller);

  std::unique_lock lock(state->mutex);
  const auto all_done = [&] { return state->remaining == 0; };
  if (!state->finished.wait_until(lock, deadline, all_done)) {
    for (std::size_t i = 0; i < state->tasks.size(); ++i) {
      if (!state->tasks[i]->done) {
        boost::asio::post(canceller, [state, i] { state->tasks[i]->Cancel(); });
      }
    }
    state->finished.wait_until(lock, deadline + kCancelGrace, all_done);
    state->abandoned = true;
  }

  const auto now = Clock::now();
  result.shards.reserve(state->tasks.size());
  microseconds slowest_any{0};
  std::vector<Impl::ReadOnlyPrimary> read_only;
  for (auto& task_ptr : state->tasks) {
    ShardTask& task = *task_ptr;
    if (task.done && task.rows) {
      ShardResult shard;
      shard.shard = task.shard;
      shard.rows = std::move(*task.rows);
      shard.elapsed = task.elapsed;
      shard.queued = task.queued;
      shard.bytes = task.bytes;
      shard.session = task.pool->Facts();
      shard.on_replica = task.replica.has_value();
      shard.server = task.replica ? *task.replica : resolver.Servers(task.shard).primary.name;
      if (task.fell_back) ++result.replica_fallbacks;
      if (task.read_only_server && !task.replica) read_only.push_back({task.shard, task.pool});
      if (!result.slowest_shard || shard.elapsed > result.slowest_elapsed) {
        result.slowest_shard = shard.shard;
        result.slowest_elapsed = shard.elapsed;
      }
      slowest_any = std::max(slowest_any, shard.elapsed);
      result.shards.push_back(std::move(shard));
    } else if (task.done) {
      result.failures.push_back({task.shard, task.cause, task.sqlstate, task.stale_directory});
      slowest_any = std::max(slowest_any, task.elapsed);
    } else {
      result.failures.push_back(
          {task.shard, fmt::format("no answer within the deadline ({} ms) while {}; the statement was cancelled. "
                                   "Check that shard's server ({}) or give the scatter a later deadline",
                                   Millis(deadline - start), PhaseName(task.phase.load()), task.pool->RedactedDsn())});
      slowest_any = std::max(slowest_any, duration_cast<microseconds>(now - start));
    }
  }
  lock.unlock();
  ConfirmReadOnlyPrimaries(read_only, result);
  result.elapsed = duration_cast<microseconds>(now - start);
  result.directory_version = directory->Version();

  const std::size_t fanout = state->tasks.size();
  if (!result.failures.empty() && (!options.allow_partial || result.shards.empty())) {
    Record(nullptr, fanout, result.failures.size(), slowest_any, true);
    // A statement the servers refused (a SQL error, not an unreachable or
    // slow shard) is fixed in the statement: waiting or a partial answer
    // does not help.
    const bool statement_error =
        std::all_of(result.failures.begin(), result.failures.end(), [](const ScatterError::Failure& f) {
          return !f.sqlstate.empty() && !f.stale_directory && !IsConnectionLost(f.sqlstate) &&
                 !IsServerGoingAway(f.sqlstate) && f.sqlstate != "57014" && f.sqlstate != "53300";
        });
    const std::string advice =
        statement_error         ? "Nothing was returned: the servers refused the statement; fix it"
        : options.allow_partial ? "No shard answered, so there is no partial result to return"
                                : "Nothing was returned: fix or wait for those shards, give a later deadline, or set "
                                  "allow_partial to accept an answer without them";
    std::string message =
        fmt::format("scatter{} failed on {} of {} shards after {} ms: {}. {}", label, result.failures.size(), fanout,
                    Millis(now - start), JoinFailures(result.failures, resolver), advice);
    throw ScatterError(message, std::move(result.failures));
  }
  if (!result.failures.empty()) {
    result.warning = fmt::format(
        "partial result{}: shard{} {} missing ({} of {} answered); counts, sums and top-k computed from it leave "
        "those shards' rows out. {}",
        label, result.failures.size() > 1 ? "s" : "", ShardList(result.failures), result.shards.size(), fanout,
        JoinFailures(result.failures, resolver));
  }
  Record(&result, fanout, result.failures.size(), slowest_any, false);
  return result;
}

}  // namespace shardkit
