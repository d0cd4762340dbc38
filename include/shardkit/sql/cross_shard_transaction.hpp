// shardkit/sql/cross_shard_transaction.hpp — plain SQL inside a transaction
// over customers on several shards (Cluster::TransactAcross), committed on
// every shard or on none (writes/cross_shard.hpp).
//
//   cluster->TransactAcross({from, to}, [&](shardkit::CrossShardTransaction& tx) {
//     tx.On(from).Execute("UPDATE accounts SET balance = balance - $2 WHERE customer_id = $1", {"17", "25"});
//     tx.On(to).Execute("UPDATE accounts SET balance = balance + $2 WHERE customer_id = $1", {"4242", "25"});
//   });
//
// On(key) is a SqlTransaction pinned to that key's bucket (sql_transaction.hpp):
// each statement must stay on that customer's bucket (or read reference
// tables only), as in Cluster::Transact. Keys on one shard share that
// shard's transaction.
//
// Not thread-safe: one thread uses a transaction.
#pragma once

#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/sql/sql_transaction.hpp"
#include "shardkit/writes/cross_shard.hpp"

namespace shardkit {

class CrossShardTransaction {
 public:
  CrossShardTransaction(sql::SqlEngine& engine, const std::vector<CrossShardPart>& parts) : parts_(parts) {
    transactions_.reserve(parts.size());
    for (const CrossShardPart& part : parts) transactions_.emplace_back(engine, *part.tx, part.at);
  }

  // The transaction of `key`, one of the keys the transaction was opened
  // with; another key is refused (its shard has no transaction here).
  [[nodiscard]] SqlTransaction& On(const ShardKey& key) {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      if (parts_[i].key == key) return transactions_[i];
    }
    throw Error("cross-shard transaction: " + Describe(key) +
                " is not one of the keys it was opened with; name every customer it changes in TransactAcross");
  }

  // Every key's part (its bucket, shard, attempt) in the order given.
  [[nodiscard]] const std::vector<CrossShardPart>& Parts() const noexcept { return parts_; }

 private:
  const std::vector<CrossShardPart>& parts_;
  std::vector<SqlTransaction> transactions_;
};

}  // namespace shardkit
