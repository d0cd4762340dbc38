#include "writes/routed_call.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "pg/libpq_handle.hpp"
#include "pg/pipelined_statement.hpp"
#include "pg/server_message.hpp"
#include "pg/sync_standby_watch.hpp"
#include "routing/replica_reads.hpp"
#include "shardkit/core/shard_key_format.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/resolver.hpp"
#include "writes/bounded_call.hpp"
#include "writes/transaction_steps.hpp"

namespace shardkit::detail {
namespace {

using std::chrono::milliseconds;

constexpr auto kDefaultTimeout = std::chrono::seconds(5);
constexpr const char* kSqlStateReadOnlyTransaction = "25006";  // read_only_sql_transaction
constexpr const char* kSqlStateQueryCanceled = "57014";        // query_canceled: statement_timeout
constexpr const char* kSqlStateTooManyConnections = "53300";
// The server's statement_timeout starts when the statement arrives, a little
// after the deadline's "time left" was computed here.
constexpr milliseconds kTimeoutSlack{50};

const std::string kCommit = "COMMIT";

bool IsSerializationFailure(const std::string& sqlstate) {
  return sqlstate == "40001" || sqlstate == "40P01";
}

void Rollback(ConnectionPool::Lease& lease) noexcept {
  try {
    pqxx::nontransaction tx{*lease};
    tx.exec("ROLLBACK");
  } catch (...) {
    lease.Discard();
  }
}

}  // namespace

RoutedCall::RoutedCall(const RoutedParts& parts, const ShardKey& key, const RoutedOptions& options, RoutedWork& work)
    : parts_(parts),
      key_(key),
      options_(options),
      work_(work),
      start_(Clock::now()),
      deadline_(options.deadline.value_or(start_ + kDefaultTimeout)),
      label_(options.label.empty() ? "routed transaction" : options.label),
      bucket_(key.bucket()),
      fence_sql_(BucketSet::One(bucket_).FenceSql(WantsToken())) {
  const bool wants_replicas = options.read_only && parts.replicas != nullptr && options.read.UsesReplicas();
  replica_only_ = wants_replicas && options.read.preference == ReadPreference::kReplicaOnly;
  primary_only_ = !wants_replicas;
}

void RoutedCall::Run() {
  try {
    Attempts();
  } catch (...) {
    outcome_.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
    throw;
  }
  outcome_.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
}

void RoutedCall::Attempts() {
  for (;;) {
    Target target = Choose();
    std::optional<ConnectionPool::Lease> lease = Acquire(target);
    if (!lease) continue;
    if (!ConfirmPrimary(target, *lease)) continue;
    const milliseconds left = TimeLeft(target.shard);
    Next next = Next::kPauseFirst;
    committing_ = false;
    try {
      Attempt(target, *lease, left);
      Succeeded(target);
      return;
    } catch (...) {
      next = Classify(target, *lease);
    }
    if (next == Next::kPauseFirst) PauseOrGiveUp(target.shard);
  }
}

RoutedCall::Target RoutedCall::Choose() {
  Target target;
  const auto directory = parts_.resolver.Directory();
  target.shard = directory->ShardOf(bucket_);
  // Follow a refusal's named owner only while the directory still sends us
  // to the shard that refused (it has not caught up yet).
  if (redirect_ && target.shard == redirect_->first) target.shard = redirect_->second;
  const ShardServers& servers = parts_.resolver.Servers(target.shard);
  target.pool = servers.primary.pool;
  if (!primary_only_) {
    if (options_.isolation == Isolation::kSerializable) {
      if (replica_only_) {
        throw ReplicaUnavailable(target.shard,
                                 fmt::format("{} for {}: a SERIALIZABLE read cannot run on a hot "
                                             "standby; read with REPEATABLE READ or from the primary",
                                             label_, Who()),
                                 {});
      }
      primary_only_ = true;
    } else {
      target.choice = parts_.replicas->Choose(target.shard, options_.read, left_replicas_);
    }
  }
  target.on_replica = target.choice && target.choice->replica;
  if (target.on_replica) target.pool = target.choice->replica->pool;
  target.at = RoutedContext{key_,
                            bucket_,
                            target.shard,
                            directory->Version(),
                            outcome_.attempts + 1,
                            target.on_replica ? target.choice->replica->name : servers.primary.name,
                            target.on_replica};
  ++outcome_.attempts;
  return target;
}

std::optional<ConnectionPool::Lease> RoutedCall::Acquire(const Target& target) {
  try {
    return target.pool->Acquire(deadline_);
  } catch (const ShardError& e) {
    if (target.on_replica && Clock::now() < deadline_) {
      parts_.replicas->ReportFailure(target.shard, target.at.server, FirstLine(e.what()));
      Leave(target, "unreachable: " + FirstLine(e.what()));
      return std::nullopt;
    }
    if (!target.on_replica && Clock::now() < deadline_ && WaitForPrimary(target, e)) return std::nullopt;
    if (primary_lost_at_ && dynamic_cast<const ShardUnavailable*>(&e) != nullptr) {
      throw ShardUnavailable(
          target.shard,
          fmt::format("{}: shard {}'s primary {} stayed unreachable for {} ms, to the deadline, and no failover named "
                      "another: {}",
                      Describe(), target.shard, target.at.server,
                      std::chrono::duration_cast<milliseconds>(Clock::now() - *primary_lost_at_).count(),
                      FirstLine(e.what())),
          e.sqlstate());
    }
    throw;
  }
}

bool RoutedCall::WaitForPrimary(const Target& target, const ShardError& failure) {
  Refresh();
  const ShardServers& now = parts_.resolver.Servers(target.shard);
  if (now.primary.pool != target.pool) return ++primary_switches_ <= 3;  // a failover replaced it
  // Only an unreachable server is waited for (a full pool has already used
  // the deadline), and only where a failover can happen: a catalog to name
  // the successor and a replica to promote.
  if (dynamic_cast<const ShardUnavailable*>(&failure) == nullptr || parts_.watcher == nullptr || now.replicas.empty()) {
    return false;
  }
  if (!primary_lost_at_) primary_lost_at_ = Clock::now();
  last_failure_ = FirstLine(failure.what());
  const auto wait = std::min(milliseconds(50), std::chrono::ceil<milliseconds>(deadline_ - Clock::now()));
  if (wait.count() <= 0) return false;
  std::this_thread::sleep_for(wait);
  return Clock::now() < deadline_;
}

bool RoutedCall::ConfirmPrimary(const Target& target, ConnectionPool::Lease& lease) {
  if (!options_.read_only || target.on_replica || primary_confirmed_ || !ReportsReadOnly(lease.Connection())) {
    return true;
  }
  // A primary that takes no writes: a failover fenced it, and its successor
  // may hold writes acknowledged before this read began. It answers only if
  // the catalog, asked now, still names it the primary.
  std::string why;
  if (parts_.watcher == nullptr) {
    why =
        "this router has no directory watcher to ask the catalog which server is the shard's primary now; "
        "route through a Cluster (it follows the catalog) or give RoutedTransactions a DirectoryWatcher";
  } else {
    try {
      (void)parts_.watcher->RefreshNow();
      if (parts_.resolver.Servers(target.shard).primary.pool == target.pool) {
        primary_confirmed_ = true;
        return true;
      }
      if (++primary_switches_ <= 3) {
        ++outcome_.retried_other;
        return false;  // the catalog names its successor
      }
      why = "the catalog named another primary after each of 3 attempts";
    } catch (const Error& e) {
      why = fmt::format("the catalog could not say which server is the shard's primary now ({})", FirstLine(e.what()));
    }
  }
  throw ShardUnavailable(target.shard,
                         fmt::format("{}: shard {}'s primary {} is read-only (a failover fenced it?) and {}; nothing "
                                     "was read",
                                     Describe(), target.shard, target.at.server, why),
                         kSqlStateReadOnlyTransaction);
}

milliseconds RoutedCall::TimeLeft(ShardId shard) const {
  const auto left = std::chrono::ceil<milliseconds>(deadline_ - Clock::now());
  if (left.count() > 0) return left;
  // The deadline passed during the back-off: still the refusal (if this
  // attempt was going back to the shard that refused).
  if (RefusalStands(shard)) ThrowStillRefused(outcome_.attempts - 1);
  throw PoolTimeout(shard, fmt::format("{}: the deadline passed after {} attempt(s){}", Describe(), outcome_.attempts,
                                       last_failure_.empty() ? "" : "; last: " + last_failure_));
}

void RoutedCall::Attempt(const Target& target, ConnectionPool::Lease& lease, milliseconds left) {
  // On a replica: one REPEATABLE READ snapshot (a replica cannot hold the
  // bucket for a move as a primary's READ COMMITTED read does), and, for a
  // read token it is not known to have replayed, its replay position read
  // before that snapshot and checked by the fence's statement.
  std::string begin = target.on_replica ? kReplicaBegin : std::string(BeginSql(options_.isolation));
  if (options_.read_only && !target.on_replica) begin += " READ ONLY";
  std::string setup = fence_sql_;
  const std::string* presync = nullptr;
  if (target.on_replica && target.choice->verify) {
    setup += ", " + RequireReplayed(*target.choice->verify);
    presync_ = CaptureReplayed(*target.choice->verify);
    presync = &presync_;
  }
  switch (work_.kind) {
    case RoutedWork::Kind::kFunction:
      RunFunction(target, lease, begin, setup, presync, left);
      return;
    case RoutedWork::Kind::kRead:
      RunRead(target, lease, begin, setup, presync, left);
      return;
    case RoutedWork::Kind::kWrite:
      RunWrite(lease, target, begin, setup, left);
      return;
  }
}

void RoutedCall::RunFunction(const Target& target, ConnectionPool::Lease& lease, const std::string& begin,
                             const std::string& setup, const std::string* presync, milliseconds left) {
  ReadToken token;
  {
    pqxx::nontransaction tx{*lease};
    if (presync != nullptr) tx.exec(*presync);
    const auto folded = SetupSettingTimeout(setup, left.count());
    // The timeout is a number computed here (SET takes no parameters).
    const pqxx::result set =
        tx.exec(folded ? fmt::format("{}; {}", begin, *folded)
                       : fmt::format("{}; SET LOCAL statement_timeout = {}; {}", begin, left.count(), setup));
    if (WantsToken()) token = TokenOfCheck(target.shard, set[0][set[0].size() - 1].c_str());
    (*work_.fn)(tx, target.at);
  }
  // A statement that failed inside the function, its error caught there,
  // left the transaction aborted, and COMMIT would answer ROLLBACK without
  // an error (libpqxx does not show the command tag): libpq knows it from
  // the server's last ReadyForQuery, no round trip.
  if (PQtransactionStatus(LibpqHandle(*lease)) == PQTRANS_INERROR) {
    throw ShardQueryError(target.shard, fmt::format("{} on shard {}: a statement failed inside the function and its "
                                                    "error was caught there, so the transaction could not commit; "
                                                    "nothing was committed",
                                                    Describe(), target.shard));
  }
  const std::vector<const char*> none;
  PipelineRequest request;
  request.sql = &kCommit;
  request.values = &none;
  request.wrap = PipelineRequest::Wrap::kStatementOnly;
  committing_ = true;
  (void)Commit(target, lease, request);
  outcome_.token = std::move(token);
}

void RoutedCall::RunRead(const Target& target, ConnectionPool::Lease& lease, const std::string& begin,
                         const std::string& setup, const std::string* presync, milliseconds left) {
  // BEGIN, timeout, fence, statement and COMMIT in one round trip.
  PipelineRequest request;
  request.sql = work_.sql;
  request.values = &work_.values;
  request.begin = &begin;
  request.statement_timeout_ms = left.count();
  request.setup = &setup;
  request.presync = presync;
  bool reusable = true;
  std::optional<std::string> replayed;
  try {
    work_.rows = RunPipelined(lease.Connection(), request, reusable, nullptr, nullptr, &replayed);
  } catch (...) {
    if (!reusable) lease.Discard();
    if (replayed && !replayed->empty()) {
      parts_.replicas->ReportReplayed(target.shard, target.at.server, ParseLsn(*replayed));
    }
    throw;
  }
  if (!reusable) lease.Discard();
}

void RoutedCall::RunWrite(ConnectionPool::Lease& lease, const Target& target, const std::string& begin,
                          const std::string& setup, milliseconds left) {
  // BEGIN, timeout and fence (with the read token's values), statement and
  // COMMIT in one round trip; the statement's own errors (the fence's
  // refusal among them) stop it before the COMMIT, as one by one.
  PipelineRequest request;
  request.sql = work_.sql;
  request.values = &work_.values;
  request.read_only = false;
  request.begin = &begin;
  request.statement_timeout_ms = left.count();
  request.setup = &setup;
  BoundedAnswer answer = Commit(target, lease, request);
  work_.rows = std::move(*answer.rows);
  if (WantsToken() && answer.setup && !answer.setup->empty()) {
    const pg::Row check = (*answer.setup)[0];
    outcome_.token = TokenOfCheck(target.shard, check[static_cast<int>(check.size()) - 1].c_str());
  }
}

BoundedAnswer RoutedCall::Commit(const Target& target, ConnectionPool::Lease& lease, const PipelineRequest& request) {
  const SyncStandbyWatch standby(LibpqHandle(*lease));
  const auto unconfirmed = [&] {
    // Durable on the primary only: a failover now would lose it.
    ThrowUnknown(target.shard,
                 fmt::format("COMMIT returned without its synchronous standby's confirmation ({}) on {}: it is "
                             "committed on the primary but a failover may lose it; check before doing it again, and "
                             "check the shard's replicas (shardctl shards)",
                             standby.Message(), target.at.server));
  };
  BoundedAnswer answer;
  // A lone COMMIT (the function's) is committing already; a pipelined
  // write once its COMMIT is queued.
  bool queued = false;
  try {
    answer = RunBounded(lease, request, deadline_, queued);
    committing_ = committing_ || queued;
  } catch (const pqxx::sql_error& e) {
    committing_ = committing_ || queued;
    if (standby.Unconfirmed()) unconfirmed();
    // A lone COMMIT the server ended the session at (a shutdown while it
    // waited for a standby) may have committed locally first.
    if (work_.kind == RoutedWork::Kind::kFunction && IsServerGoingAway(e.sqlstate())) {
      ThrowUnknown(target.shard, fmt::format("the server ended the session during COMMIT on {} ({}): it may or may "
                                             "not have committed; check before doing it again",
                                             target.at.server, FirstLine(e.what())));
    }
    throw;
  } catch (...) {
    committing_ = committing_ || queued;
    if (standby.Unconfirmed()) unconfirmed();
    throw;
  }
  if (standby.Unconfirmed()) unconfirmed();
  if (!answer.failure.empty()) {
    ThrowUnknown(target.shard, fmt::format("COMMIT did not answer by the deadline on {} and was cancelled ({}): it "
                                           "may or may not have committed; check before doing it again",
                                           target.at.server, answer.failure));
  }
  return answer;
}

void RoutedCall::Succeeded(const Target& target) {
  outcome_.shard = target.shard;
  outcome_.server = target.at.server;
  outcome_.on_replica = target.on_replica;
}

RoutedCall::Next RoutedCall::Classify(const Target& target, ConnectionPool::Lease& lease) {
  const bool in_function = work_.kind == RoutedWork::Kind::kFunction;
  try {
    throw;
  } catch (const OutcomeUnknown&) {
    throw;
  } catch (const pqxx::broken_connection& e) {
    return OnConnectionLost(target, lease, e);
  } catch (const pqxx::sql_error& e) {
    // A pipelined call has ended its transaction itself.
    if (in_function) Rollback(lease);
    return OnServerError(target, lease, e, e.sqlstate());
  } catch (...) {
    // The function's own exception (or anything else): roll back, pass on.
    if (in_function && !committing_) Rollback(lease);
    throw;
  }
}

RoutedCall::Next RoutedCall::OnConnectionLost(const Target& target, ConnectionPool::Lease& lease,
                                              const std::exception& e) {
  PGconn* handle = LibpqHandle(lease.Connection());
  if (work_.kind == RoutedWork::Kind::kFunction && !committing_ && handle != nullptr &&
      PQstatus(handle) == CONNECTION_OK) {
    // libpqxx 6.4 throws broken_connection for every class 08 SQLSTATE; on
    // a connection that is still up it is 08P01, a statement the server
    // refused as sent (a wrong parameter count): the statement's error,
    // never retried.
    Rollback(lease);
    throw ShardQueryError(target.shard,
                          fmt::format("{} on shard {}: {}", Describe(), target.shard, FirstLine(e.what())), "08P01");
  }
  lease.Discard();
  if (committing_) {
    ThrowUnknown(target.shard, fmt::format("the connection was lost once COMMIT was sent ({}): it may or may not "
                                           "have committed; check before doing it again",
                                           FirstLine(e.what())));
  }
  last_failure_ =
      fmt::format("connection to shard {} ({}) lost: {}", target.shard, target.at.server, FirstLine(e.what()));
  if (target.on_replica) {
    parts_.replicas->ReportFailure(target.shard, target.at.server, FirstLine(e.what()));
    Leave(target, "connection lost: " + FirstLine(e.what()));
    return Next::kRetryNow;
  }
  ++outcome_.retried_other;
  return Next::kPauseFirst;
}

RoutedCall::Next RoutedCall::OnServerError(const Target& target, ConnectionPool::Lease& lease, const std::exception& e,
                                           const std::string& sqlstate) {
  if (!target.on_replica && IsServerGoingAway(sqlstate)) {
    // The primary ended the session (shut down, restarted, the backend
    // terminated) before the COMMIT ran (one that may have run comes as a
    // lost connection): the transaction went with it, as with a lost
    // connection.
    lease.Discard();
    last_failure_ =
        fmt::format("shard {}'s server {} ended the session: {}", target.shard, target.at.server, FirstLine(e.what()));
    ++outcome_.retried_other;
    Refresh();
    return Next::kPauseFirst;
  }
  if (IsSerializationFailure(sqlstate)) {
    // The transaction is gone and nothing of it kept. On a replica it is a
    // conflict with its recovery: try elsewhere.
    if (target.on_replica) {
      Leave(target, FirstLine(e.what()));
      return Next::kRetryNow;
    }
    if (!options_.retry_serialization_failures) throw;
    last_failure_ = FirstLine(e.what());
    ++outcome_.retried_other;
    return Next::kPauseFirst;
  }
  if (target.on_replica && sqlstate == kSqlStateNotReplayed) {
    // It had not replayed the token's writes when the read began: wait for
    // it (once, briefly) or go elsewhere.
    if (options_.read.replay_wait.count() > 0 && !waited_for_replay_) {
      waited_for_replay_ = true;
      if (parts_.replicas->WaitForReplay(target.shard, *target.choice->replica, *target.choice->verify,
                                         std::min(deadline_, Clock::now() + options_.read.replay_wait))) {
        return Next::kRetryNow;
      }
    }
    Leave(target,
          fmt::format(
              "it did not show the read token's writes yet (position {}{})", FormatLsn(target.choice->verify->lsn),
              target.choice->verify->xid == 0 ? "" : fmt::format(", transaction {}", target.choice->verify->xid)));
    return Next::kRetryNow;
  }
  if (!target.on_replica && !options_.read_only && sqlstate == kSqlStateReadOnlyTransaction) {
    // A primary that takes no writes: a failover fenced it. The catalog
    // names the new primary; the refresh switches to it.
    last_failure_ = fmt::format(
        "shard {}'s server {} takes no writes (a failover fenced it?): {}; check the shard's "
        "primary (shardctl shards)",
        target.shard, target.at.server, FirstLine(e.what()));
    ++outcome_.retried_other;
    Refresh();
    if (parts_.resolver.Servers(target.shard).primary.pool != target.pool && ++immediate_ < 3) return Next::kRetryNow;
    return Next::kPauseFirst;
  }
  if (sqlstate == kSqlStateQueryCanceled && RefusalStands(target.shard) && Clock::now() + kTimeoutSlack >= deadline_) {
    // The statement timeout (the deadline's) cancelled this attempt at the
    // shard that refused it before, ahead of its bucket check: the answer is
    // that refusal, not the cancellation. (At another shard, say the owner
    // a refusal named, the cancellation is the answer: nothing refused it.)
    ThrowStillRefused(outcome_.attempts);
  }
  if (sqlstate == kSqlStateQueryCanceled && Clock::now() + kTimeoutSlack >= deadline_) {
    // The deadline's own statement timeout cut the attempt (before COMMIT:
    // rolled back). The call ran out of time: shardkit's error, not the driver's.
    throw ShardQueryError(target.shard,
                          fmt::format("{}: the deadline passed during attempt {} on shard {}'s server {}, which "
                                      "cancelled it (rolled back, nothing kept){}",
                                      Describe(), outcome_.attempts, target.shard, target.at.server,
                                      last_failure_.empty() ? "" : "; before it: " + last_failure_),
                          kSqlStateQueryCanceled);
  }
  const auto refusal = ParseFenceRefusal(e);
  if (target.on_replica && !refusal) {
    if (IsConnectionLost(sqlstate) || IsServerGoingAway(sqlstate) || sqlstate == kSqlStateTooManyConnections) {
      // Shut down, starting up, out of connections: the replica's trouble.
      parts_.replicas->ReportFailure(target.shard, target.at.server, FirstLine(e.what()));
      Leave(target, FirstLine(e.what()));
      return Next::kRetryNow;
    }
    throw;
  }
  if (target.on_replica && !replica_only_) {
    // The replica has not replayed the move the directory knows of (or has
    // replayed one the directory does not): the primary decides.
    Leave(target, fmt::format("it does not serve bucket {} as of its replay ({})", bucket_, refusal->message));
    primary_only_ = true;
    return Next::kRetryNow;
  }
  if (!refusal) throw;
  return OnRefusal(target, *refusal);
}

RoutedCall::Next RoutedCall::OnRefusal(const Target& target, const FenceRefusal& refusal) {
  last_refusal_.emplace(
      ToException(refusal, target.shard, fmt::format("{} for {} on shard {}", label_, Who(), target.shard)));
  last_failure_ = refusal.message;
  if (target.on_replica) {
    // Replicas only: wait for it to replay the move, refreshing the
    // directory meanwhile.
    ++outcome_.refused_not_readable;
    Refresh();
    return Next::kPauseFirst;
  }
  // The refusing shard names the new owner (it retired the bucket): go there
  // at once. The named owner not owning it yet (incoming: the cutover is
  // under way, or its mover stopped) or a frozen bucket: stay, after a pause.
  const ShardId shard = target.shard;
  const bool moved_away = refusal.state == "retired" || refusal.state == "cleaning";
  const bool at_named_owner = redirect_ && shard == redirect_->second;
  const auto follow = [&] {
    if (moved_away && refusal.new_owner) {
      redirect_.emplace(shard, *refusal.new_owner);
    } else if (!(refusal.state == "incoming" && at_named_owner) && refusal.state != "frozen") {
      redirect_.reset();
    }
  };
  const auto elsewhere_now = [&] {
    return (parts_.resolver.Directory()->ShardOf(bucket_) != shard || redirect_) && ++immediate_ < 3;
  };
  switch (refusal.kind) {
    case BucketRefused::Kind::kNotOwned:
      ++outcome_.refused_not_owned;
      Refresh();
      follow();
      if (moved_away && elsewhere_now()) return Next::kRetryNow;
      break;
    case BucketRefused::Kind::kFrozen:
      ++outcome_.refused_frozen;
      redirect_.reset();
      break;
    case BucketRefused::Kind::kNotReadable:
      ++outcome_.refused_not_readable;
      if (refusal.state == "frozen") break;
      Refresh();
      follow();
      if ((moved_away || refusal.state == "absent") && elsewhere_now()) return Next::kRetryNow;
      break;
  }
  return Next::kPauseFirst;
}

void RoutedCall::PauseOrGiveUp(ShardId shard) {
  immediate_ = 0;
  const auto wait = Backoff(backoff_round_++, options_.max_backoff);
  if (Clock::now() + wait < deadline_) {
    std::this_thread::sleep_for(wait);
    return;
  }
  if (RefusalStands(shard)) ThrowStillRefused(outcome_.attempts);
  throw ShardQueryError(shard, fmt::format("{}: gave up at the deadline after {} attempts: {}", Describe(),
                                           outcome_.attempts, last_failure_));
}

bool RoutedCall::RefusalStands(ShardId shard) const noexcept {
  return last_refusal_ && last_refusal_->shard() == shard;
}

void RoutedCall::Refresh() {
  if (parts_.watcher == nullptr) return;
  try {
    (void)parts_.watcher->RefreshNow();
  } catch (const Error&) {
    // The catalog may be briefly unreachable; the refusal's named owner and
    // the next attempt still make progress.
  }
}

void RoutedCall::Leave(const Target& target, std::string why) {
  left_replicas_.push_back({target.at.server, std::move(why)});
  ++outcome_.replica_fallbacks;
}

void RoutedCall::ThrowStillRefused(int attempts) const {
  throw BucketRefused(
      last_refusal_->kind(), last_refusal_->shard(), last_refusal_->bucket(), last_refusal_->new_owner(),
      last_refusal_->state(),
      fmt::format("{} (still refused at the deadline, after {} attempts in {} ms)", last_refusal_->what(), attempts,
                  std::chrono::duration_cast<milliseconds>(Clock::now() - start_).count()));
}

void RoutedCall::ThrowUnknown(ShardId shard, const std::string& why) {
  unknown_ = true;
  throw OutcomeUnknown(shard, fmt::format("{} on shard {}: {}", Describe(), shard, why));
}

std::string RoutedCall::Describe() const {
  return fmt::format("{} for {} (bucket {})", label_, Who(), bucket_);
}

std::string RoutedCall::Who() const {
  return shardkit::Describe(key_);
}

}  // namespace shardkit::detail
