// Placement strategies: published jump-hash values, pinned hashes (a
// placement must never change between versions), and the movement
// fractions theory predicts when a node is added.
#include "shardkit/resharding/placement.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numeric>
#include <set>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// Generated from Lamping & Veach's reference C++ code (as published with
// the Go port github.com/dgryski/go-jump): key, then the bucket for
// 1, 2, 3, ... buckets.
struct JumpVector {
  std::uint64_t key;
  std::vector<int> buckets;
};
const std::array<JumpVector, 4> kJumpVectors{{
    {0, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {1, {0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 17, 17}},
    {0xdeadbeef, {0, 1, 2, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 16, 16, 16}},
    {0x0ddc0ffeebadf00d, {0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 15, 15, 15, 15}},
}};

TEST(JumpConsistentHash, MatchesThePublishedValues) {
  for (const auto& v : kJumpVectors) {
    for (std::size_t i = 0; i < v.buckets.size(); ++i) {
      EXPECT_EQ(JumpConsistentHash(v.key, static_cast<int>(i + 1)), v.buckets[i])
          << "key " << v.key << ", " << i + 1 << " buckets";
    }
  }
  // The Python package jump-consistent-hash documents jump.hash(256, 1024) == 520.
  EXPECT_EQ(JumpConsistentHash(256, 1024), 520);
  static_assert(JumpConsistentHash(1, 7) == 6, "constexpr");
}

TEST(JumpConsistentHash, GrowingMovesKeysOnlyToTheNewBucket) {
  for (std::uint64_t k = 0; k < 20000; ++k) {
    const std::uint64_t h = PlacementHash(k);
    for (int n = 1; n < 12; ++n) {
      const int before = JumpConsistentHash(h, n);
      const int after = JumpConsistentHash(h, n + 1);
      ASSERT_TRUE(after == before || after == n) << "key " << k << " moved from " << before << " to " << after;
    }
  }
}

TEST(PlacementHash, IsPinnedForever) {
  // Changing these moves every key: placements are stored and compared
  // across processes and versions.
  EXPECT_EQ(PlacementHash(std::uint64_t{0}), 16294208416658607535ULL);
  EXPECT_EQ(PlacementHash(std::int32_t{4242}), 15514741754378068195ULL);
  EXPECT_EQ(PlacementHash(std::string_view("customer:4242")), 15959108605517880931ULL);
  EXPECT_EQ(PlacementHash(std::int64_t{-1}), PlacementHash(~std::uint64_t{0}));
  EXPECT_EQ(PlacementHash(std::int32_t{-1}), PlacementHash(std::int64_t{-1}));
}

TEST(HashRing, AddingANodeOnlyMovesKeysToIt) {
  const HashRing before(4, 160);
  const HashRing after(5, 160);
  int moved = 0;
  for (std::int64_t k = 1; k <= 50000; ++k) {
    const std::uint64_t h = PlacementHash(k);
    const int a = before.NodeFor(h);
    const int b = after.NodeFor(h);
    if (a != b) {
      ++moved;
      ASSERT_EQ(b, 4) << "key " << k << " moved between two old nodes";
    }
  }
  EXPECT_GT(moved, 0);
}

TEST(HashRing, SharesAddUpAndEvenOutWithVirtualNodes) {
  for (const int v : {1, 16, 160}) {
    const HashRing ring(4, v);
    const auto shares = ring.Shares();
    EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0, 1e-9) << v << " vnodes";
  }
  auto spread = [](const HashRing& ring) {
    const auto s = ring.Shares();
    return *std::max_element(s.begin(), s.end()) / *std::min_element(s.begin(), s.end());
  };
  EXPECT_GT(spread(HashRing(4, 1)), spread(HashRing(4, 160)));
  EXPECT_LT(spread(HashRing(4, 160)), 1.5);
  const HashRing single(1, 1);
  EXPECT_EQ(single.Shares(), std::vector<double>{1.0});
  EXPECT_EQ(single.NodeFor(0), 0);
  EXPECT_EQ(single.NodeFor(~std::uint64_t{0}), 0);
  EXPECT_THROW(HashRing(0, 10), ConfigError);
  EXPECT_THROW(HashRing(2, 0), ConfigError);
}

TEST(Rendezvous, RemovingANodeOnlyMovesItsKeys) {
  const std::vector<std::uint64_t> ids{11, 22, 33, 44, 55};
  const std::span<const std::uint64_t> all(ids);
  for (std::int64_t k = 1; k <= 20000; ++k) {
    const std::uint64_t h = PlacementHash(k);
    const std::size_t with = RendezvousNode(h, all);
    const std::size_t without = RendezvousNode(h, all.first(4));
    if (with != 4) {
      ASSERT_EQ(with, without) << "key " << k;
    }
  }
}

TEST(SimulatePlacement, MovementFractionsAreWithinToleranceOfTheory) {
  PlacementSimOptions o;
  o.nodes = 4;
  o.add = 1;
  o.ring_vnodes = {1, 160};
  for (std::int64_t k = 1; k <= 100000; ++k) o.keys.push_back(k);
  const auto rows = SimulatePlacement(o);
  std::map<std::string, PlacementSimRow> by;
  for (const auto& r : rows) by[r.Label()] = r;
  ASSERT_EQ(by.size(), 6U);
  // Modulo: 1 - 1/N of all keys move (N = 5 afterwards).
  EXPECT_NEAR(by["modulo"].moved_fraction, 1.0 - 1.0 / 5, 0.01);
  // Consistent strategies: ~1/N.
  EXPECT_NEAR(by["ring (160 vnodes)"].moved_fraction, 1.0 / 5, 0.03);
  EXPECT_NEAR(by["jump"].moved_fraction, 1.0 / 5, 0.01);
  EXPECT_NEAR(by["rendezvous"].moved_fraction, 1.0 / 5, 0.01);
  // The bucket table moves exactly floor(64/5) = 12 buckets' keys.
  EXPECT_NEAR(by["bucket table (64 buckets)"].moved_fraction, 12.0 / 64, 0.01);
  EXPECT_DOUBLE_EQ(by["bucket table (64 buckets)"].expected_moved, 12.0 / 64);
  // One point per node is lumpy; 160 even it out.
  EXPECT_GT(by["ring (1 vnode)"].max_min_after, 2.0);
  EXPECT_LT(by["ring (160 vnodes)"].max_min_after, 1.5);
  for (const auto& r : rows) {
    EXPECT_EQ(std::accumulate(r.load_after.begin(), r.load_after.end(), std::int64_t{0}), 100000) << r.Label();
    EXPECT_EQ(r.load_after.size(), 5U);
  }
}

TEST(SimulatePlacement, RefusesNonsense) {
  PlacementSimOptions o;
  EXPECT_THROW((void)SimulatePlacement(o), ConfigError);  // no keys
  o.keys = {1, 2, 3};
  o.nodes = 0;
  EXPECT_THROW((void)SimulatePlacement(o), ConfigError);
  o.nodes = 2;
  o.add = -1;
  EXPECT_THROW((void)SimulatePlacement(o), ConfigError);
  o.add = 100;  // more nodes than buckets: no bucket-table row, the others still work
  const auto rows = SimulatePlacement(o);
  EXPECT_TRUE(std::none_of(rows.begin(), rows.end(),
                           [](const PlacementSimRow& r) { return r.strategy == PlacementStrategy::kBucketTable; }));
}

}  // namespace
}  // namespace shardkit
