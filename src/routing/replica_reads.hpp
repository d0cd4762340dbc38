// What a read on a replica sends around its statement, for routed reads
// (writes/routed.cpp) and scatters (queries/scatter.cpp) alike.
#pragma once

#include <cstdint>
#include <string>

namespace shardkit::detail {

// One snapshot for the whole read: a replica cannot hold a bucket for a
// move the way a primary's READ COMMITTED read does.
extern const std::string kReplicaBegin;
// The replica's replay position, read before the read's snapshot in an
// implicit transaction of its own (a pipeline Sync ends it), for
// RequireReplayed (sql/036_replica_reads.sql).
extern const std::string kCaptureReplayed;
// The call, for the bucket step's SELECT list, that refuses the read
// (SQLSTATE SK005) unless the position captured before its snapshot is at
// or after `lsn`.
[[nodiscard]] std::string RequireReplayed(std::uint64_t lsn);

}  // namespace shardkit::detail
