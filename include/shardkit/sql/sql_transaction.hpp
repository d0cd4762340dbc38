// shardkit/sql/sql_transaction.hpp — plain SQL inside one customer's
// transaction: several statements on that customer's shard, committed
// together or not at all (Cluster::Transact).
//
//   cluster->Transact(shardkit::CustomerId{4242}, [&](shardkit::SqlTransaction& tx) {
//     tx.Execute("INSERT INTO orders (customer_id, order_id, ordered_at, total) VALUES ($1, $2, now(), $3)",
//                {"4242", id, "19.90"});
//     tx.Execute("INSERT INTO order_items (customer_id, order_id, line_no, book_id, quantity, unit_price) "
//                "VALUES ($1, $2, 1, 7, 1, 19.90)", {"4242", id});
//   });                                   // bucket filled in; both rows commit, or neither
//
// Each statement is planned as Cluster::Execute plans it (the same cache),
// then must stay on the transaction's shard: routed to a customer of the
// transaction's bucket (the bucket the transaction's fence holds: the
// statement is as safe through a move as the transaction), or reading
// reference tables only. A statement pinned to a customer of another
// bucket, or one over several shards, is refused with SqlError before it
// runs, and nothing of the transaction commits unless the callback catches
// the error. Transaction control (BEGIN, COMMIT, SAVEPOINT...) is refused:
// the callback returning commits, an exception rolls back.
//
// Not thread-safe: one thread uses a transaction, as with libpqxx's.
#pragma once

#include <string>

#include "shardkit/core/sql_params.hpp"
#include "shardkit/sql/sql_result.hpp"
#include "shardkit/writes/routed.hpp"

namespace pqxx {
class transaction_base;
}

namespace shardkit {

namespace sql {
class SqlEngine;
}

class SqlTransaction {
 public:
  SqlTransaction(sql::SqlEngine& engine, pqxx::transaction_base& transaction, const RoutedContext& at)
      : engine_(engine), transaction_(transaction), at_(at) {}

  // One statement in this transaction: its rows (or the rows it affected),
  // or SqlError (a syntax error, or a refusal saying why and what to do).
  SqlResult Execute(const std::string& sql, const SqlParams& params = {});

  // The customer, bucket, shard and directory version of this attempt.
  [[nodiscard]] const RoutedContext& At() const noexcept { return at_; }
  // The libpqxx transaction itself, for what SQL text does not cover.
  [[nodiscard]] pqxx::transaction_base& Raw() const noexcept { return transaction_; }

 private:
  sql::SqlEngine& engine_;
  pqxx::transaction_base& transaction_;
  const RoutedContext& at_;
};

}  // namespace shardkit
