// CrossShardTransactions: one transaction per shard, one decision in the
// catalog (cross_shard.hpp has the protocol; sql/040 the log).
#include "shardkit/writes/cross_shard.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "pg/libpq_handle.hpp"
#include "pg/pipelined_on_each.hpp"
#include "pg/server_message.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pg/server_error.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "writes/cross_shard_log.hpp"
#include "writes/transaction_steps.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Backoff;
using detail::BeginSql;
using detail::FirstLine;
using detail::kWalPosition;
using detail::LibpqHandle;
using std::chrono::milliseconds;

constexpr auto kDefaultTimeout = std::chrono::seconds(5);

// A time-ordered id no other coordinator makes: milliseconds since the
// epoch, then 64 random bits.
std::string NewTransactionId() {
  thread_local std::mt19937_64 random{std::random_device{}() ^
                                      static_cast<std::uint64_t>(Clock::now().time_since_epoch().count())};
  const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return fmt::format("{:012x}{:016x}", ms, random());
}

// One shard's transaction.
struct Participant {
  ShardId shard{};
  ConnectionPool* pool = nullptr;
  std::string server;
  BucketSet buckets;
  std::optional<ConnectionPool::Lease> lease;
  std::unique_ptr<pqxx::nontransaction> tx;
  bool begun = false;
  bool prepared = false;
  std::string gid;
};

// A failure after which the whole transaction may run again.
struct Retry {
  std::string why;
  bool refresh = false;
};

class CrossShardCall {
 public:
  CrossShardCall(BucketShardResolver& resolver, DirectoryWatcher* watcher, ConnectionPool* catalog,
                 const std::vector<ShardKey>& keys, const CrossShardOptions& options, CrossShardOutcome& outcome)
      : resolver_(resolver),
        watcher_(watcher),
        catalog_(catalog),
        options_(options),
        outcome_(outcome),
        start_(Clock::now()),
        deadline_(options.deadline.value_or(start_ + kDefaultTimeout)),
        label_(options.label.empty() ? "cross-shard transaction" : options.label) {
    for (const ShardKey& key : keys) {
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(key);
    }
    if (keys_.empty()) throw Error(label_ + ": no keys given; name the customers the transaction changes");
  }

  void Run(const std::function<void(const std::vector<CrossShardPart>&)>& fn) {
    for (;;) {
      std::optional<Retry> retry;
      try {
        Attempt(fn);
        return;
      } catch (...) {
        retry = Classify();  // throws what is not retried
      }
      last_failure_ = retry->why;
      if (retry->refresh) Refresh();
      Pause();
    }
  }

 private:
  void Attempt(const std::function<void(const std::vector<CrossShardPart>&)>& fn) {
    ++outcome_.attempts;
    participants_.clear();
    parts_.clear();
    transaction_id_.clear();
    logged_ = false;
    decided_ = false;
    Route();
    if (participants_.size() > 1 && catalog_ == nullptr) {
      throw ConfigError("catalog", fmt::format("{}: {} spans {} shards; committing on several shards atomically "
                                               "needs the catalog's coordinator log: add [catalog] dsn",
                                               label_, Who(), participants_.size()));
    }
    const auto left = TimeLeft();
    for (Participant& p : participants_) {
      current_ = &p;
      p.lease.emplace(p.pool->Acquire(deadline_));
      p.tx = std::make_unique<pqxx::nontransaction>(**p.lease);
    }
    // Every shard's BEGIN, timeout and fence, and the coordinator's row
    // (two-phase only), in one round trip.
    std::vector<PGconn*> connections;
    std::vector<std::vector<std::string>> statements;
    for (Participant& p : participants_) {
      connections.push_back(LibpqHandle(**p.lease));
      statements.push_back({BeginSql(options_.isolation), fmt::format("SET LOCAL statement_timeout = {}", left.count()),
                            p.buckets.FenceSql()});
    }
    if (participants_.size() > 1) {
      current_ = nullptr;
      transaction_id_ = NewTransactionId();
      catalog_lease_.emplace(catalog_->Acquire(deadline_));
      connections.push_back(LibpqHandle(**catalog_lease_));
      statements.push_back({detail::LogPreparingSql(transaction_id_, ShardNames(), label_)});
    }
    step_ = "BEGIN";
    const std::vector<detail::EachAnswer> answers = detail::PipelinedOnEach(connections, statements);
    for (std::size_t i = 0; i < participants_.size(); ++i) {
      participants_[i].begun = !answers[i].connection_lost;
    }
    if (participants_.size() > 1) {
      const detail::EachAnswer& logged = answers.back();
      logged_ = !logged.failed;
      if (logged.failed) {
        if (logged.connection_lost) catalog_lease_->Discard();
        throw Retry{fmt::format("the catalog could not log the transaction: {}", logged.message), false};
      }
    }
    for (std::size_t i = 0; i < participants_.size(); ++i) ThrowIfFailed(participants_[i], answers[i]);
    current_ = nullptr;
    for (const ShardKey& key : keys_) {
      Participant& p = Of(key.bucket());
      parts_.push_back(CrossShardPart{
          key, RoutedContext{key, key.bucket(), p.shard, directory_version_, outcome_.attempts, p.server, false},
          p.tx.get()});
    }
    step_ = "a statement of the function";
    fn(parts_);
    step_ = "COMMIT";
    for (Participant& p : participants_) {
      if (PQtransactionStatus(LibpqHandle(**p.lease)) == PQTRANS_INERROR) {
        throw ShardQueryError(p.shard, fmt::format("{} on shard {}: a statement failed inside the function and its "
                                                   "error was caught there, so the transaction could not commit; "
                                                   "nothing was committed",
                                                   Describe(), p.shard));
      }
    }
    if (participants_.size() == 1) {
      CommitOne(participants_.front());
    } else {
      CommitTwoPhase();
    }
    Done();
  }

  void Route() {
    const auto directory = resolver_.Directory();
    directory_version_ = directory->Version();
    std::map<ShardId, BucketSet> shards;
    for (const ShardKey& key : keys_) shards[directory->ShardOf(key.bucket())].Add(key.bucket());
    for (const auto& [shard, buckets] : shards) {
      const ShardServers& servers = resolver_.Servers(shard);
      Participant p;
      p.shard = shard;
      p.pool = servers.primary.pool;
      p.server = servers.primary.name;
      p.buckets = buckets;
      participants_.push_back(std::move(p));
    }
  }

  Participant& Of(BucketId bucket) {
    for (Participant& p : participants_) {
      if (p.buckets.Contains(bucket)) return p;
    }
    throw Error("cross-shard transaction: bucket without a participant");  // not reached: Route() placed every key
  }

  void CommitOne(Participant& p) {
    current_ = &p;
    committing_ = true;
    const bool with_token = options_.read_token;
    const pqxx::result r = p.tx->exec(with_token ? "COMMIT; " + kWalPosition : std::string("COMMIT"));
    p.begun = false;
    if (with_token && !r.empty()) outcome_.token.Add({p.shard, ParseLsn(r[0][0].c_str())});
    outcome_.shards.push_back(p.shard);
  }

  void CommitTwoPhase() {
    outcome_.two_phase = true;
    outcome_.transaction_id = transaction_id_;
    Step(CrossShardStep::Kind::kLogged, std::nullopt);
    // Every PREPARE in one round trip.
    std::vector<PGconn*> connections;
    std::vector<std::vector<std::string>> statements;
    for (Participant& p : participants_) {
      p.gid = detail::PreparedGid(transaction_id_, resolver_.ShardName(p.shard));
      connections.push_back(LibpqHandle(**p.lease));
      statements.push_back({"PREPARE TRANSACTION " + p.tx->quote(p.gid)});
    }
    step_ = "PREPARE TRANSACTION";
    const std::vector<detail::EachAnswer> prepared = detail::PipelinedOnEach(connections, statements);
    for (std::size_t i = 0; i < participants_.size(); ++i) {
      Participant& p = participants_[i];
      // A PREPARE that failed rolled its transaction back; one whose answer
      // was lost may have prepared: the row's 'abort' (RollBackAll) has the
      // recovery pass roll it back.
      p.begun = false;
      p.prepared = !prepared[i].failed;
    }
    for (std::size_t i = 0; i < participants_.size(); ++i) {
      if (participants_[i].prepared) Step(CrossShardStep::Kind::kPrepared, participants_[i].shard);
    }
    for (std::size_t i = 0; i < participants_.size(); ++i) ThrowIfFailed(participants_[i], prepared[i]);
    current_ = nullptr;
    Decide();
    Step(CrossShardStep::Kind::kDecided, std::nullopt);
    // Every COMMIT PREPARED (and the WAL position after it) in one round trip.
    statements.clear();
    for (Participant& p : participants_) {
      statements.push_back({"COMMIT PREPARED " + p.tx->quote(p.gid)});
      if (options_.read_token) statements.back().push_back(kWalPosition);
    }
    const std::vector<detail::EachAnswer> committed = detail::PipelinedOnEach(connections, statements);
    for (std::size_t i = 0; i < participants_.size(); ++i) {
      Participant& p = participants_[i];
      const detail::EachAnswer& answer = committed[i];
      outcome_.shards.push_back(p.shard);
      p.prepared = false;
      if (answer.connection_lost) p.lease->Discard();
      if (answer.failed && answer.failed_statement <= 0 && answer.sqlstate != "42704") {
        // Not known to be committed here (42704: a recovery pass committed
        // it first; the decision is 'commit', nothing else could end it).
        outcome_.left_to_recovery.push_back(p.shard);
        continue;
      }
      if (answer.last_value && options_.read_token && answer.failed_statement < 0) {
        outcome_.token.Add({p.shard, ParseLsn(*answer.last_value)});
      }
      Step(CrossShardStep::Kind::kCommitted, p.shard);
    }
    // The row stays until a recovery pass finds no part of it (in_doubt.hpp):
    // no round trip here.
  }

  // Throws the statement's failure as libpqxx would have, for Classify().
  void ThrowIfFailed(Participant& p, const detail::EachAnswer& answer) {
    if (!answer.failed) return;
    current_ = &p;
    if (answer.connection_lost) {
      p.lease->Discard();
      throw pqxx::broken_connection(answer.message);
    }
    throw pqxx::sql_error(answer.message, "", answer.sqlstate.c_str());
  }

  [[nodiscard]] std::vector<std::string> ShardNames() const {
    std::vector<std::string> names;
    for (const Participant& p : participants_) names.push_back(resolver_.ShardName(p.shard));
    return names;
  }

  // The one UPDATE that decides. If its answer is lost, ask again.
  void Decide() {
    std::optional<std::string> state;
    try {
      state = detail::DecideCommit(**catalog_lease_, transaction_id_);
    } catch (const pqxx::sql_error& e) {
      throw Retry{fmt::format("the catalog refused the decision: {}", FirstLine(e.what())), false};
    } catch (const std::exception& e) {
      // Lost: read the row on a new connection.
      catalog_lease_->Discard();
      catalog_lease_.reset();
      try {
        auto catalog = catalog_->Acquire(deadline_);
        state = detail::StateOf(*catalog, transaction_id_);
        if (state == "preparing") state = detail::DecideAbort(*catalog, transaction_id_);
      } catch (const std::exception& again) {
        throw OutcomeUnknown(participants_.front().shard,
                             fmt::format("{}: every part is prepared, and the decision could not be confirmed in the "
                                         "catalog ({}; then {}): the next recovery pass commits or rolls back every "
                                         "part alike (shardctl recover); check before doing it again",
                                         Describe(), FirstLine(e.what()), FirstLine(again.what())));
      }
    }
    if (state == "commit") {
      decided_ = true;
      return;
    }
    throw Retry{fmt::format("transaction {} was aborted by a recovery pass before its decision (state {})",
                            transaction_id_, state.value_or("missing")),
                false};
  }

  void Done() {
    for (Participant& p : participants_) {
      p.tx.reset();
      p.lease.reset();
    }
    catalog_lease_.reset();
  }

  // After a failure: roll every part back (unless decided), then say
  // whether to go again.
  Retry Classify() {
    try {
      throw;
    } catch (const OutcomeUnknown&) {
      // The decision (or a one-shard COMMIT) may have been taken: nothing
      // is rolled back; the prepared parts stay for the recovery pass.
      Release();
      throw;
    } catch (...) {
      if (decided_) {
        Release();  // committed; what failed after the decision is passed on
        throw;
      }
    }
    RollBackAll();
    try {
      throw;
    } catch (const Retry& retry) {
      return retry;
    } catch (const ConfigError&) {
      throw;
    } catch (const ShardUnavailable& e) {
      // A primary that cannot be reached: a failover may name another.
      if (watcher_ != nullptr && !resolver_.Servers(e.shard()).replicas.empty()) {
        return Retry{FirstLine(e.what()), true};
      }
      throw;
    } catch (const pqxx::broken_connection& e) {
      const ShardId shard = Culprit();
      if (current_ != nullptr && !committing_) {
        PGconn* handle = current_->lease ? LibpqHandle(**current_->lease) : nullptr;
        if (handle != nullptr && PQstatus(handle) == CONNECTION_OK) {
          // 08P01: the statement as sent was refused (a wrong parameter count).
          throw ShardQueryError(shard, fmt::format("{} on shard {}: {}", Describe(), shard, FirstLine(e.what())),
                                "08P01");
        }
      }
      if (committing_) {
        throw OutcomeUnknown(shard, fmt::format("{} on shard {}: the connection was lost once COMMIT was sent ({}): "
                                                "it may or may not have committed; check before doing it again",
                                                Describe(), shard, FirstLine(e.what())));
      }
      return Retry{fmt::format("connection to shard {} lost: {}", shard, FirstLine(e.what())), true};
    } catch (const pqxx::sql_error& e) {
      const ShardId shard = Culprit();
      const std::string& sqlstate = e.sqlstate();
      if (const auto refusal = ParseFenceRefusal(e)) {
        last_refusal_.emplace(ToException(*refusal, shard, fmt::format("{} on shard {}", Describe(), shard)));
        return Retry{refusal->message, true};
      }
      if (IsServerGoingAway(sqlstate) || sqlstate == "25006") {
        return Retry{fmt::format("shard {}: {}", shard, FirstLine(e.what())), true};
      }
      if ((sqlstate == "40001" || sqlstate == "40P01") && options_.retry_serialization_failures) {
        return Retry{FirstLine(e.what()), false};
      }
      if (sqlstate == "55000" &&
          std::string_view(e.what()).find("prepared transactions are disabled") != std::string_view::npos) {
        throw ShardQueryError(shard,
                              fmt::format("{}: shard {} cannot prepare a transaction: its server has "
                                          "max_prepared_transactions = 0; set it (at least max_connections' share "
                                          "this service uses, e.g. 64) on every shard's servers and restart them; "
                                          "nothing was committed",
                                          Describe(), shard),
                              sqlstate);
      }
      RethrowAsShardError(shard,
                          fmt::format("{}, at {} on shard {} (nothing was committed)", Describe(), step_, shard));
    } catch (...) {
      throw;  // the function's own exception, or anything else: passed on
    }
  }

  void Release() noexcept {
    for (Participant& p : participants_) {
      if (p.lease && p.begun) p.lease->Discard();
      p.tx.reset();
      p.lease.reset();
    }
    catalog_lease_.reset();
  }

  void RollBackAll() noexcept {
    committing_ = false;
    bool all_rolled_back = true;
    for (Participant& p : participants_) {
      if (!p.tx) continue;
      try {
        if (p.prepared) {
          p.tx->exec("ROLLBACK PREPARED " + p.tx->quote(p.gid));
          p.prepared = false;
        } else if (p.begun) {
          p.tx->exec("ROLLBACK");
        }
      } catch (...) {
        if (p.prepared) all_rolled_back = false;
        if (p.lease) p.lease->Discard();
      }
      p.begun = false;
      p.tx.reset();
      p.lease.reset();
    }
    if (!logged_) {
      catalog_lease_.reset();
      return;
    }
    try {
      if (!catalog_lease_) catalog_lease_.emplace(catalog_->Acquire(deadline_));
      // The row says abort before it goes: a part still prepared (its
      // rollback failed above) is rolled back by the next recovery pass.
      (void)detail::DecideAbort(**catalog_lease_, transaction_id_);
      if (all_rolled_back) detail::Forget(**catalog_lease_, transaction_id_);
    } catch (...) {
      // Left 'preparing': a recovery pass aborts it after the bound.
      if (catalog_lease_) catalog_lease_->Discard();
    }
    catalog_lease_.reset();
  }

  // The shard whose statement failed: the one being worked on, else the
  // one whose transaction is in error.
  ShardId Culprit() const {
    if (current_ != nullptr) return current_->shard;
    for (const Participant& p : participants_) {
      if (p.lease && PQtransactionStatus(LibpqHandle(**p.lease)) == PQTRANS_INERROR) return p.shard;
    }
    return participants_.empty() ? ShardId{0} : participants_.front().shard;
  }

  void Step(CrossShardStep::Kind kind, std::optional<ShardId> shard) {
    if (options_.on_step) options_.on_step(CrossShardStep{kind, transaction_id_, shard});
  }

  milliseconds TimeLeft() const {
    const auto left = std::chrono::ceil<milliseconds>(deadline_ - Clock::now());
    if (left.count() > 0) return left;
    GiveUp();
  }

  void Pause() {
    const auto wait = Backoff(backoff_round_++, options_.max_backoff);
    if (Clock::now() + wait >= deadline_) GiveUp();
    std::this_thread::sleep_for(wait);
  }

  [[noreturn]] void GiveUp() const {
    if (last_refusal_) throw *last_refusal_;
    throw ShardQueryError(participants_.empty() ? ShardId{0} : participants_.front().shard,
                          fmt::format("{}: gave up at the deadline after {} attempts (nothing was committed): {}",
                                      Describe(), outcome_.attempts, last_failure_));
  }

  void Refresh() {
    if (watcher_ == nullptr) return;
    try {
      (void)watcher_->RefreshNow();
    } catch (const Error&) {
      // The next attempt (or a refusal's named owner) still makes progress.
    }
  }

  [[nodiscard]] std::string Who() const {
    std::string who;
    for (const ShardKey& key : keys_) who += (who.empty() ? "" : ", ") + shardkit::Describe(key);
    return who;
  }

  [[nodiscard]] std::string Describe() const {
    return transaction_id_.empty() ? fmt::format("{} for {}", label_, Who())
                                   : fmt::format("{} {} for {}", label_, transaction_id_, Who());
  }

  BucketShardResolver& resolver_;
  DirectoryWatcher* watcher_;
  ConnectionPool* catalog_;
  const CrossShardOptions& options_;
  CrossShardOutcome& outcome_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  std::string label_;
  std::vector<ShardKey> keys_;

  std::int64_t directory_version_ = 0;
  std::vector<Participant> participants_;
  std::vector<CrossShardPart> parts_;
  Participant* current_ = nullptr;                      // the participant a statement of ours is running on
  const char* step_ = "BEGIN";                          // for messages: where a failure happened
  std::optional<ConnectionPool::Lease> catalog_lease_;  // two-phase: the coordinator log's connection
  std::string transaction_id_;
  bool logged_ = false;
  bool decided_ = false;
  bool committing_ = false;  // a one-shard COMMIT was sent
  int backoff_round_ = 0;
  std::string last_failure_;
  std::optional<BucketRefused> last_refusal_;
};

}  // namespace

const char* ToString(CrossShardStep::Kind kind) noexcept {
  switch (kind) {
    case CrossShardStep::Kind::kLogged:
      return "logged";
    case CrossShardStep::Kind::kPrepared:
      return "prepared";
    case CrossShardStep::Kind::kDecided:
      return "decided";
    case CrossShardStep::Kind::kCommitted:
      return "committed";
  }
  return "?";
}

CrossShardTransactions::CrossShardTransactions(BucketShardResolver& resolver, DirectoryWatcher* watcher,
                                               std::optional<Dsn> catalog, PoolOptions catalog_pool)
    : resolver_(resolver), watcher_(watcher) {
  if (catalog) catalog_ = std::make_unique<ConnectionPool>(ShardId{-1}, *catalog, std::move(catalog_pool));
}

CrossShardTransactions::~CrossShardTransactions() = default;

void CrossShardTransactions::RunErased(const std::vector<ShardKey>& keys,
                                       const std::function<void(const std::vector<CrossShardPart>&)>& fn,
                                       const CrossShardOptions& options, CrossShardOutcome* outcome) {
  CrossShardOutcome local;
  CrossShardOutcome& out = outcome != nullptr ? *outcome : local;
  out = CrossShardOutcome{};
  CrossShardCall call(resolver_, watcher_, catalog_.get(), keys, options, out);
  const auto start = Clock::now();
  try {
    call.Run(fn);
  } catch (...) {
    out.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    throw;
  }
  out.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

}  // namespace shardkit
