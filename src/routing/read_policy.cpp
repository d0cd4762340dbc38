#include "shardkit/routing/read_policy.hpp"

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
const std::string kCaptureReplayed =
    "SELECT set_config('shardkit.replayed', coalesce(pg_last_wal_replay_lsn()::text, ''), false)";

std::string RequireReplayed(std::uint64_t lsn) {
  return "shardkit_require_replayed('" + FormatLsn(lsn) + "')";
}

}  // namespace detail
}  // namespace shardkit
