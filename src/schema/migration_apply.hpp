// Applying one migration file on one server, and recording the attempt in
// the server's history of the file's set (migration_history.hpp): the migrator runs these, one
// thread per server, under its lock (migration_lock.hpp).
#pragma once

#include <pqxx/connection>
#include <string>
#include <string_view>

#include "shardkit/schema/migrate.hpp"

namespace shardkit::detail {

struct StepOutcome {
  bool ok = false;
  bool lost = false;  // the connection is gone: leave the server behind
  std::string error;
};

// The whole file and its history row in one transaction; on failure the
// failure's row, in a transaction of its own.
[[nodiscard]] StepOutcome ApplyInTransaction(pqxx::connection_base& c, std::string_view set, const Migration& m,
                                             const std::string& applied_by);

// Statement by statement (`transaction = none`), the history row counting
// the steps done; resumes after the steps that `previous`, a failed attempt
// of this very file, completed. A failed step names the INVALID indexes it
// left behind.
[[nodiscard]] StepOutcome ApplyStepByStep(pqxx::connection_base& c, std::string_view set, const Migration& m,
                                          const AppliedMigration* previous, const std::string& applied_by);

}  // namespace shardkit::detail
