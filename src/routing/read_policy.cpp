#include "shardkit/routing/read_policy.hpp"

#include <fmt/format.h>

#include "routing/replica_reads.hpp"

namespace shardkit {

std::string_view ReadPreferenceName(ReadPreference preference) noexcept {
  switch (preference) {
    case ReadPreference::kPrimary:
      return "primary";
    case ReadPreference::kReplicaPreferred:
      return "replica preferred";
    case ReadPreference::kReplicaOnly:
      return "replica only";
  }
  return "?";
}

namespace detail {

const std::string kReplicaBegin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
std::string TransactionStatus(std::uint64_t xid) {
  // pg_xact_status raises for a transaction the server has not heard of.
  return fmt::format("CASE WHEN '{0}'::xid8 < pg_snapshot_xmax(pg_current_snapshot()) THEN pg_xact_status('{0}') END",
                     xid);
}

std::string CaptureReplayed(const ReadToken::Entry& wanted) {
  std::string sql = "SELECT set_config('shardkit.replayed', coalesce(pg_last_wal_replay_lsn()::text, ''), false)";
  if (wanted.xid != 0) {
    sql += fmt::format(", set_config('shardkit.token_xact', '{}:' || coalesce({}, ''), false)", wanted.xid,
                       TransactionStatus(wanted.xid));
  }
  return sql;
}

std::string RequireReplayed(const ReadToken::Entry& wanted) {
  if (wanted.xid == 0) return "shardkit_require_replayed('" + FormatLsn(wanted.lsn) + "')";
  return fmt::format("shardkit_require_replayed('{}', '{}', '{}')", FormatLsn(wanted.lsn), wanted.xid, wanted.horizon);
}

}  // namespace detail
}  // namespace shardkit
