// The inline driver: statements driven from the caller's thread, their
// sockets read with non-blocking libpq.
#include "queries/scatter_internal.hpp"

#include <poll.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <deque>
#include <mutex>

#include "pg/libpq_handle.hpp"
#include "pg/pipelined_statement.hpp"

namespace shardkit::detail::scatter {
namespace {

// Ends an inline call's hold on its connection: as ExecuteOn's Deactivate, a
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

void FinishInline(const std::shared_ptr<ScatterState>& shared_state, InlineCall& c, boost::asio::thread_pool& workers) {
  ScatterState& state = *shared_state;
  ShardTask& task = *c.task;
  c.open = false;
  std::optional<pg::Rows> rows;
  std::string cause;
  std::string sqlstate;
  bool reusable = true;
  bool rollback = false;
  bool again = false;  // a replica's failure: the primary answers instead, on a worker
  try {
    rows = c.call->Finish(reusable, &rollback);
  } catch (const std::exception& error) {
    again = FallBack(state, task, error);
    if (!again) Describe(task, error, c.started, cause, sqlstate);
  }
  const std::size_t bytes = c.call->Bytes();
  task.timing = c.call->Timings();
  task.read_only_server = detail::ReportsReadOnly(c.lease->Connection());
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
  if (again) {
    boost::asio::post(workers, [shared_state, &task] { RunShard(*shared_state, task); });
    return;
  }
  Complete(state, task, c.started, std::move(rows), std::move(cause), std::move(sqlstate), bytes);
}

}  // namespace

// Drives the inline calls until each has finished or deadline + grace has
// passed; at the deadline it has the unfinished ones cancelled, after the
// grace it gives up on them (their connections are closed; the servers
// stop the statements at their statement_timeout or on the cancel).
//
// The calls are read one after another (from a turning first one, see
// below), waiting on one socket at a time, as a plain libpq loop would: the answers arrive at about the same time, the
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
  // Which call is waited on first turns from one fan-out to the next: only
  // that one's round trip and transfer are timed as they arrive (the
  // others' answers wait in their sockets), and every shard takes a turn.
  static std::atomic<std::size_t> rotation{0};
  const std::size_t first = calls.empty() ? 0 : rotation.fetch_add(1, std::memory_order_relaxed) % calls.size();
  for (std::size_t turn = 0; turn < calls.size(); ++turn) {
    auto& c = calls[(first + turn) % calls.size()];
    if (c.open) c.call->StartWatching(turn == 0);
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
      if (ready != 0 && c.call->Advance()) FinishInline(shared_state, c, workers);
    }
  }
}

}  // namespace shardkit::detail::scatter
