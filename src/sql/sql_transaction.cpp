#include "shardkit/sql/sql_transaction.hpp"

#include "sql/sql_engine.hpp"

namespace shardkit {

SqlResult SqlTransaction::Execute(const std::string& sql, const SqlParams& params) {
  return engine_.ExecuteIn(transaction_, at_, sql, params);
}

}  // namespace shardkit
