// One RoutedTransactions call: its attempts, one after another, and the one
// classifier that decides after a failed attempt whether to go again (at
// once, or after a pause) or to throw.
//
// An attempt routes (the directory's shard, or the shard a refusal named;
// a replica for reads that ask for one), acquires a connection, and runs
// the work on it: the caller's function between BEGIN and COMMIT, or one
// statement whose whole transaction is pipelined into one round trip (a
// read, or a write with its COMMIT and read token).
//
// Which failures are retried, and why that is safe: a fence or visibility
// refusal is raised by a statement, so the transaction is aborted and
// nothing it did is kept; so is a serialization failure or deadlock; a
// connection lost before COMMIT was sent takes its transaction with it.
// Only a connection lost once COMMIT may have reached the server, a COMMIT
// cancelled at the deadline, or one its synchronous standby did not confirm
// leaves the outcome open (OutcomeUnknown). A write refused as read-only (a
// primary a failover fenced) or a primary that cannot be reached reads the
// catalog's primaries again (the directory watcher) and retries on the new
// one.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/replica_monitor.hpp"
#include "shardkit/writes/routed.hpp"
#include "writes/bounded_call.hpp"

namespace shardkit::detail {

// What each attempt runs.
struct RoutedWork {
  enum class Kind {
    kFunction,  // fn between BEGIN and COMMIT (three round trips and fn's)
    kRead,      // sql, its transaction in one round trip
    kWrite,     // sql, its transaction, COMMIT and read token in one round trip
  };
  Kind kind = Kind::kFunction;
  const std::function<void(pqxx::transaction_base&, const RoutedContext&)>* fn = nullptr;
  const std::string* sql = nullptr;
  std::vector<const char*> values;  // into the caller's params; nullptr is NULL
  pg::Rows rows;                    // kRead, kWrite: the statement's rows
};

// The parts of RoutedTransactions a call uses.
struct RoutedParts {
  BucketShardResolver& resolver;
  DirectoryWatcher* watcher;
  ReplicaMonitor* replicas;
};

class RoutedCall {
 public:
  RoutedCall(const RoutedParts& parts, const ShardKey& key, const RoutedOptions& options, RoutedWork& work);

  // Attempts until one commits; throws what the classifier gives up with.
  void Run();

  // Filled as it goes (elapsed: when Run returns or throws).
  [[nodiscard]] const RoutedOutcome& Outcome() const noexcept { return outcome_; }
  // Run threw OutcomeUnknown.
  [[nodiscard]] bool Unknown() const noexcept { return unknown_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Next { kRetryNow, kPauseFirst };
  // Where one attempt runs.
  struct Target {
    ShardId shard{};
    ConnectionPool* pool = nullptr;
    std::optional<ReplicaChoice> choice;
    bool on_replica = false;
    RoutedContext at;
  };

  void Attempts();
  Target Choose();
  // nullopt: go again at once (a replica or primary to switch to).
  std::optional<ConnectionPool::Lease> Acquire(const Target& target);
  // The primary is unreachable: true to try again (the catalog named
  // another, or the shard has replicas and the deadline leaves time to wait
  // for a failover to name one, or for this one to come back).
  bool WaitForPrimary(const Target& target, const ShardError& failure);
  // A read on a primary that reports itself read-only: false to go again
  // at once (the catalog names its successor); throws if it cannot say.
  bool ConfirmPrimary(const Target& target, ConnectionPool::Lease& lease);
  // The deadline's time left for the attempt's statements; throws at it.
  [[nodiscard]] std::chrono::milliseconds TimeLeft(ShardId shard) const;
  void Attempt(const Target& target, ConnectionPool::Lease& lease, std::chrono::milliseconds left);
  // A write that returns a read token (read by its bucket check's SELECT).
  [[nodiscard]] bool WantsToken() const noexcept {
    return work_.kind != RoutedWork::Kind::kRead && !options_.read_only && options_.read_token;
  }
  void RunFunction(const Target& target, ConnectionPool::Lease& lease, const std::string& begin,
                   const std::string& setup, const std::string* presync, std::chrono::milliseconds left);
  void RunRead(const Target& target, ConnectionPool::Lease& lease, const std::string& begin, const std::string& setup,
               const std::string* presync, std::chrono::milliseconds left);
  void RunWrite(ConnectionPool::Lease& lease, const Target& target, const std::string& begin, const std::string& setup,
                std::chrono::milliseconds left);
  // A pipelined call with a COMMIT (RunBounded): throws OutcomeUnknown if
  // it is not known whether it committed where a failover would keep it.
  BoundedAnswer Commit(const Target& target, ConnectionPool::Lease& lease, const PipelineRequest& request);
  void Succeeded(const Target& target);

  // The classifier: called while the attempt's exception is being handled.
  Next Classify(const Target& target, ConnectionPool::Lease& lease);
  Next OnConnectionLost(const Target& target, ConnectionPool::Lease& lease, const std::exception& e);
  Next OnServerError(const Target& target, ConnectionPool::Lease& lease, const std::exception& e,
                     const std::string& sqlstate);
  Next OnRefusal(const Target& target, const FenceRefusal& refusal);

  void PauseOrGiveUp(ShardId shard);
  // The deadline's answer is the last refusal only if it came from `shard`,
  // the shard of the attempt the deadline cut short.
  [[nodiscard]] bool RefusalStands(ShardId shard) const noexcept;
  void Refresh();
  void Leave(const Target& target, std::string why);
  [[noreturn]] void ThrowStillRefused(int attempts) const;
  [[noreturn]] void ThrowUnknown(ShardId shard, const std::string& why);
  [[nodiscard]] std::string Describe() const;
  // "customer 4242" (integer keys), "key <value>" (the others).
  [[nodiscard]] std::string Who() const;

  RoutedParts parts_;
  ShardKey key_;
  const RoutedOptions& options_;
  RoutedWork& work_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  std::string label_;
  BucketId bucket_;
  std::string fence_sql_;
  std::string presync_;  // a replica read's step before its snapshot (CaptureReplayed)
  RoutedOutcome outcome_;
  bool unknown_ = false;

  // A refusal named where the bucket went: while the directory still sends
  // us to the refusing shard (`first`), go to the named owner (`second`).
  std::optional<std::pair<ShardId, ShardId>> redirect_;
  std::optional<BucketRefused> last_refusal_;
  std::string last_failure_;
  int backoff_round_ = 0;
  int immediate_ = 0;         // retries without a pause in a row (a refusal naming the new owner)
  int primary_switches_ = 0;  // an unreachable primary that a failover replaced
  std::optional<Clock::time_point> primary_lost_at_;  // the first unreachable primary, while waiting
  bool primary_confirmed_ = false;                    // a read-only primary the catalog still names
  bool committing_ = false;                           // this attempt's COMMIT may have reached the server

  // Reads on replicas: the replicas this call tried and left (and why), and
  // whether it has given up on them (a bucket a replica refused).
  bool replica_only_ = false;
  bool primary_only_ = true;
  std::vector<ReplicaUnavailable::Skipped> left_replicas_;
  bool waited_for_replay_ = false;
};

}  // namespace shardkit::detail
