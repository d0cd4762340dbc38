// What a read on a replica sends around its statement, for routed reads
// (writes/routed.cpp) and scatters (queries/scatter.cpp) alike.
#pragma once

#include <cstdint>
#include <string>

#include "shardkit/routing/read_token.hpp"

namespace shardkit::detail {

// One snapshot for the whole read: a replica cannot hold a bucket for a
// move the way a primary's READ COMMITTED read does.
extern const std::string kReplicaBegin;
// The replica's replay position, and the status of the token's transaction
// if it has one, read before the read's snapshot in an implicit transaction
// of its own (a pipeline Sync ends it), for RequireReplayed
// (sql/036_replica_reads.sql, sql/046_read_token_transactions.sql).
[[nodiscard]] std::string CaptureReplayed(const ReadToken::Entry& wanted);
// The call, for the bucket step's SELECT list, that refuses the read
// (SQLSTATE SK005) unless the replica shows the token's writes: the
// position captured before its snapshot at or after wanted.lsn, and the
// transaction finished.
[[nodiscard]] std::string RequireReplayed(const ReadToken::Entry& wanted);
// An expression of a transaction's status on a replica ('committed', 'in
// progress', 'aborted'), NULL for one it has not heard of yet.
[[nodiscard]] std::string TransactionStatus(std::uint64_t xid);

}  // namespace shardkit::detail
