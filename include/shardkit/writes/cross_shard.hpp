// shardkit/writes/cross_shard.hpp — one transaction over customers on several
// shards, committed on all of them or on none (two-phase commit).
//
// Run() opens a transaction on the primary of every shard the keys live on
// (BEGIN, statement_timeout and the fence of the keys' buckets, as a routed
// transaction does), calls your function with one part per key, and commits:
//
// - one shard: a plain COMMIT, as RoutedTransactions::Run;
// - several: a row in the catalog's coordinator log (sql/040), PREPARE
//   TRANSACTION 'shardkit:<id>:<shard>' on every shard, the decision written
//   to the catalog (the one UPDATE that moves the row from 'preparing' to
//   'commit'), then COMMIT PREPARED on every shard. A failure before the
//   decision rolls every part back (and marks the row 'abort'); after it the
//   transaction is committed, and a part whose COMMIT PREPARED failed is
//   committed by the next recovery pass (in_doubt.hpp) on that shard's
//   current primary. The servers need max_prepared_transactions > 0.
//
// As a routed transaction, it follows the keys' buckets through moves and
// failovers: a fence refusal, a serialization failure, a lost connection
// or a fenced primary before the decision rolls every part back, refreshes
// the directory and runs the function again, until the deadline. So the
// function may run more than once (keep effects outside the database out of
// it). A prepared part holds its locks, the bucket's fence hold included:
// a move's cutover of that bucket waits for the decision.
//
// Between the first COMMIT PREPARED and the last, a reader may see one
// shard's part committed and not another's (no snapshot spans shards).
//
// Errors: whatever the function throws (every part rolled back);
// ShardQueryError for a server's error, naming the shard and the step;
// OutcomeUnknown only when the decision itself could not be confirmed (the
// catalog connection lost during the UPDATE, and not reachable to ask): the
// next recovery pass settles it one way or the other, on every shard alike.
//
// Thread-safe: any number of threads may Run() at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardkit/core/dsn.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/writes/routed.hpp"

namespace pqxx {
class transaction_base;
}

namespace shardkit {

class BucketShardResolver;
class DirectoryWatcher;

// One step of a cross-shard commit, as it happens (CrossShardOptions::on_step).
struct CrossShardStep {
  enum class Kind {
    kLogged,     // the coordinator's row is in the catalog ('preparing'); no part prepared yet
    kPrepared,   // `shard`'s part is prepared
    kDecided,    // the decision 'commit' is durable in the catalog
    kCommitted,  // `shard`'s part is committed (COMMIT PREPARED)
  };
  Kind kind = Kind::kLogged;
  std::string transaction_id;
  std::optional<ShardId> shard;
};

// "logged", "prepared", "decided", "committed".
[[nodiscard]] const char* ToString(CrossShardStep::Kind kind) noexcept;

struct CrossShardOptions : RoutedOptions {
  // Called at each step of a two-phase commit, on the calling thread: for
  // logs and metrics, and for tests that stop the process at a step.
  std::function<void(const CrossShardStep&)> on_step;
};

// What one Run() did (optional out-parameter).
struct CrossShardOutcome {
  std::vector<ShardId> shards;  // the shards it committed on, in shard order
  bool two_phase = false;       // several shards: prepared and decided in the catalog
  std::string transaction_id;   // two-phase only: the catalog row's id
  // Shards whose COMMIT PREPARED failed after the decision: committed, but
  // visible there only once a recovery pass has finished them.
  std::vector<ShardId> left_to_recovery;
  ReadToken token;  // every shard's WAL position after its commit
  int attempts = 0;
  std::chrono::microseconds elapsed{0};
};

// One key's part of the transaction, as the function gets it.
struct CrossShardPart {
  ShardKey key = CustomerId{0};
  RoutedContext at;                      // its bucket, shard, server and attempt
  pqxx::transaction_base* tx = nullptr;  // its shard's transaction (shared by keys on one shard)
};

class CrossShardTransactions {
 public:
  // `catalog` holds the coordinator log (none: only transactions on one
  // shard are possible, the others are refused with ConfigError).
  CrossShardTransactions(BucketShardResolver& resolver, DirectoryWatcher* watcher, std::optional<Dsn> catalog,
                         PoolOptions catalog_pool = {});
  ~CrossShardTransactions();
  CrossShardTransactions(const CrossShardTransactions&) = delete;
  CrossShardTransactions& operator=(const CrossShardTransactions&) = delete;

  // fn(parts) with one part per key (in the order given; repeated keys
  // once), then commits as above; returns what fn returns.
  template <class Fn>
  auto Run(const std::vector<ShardKey>& keys, Fn&& fn, const CrossShardOptions& options = {},
           CrossShardOutcome* outcome = nullptr) {
    using Result = std::invoke_result_t<Fn&, const std::vector<CrossShardPart>&>;
    if constexpr (std::is_void_v<Result>) {
      RunErased(
          keys, [&](const std::vector<CrossShardPart>& parts) { fn(parts); }, options, outcome);
    } else {
      std::optional<Result> result;
      RunErased(
          keys, [&](const std::vector<CrossShardPart>& parts) { result.emplace(fn(parts)); }, options, outcome);
      return std::move(*result);
    }
  }

 private:
  void RunErased(const std::vector<ShardKey>& keys, const std::function<void(const std::vector<CrossShardPart>&)>& fn,
                 const CrossShardOptions& options, CrossShardOutcome* outcome);

  BucketShardResolver& resolver_;
  DirectoryWatcher* watcher_;
  std::unique_ptr<ConnectionPool> catalog_;  // null without a catalog
};

}  // namespace shardkit
