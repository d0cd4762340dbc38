// Test support: Bookstore rows for bucket-move tests, written to the shard
// that owns each customer and to the reference server, and the checks that
// compare the shards with the reference.
//
//   test::FillBookstore(cluster, 600);                 // 600 customers, their orders and items
//   EXPECT_EQ(test::ShardRows(cluster), test::ReferenceRows(cluster));
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::test {

// Customers 1..n with 0..4 orders each and 1..3 items per order, written
// to the owning shard (by the cluster's directory) and to the reference.
void FillBookstore(const ScratchCluster& cluster, int customers);

// A table's rows of one bucket: how many, and a hash of their text.
struct TableDigest {
  std::int64_t rows = 0;
  std::string hash;  // md5 of the rows in key order
  friend bool operator==(const TableDigest&, const TableDigest&) = default;
};
// (table, bucket) -> digest.
using BucketDigests = std::map<std::pair<std::string, int>, TableDigest>;

// The reference server's rows.
[[nodiscard]] BucketDigests ReferenceDigests(const ScratchCluster& cluster);
// Every row of every shard (shardkit.buckets = 'all'), per table and
// bucket; a (table, bucket) found on a second shard is listed in
// extra_copies instead.
[[nodiscard]] BucketDigests ShardDigests(const ScratchCluster& cluster,
                                         std::vector<std::string>* extra_copies = nullptr);
// Per shard, its database's digests of every row it holds (all visible).
[[nodiscard]] std::vector<BucketDigests> DigestsPerShard(const ScratchCluster& cluster);
// What differs, one line per (table, bucket): empty if equal.
[[nodiscard]] std::vector<std::string> Differences(const BucketDigests& actual, const BucketDigests& expected);

}  // namespace shardkit::test
