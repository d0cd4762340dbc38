#include "shardkit/writes/routed.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "pg/libpq_handle.hpp"
#include "pg/pipelined_statement.hpp"
#include "pg/server_message.hpp"
#include "pg/sync_standby_watch.hpp"
#include "routing/replica_reads.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/routing/resolver.hpp"

// One attempt: acquire a connection of the routed shard; one round trip for
// BEGIN, statement_timeout, shardkit.buckets and its check (only the
// customer's bucket is visible: the function reads its own customer's rows,
// as of the freeze if the router is stale, or is refused at BEGIN); the caller's function on a
// nontransaction (so that the statements run inside our explicit BEGIN);
// then COMMIT (CommitWithin: bounded by the deadline), unless libpq says the
// transaction failed (a function that swallowed an error: COMMIT would
// answer ROLLBACK), with a write's WAL position after it in the same round
// trip.
//
// Which errors are retried, and why that is safe: a fence or visibility
// refusal is raised by a statement, so the transaction is aborted and
// nothing it did is kept; so is a serialization failure or deadlock; a
// connection lost before COMMIT was sent takes its transaction with it.
// Only a connection lost while COMMIT was in flight, a COMMIT cancelled at
// the deadline, or one its synchronous standby did not confirm leaves the
// outcome open (OutcomeUnknown). A write refused as read-only (a primary a
// failover fenced) or a primary that cannot be reached reads the catalog's
// primaries again (the directory watcher) and retries on the new one.

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kDefaultTimeout = std::chrono::seconds(5);
constexpr const char* kSqlStateReadOnlyTransaction = "25006";  // read_only_sql_transaction
constexpr const char* kSqlStateQueryCanceled = "57014";        // query_canceled: statement_timeout
// The server's statement_timeout starts when the statement arrives, a little
// after the deadline's "time left" was computed here.
constexpr milliseconds kTimeoutSlack{50};

// A COMMIT gets at least this long, whatever is left of the deadline.
constexpr auto kCommitGrace = std::chrono::seconds(1);

// What a COMMIT answered: the WAL insert position after it (at or after the
// commit record: the write's read token) when asked for, and whether it had
// to be cancelled at the deadline (then `failure` says how it ended, if it
// failed: its outcome is unknown either way but a clean commit).
struct CommitAnswer {
  std::optional<std::string> position;
  bool cancelled = false;
  std::string failure;
};

// COMMIT (and the position, in the same round trip) within the deadline. A
// primary waits at COMMIT for its synchronous standby, past any
// statement_timeout; at the deadline the wait is cancelled, which the
// server answers with a warning and a commit on the primary only (the
// caller's SyncStandbyWatch sees it). Failures before a cancel are thrown as
// libpqxx throws them.
CommitAnswer CommitWithin(ConnectionPool::Lease& lease, Clock::time_point deadline, bool with_position) {
  static const std::string kCommit = "COMMIT";
  static const std::vector<std::string> kPosition{"SELECT pg_current_wal_insert_lsn()::text"};
  const std::vector<const char*> none;
  detail::PipelineRequest request;
  request.sql = &kCommit;
  request.values = &none;
  request.wrap = detail::PipelineRequest::Wrap::kStatementOnly;
  if (with_position) request.then = &kPosition;
  CommitAnswer answer;
  bool reusable = true;
  try {
    detail::PipelinedStatement call{lease.Connection(), request, /*nonblocking=*/true};
    call.Send();
    auto limit = std::max(deadline, Clock::now() + kCommitGrace);
    while (!call.Advance()) {
      const auto now = Clock::now();
      if (now >= limit) {
        if (answer.cancelled) throw pqxx::broken_connection("no answer to COMMIT after its cancel request");
        if (const auto canceller = lease.Canceller(); canceller) (void)canceller->Send();
        answer.cancelled = true;
        limit = now + kCommitGrace;
      }
      pollfd fd{call.Socket(), static_cast<short>(POLLIN | (call.WantsWrite() ? POLLOUT : 0)), 0};
      const auto slice = std::min<long long>(50, std::chrono::ceil<milliseconds>(limit - now).count());
      (void)::poll(&fd, 1, static_cast<int>(std::max<long long>(slice, 1)));
    }
    const pg::Rows rows = call.Finish(reusable);
    if (!reusable) lease.Discard();
    if (with_position) answer.position = rows[0][0].c_str();
  } catch (const std::exception& e) {
    if (!answer.cancelled) throw;
    lease.Discard();
    answer.failure = detail::FirstLine(e.what());
  }
  return answer;
}

const char* BeginSql(Isolation isolation) {
  switch (isolation) {
    case Isolation::kReadCommitted:
      return "BEGIN ISOLATION LEVEL READ COMMITTED";
    case Isolation::kRepeatableRead:
      return "BEGIN ISOLATION LEVEL REPEATABLE READ";
    case Isolation::kSerializable:
      return "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  return "BEGIN";
}

using detail::FirstLine;

void Rollback(ConnectionPool::Lease& lease) noexcept {
  try {
    pqxx::nontransaction tx{*lease};
    tx.exec("ROLLBACK");
  } catch (...) {
    lease.Discard();
  }
}

milliseconds Backoff(int round, milliseconds cap) {
  thread_local std::minstd_rand random{std::random_device{}()};
  const auto base = std::min<long long>(cap.count(), 1LL << std::min(round, 10));
  std::uniform_int_distribution<long long> jitter(base / 2, std::max<long long>(base, 1));
  return milliseconds(jitter(random));
}

}  // namespace

RoutedTransactions::RoutedTransactions(BucketShardResolver& resolver, DirectoryWatcher* watcher)
    : resolver_(resolver), watcher_(watcher) {}

RoutedStats RoutedTransactions::Stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

struct RoutedTransactions::ReadRequest {
  const std::string& sql;
  std::vector<const char*> values;  // into the caller's params; nullptr is NULL
  pg::Rows rows;
};

pg::Rows RoutedTransactions::Read(CustomerId customer, const std::string& sql, const SqlParams& params,
                                  const RoutedOptions& options, RoutedOutcome* outcome) {
  ReadRequest read{sql, {}, {}};
  read.values.reserve(params.size());
  for (const auto& p : params) read.values.push_back(p ? p->c_str() : nullptr);
  RoutedOptions read_only = options;
  read_only.read_only = true;
  RunErased(customer, nullptr, read_only, outcome, &read);
  return std::move(read.rows);
}

void RoutedTransactions::RunErased(CustomerId customer,
                                   const std::function<void(pqxx::transaction_base&, const RoutedContext&)>& fn,
                                   const RoutedOptions& options, RoutedOutcome* outcome_out, ReadRequest* read) {
  const auto start = Clock::now();
  const auto deadline = options.deadline.value_or(start + kDefaultTimeout);
  const std::string label = options.label.empty() ? "routed transaction" : options.label;
  const BucketId bucket = BucketOf(customer);
  const std::string fence_sql = BucketSet::One(bucket).FenceSql();
  RoutedOutcome outcome;
  // A refusal named where the bucket went: while the directory still sends
  // us to the refusing shard (`first`), go to the named owner (`second`).
  std::optional<std::pair<ShardId, ShardId>> redirect;
  std::optional<BucketRefused> last_refusal;
  std::string last_failure;
  int backoff_round = 0;
  int immediate = 0;               // retries without a pause in a row (a refusal naming the new owner)
  int primary_switches = 0;        // an unreachable primary that a failover replaced
  bool primary_confirmed = false;  // a read-only primary the catalog still names
  // Reads on replicas: the replicas this call tried and left (and why), and
  // whether it has given up on them (a bucket a replica refused).
  const bool wants_replicas = options.read_only && replicas_ != nullptr && options.read.UsesReplicas();
  const bool replica_only = wants_replicas && options.read.preference == ReadPreference::kReplicaOnly;
  bool primary_only = !wants_replicas;
  std::vector<ReplicaUnavailable::Skipped> left_replicas;
  bool waited_for_replay = false;

  auto finish = [&](bool committed, bool unknown) {
    outcome.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    if (outcome_out != nullptr) *outcome_out = outcome;
    std::lock_guard lock(stats_mutex_);
    ++stats_.calls;
    stats_.attempts += static_cast<std::uint64_t>(outcome.attempts);
    stats_.refused_not_owned += static_cast<std::uint64_t>(outcome.refused_not_owned);
    stats_.refused_frozen += static_cast<std::uint64_t>(outcome.refused_frozen);
    stats_.refused_not_readable += static_cast<std::uint64_t>(outcome.refused_not_readable);
    stats_.retried_other += static_cast<std::uint64_t>(outcome.retried_other);
    stats_.replica_fallbacks += static_cast<std::uint64_t>(outcome.replica_fallbacks);
    if (committed && outcome.on_replica) ++stats_.replica_reads;
    if (committed) ++stats_.committed;
    if (unknown) ++stats_.outcome_unknown;
    if (!committed) ++stats_.failed;
  };
  auto throw_still_refused = [&](int attempts) {
    throw BucketRefused(
        last_refusal->kind(), last_refusal->shard(), last_refusal->bucket(), last_refusal->new_owner(),
        last_refusal->state(),
        fmt::format("{} (still refused at the deadline, after {} attempts in {} ms)", last_refusal->what(), attempts,
                    std::chrono::duration_cast<milliseconds>(Clock::now() - start).count()));
  };
  auto refresh = [&] {
    if (watcher_ == nullptr) return;
    try {
      (void)watcher_->RefreshNow();
    } catch (const Error&) {
      // The catalog may be briefly unreachable; the refusal's named owner
      // and the next attempt still make progress.
    }
  };
  auto pause = [&] {
    immediate = 0;
    const auto wait = Backoff(backoff_round++, options.max_backoff);
    if (Clock::now() + wait >= deadline) return false;
    std::this_thread::sleep_for(wait);
    return true;
  };

  for (;;) {
    const auto directory = resolver_.Directory();
    ShardId shard = directory->ShardOf(bucket);
    // Follow a refusal's named owner only while the directory still sends us
    // to the shard that refused (it has not caught up yet).
    if (redirect && shard == redirect->first) shard = redirect->second;
    const ShardServers& servers = resolver_.Servers(shard);
    ConnectionPool* pool = servers.primary.pool;
    std::optional<ReplicaChoice> choice;
    if (!primary_only) {
      try {
        if (options.isolation == Isolation::kSerializable) {
          if (replica_only) {
            throw ReplicaUnavailable(shard,
                                     fmt::format("{} for customer {}: a SERIALIZABLE read cannot run on a hot "
                                                 "standby; read with REPEATABLE READ or from the primary",
                                                 label, customer),
                                     {});
          }
          primary_only = true;
        } else {
          choice = replicas_->Choose(shard, options.read, left_replicas);
        }
      } catch (...) {
        finish(false, false);
        throw;
      }
    }
    const bool on_replica = choice && choice->replica;
    if (on_replica) pool = choice->replica->pool;
    RoutedContext at{customer,
                     bucket,
                     shard,
                     directory->Version(),
                     outcome.attempts + 1,
                     on_replica ? choice->replica->name : servers.primary.name,
                     on_replica};
    ++outcome.attempts;
    // This read leaves the replica it is on for another one or the primary.
    auto leave = [&](std::string why) {
      left_replicas.push_back({at.server, std::move(why)});
      ++outcome.replica_fallbacks;
    };

    std::optional<ConnectionPool::Lease> acquired;
    try {
      acquired.emplace(pool->Acquire(deadline));
    } catch (const ShardError& e) {
      if (on_replica && Clock::now() < deadline) {
        replicas_->ReportFailure(shard, at.server, FirstLine(e.what()));
        leave("unreachable: " + FirstLine(e.what()));
        continue;
      }
      if (!on_replica && Clock::now() < deadline && ++primary_switches <= 3) {
        // An unreachable primary may have been replaced by a failover.
        refresh();
        if (resolver_.Servers(shard).primary.pool != pool) continue;
      }
      finish(false, false);
      throw;
    } catch (...) {
      finish(false, false);
      throw;
    }
    ConnectionPool::Lease& lease = *acquired;
    if (options.read_only && !on_replica && !primary_confirmed && detail::ReportsReadOnly(lease.Connection())) {
      // A primary that takes no writes: a failover fenced it, and its
      // successor may hold writes acknowledged before this read began. It
      // answers only if the catalog, asked now, still names it the primary.
      std::string why;
      if (watcher_ == nullptr) {
        why =
            "this router has no directory watcher to ask the catalog which server is the shard's primary now; "
            "route through a Cluster (it follows the catalog) or give RoutedTransactions a DirectoryWatcher";
      } else {
        try {
          (void)watcher_->RefreshNow();
          if (resolver_.Servers(shard).primary.pool == pool) {
            primary_confirmed = true;
          } else if (++primary_switches <= 3) {
            ++outcome.retried_other;
            continue;  // the catalog names its successor
          } else {
            why = "the catalog named another primary after each of 3 attempts";
          }
        } catch (const Error& e) {
          why = fmt::format("the catalog could not say which server is the shard's primary now ({})",
                            FirstLine(e.what()));
        }
      }
      if (!primary_confirmed) {
        finish(false, false);
        throw ShardUnavailable(shard,
                               fmt::format("{} for customer {} (bucket {}): shard {}'s primary {} is read-only (a "
                                           "failover fenced it?) and {}; nothing was read",
                                           label, customer, bucket, shard, at.server, why),
                               kSqlStateReadOnlyTransaction);
      }
    }
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && last_refusal) {
      // The deadline passed during the back-off: still the refusal.
      finish(false, false);
      throw_still_refused(outcome.attempts - 1);
    }
    if (left.count() <= 0) {
      finish(false, false);
      throw PoolTimeout(shard, fmt::format("{} for customer {} (bucket {}): the deadline passed after {} attempt(s){}",
                                           label, customer, bucket, outcome.attempts,
                                           last_failure.empty() ? "" : "; last: " + last_failure));
    }

    // On a replica: one REPEATABLE READ snapshot (a replica cannot hold the
    // bucket for a move as a primary's READ COMMITTED read does), and, for
    // a read token it is not known to have replayed, its replay position
    // read before that snapshot and checked by the fence's statement.
    std::string begin = on_replica ? detail::kReplicaBegin : std::string(BeginSql(options.isolation));
    if (options.read_only && !on_replica) begin += " READ ONLY";
    std::string setup = fence_sql;
    const std::string* presync = nullptr;
    if (on_replica && choice->verify_lsn) {
      setup += ", " + detail::RequireReplayed(*choice->verify_lsn);
      presync = &detail::kCaptureReplayed;
    }

    bool committing = false;
    try {
      if (read != nullptr) {
        // BEGIN, timeout, fence, statement and COMMIT in one round trip;
        // failures come as the same exceptions as below.
        detail::PipelineRequest request;
        request.sql = &read->sql;
        request.values = &read->values;
        request.begin = &begin;
        request.statement_timeout_ms = left.count();
        request.setup = &setup;
        request.presync = presync;
        bool reusable = true;
        std::optional<std::string> replayed;
        try {
          read->rows = detail::RunPipelined(lease.Connection(), request, reusable, nullptr, nullptr, &replayed);
        } catch (...) {
          if (!reusable) lease.Discard();
          if (replayed && !replayed->empty()) replicas_->ReportReplayed(shard, at.server, ParseLsn(*replayed));
          throw;
        }
        if (!reusable) lease.Discard();
        outcome.shard = shard;
        outcome.server = at.server;
        outcome.on_replica = on_replica;
        finish(true, false);
        return;
      }
      {
        pqxx::nontransaction tx{*lease};
        if (presync != nullptr) tx.exec(*presync);
        // The timeout is a number computed here (SET takes no parameters).
        tx.exec(fmt::format("{}; SET LOCAL statement_timeout = {}; {}", begin, left.count(), setup));
        fn(tx, at);
      }
      // A statement that failed inside the function, its error caught
      // there, left the transaction aborted, and COMMIT would answer
      // ROLLBACK without an error (libpqxx does not show the command tag):
      // libpq knows it from the server's last ReadyForQuery, no round trip.
      if (PQtransactionStatus(detail::LibpqHandle(*lease)) == PQTRANS_INERROR) {
        Rollback(lease);
        finish(false, false);
        throw ShardQueryError(shard, fmt::format("{} for customer {} on shard {}: a statement failed inside the "
                                                 "function and its error was caught there, so the transaction could "
                                                 "not commit; nothing was committed",
                                                 label, customer, shard));
      }
      committing = true;
      // A write reads the WAL insert position after its COMMIT in the same
      // round trip: at or after the commit record, its read token.
      const bool with_token = !options.read_only && options.read_token;
      const detail::SyncStandbyWatch standby(detail::LibpqHandle(*lease));
      const CommitAnswer committed = CommitWithin(lease, deadline, with_token);
      if (standby.Unconfirmed()) {
        // Durable on the primary only: a failover now would lose it.
        finish(false, true);
        throw OutcomeUnknown(shard, fmt::format("{} for customer {} (bucket {}) on shard {} ({}): COMMIT returned "
                                                "without its synchronous standby's confirmation ({}): it is "
                                                "committed on the primary but a failover may lose it; check "
                                                "before doing it again, and check the shard's replicas "
                                                "(shardctl shards)",
                                                label, customer, bucket, shard, at.server, standby.Message()));
      }
      if (!committed.failure.empty()) {
        finish(false, true);
        throw OutcomeUnknown(shard, fmt::format("{} for customer {} (bucket {}) on shard {} ({}): COMMIT did not "
                                                "answer by the deadline and was cancelled ({}): it may or may not "
                                                "have committed; check before doing it again",
                                                label, customer, bucket, shard, at.server, committed.failure));
      }
      if (committed.position) outcome.token = ReadToken::At(shard, ParseLsn(*committed.position));
      outcome.shard = shard;
      outcome.server = at.server;
      outcome.on_replica = on_replica;
      finish(true, false);
      return;
    } catch (const pqxx::broken_connection& e) {
      PGconn* handle = detail::LibpqHandle(lease.Connection());
      if (!committing && read == nullptr && handle != nullptr && PQstatus(handle) == CONNECTION_OK) {
        // libpqxx 6.4 throws broken_connection for every class 08 SQLSTATE;
        // on a connection that is still up it is 08P01, a statement the
        // server refused as sent (a wrong parameter count): the statement's
        // error, never retried.
        Rollback(lease);
        finish(false, false);
        throw ShardQueryError(shard,
                              fmt::format("{} for customer {} (bucket {}) on shard {}: {}", label, customer, bucket,
                                          shard, FirstLine(e.what())),
                              "08P01");
      }
      lease.Discard();
      if (committing) {
        finish(false, true);
        throw OutcomeUnknown(shard, fmt::format("{} for customer {} (bucket {}) on shard {}: the connection was lost "
                                                "during COMMIT ({}): it may or may not have committed; check before "
                                                "doing it again",
                                                label, customer, bucket, shard, FirstLine(e.what())));
      }
      last_failure = fmt::format("connection to shard {} ({}) lost: {}", shard, at.server, FirstLine(e.what()));
      if (on_replica) {
        replicas_->ReportFailure(shard, at.server, FirstLine(e.what()));
        leave("connection lost: " + FirstLine(e.what()));
        continue;
      }
      ++outcome.retried_other;
    } catch (const pqxx::transaction_rollback& e) {
      // Serialization failure or deadlock: the transaction is gone, retryable.
      // (A pipelined read has ended its transaction itself.) On a replica
      // it is a conflict with its recovery: try elsewhere.
      if (read == nullptr) Rollback(lease);
      if (on_replica) {
        leave(FirstLine(e.what()));
        continue;
      }
      if (!options.retry_serialization_failures) {
        finish(false, false);
        throw;
      }
      last_failure = FirstLine(e.what());
      ++outcome.retried_other;
    } catch (const pqxx::sql_error& e) {
      if (read == nullptr) Rollback(lease);
      if (on_replica && e.sqlstate() == kSqlStateNotReplayed) {
        // It had not replayed the token's writes when the read began: wait
        // for it (once, briefly) or go elsewhere.
        if (options.read.replay_wait.count() > 0 && !waited_for_replay) {
          waited_for_replay = true;
          if (replicas_->WaitForReplay(shard, *choice->replica, *choice->verify_lsn,
                                       std::min(deadline, Clock::now() + options.read.replay_wait))) {
            continue;
          }
        }
        leave(fmt::format("it had not replayed the read token's position {} yet", FormatLsn(*choice->verify_lsn)));
        continue;
      }
      if (!on_replica && !options.read_only && e.sqlstate() == kSqlStateReadOnlyTransaction) {
        // A primary that takes no writes: a failover fenced it. The catalog
        // names the new primary; the refresh switches to it.
        last_failure = fmt::format("shard {}'s server {} takes no writes (a failover fenced it?): {}", shard, at.server,
                                   FirstLine(e.what()));
        ++outcome.retried_other;
        refresh();
        if (resolver_.Servers(shard).primary.pool != pool && ++immediate < 3) continue;
        if (!pause()) {
          finish(false, false);
          throw ShardQueryError(shard, fmt::format("{} for customer {} (bucket {}): gave up at the deadline after {} "
                                                   "attempts: {}; check the shard's primary (shardctl shards)",
                                                   label, customer, bucket, outcome.attempts, last_failure));
        }
        continue;
      }
      if (e.sqlstate() == kSqlStateQueryCanceled && last_refusal && Clock::now() + kTimeoutSlack >= deadline) {
        // The statement timeout (the deadline's) cancelled this attempt,
        // before its bucket check could answer: the answer is the refusal
        // that made it retry, not the cancellation.
        finish(false, false);
        throw_still_refused(outcome.attempts);
      }
      auto refusal = ParseFenceRefusal(e);
      if (on_replica && !refusal) {
        const std::string& state = e.sqlstate();
        if (IsConnectionLost(state) || IsServerGoingAway(state) || state == "53300") {
          // Shut down, starting up, out of connections: the replica's trouble.
          replicas_->ReportFailure(shard, at.server, FirstLine(e.what()));
          leave(FirstLine(e.what()));
          continue;
        }
        finish(false, false);
        throw;
      }
      if (on_replica && !replica_only) {
        // The replica has not replayed the move the directory knows of (or
        // has replayed one the directory does not): the primary decides.
        leave(fmt::format("it does not serve bucket {} as of its replay ({})", bucket, refusal->message));
        primary_only = true;
        continue;
      }
      if (!refusal) {
        finish(false, false);
        throw;
      }
      last_refusal.emplace(
          ToException(*refusal, shard, fmt::format("{} for customer {} on shard {}", label, customer, shard)));
      last_failure = refusal->message;
      if (on_replica) {
        // Replicas only: wait for it to replay the move, refreshing the
        // directory meanwhile.
        ++outcome.refused_not_readable;
        refresh();
      } else {
        // The refusing shard names the new owner (it retired the bucket):
        // go there at once. The named owner not owning it yet (incoming: the
        // cutover is under way, or its mover stopped) or a frozen bucket:
        // stay, after a pause.
        const bool moved_away = refusal->state == "retired" || refusal->state == "cleaning";
        const bool at_named_owner = redirect && shard == redirect->second;
        auto follow = [&] {
          if (moved_away && refusal->new_owner) {
            redirect.emplace(shard, *refusal->new_owner);
          } else if (!(refusal->state == "incoming" && at_named_owner) && refusal->state != "frozen") {
            redirect.reset();
          }
        };
        switch (refusal->kind) {
          case BucketRefused::Kind::kNotOwned:
            ++outcome.refused_not_owned;
            refresh();
            follow();
            if (moved_away) {
              if ((resolver_.Directory()->ShardOf(bucket) != shard || redirect) && ++immediate < 3) continue;
            }
            break;
          case BucketRefused::Kind::kFrozen:
            ++outcome.refused_frozen;
            redirect.reset();
            break;
          case BucketRefused::Kind::kNotReadable:
            ++outcome.refused_not_readable;
            if (refusal->state == "frozen") break;
            refresh();
            follow();
            if (moved_away || refusal->state == "absent") {
              if ((resolver_.Directory()->ShardOf(bucket) != shard || redirect) && ++immediate < 3) continue;
            }
            break;
        }
      }
    } catch (...) {
      // The function's own exception (or anything else): roll back, pass on.
      if (!committing && read == nullptr) Rollback(lease);
      finish(false, false);
      throw;
    }
    if (!pause()) {
      finish(false, false);
      if (last_refusal) throw_still_refused(outcome.attempts);
      throw ShardQueryError(shard, fmt::format("{} for customer {} (bucket {}): gave up at the deadline after {} "
                                               "attempts: {}",
                                               label, customer, bucket, outcome.attempts, last_failure));
    }
  }
}

}  // namespace shardkit
