// Applying one migration on one server (migration_apply.hpp).
#include "schema/migration_apply.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <pqxx/pqxx>

#include "pg/server_message.hpp"
#include "schema/migrate_internal.hpp"
#include "schema/migration_history.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A server shutting down ends sessions with an error (57P01...) before the
// connection drops; either way this server is gone for this run.
bool ConnectionGone(pqxx::connection_base& c, const std::exception& e) {
  if (!c.is_open()) return true;
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string& state = sql->sqlstate();
    return IsServerGoingAway(state) || IsConnectionLost(state);
  }
  return false;
}

void RecordFailure(pqxx::connection_base& c, std::string_view set, const Migration& m, bool transactional,
                   int steps_done, double duration_ms, const std::string& applied_by, const std::string& error) {
  pqxx::work tx{c, "record failed migration"};
  WriteHistory(tx, set, m, transactional, false, steps_done, static_cast<int>(m.steps.size()), duration_ms, applied_by,
               error);
  tx.commit();
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

StepOutcome ApplyInTransaction(pqxx::connection_base& c, std::string_view set, const Migration& m,
                               const std::string& applied_by) {
  const auto start = Clock::now();
  StepOutcome out;
  try {
    pqxx::work tx{c, "migration"};
    tx.exec(m.sql);
    WriteHistory(tx, set, m, true, true, 1, 1, MsSince(start), applied_by, std::string());
    tx.commit();
    out.ok = true;
    return out;
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error = "connection lost: " + ErrorText(e);
    return out;
  } catch (const pqxx::in_doubt_error& e) {
    // The history row commits with the file: the next run's status tells.
    out.lost = true;
    out.error = "connection lost during COMMIT (the next run sees whether it committed): " + ErrorText(e);
    return out;
  } catch (const std::exception& e) {
    out.error = ErrorText(e);
    if (ConnectionGone(c, e)) {
      out.lost = true;
      return out;
    }
  }
  try {
    RecordFailure(c, set, m, true, 0, MsSince(start), applied_by, out.error);
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error += "; then the connection was lost: " + ErrorText(e);
  } catch (const std::exception& e) {
    out.error += "; recording the failure failed too: " + ErrorText(e);
  }
  return out;
}

StepOutcome ApplyStepByStep(pqxx::connection_base& c, std::string_view set, const Migration& m,
                            const AppliedMigration* previous, const std::string& applied_by) {
  const auto start = Clock::now();
  StepOutcome out;
  const int total = static_cast<int>(m.steps.size());
  // Resume after the steps a failed attempt of this very file completed.
  int done = previous != nullptr && !previous->success && previous->checksum == m.checksum
                 ? std::clamp(previous->steps_done, 0, total)
                 : 0;
  try {
    {
      pqxx::nontransaction tx{c, "migration start"};
      WriteHistory(tx, set, m, false, false, done, total, 0.0, applied_by, std::string("running"));
    }
    for (; done < total; ++done) {
      try {
        pqxx::nontransaction tx{c, "migration step"};
        tx.exec(m.steps[static_cast<std::size_t>(done)]);
      } catch (const pqxx::broken_connection&) {
        throw;
      } catch (const std::exception& e) {
        out.error = fmt::format("step {} of {}: {}", done + 1, total, ErrorText(e));
        if (ConnectionGone(c, e)) {
          out.lost = true;
          return out;
        }
        ServerMigrationStatus state;
        ReadServer(c, set, state);
        for (const auto& index : state.invalid_indexes) {
          if (!index.being_built) out.error += fmt::format("; INVALID index {} left behind", DescribeIndex(index));
        }
        RecordFailure(c, set, m, false, done, MsSince(start), applied_by, out.error);
        return out;
      }
      pqxx::nontransaction tx{c, "migration progress"};
      WriteStepsDone(tx, set, m.version, done + 1);
    }
    pqxx::nontransaction tx{c, "migration done"};
    WriteHistory(tx, set, m, false, true, total, total, MsSince(start), applied_by, std::string());
    out.ok = true;
  } catch (const pqxx::broken_connection& e) {
    out.lost = true;
    out.error = fmt::format("connection lost at step {} of {}: {}", done + 1, total, ErrorText(e));
  } catch (const std::exception& e) {
    out.error = fmt::format("step {} of {}: {}", done + 1, total, ErrorText(e));
  }
  return out;
}

}  // namespace shardkit::detail
