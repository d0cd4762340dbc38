// What a failed shard's statement is reported as: its cause and SQLSTATE,
// and the failures as one text.
#include "queries/scatter_internal.hpp"

#include <fmt/format.h>

#include <mutex>
#include <pqxx/except>
#include <string>
#include <string_view>

#include "pg/server_message.hpp"
#include "shardkit/config.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::scatter {
namespace {

constexpr const char* kQueryCanceled = "57014";
constexpr const char* kReadOnlyTransaction = "25006";
constexpr const char* kUndefinedFunction = "42883";
constexpr const char* kNotReadable = "SK003";

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kQueued:
      return "waiting for a free worker thread";
    case Phase::kAcquiring:
      return "acquiring a connection";
    case Phase::kExecuting:
      return "executing";
    case Phase::kDone:
      break;
  }
  return "finishing";
}

// Server messages end in a newline and start with "ERROR:  ".
std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  for (const char* prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.erase(0, std::char_traits<char>::length(prefix));
  }
  return text;
}

long long Millis(Clock::duration d) {
  return duration_cast<milliseconds>(d).count();
}

std::string DescribeFailure(const ShardTask& task, const std::exception& error, bool cancelled,
                            Clock::duration elapsed) {
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) {
    if (sql->sqlstate() == kQueryCanceled) {
      return fmt::format(
          "cut at the deadline after {} ms ({}); give the scatter a later deadline or make "
          "the statement cheaper",
          Millis(elapsed), Trim(sql->what()));
    }
    const char* advice = sql->sqlstate() == kReadOnlyTransaction
                             ? "scatters are read-only unless ScatterOptions::read_only is false"
                         : sql->sqlstate() == kNotReadable
                             ? "the scatter's directory is out of date: refresh it (ScatterGather::FollowDirectory "
                               "does) and run again"
                         : sql->sqlstate() == kUndefinedFunction &&
                                 std::string_view(sql->what()).find("shardkit_") != std::string_view::npos
                             ? "this shard lacks shardkit's bucket functions: migrate it (shardctl migrate), or set "
                               "ScatterOptions::directory_buckets = false"
                             : "fix the statement or this shard's schema";
    return fmt::format("statement failed (SQLSTATE {}): {}; {}", sql->sqlstate().empty() ? "?" : sql->sqlstate(),
                       FirstLine(Trim(sql->what())), advice);
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr) {
    return fmt::format(
        "connection to {} lost{}: {}; the server closed the session or cannot be reached, "
        "check that server",
        task.pool->RedactedDsn(), cancelled ? " after the deadline" : "", RedactDsn(Trim(error.what())));
  }
  if (dynamic_cast<const DeadlineMissed*>(&error) != nullptr) {
    return fmt::format("{} after {} ms; give the scatter a later deadline", error.what(), Millis(elapsed));
  }
  // Pool errors (ShardUnavailable, PoolTimeout, PoolExhausted) already say
  // which shard and what to do, with the connection string redacted.
  return RedactDsn(Trim(error.what()));
}

// The failure's SQLSTATE for ScatterError::Failure (see errors.hpp).
std::string SqlStateOf(const std::exception& error) {
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) return sql->sqlstate();
  if (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr) return kSqlStateConnectionFailure;
  if (const auto* shard = dynamic_cast<const ShardError*>(&error)) return shard->sqlstate();
  return {};
}

// The cause and SQLSTATE of a failed task.
void Describe(ShardTask& task, const std::exception& error, Clock::time_point started, std::string& cause,
              std::string& sqlstate) {
  bool cancelled = false;
  {
    std::lock_guard lock(task.cancel_mutex);
    cancelled = task.cancel_requested;
  }
  cause = DescribeFailure(task, error, cancelled, Clock::now() - started);
  if (task.replica) cause = fmt::format("on replica {}: {}", *task.replica, cause);
  sqlstate = SqlStateOf(error);
  if (const auto refusal = ParseFenceRefusal(error)) {
    task.stale_directory = refusal->kind == BucketRefused::Kind::kNotReadable;
  }
}

bool ReplicaTrouble(const std::exception& error) {
  if (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr) return true;
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) {
    const std::string& state = sql->sqlstate();
    // Refused or not replayed (SK003, SK005), a conflict with its recovery
    // (40001), shut down or starting (57P0x), out of connections (53300),
    // unreachable (08...).
    return state == kNotReadable || state == kSqlStateNotReplayed || state == "40001" || IsServerGoingAway(state) ||
           state == "53300" || IsConnectionLost(state);
  }
  // A pool that could not give a connection (unreachable, exhausted).
  return dynamic_cast<const ShardError*>(&error) != nullptr;
}

bool FallBack(ScatterState& state, ShardTask& task, const std::exception& error) {
  if (!task.replica) return false;
  if (state.replicas != nullptr && (dynamic_cast<const pqxx::broken_connection*>(&error) != nullptr ||
                                    dynamic_cast<const ShardUnavailable*>(&error) != nullptr)) {
    state.replicas->ReportFailure(task.shard, *task.replica, FirstLine(Trim(RedactDsn(error.what()))));
  }
  if (!state.fall_back_to_primary || !ReplicaTrouble(error) || state.abandoned.load() ||
      Clock::now() >= state.deadline) {
    return false;
  }
  task.replica.reset();
  task.pool = task.primary;
  task.bucket_setup = task.primary_setup;
  task.replica_presync.clear();
  task.fell_back = true;
  return true;
}

std::string JoinFailures(const std::vector<ScatterError::Failure>& failures, const BucketShardResolver& resolver) {
  std::string text;
  for (const auto& f : failures) {
    if (!text.empty()) text += "; ";
    text += fmt::format("shard {} ({}): {}", f.shard, resolver.ShardName(f.shard), f.cause);
  }
  return text;
}

std::string ShardList(const std::vector<ScatterError::Failure>& failures) {
  std::string text;
  for (const auto& f : failures) {
    if (!text.empty()) text += ", ";
    text += std::to_string(ToInt(f.shard));
  }
  return text;
}

}  // namespace shardkit::detail::scatter
