#include "shardkit/queries/scatter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <poll.h>
#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/prepared_statement>
#include <stdexcept>
#include <string>
#include <thread>

#include "pg/pipelined_statement.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/pool/pool.hpp"
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
//   queue behind each other, bounded by the deadline. This was preferred to
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

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr auto kDefaultTimeout = std::chrono::seconds(30);
// After the deadline: time for cancelled shards to report their cause.
constexpr auto kCancelGrace = milliseconds(50);
// statement_timeout fits in an int of milliseconds; a week is plenty.
constexpr auto kMaxTimeout = std::chrono::hours(24 * 7);
constexpr const char* kQueryCanceled = "57014";
constexpr const char* kReadOnlyTransaction = "25006";
constexpr const char* kUndefinedFunction = "42883";
constexpr const char* kNotReadable = "SK003";

using Statement = ScatterGather::Statement;

// Thrown inside a worker when the deadline passed before a step could start.
class DeadlineMissed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Phase : int { kQueued, kAcquiring, kExecuting, kDone };

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kQueued:
      return "waiting for a free worker thread";
    case Phase::kAcquiring:
      return "acquiring a connection";
    case Phase::kExecuting:
      return "executing";
    case Phase::kDone:
      break;
  }
  return "finishing";
}

// Server messages end in a newline and start with "ERROR:  ".
std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  for (const char* prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.erase(0, std::char_traits<char>::length(prefix));
  }
  return text;
}

// Server messages may go on with "LINE 1: ..." and a caret line.
std::string FirstLine(std::string text) {
  if (const auto end = text.find('\n'); end != std::string::npos) text.resize(end);
  return text;
}

long long Millis(Clock::duration d) { return duration_cast<milliseconds>(d).count(); }

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
  // Points into ScatterState::bucket_setups.
  const std::string* bucket_setup = nullptr;

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
  std::optional<pqxx::result> rows;
  std::string cause;
  std::string sqlstate;
  bool stale_directory = false;
  microseconds elapsed{0};
  microseconds queued{0};
  std::size_t bytes = 0;

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
      // A number list computed here (SET takes no parameters); set_config
      // runs before the check: a target list is evaluated in order.
      by_shard.push_back(fmt::format("SELECT set_config('shardkit.buckets', '{}', true), shardkit_check_buckets()",
                                     BucketSet::Of(*directory, ShardId{s}).Setting()));
    }
  }
};

struct ScatterState {
  // A session's fan-out keeps the session's connections alive until its
  // last task is done, even after the caller gave up on it.
  std::shared_ptr<ScatterSession::State> session;
  std::shared_ptr<const BucketSetups> bucket_setups;  // null: no bucket step
  Clock::time_point start;
  Clock::time_point deadline;
  bool read_only = true;
  std::vector<std::unique_ptr<ShardTask>> tasks;  // in shard order

  std::mutex mutex;
  std::condition_variable finished;
  std::size_t remaining = 0;
  std::atomic<bool> abandoned{false};  // the caller has returned
};

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
pqxx::result ExecuteOn(ScatterState& state, ShardTask& task, ConnectionPool::Lease& lease, std::size_t& bytes) {
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
    pqxx::result rows = detail::RunPipelined(connection, request, reusable, &bytes);
    if (!reusable) lease.Discard();
    return rows;
  } catch (...) {
    if (!reusable) lease.Discard();
    throw;
  }
}

std::string DescribeFailure(const ShardTask& task, const std::exception& error, bool cancelled,
                            Clock::duration elapsed) {
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) {
    if (sql->sqlstate() == kQueryCanceled) {
      return fmt::format("cut at the deadline after {} ms ({}); give the scatter a later deadline or make "
                         "the statement cheaper",
                         Millis(elapsed), Trim(sql->what()));
    }
    const char* advice = sql->sqlstate() == kReadOnlyTransaction
                             ? "scatters are read-only unless ScatterOptions::read_only is false"
                         : sql->sqlstate() == kNotReadable
                             ? "the scatter's directory is out of date: refresh it (ScatterGather::FollowDirectory "
                               "does) and run again"
                         : sql->sqlstate() == kUndefinedFunction && std::string_view(sql->what()).find("shardkit_") !=
                                                                        std::string_view::npos
                             ? "this shard lacks shardkit's bucket functions: migrate it (shardctl migrate), or set "
                               "ScatterOptions::directory_buckets = false"
                             : "fix the statement or this shard's schema";
    return fmt::format("statement failed (SQLSTATE {}): {}; {}", sql->sqlstate().empty() ? "?" : sql->sqlstate(),
                       FirstLine(Trim(sql->what())), advice);
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr) {
    return fmt::format("connection to {} lost{}: {}; the server closed the session or cannot be reached, "
                       "check that server",
                       task.pool->RedactedDsn(), cancelled ? " after the deadline" : "",
                       RedactDsn(Trim(error.what())));
  }
  if (dynamic_cast<const DeadlineMissed*>(&error) != nullptr) {
    return fmt::format("{} after {} ms; give the scatter a later deadline", error.what(), Millis(elapsed));
  }
  // Pool errors (ShardUnavailable, PoolTimeout, PoolExhausted) already say
  // which shard and what to do, with the connection string redacted.
  return RedactDsn(Trim(error.what()));
}

// The failure's SQLSTATE for ScatterError::Failure (see errors.hpp).
std::string SqlStateOf(const std::exception& error) {
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) return sql->sqlstate();
  if (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr) return kSqlStateConnectionFailure;
  if (const auto* shard = dynamic_cast<const ShardError*>(&error)) return shard->sqlstate();
  return {};
}

// The cause and SQLSTATE of a failed task.
void Describe(ShardTask& task, const std::exception& error, Clock::time_point started, std::string& cause,
              std::string& sqlstate) {
  bool cancelled = false;
  {
    std::lock_guard lock(task.cancel_mutex);
    cancelled = task.cancel_requested;
  }
  cause = DescribeFailure(task, error, cancelled, Clock::now() - started);
  sqlstate = SqlStateOf(error);
  if (const auto refusal = ParseFenceRefusal(error)) {
    task.stale_directory = refusal->kind == BucketRefused::Kind::kNotReadable;
  }
}

// Publishes a task's outcome to the caller.
void Complete(ScatterState& state, ShardTask& task, Clock::time_point started, std::optional<pqxx::result> rows,
              std::string cause, std::string sqlstate, std::size_t bytes) {
  if (!rows) bytes = 0;
  const auto finished = Clock::now();
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
  std::optional<pqxx::result> rows;
  std::size_t bytes = 0;
  std::string cause;
  std::string sqlstate;
  if (state.abandoned.load() || started >= state.deadline) {
    cause = fmt::format("not started before the deadline ({} ms): every worker thread was busy; give the "
                        "scatter a later deadline or more threads",
                        Millis(state.deadline - state.start));
  } else {
    try {
      task.phase = Phase::kAcquiring;
      auto lease = task.pool->Acquire(state.deadline);
      task.phase = Phase::kExecuting;
      rows = ExecuteOn(state, task, lease, bytes);
    } catch (const std::exception& error) {
      Describe(task, error, started, cause, sqlstate);
      rows.reset();
    }
  }
  Complete(state, task, started, std::move(rows), std::move(cause), std::move(sqlstate), bytes);
}

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

// Ends an inline call's hold on its connection: as Deactivate above, a
// connection a cancel may still be travelling to is never reused.
void Deactivate(InlineCall& c) {
  std::lock_guard lock(c.task->cancel_mutex);
  c.task->active.reset();
  if (c.task->cancel_requested) c.lease->Discard();
}

// A call that could not be sent.
void FailInline(ScatterState& state, InlineCall& c, const std::exception& error, bool discard) {
  c.open = false;
  if (discard) c.lease->Discard();
  c.call.reset();
  std::string cause;
  std::string sqlstate;
  Describe(*c.task, error, c.started, cause, sqlstate);
  Deactivate(c);
  c.lease = nullptr;
  c.owned.reset();
  Complete(state, *c.task, c.started, std::nullopt, std::move(cause), std::move(sqlstate), 0);
}

// Prepares a call (sends nothing yet).
void StartInline(ScatterState& state, InlineCall& c, const InlineCall* previous) {
  ShardTask& task = *c.task;
  c.started = state.start;
  task.phase = Phase::kExecuting;
  {
    std::lock_guard lock(task.cancel_mutex);
    task.active = c.lease->Canceller();
  }
  const auto left = std::chrono::ceil<milliseconds>(state.deadline - Clock::now());
  try {
    if (left.count() <= 0) throw DeadlineMissed("the deadline passed before the statement could start");
    // Run() sends one statement everywhere: its parameters are converted once.
    if (previous != nullptr && previous->shared_values != nullptr && previous->task->statement == task.statement) {
      c.shared_values = previous->shared_values;
    } else {
      c.values = ParameterValues(task);
      c.shared_values = &c.values;
    }
    c.call.emplace(c.lease->Connection(), Request(state, task, *c.shared_values, left), /*nonblocking=*/true);
    c.open = true;
  } catch (const std::exception& error) {
    FailInline(state, c, error, dynamic_cast<const DeadlineMissed*>(&error) == nullptr);
  }
}

void SendInline(ScatterState& state, InlineCall& c) {
  try {
    c.call->Send();
  } catch (const std::exception& error) {
    FailInline(state, c, error, true);
  }
}

void FinishInline(ScatterState& state, InlineCall& c, boost::asio::thread_pool& workers) {
  ShardTask& task = *c.task;
  c.open = false;
  std::optional<pqxx::result> rows;
  std::string cause;
  std::string sqlstate;
  bool reusable = true;
  bool rollback = false;
  try {
    rows = c.call->Finish(reusable, &rollback);
  } catch (const std::exception& error) {
    Describe(task, error, c.started, cause, sqlstate);
  }
  const std::size_t bytes = c.call->Bytes();
  c.call.reset();
  // A failure aborts a session's transaction: its connection is never reused.
  if (!reusable || (!rows && !c.owned)) c.lease->Discard();
  Deactivate(c);
  if (rollback && c.owned) {
    // The failed transaction is ended on a worker: the caller never blocks
    // on a round trip outside its poll.
    boost::asio::post(workers, [lease = std::move(c.owned)] {
      if (!detail::RollBack(lease->Connection())) lease->Discard();
      lease->Release();
    });
  }
  c.lease = nullptr;
  c.owned.reset();
  Complete(state, task, c.started, std::move(rows), std::move(cause), std::move(sqlstate), bytes);
}

// Drives the inline calls until each has finished or deadline + grace has
// passed; at the deadline it has the unfinished ones cancelled, after the
// grace it gives up on them (their connections are closed; the servers
// stop the statements at their statement_timeout or on the cancel).
//
// The calls are read in shard order, waiting on one socket at a time, as a
// plain libpq loop would: the answers arrive at about the same time, the
// scatter waits for the last one anyway, and a poll over every socket after
// each answer costs more client CPU than it saves (bench/scatter_bench.cpp).
void DriveInline(const std::shared_ptr<ScatterState>& shared_state, std::deque<InlineCall>& calls,
                 boost::asio::thread_pool& workers, boost::asio::thread_pool& canceller) {
  ScatterState& state = *shared_state;
  const InlineCall* previous = nullptr;
  for (auto& c : calls) {
    StartInline(state, c, previous);
    previous = &c;
  }
  // Back to back, after all the bookkeeping: the servers start at about the
  // same time, and this thread is not preempted by the first ones between
  // its sends.
  for (auto& c : calls) {
    if (c.open) SendInline(state, c);
  }
  bool cancelled = false;
  for (auto& c : calls) {
    while (c.open) {
      pollfd fd{c.call->Socket(), static_cast<short>(POLLIN | (c.call->WantsWrite() ? POLLOUT : 0)), 0};
      const auto now = Clock::now();
      if (!cancelled && now >= state.deadline) {
        cancelled = true;
        for (auto& other : calls) {
          // The cancel may run after the caller has returned: it keeps the
          // state, which owns the task, alive.
          if (other.open) boost::asio::post(canceller, [shared_state, task = other.task] { task->Cancel(); });
        }
      }
      const auto limit = cancelled ? state.deadline + kCancelGrace : state.deadline;
      if (now >= limit) {
        for (auto& other : calls) {
          if (!other.open) continue;
          // Not done: reported as no answer within the deadline. The task
          // keeps its cancel handle, so the caller's cancels still reach
          // the server.
          other.open = false;
          other.call.reset();
          other.lease->Discard();
          other.lease = nullptr;
          other.owned.reset();
        }
        return;
      }
      const auto wait = std::chrono::ceil<milliseconds>(limit - now).count();
      const int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(wait, 60'000)));
      if (ready < 0 && errno != EINTR) c.call->Wait();  // cannot wait on the socket: block on libpq itself
      if (ready != 0 && c.call->Advance()) FinishInline(state, c, workers);
    }
  }
}

std::string JoinFailures(const std::vector<ScatterError::Failure>& failures, const BucketShardResolver& resolver) {
  std::string text;
  for (const auto& f : failures) {
    if (!text.empty()) text += "; ";
    text += fmt::format("shard {} ({}): {}", f.shard, resolver.ShardName(f.shard), f.cause);
  }
  return text;
}

std::string ShardList(const std::vector<ScatterError::Failure>& failures) {
  std::string text;
  for (const auto& f : failures) {
    if (!text.empty()) text += ", ";
    text += std::to_string(ToInt(f.shard));
  }
  return text;
}

}  // namespace

std::size_t ScatterResult::TotalRows() const noexcept {
  std::size_t total = 0;
  for (const auto& s : shards) total += s.rows.size();
  return total;
}

std::size_t ScatterResult::TotalBytes() const noexcept {
  std::size_t total = 0;
  for (const auto& s : shards) total += s.bytes;
  return total;
}

struct ScatterSession::State {
  ScatterGather::Impl* impl = nullptr;
  std::vector<ShardId> shards;               // ascending
  std::vector<ConnectionPool::Lease> leases;  // leases[i] serves shards[i]
  // What begins shards[i]'s transaction, sent before its first statement in
  // the same pipeline: the setup statements, then the bucket step (empty:
  // none). begun[i]: sent.
  std::vector<std::string> setup;
  std::vector<std::string> bucket_steps;
  std::vector<bool> begun;
  Clock::time_point deadline;
  std::string label;
  std::optional<std::string> failure;  // set once a fan-out failed: the session is unusable
  bool finished = false;
  microseconds open_time{0};
};

namespace {
std::size_t SessionIndex(const ScatterSession::State& session, ShardId shard, const std::string& label) {
  const auto it = std::lower_bound(session.shards.begin(), session.shards.end(), shard);
  if (it == session.shards.end() || *it != shard) {
    throw Error(fmt::format("scatter session{}: shard {} is not part of this session; open the session on it",
                            label, shard));
  }
  return static_cast<std::size_t>(it - session.shards.begin());
}

// The statements that begin a session's transaction on one shard: REPEATABLE
// READ, the time left as statement_timeout, the setup, the bucket step, and
// read-only from then on.
std::vector<std::string> SessionBegin(const ScatterSession::State& session, std::size_t i, milliseconds left) {
  std::vector<std::string> steps = {"BEGIN ISOLATION LEVEL REPEATABLE READ",
                                    "SET LOCAL statement_timeout = " + std::to_string(std::max<long long>(1, left.count()))};
  steps.insert(steps.end(), session.setup.begin(), session.setup.end());
  if (!session.bucket_steps[i].empty()) steps.push_back(session.bucket_steps[i]);
  steps.emplace_back("SET TRANSACTION READ ONLY");
  return steps;
}
}  // namespace

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
  void Record(const ScatterResult* result, std::size_t fanout, std::size_t failures, microseconds slowest,
              bool threw);

  // The bucket steps for `directory`, made again only when the resolver's
  // directory has changed since the last scatter.
  std::shared_ptr<const BucketSetups> SetupsFor(const std::shared_ptr<const BucketDirectory>& directory) {
    std::lock_guard lock(setups_mutex);
    if (!setups || setups->directory->Version() != directory->Version()) {
      setups = std::make_shared<const BucketSetups>(directory, resolver.ShardCount());
    }
    return setups;
  }

  BucketShardResolver& resolver;
  std::mutex setups_mutex;
  std::shared_ptr<const BucketSetups> setups;
  boost::asio::thread_pool workers;
  boost::asio::thread_pool session_workers;  // COMMITs of sessions (ScatterSession)
  // As many as the workers: one scatter's cancels go out in parallel, and a
  // cancel stuck on an unreachable server (bounded by tcp_user_timeout) holds
  // up others no more than the stuck statement holds up a worker.
  boost::asio::thread_pool canceller;
  mutable std::mutex stats_mutex;
  ScatterStats stats;
};

ScatterGather::ScatterGather(BucketShardResolver& resolver, std::optional<int> threads) : resolver_(resolver) {
  const int count = threads.value_or(std::max(1, resolver.ShardCount()));
  if (count < 1) {
    throw Error(fmt::format("ScatterGather: threads must be at least 1 (got {})", count));
  }
  impl_ = std::make_unique<Impl>(resolver, count);
}

ScatterGather::~ScatterGather() = default;

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

ScatterResult ScatterGather::ExecuteFollowingDirectory(
    std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements, const ScatterOptions& options) {
  constexpr int kMaxDirectoryRetries = 3;
  // A shard refuses a bucket from the moment a move retires it, a few ms
  // before the catalog's directory flips: while the catalog has nothing
  // newer, run again after a pause (1, 2, 4 ... ms), this long in all.
  constexpr auto kMaxFlipWait = milliseconds(250);
  ScatterOptions attempt = options;
  attempt.deadline = std::min(options.deadline.value_or(Clock::now() + kDefaultTimeout), Clock::now() + kMaxTimeout);
  int newer_directories = 0;
  auto waited = milliseconds(0);
  auto pause = milliseconds(1);
  for (int retry = 0;; ++retry) {
    try {
      ScatterResult result = impl_->Execute(statements, attempt);
      result.directory_retries = retry;
      return result;
    } catch (const ScatterError& e) {
      const bool stale = std::any_of(e.failures().begin(), e.failures().end(),
                                     [](const ScatterError::Failure& f) { return f.stale_directory; });
      if (!stale || watcher_ == nullptr || Clock::now() >= *attempt.deadline) throw;
      // A shard refused a bucket this directory gave it: the whole scatter
      // runs again with a newer directory, never a mix of two.
      const std::int64_t used = resolver_.Directory()->Version();
      std::int64_t now_version = used;
      try {
        now_version = watcher_->RefreshNow();
      } catch (const Error&) {
        throw e;
      }
      if (now_version > used) {
        if (++newer_directories > kMaxDirectoryRetries) throw;
      } else {
        if (waited >= kMaxFlipWait || Clock::now() + pause >= *attempt.deadline) throw;
        std::this_thread::sleep_for(pause);
        waited += pause;
        pause = std::min(pause * 2, milliseconds(32));
      }
    }
  }
}

ScatterStats ScatterGather::Stats() const {
  std::lock_guard lock(impl_->stats_mutex);
  return impl_->stats;
}

void ScatterGather::Impl::Record(const ScatterResult* result, std::size_t fanout, std::size_t failures,
                                 microseconds slowest, bool threw) {
  std::lock_guard lock(stats_mutex);
  if (fanout > 1) {
    ++stats.scatters;
  } else {
    ++stats.single_shard;
  }
  stats.shard_requests += fanout;
  stats.max_fanout = std::max<std::uint64_t>(stats.max_fanout, fanout);
  stats.shard_failures += failures;
  if (threw) ++stats.failed;
  if (result != nullptr) {
    if (!result->failures.empty()) ++stats.partial;
    stats.rows += result->TotalRows();
    stats.bytes += result->TotalBytes();
  }
  stats.total_slowest += slowest;
  stats.max_slowest = std::max(stats.max_slowest, slowest);
}

ScatterResult ScatterGather::Impl::Execute(
    std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> statements, const ScatterOptions& options,
    const std::shared_ptr<ScatterSession::State>& session,
    const std::vector<std::string>& then) {
  const auto start = Clock::now();
  const auto deadline = std::min(options.deadline.value_or(start + kDefaultTimeout), start + kMaxTimeout);
  const std::string label = options.label.empty() ? std::string() : fmt::format(" '{}'", options.label);

  std::sort(statements.begin(), statements.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < statements.size(); ++i) {
    (void)resolver.Pool(statements[i].first);  // throws UnknownShard
    if (i > 0 && statements[i].first == statements[i - 1].first) {
      throw Error(fmt::format("scatter{}: shard {} is listed twice; list each shard once", label,
                              statements[i].first));
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
  if (options.directory_buckets && session == nullptr) {
    state->bucket_setups = SetupsFor(directory);
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
                                   Millis(deadline - start), PhaseName(task.phase.load()),
                                   task.pool->RedactedDsn())});
      slowest_any = std::max(slowest_any, duration_cast<microseconds>(now - start));
    }
  }
  lock.unlock();
  result.elapsed = duration_cast<microseconds>(now - start);
  result.directory_version = directory->Version();

  const std::size_t fanout = state->tasks.size();
  if (!result.failures.empty() && (!options.allow_partial || result.shards.empty())) {
    Record(nullptr, fanout, result.failures.size(), slowest_any, true);
    const std::string advice =
        options.allow_partial
            ? "No shard answered, so there is no partial result to return"
            : "Nothing was returned: fix or wait for those shards, give a later deadline, or set "
              "allow_partial to accept an answer without them";
    std::string message = fmt::format("scatter{} failed on {} of {} shards after {} ms: {}. {}", label,
                                      result.failures.size(), fanout, Millis(now - start),
                                      JoinFailures(result.failures, resolver), advice);
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

namespace shardkit {

// ------------------------------------------------------------------ session

ScatterSession::ScatterSession(ScatterGather& scatter, SessionOptions options)
    : state_(std::make_shared<State>()) {
  State& st = *state_;
  const auto start = Clock::now();
  st.impl = scatter.impl_.get();
  st.deadline = std::min(options.deadline.value_or(start + kDefaultTimeout), start + kMaxTimeout);
  st.label = options.label.empty() ? std::string() : fmt::format(" '{}'", options.label);
  BucketShardResolver& resolver = scatter.Resolver();
  if (options.shards) {
    st.shards = *options.shards;
  } else {
    for (int s = 0; s < resolver.ShardCount(); ++s) st.shards.push_back(ShardId{s});
  }
  std::sort(st.shards.begin(), st.shards.end());
  for (std::size_t i = 0; i < st.shards.size(); ++i) {
    (void)resolver.Pool(st.shards[i]);  // throws UnknownShard
    if (i > 0 && st.shards[i] == st.shards[i - 1]) {
      throw Error(fmt::format("scatter session{}: shard {} is listed twice; list each shard once", st.label,
                              st.shards[i]));
    }
  }

  // Ascending shard order (see the header): every shard that has a
  // connection free right away is taken without waiting; from the first
  // one that has none, the later ones are given back and taken again in
  // order, waiting for each while holding only lower-numbered shards.
  std::vector<std::optional<ConnectionPool::Lease>> held(st.shards.size());
  std::vector<ScatterError::Failure> failures;
  std::size_t first_missing = st.shards.size();
  for (std::size_t i = 0; i < st.shards.size(); ++i) {
    try {
      held[i] = resolver.Pool(st.shards[i]).TryAcquire();
    } catch (const std::exception& e) {
      failures.push_back({st.shards[i], RedactDsn(Trim(e.what())), SqlStateOf(e)});
      break;
    }
    if (!held[i]) {
      first_missing = i;
      break;
    }
  }
  if (failures.empty()) {
    for (std::size_t i = first_missing; i < st.shards.size(); ++i) {
      if (held[i]) continue;
      try {
        held[i] = resolver.Pool(st.shards[i]).Acquire(st.deadline);
      } catch (const std::exception& e) {
        failures.push_back({st.shards[i], RedactDsn(Trim(e.what())), SqlStateOf(e)});
        break;
      }
    }
  }
  if (!failures.empty()) {
    held.clear();  // gives back everything
    // The message first: the failures are moved into the exception after.
    std::string message = fmt::format("scatter session{} could not get a connection on every shard after {} ms: {}",
                                      st.label, Millis(Clock::now() - start), JoinFailures(failures, resolver));
    throw ScatterError(std::move(message), std::move(failures));
  }
  for (auto& lease : held) st.leases.push_back(std::move(*lease));

  // The transactions begin with each shard's first statement, in its
  // pipeline (no round trip of their own).
  st.setup = options.setup;
  st.bucket_steps.assign(st.shards.size(), std::string());
  st.begun.assign(st.shards.size(), false);
  if (options.directory_buckets) {
    // A scatter's bucket step: each shard sees the buckets one directory
    // snapshot gives it, for the whole transaction (see ScatterOptions).
    const auto setups = st.impl->SetupsFor(resolver.Directory());
    for (std::size_t i = 0; i < st.shards.size(); ++i) {
      st.bucket_steps[i] = setups->by_shard[static_cast<std::size_t>(ToInt(st.shards[i]))];
    }
  }
  st.open_time = duration_cast<microseconds>(Clock::now() - start);
}

ScatterSession::~ScatterSession() { Finish(); }

const std::vector<ShardId>& ScatterSession::Shards() const noexcept { return state_->shards; }

std::chrono::microseconds ScatterSession::OpenTime() const noexcept { return state_->open_time; }

ScatterResult ScatterSession::Run(const std::string& sql, const SqlParams& params) {
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (ShardId s : state_->shards) statements.emplace_back(s, Statement{sql, params});
  return RunPerShard(statements);
}

ScatterResult ScatterSession::RunPerShard(const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements) {
  return RunPerShardThen(statements, {});
}

ScatterResult ScatterSession::RunPerShardThen(const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements,
                                              const std::vector<std::string>& then) {
  State& st = *state_;
  if (st.finished || st.failure) {
    throw Error(fmt::format("scatter session{} is {}; open a new session", st.label,
                            st.failure ? "failed (" + *st.failure + ")" : std::string("finished")));
  }
  std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> copies;
  copies.reserve(statements.size());
  for (const auto& [shard, statement] : statements) {
    copies.emplace_back(shard, std::make_shared<const Statement>(statement));
  }
  ScatterOptions o;
  o.deadline = st.deadline;
  o.label = st.label.empty() ? "session" : st.label.substr(2, st.label.size() - 3);
  try {
    return st.impl->Execute(std::move(copies), o, state_, then);
  } catch (const ScatterError& e) {
    st.failure = e.what();
    throw;
  }
}

void ScatterSession::Finish() noexcept {
  if (!state_ || state_->finished) return;
  State& st = *state_;
  st.finished = true;
  if (st.failure) {
    // Some connection may still run a cancelled statement, and some
    // transactions are aborted: close them all (the servers roll back) as
    // the last task lets go of the session.
    for (auto& lease : st.leases) lease.Discard();
    state_.reset();
    return;
  }
  // COMMIT every shard that began a transaction (a shard never asked has
  // none), from this thread, one pipeline each and all at once, so that
  // the connections are back in their pools, idle and warm, when Finish
  // returns: the next query does not open a fresh connection beside one
  // still committing. Bounded by the session's deadline; once that has
  // passed, the COMMITs run on the workers and the caller does not wait.
  if (Clock::now() < st.deadline) {
    const auto commit = std::make_shared<const Statement>(Statement{"COMMIT", {}});
    std::vector<std::pair<ShardId, std::shared_ptr<const Statement>>> commits;
    for (std::size_t i = 0; i < st.shards.size(); ++i) {
      if (st.begun[i]) commits.emplace_back(st.shards[i], commit);
    }
    if (!commits.empty()) {
      ScatterOptions o;
      o.deadline = st.deadline;
      o.allow_partial = true;
      o.label = st.label.empty() ? "session commit" : st.label.substr(2, st.label.size() - 3) + " commit";
      try {
        (void)st.impl->Execute(std::move(commits), o, state_);
      } catch (...) {
        // Every shard failed: their connections were discarded.
      }
    }
    for (auto& lease : st.leases) lease.Release();  // a discarded one is closed
    state_.reset();
    return;
  }
  for (std::size_t i = 0; i < st.leases.size(); ++i) {
    if (!st.begun[i]) {
      st.leases[i].Release();
      continue;
    }
    try {
      boost::asio::post(st.impl->session_workers, [keep = state_, i] {
        ConnectionPool::Lease& lease = keep->leases[i];
        try {
          pqxx::nontransaction tx{lease.Connection()};
          tx.exec("COMMIT");
        } catch (...) {
          lease.Discard();
        }
        lease.Release();
      });
    } catch (...) {
      st.leases[i].Discard();
    }
  }
  state_.reset();
}

}  // namespace shardkit
