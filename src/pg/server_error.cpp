#include "shardkit/pg/server_error.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

#include "pg/server_message.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

void RethrowAsShardError(ShardId shard, const std::string& context) {
  const auto where = [&](const std::exception& e) {
    return fmt::format("{} on shard {}: {}", context, ToInt(shard), detail::FirstLine(e.what()));
  };
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const pqxx::in_doubt_error& e) {
    throw OutcomeUnknown(shard, where(e) + " (whether it committed is unknown: check before doing it again)",
                         "08007");  // transaction_resolution_unknown
  } catch (const pqxx::statement_completion_unknown& e) {
    throw OutcomeUnknown(shard, where(e) + " (whether it completed is unknown: check before doing it again)", "40003");
  } catch (const pqxx::broken_connection& e) {
    throw ShardUnavailable(shard, where(e));
  } catch (const pqxx::sql_error& e) {
    throw ShardQueryError(shard, fmt::format("{} (SQLSTATE {})", where(e), e.sqlstate()), e.sqlstate());
  } catch (const pqxx::serialization_failure& e) {
    throw ShardQueryError(shard, where(e) + " (SQLSTATE 40001: retry the transaction)", "40001");
  } catch (const pqxx::deadlock_detected& e) {
    throw ShardQueryError(shard, where(e) + " (SQLSTATE 40P01: retry the transaction)", "40P01");
  } catch (const pqxx::transaction_rollback& e) {
    throw ShardQueryError(shard, where(e) + " (SQLSTATE 40000)", "40000");
  } catch (const pqxx::failure& e) {
    throw ShardQueryError(shard, where(e));
  }
}

}  // namespace shardkit
