#include "writes/cross_shard_log.hpp"

#include <pqxx/pqxx>

#include "pg/pg_array.hpp"

namespace shardkit::detail {
namespace {

std::optional<std::string> Decide(pqxx::connection_base& catalog, const std::string& transaction_id,
                                  const char* decision) {
  // The UPDATE decides if the row is still 'preparing'; if it found none,
  // the row's state (someone else's decision) is the answer.
  {
    pqxx::nontransaction tx{catalog};
    const pqxx::result r = tx.exec_params(
        "UPDATE shardkit_transactions SET state = $2, decided_at = clock_timestamp() "
        "WHERE transaction_id = $1 AND state = 'preparing' RETURNING state",
        transaction_id, decision);
    if (!r.empty()) return r[0][0].as<std::string>();
  }
  return StateOf(catalog, transaction_id);
}

}  // namespace

std::string PreparedGid(const std::string& transaction_id, const std::string& shard_name) {
  return kPreparedGidPrefix + transaction_id + ":" + shard_name;
}

std::optional<std::string> TransactionOfGid(const std::string& gid) {
  const std::string prefix = kPreparedGidPrefix;
  if (gid.rfind(prefix, 0) != 0) return std::nullopt;
  const auto end = gid.find(':', prefix.size());
  if (end == std::string::npos || end == prefix.size()) return std::nullopt;
  return gid.substr(prefix.size(), end - prefix.size());
}

namespace {

// A string literal (standard_conforming_strings is on: session.hpp pins it).
std::string Literal(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string LogPreparingSql(const std::string& transaction_id, const std::vector<std::string>& shards,
                            const std::string& label) {
  std::vector<std::optional<std::string>> names(shards.begin(), shards.end());
  return "INSERT INTO shardkit_transactions (transaction_id, state, shards, label) VALUES (" + Literal(transaction_id) +
         ", 'preparing', " + Literal(PgTextArray(names)) + "::text[], " + Literal(label) + ")";
}

std::optional<std::string> DecideCommit(pqxx::connection_base& catalog, const std::string& transaction_id) {
  return Decide(catalog, transaction_id, "commit");
}

std::optional<std::string> DecideAbort(pqxx::connection_base& catalog, const std::string& transaction_id) {
  return Decide(catalog, transaction_id, "abort");
}

std::optional<std::string> StateOf(pqxx::connection_base& catalog, const std::string& transaction_id) {
  pqxx::nontransaction tx{catalog};
  const pqxx::result r =
      tx.exec_params("SELECT state FROM shardkit_transactions WHERE transaction_id = $1", transaction_id);
  if (r.empty()) return std::nullopt;
  return r[0][0].as<std::string>();
}

void Forget(pqxx::connection_base& catalog, const std::string& transaction_id) {
  pqxx::nontransaction tx{catalog};
  tx.exec_params("DELETE FROM shardkit_transactions WHERE transaction_id = $1 AND state <> 'preparing'",
                 transaction_id);
}

}  // namespace shardkit::detail
