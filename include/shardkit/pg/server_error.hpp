// libpqxx's exceptions as shardkit's (errors.hpp), so that a caller meets
// one family whatever ran the statement: a server's error about the
// statement is a ShardQueryError with its SQLSTATE and the server's message,
// a lost connection ShardUnavailable, a COMMIT whose fate is not known
// OutcomeUnknown. Cluster::Execute and Cluster::Transact throw these; code
// that runs statements itself (Cluster::Run) can do the same:
//
//   try {
//     cluster.Run(customer, [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& at) { ... });
//   } catch (...) {
//     shardkit::RethrowAsShardError(cluster.Route(customer).shard, "placing the order");
//   }
#pragma once

#include <string>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

// Inside a catch block: throws the current exception as shardkit's when it
// is libpqxx's, naming `shard` and `context` (what was being done), with the
// server's first line, redacted; anything else (shardkit's own errors
// included) is rethrown as it is.
[[noreturn]] void RethrowAsShardError(ShardId shard, const std::string& context);

}  // namespace shardkit
