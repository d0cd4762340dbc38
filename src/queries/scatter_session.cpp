// ScatterSession: one REPEATABLE READ transaction per shard, held across
// statements.
#include "queries/scatter_internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <pqxx/nontransaction>
#include <string>

#include "shardkit/config.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit::detail::scatter {

std::size_t SessionIndex(const ScatterSession::State& session, ShardId shard, const std::string& label) {
  const auto it = std::lower_bound(session.shards.begin(), session.shards.end(), shard);
  if (it == session.shards.end() || *it != shard) {
    throw Error(
        fmt::format("scatter session{}: shard {} is not part of this session; open the session on it", label, shard));
  }
  return static_cast<std::size_t>(it - session.shards.begin());
}

// The statements that begin a session's transaction on one shard: REPEATABLE
// READ, the time left as statement_timeout, the setup, the bucket step, and
// read-only from then on.
std::vector<std::string> SessionBegin(const ScatterSession::State& session, std::size_t i, milliseconds left) {
  std::vector<std::string> steps = {
      "BEGIN ISOLATION LEVEL REPEATABLE READ",
      "SET LOCAL statement_timeout = " + std::to_string(std::max<long long>(1, left.count()))};
  steps.insert(steps.end(), session.setup.begin(), session.setup.end());
  if (!session.bucket_steps[i].empty()) steps.push_back(session.bucket_steps[i]);
  steps.emplace_back("SET TRANSACTION READ ONLY");
  return steps;
}

}  // namespace shardkit::detail::scatter

namespace shardkit {

using detail::scatter::Clock;
using detail::scatter::JoinFailures;
using detail::scatter::kDefaultTimeout;
using detail::scatter::kMaxTimeout;
using detail::scatter::Millis;
using detail::scatter::SqlStateOf;
using detail::scatter::Statement;
using detail::scatter::Trim;
using std::chrono::duration_cast;
using std::chrono::microseconds;

// ------------------------------------------------------------------ session

ScatterSession::ScatterSession(ScatterGather& scatter, SessionOptions options) : state_(std::make_shared<State>()) {
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
      throw Error(
          fmt::format("scatter session{}: shard {} is listed twice; list each shard once", st.label, st.shards[i]));
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

ScatterSession::~ScatterSession() {
  Finish();
}

const std::vector<ShardId>& ScatterSession::Shards() const noexcept {
  return state_->shards;
}

std::chrono::microseconds ScatterSession::OpenTime() const noexcept {
  return state_->open_time;
}

ScatterResult ScatterSession::Run(const std::string& sql, const SqlParams& params) {
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  for (ShardId s : state_->shards) statements.emplace_back(s, Statement{sql, params});
  return RunPerShard(statements);
}

ScatterResult ScatterSession::RunPerShard(const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements) {
  return RunPerShardThen(statements, {});
}

ScatterResult ScatterSession::RunPerShardThen(
    const std::vector<std::pair<ShardId, ScatterGather::Statement>>& statements, const std::vector<std::string>& then) {
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
