// The state every bucket move must end in, checked after a move finished,
// was aborted or was resumed.
#pragma once

#include <string>

namespace shardkit::test {

class ScratchCluster;

// Every row on exactly one shard, equal to the reference; each shard owns
// exactly what the catalog's directory gives it, holds only rows of those
// buckets and its fence's fast path admits no other; no ownership row left
// mid-move, no replication object, no live move; shardctl verify finds
// nothing. Reports failures as gtest failures under `where`.
void ExpectSettled(const ScratchCluster& cluster, const std::string& where);

}  // namespace shardkit::test
