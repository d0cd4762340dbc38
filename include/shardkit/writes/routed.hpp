// shardkit/writes/routed.hpp — one customer's transaction on the shard that owns it,
// with a deadline, that follows the customer's bucket through moves.
//
// Run() routes with the resolver's current directory, opens a transaction on
// the owning shard (BEGIN, statement_timeout and the bucket setting of
// ownership.hpp in one round trip), calls your function, and commits. If a
// shard refuses the bucket (the fence: moved away, frozen for a move's
// cutover; or a read of a bucket it does not serve), nothing was written,
// so it refreshes the directory (DirectoryWatcher::RefreshNow), goes to the
// new owner the refusal names (and stays there while that shard is about to
// own it), and runs the function again, with a short back-off while the
// bucket is frozen or arriving, until the deadline. Reads and writes alike
// follow a move this way, also before the catalog's directory flips. A
// serialization failure or a connection lost before COMMIT is retried the
// same way. A connection lost during COMMIT is never retried: the outcome is
// unknown and OutcomeUnknown says so.
//
//   shardkit::RoutedTransactions routed{*resolver, &watcher};
//   const auto order_id = routed.Run(customer, [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& at) {
//     tx.exec_params("INSERT INTO orders (customer_id, bucket, order_id, ...) VALUES ($1, $2, $3, ...)",
//                    customer, at.bucket, id, ...);
//     return id;
//   });
//
// Every write that commits returns its read token (RoutedOutcome::token):
// the shard, its transaction and a WAL position (read by its bucket check,
// no statement of its own), for reads that must see it on a replica
// (read_token.hpp). Reads (Read, and Run with read_only) may go to a
// shard's replica under options.read (read_policy.hpp) once a ReplicaMonitor
// is set (ReadReplicas; a Cluster does it): a REPEATABLE READ READ ONLY
// transaction there, fenced like the primary's; a replica that is not fit,
// fails, has not replayed the token or refuses the bucket (a move it has
// not replayed) sends the read to another replica or the primary.
//
// Failover (topology/failover.hpp): a write refused by a read-only primary
// (fenced), or a primary that cannot be reached, refreshes the catalog's
// primaries and runs again on the new one. A read on a primary that reports
// itself read-only runs there only if the catalog, asked after the call
// began, still names it; without a watcher it throws ShardUnavailable
// (SQLSTATE 25006) rather than read a server that may have a successor.
//
// The function may run more than once: keep effects outside the database
// (messages, HTTP calls) out of it, and let it compute its values (IDs)
// before or idempotently. Throwing from it rolls the transaction back and
// propagates. Do not COMMIT or ROLLBACK inside it; its transaction object is
// the routed transaction (commit() on it does nothing).
//
// Thread-safe: any number of threads may Run() at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <pqxx/result>
#include <string>
#include <type_traits>
#include <utility>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/core/sql_params.hpp"
#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/pg/rows.hpp"
#include "shardkit/routing/read_policy.hpp"
#include "shardkit/routing/read_token.hpp"

namespace pqxx {
class transaction_base;
}

namespace shardkit {

class BucketShardResolver;
class DirectoryWatcher;
class ReplicaMonitor;
namespace detail {
struct RoutedWork;
}

enum class Isolation { kReadCommitted, kRepeatableRead, kSerializable };

struct RoutedOptions {
  // Absolute deadline for every attempt together (acquire, statements,
  // back-off). Default: now + 5 s when Run is called.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  Isolation isolation = Isolation::kReadCommitted;
  bool read_only = false;
  // Retry serialization failures and deadlocks (SQLSTATE 40001, 40P01).
  bool retry_serialization_failures = true;
  // Back-off between attempts after a frozen bucket or a failure: starts at
  // 1 ms, doubles, capped here (with jitter).
  std::chrono::milliseconds max_backoff{20};
  // For messages: "place order".
  std::string label;
  // Where a read-only call may run: the primary (default) or a replica
  // (read_policy.hpp). Writes always run on the primary.
  ReadPolicy read;
  // A write's bucket check returns its read token (RoutedOutcome::token,
  // sql/046), assigning the transaction id. false: no token, and a call
  // that changes nothing commits no record (bench/results.md).
  bool read_token = true;
};

// What the function is told about where it runs.
struct RoutedContext {
  ShardKey key = CustomerId{0};  // what it routes by (a parameter in its text form)
  BucketId bucket{};
  ShardId shard{};
  std::int64_t directory_version = 0;  // of the directory this attempt routed with
  int attempt = 1;                     // 1 for the first
  std::string server;                  // the server's name: the shard's primary, or a replica
  bool on_replica = false;
};

// What one Run() did (optional out-parameter of Run()).
struct RoutedOutcome {
  ShardId shard{};          // where it committed
  std::string server;       // which server of the shard: its primary's name or a replica's
  bool on_replica = false;  // a read served by a replica
  // What a replica must show of a write: its transaction and position (empty
  // for reads): combine and pass it to later reads (read_token.hpp).
  ReadToken token;
  int attempts = 0;
  int replica_fallbacks = 0;     // replicas a read tried and left (failed, not replayed, refused the bucket)
  int refused_not_owned = 0;     // SK001 refusals followed
  int refused_frozen = 0;        // SK002
  int refused_not_readable = 0;  // SK003
  int retried_other = 0;         // serialization failures, deadlocks, connections lost before COMMIT
  std::chrono::microseconds elapsed{0};
};

struct RoutedStats {
  std::uint64_t calls = 0;
  std::uint64_t committed = 0;
  std::uint64_t attempts = 0;
  std::uint64_t refused_not_owned = 0;
  std::uint64_t refused_frozen = 0;
  std::uint64_t refused_not_readable = 0;
  std::uint64_t retried_other = 0;
  std::uint64_t outcome_unknown = 0;
  std::uint64_t failed = 0;             // calls that threw
  std::uint64_t replica_reads = 0;      // reads answered by a replica
  std::uint64_t replica_fallbacks = 0;  // replicas a read tried and left
};

class RoutedTransactions {
 public:
  // `watcher` (may be null) is asked to refresh the directory after a refusal;
  // without one, only the refusal's named new owner is followed.
  explicit RoutedTransactions(BucketShardResolver& resolver, DirectoryWatcher* watcher = nullptr);

  // Runs fn(tx, context) in a transaction on the customer's shard and
  // commits; returns what fn returns. Throws BucketRefused when the bucket
  // stays refused until the deadline, OutcomeUnknown when COMMIT's outcome
  // is unknown, PoolTimeout/ShardUnavailable when no connection is had,
  // ShardQueryError with SQLSTATE 57014 when the deadline's statement
  // timeout cancels a statement (rolled back), and whatever fn throws.
  template <class Fn>
  auto Run(const ShardKey& key, Fn&& fn, const RoutedOptions& options = {}, RoutedOutcome* outcome = nullptr) {
    using Result = std::invoke_result_t<Fn&, pqxx::transaction_base&, const RoutedContext&>;
    if constexpr (std::is_void_v<Result>) {
      RunErased(
          key, [&](pqxx::transaction_base& tx, const RoutedContext& at) { fn(tx, at); }, options, outcome);
    } else {
      std::optional<Result> result;
      RunErased(
          key, [&](pqxx::transaction_base& tx, const RoutedContext& at) { result.emplace(fn(tx, at)); }, options,
          outcome);
      return std::move(*result);
    }
  }

  // One read-only statement on the customer's shard, its transaction from
  // BEGIN to COMMIT in one round trip (libpq pipeline mode) instead of
  // Run's three; the same routing, fence, retries and errors as Run. The
  // statement is one statement (extended protocol); params are $1..$n.
  [[nodiscard]] pg::Rows Read(const ShardKey& key, const std::string& sql, const SqlParams& params,
                              const RoutedOptions& options = {}, RoutedOutcome* outcome = nullptr);
  // One writing statement the same way: BEGIN, the fence, the statement,
  // COMMIT and the read token's WAL position in one round trip. Its rows
  // are the statement's (RETURNING), affected_rows() its count. As every
  // step is sent at once, a connection lost after sending is OutcomeUnknown
  // (Run retries one lost before its COMMIT was sent); a statement's error
  // (the fence's refusal, a constraint) stops it before the COMMIT, and is
  // retried or thrown as Run does.
  pg::Rows Write(const ShardKey& key, const std::string& sql, const SqlParams& params,
                 const RoutedOptions& options = {}, RoutedOutcome* outcome = nullptr);

  [[nodiscard]] RoutedStats Stats() const;
  [[nodiscard]] BucketShardResolver& Resolver() const noexcept { return resolver_; }
  // Reads may go to replicas that `monitor` finds fit (null: primaries
  // only). Set before use.
  void ReadReplicas(ReplicaMonitor* monitor) noexcept { replicas_ = monitor; }

 private:
  void RunErased(const ShardKey& key, const std::function<void(pqxx::transaction_base&, const RoutedContext&)>& fn,
                 const RoutedOptions& options, RoutedOutcome* outcome);
  void RunWork(const ShardKey& key, detail::RoutedWork& work, const RoutedOptions& options, RoutedOutcome* outcome);
  void Count(const RoutedOutcome& outcome, bool committed, bool unknown);

  BucketShardResolver& resolver_;
  DirectoryWatcher* watcher_;
  ReplicaMonitor* replicas_ = nullptr;
  mutable std::mutex stats_mutex_;
  RoutedStats stats_ SHARDKIT_GUARDED_BY(stats_mutex_);
};

}  // namespace shardkit
