// The coordinator log of cross-shard transactions in the catalog
// (sql/040_cross_shard_transactions.sql): the statements that write and
// decide its rows, shared by the coordinator (cross_shard.cpp) and the
// recovery pass (in_doubt.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pqxx {
class connection_base;
}

namespace shardkit::detail {

// The prepared transaction's name on one shard: shardkit:<id>:<shard name>.
[[nodiscard]] std::string PreparedGid(const std::string& transaction_id, const std::string& shard_name);
inline constexpr const char* kPreparedGidPrefix = "shardkit:";
// The transaction id in a gid PreparedGid made; nullopt for any other gid.
[[nodiscard]] std::optional<std::string> TransactionOfGid(const std::string& gid);

// The INSERT of the row ('preparing'), as text to send beside the shards'
// BEGINs; before any part is prepared.
[[nodiscard]] std::string LogPreparingSql(const std::string& transaction_id, const std::vector<std::string>& shards,
                                          const std::string& label);
// Moves a 'preparing' row to 'commit' / 'abort'; returns the row's state
// afterwards (whoever decided first), nullopt when there is no row.
[[nodiscard]] std::optional<std::string> DecideCommit(pqxx::connection_base& catalog,
                                                      const std::string& transaction_id);
[[nodiscard]] std::optional<std::string> DecideAbort(pqxx::connection_base& catalog, const std::string& transaction_id);
// The row's state, nullopt when there is none.
[[nodiscard]] std::optional<std::string> StateOf(pqxx::connection_base& catalog, const std::string& transaction_id);
// Deletes a decided row (no shard holds a part of it any more).
void Forget(pqxx::connection_base& catalog, const std::string& transaction_id);

}  // namespace shardkit::detail
