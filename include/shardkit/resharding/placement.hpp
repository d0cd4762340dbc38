// shardkit/resharding/placement.hpp — placing keys on N nodes, and what adding a node moves.
//
// Seeds 000 and 003 compare ways to map a key to one of N nodes (workers,
// servers). They differ in what happens when N changes:
//
//   modulo        hash(key) % N                 N -> N+1 moves ~1 - 1/(N+1) of all keys
//   ring          consistent hashing: V points  moves ~1/(N+1); V = 1 is lumpy (one node
//                 per node on a 2^64 ring,      can get several times another's share),
//                 a key goes to the next point  V = 100-200 evens it out (Cassandra: 256,
//                 clockwise                     later 16 tokens)
//   jump          Lamping & Veach's jump hash:  moves exactly the new node's share; nodes
//                 no table, O(log N)            must be numbered 0..N-1, only the last removable
//   rendezvous    highest hash(key, node) wins  moves ~1/(N+1); O(N) per key
//   bucket table  shardkit's own: key -> one of moves only the buckets the new node takes
//                 64 fixed buckets -> a table   (the fewest possible: floor(64/(N+1)));
//                 BucketDirectory::WithShardAdded is the plan
//
//   int node = shardkit::JumpConsistentHash(shardkit::PlacementHash(customer_id), 4);
//   shardkit::HashRing ring{4, 160};          // nodes 0..3, 160 virtual nodes each
//   int owner = ring.NodeFor(shardkit::PlacementHash(customer_id));
//   auto rows = shardkit::SimulatePlacement({.nodes = 4, .add = 1, .keys = ids});   // shardctl placement-sim
//
// With a fixed partition layer (the 64 buckets and a table, the worker-sharding case's
// method 1) there is no need for a ring: the table is simpler and visible.
// The ring and its cousins are for systems without such a layer; this header
// exists to measure the difference, and for services that need them.
//
// Every hash here is fixed forever (SplitMix64's finaliser, FNV-1a for
// strings): a placement must not change between processes, machines or
// shardkit versions — never a process-seeded hash such as std::hash.
// Everything is a pure function or an immutable object: thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

// SplitMix64's output function of key + golden gamma: a 64-bit mix in which
// every input bit affects every output bit.
[[nodiscard]] constexpr std::uint64_t PlacementHash(std::uint64_t key) noexcept {
  std::uint64_t z = key + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
// A signed id hashes as its 64-bit two's complement.
[[nodiscard]] constexpr std::uint64_t PlacementHash(std::int64_t key) noexcept {
  return PlacementHash(static_cast<std::uint64_t>(key));
}
[[nodiscard]] constexpr std::uint64_t PlacementHash(std::int32_t key) noexcept {
  return PlacementHash(static_cast<std::uint64_t>(static_cast<std::int64_t>(key)));
}
// FNV-1a over the bytes, then mixed as above.
[[nodiscard]] std::uint64_t PlacementHash(std::string_view key) noexcept;

// hash % nodes. nodes >= 1.
[[nodiscard]] constexpr int ModuloNode(std::uint64_t key_hash, int nodes) noexcept {
  return static_cast<int>(key_hash % static_cast<std::uint64_t>(nodes));
}

// Lamping & Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm"
// (2014): the bucket in [0, buckets) of a 64-bit key, as their reference
// code computes it (same results). buckets >= 1; the key should already be
// a hash.
[[nodiscard]] constexpr int JumpConsistentHash(std::uint64_t key, int buckets) noexcept {
  std::int64_t b = -1;
  std::int64_t j = 0;
  while (j < buckets) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = static_cast<std::int64_t>(static_cast<double>(b + 1) *
                                  (static_cast<double>(1LL << 31) / static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<int>(b);
}

// Rendezvous (highest random weight) hashing: the node with the highest
// PlacementHash(key_hash ^ PlacementHash(node id)). Nodes are named by ids
// (any numbers); returns the index into node_ids. node_ids must not be empty.
[[nodiscard]] std::size_t RendezvousNode(std::uint64_t key_hash, std::span<const std::uint64_t> node_ids) noexcept;

// A consistent-hash ring: every node owns `vnodes` points on a 2^64 ring
// (the seeds draw 2^32; the wider ring makes point collisions negligible);
// a key belongs to the first point at or after its hash, wrapping around.
// A node's points depend only on its id and the point's index, so adding a
// node leaves every other point where it was.
class HashRing {
 public:
  // Nodes 0..nodes-1.
  HashRing(int nodes, int vnodes);
  // Nodes with the given ids (unique).
  HashRing(std::span<const std::uint64_t> node_ids, int vnodes);

  // The index (into the ids, or 0..nodes-1) of the key's node. O(log(N*V)).
  [[nodiscard]] int NodeFor(std::uint64_t key_hash) const noexcept;
  [[nodiscard]] int NodeCount() const noexcept { return static_cast<int>(node_ids_.size()); }
  [[nodiscard]] int VirtualNodes() const noexcept { return vnodes_; }
  // Fraction of the ring each node owns (its share of uniformly hashed keys).
  [[nodiscard]] std::vector<double> Shares() const;

 private:
  struct Point {
    std::uint64_t position;
    int node;
  };
  std::vector<std::uint64_t> node_ids_;
  int vnodes_;
  std::vector<Point> points_;  // sorted by position
};

enum class PlacementStrategy { kModulo, kRing, kJump, kRendezvous, kBucketTable };
[[nodiscard]] const char* Name(PlacementStrategy strategy) noexcept;

struct PlacementSimOptions {
  int nodes = 4;
  int add = 1;
  // Ring sizes to compare: 1 (lumpy), Cassandra's later 16, 100-200, Cassandra's 256.
  std::vector<int> ring_vnodes{1, 16, 160, 256};
  // The keys (customer ids, say); every strategy places PlacementHash(key),
  // the bucket table BucketOf(CustomerId{key}) (keys must fit an int32).
  std::vector<std::int64_t> keys;
};

struct PlacementSimRow {
  PlacementStrategy strategy;
  int vnodes = 0;                           // ring only
  double moved_fraction = 0;                // keys whose node changed when the nodes were added
  double expected_moved = 0;                // what theory says for this strategy
  double max_min_before = 0;                // most loaded / least loaded node, before
  double max_min_after = 0;                 // and after (infinity if a node gets no key)
  std::vector<std::int64_t> load_after;     // keys per node, after
  [[nodiscard]] std::string Label() const;  // "ring (160 vnodes)"
};

// Places every key on `nodes` nodes, then on nodes + add, per strategy:
// modulo, ring for each ring_vnodes, jump, rendezvous, and (up to 64 nodes)
// the bucket directory: BucketDirectory::EvenSplit(nodes), then
// WithShardAdded() `add` times. Throws ConfigError for nodes < 1, add < 0
// or no keys.
[[nodiscard]] std::vector<PlacementSimRow> SimulatePlacement(const PlacementSimOptions& options);

}  // namespace shardkit
