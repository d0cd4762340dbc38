// Placement strategies and the movement simulation (placement.hpp).
#include "shardkit/resharding/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {

std::uint64_t PlacementHash(std::string_view key) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a 64
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return PlacementHash(h);
}

std::size_t RendezvousNode(std::uint64_t key_hash, std::span<const std::uint64_t> node_ids) noexcept {
  std::size_t best = 0;
  std::uint64_t best_score = 0;
  for (std::size_t i = 0; i < node_ids.size(); ++i) {
    const std::uint64_t score = PlacementHash(key_hash ^ PlacementHash(node_ids[i]));
    // Ties (astronomically rare) go to the lower id, so every caller agrees.
    if (i == 0 || score > best_score || (score == best_score && node_ids[i] < node_ids[best])) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

namespace {

std::vector<std::uint64_t> Iota(int nodes) {
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(nodes));
  std::iota(ids.begin(), ids.end(), std::uint64_t{0});
  return ids;
}

}  // namespace

HashRing::HashRing(int nodes, int vnodes) : HashRing(Iota(nodes), vnodes) {}

HashRing::HashRing(std::span<const std::uint64_t> node_ids, int vnodes)
    : node_ids_(node_ids.begin(), node_ids.end()), vnodes_(vnodes) {
  if (node_ids_.empty()) throw ConfigError("placement.nodes", "a hash ring needs at least one node");
  if (vnodes < 1 || vnodes > 65536) {
    throw ConfigError("placement.vnodes", fmt::format("{} virtual nodes per node is outside 1..65536", vnodes));
  }
  points_.reserve(node_ids_.size() * static_cast<std::size_t>(vnodes));
  for (std::size_t n = 0; n < node_ids_.size(); ++n) {
    // The point depends on the node's id and the point's index only.
    const std::uint64_t node_seed = PlacementHash(node_ids_[n]);
    for (int v = 0; v < vnodes; ++v) {
      points_.push_back(
          {PlacementHash(node_seed ^ PlacementHash(static_cast<std::uint64_t>(v) << 32)), static_cast<int>(n)});
    }
  }
  std::sort(points_.begin(), points_.end(), [&](const Point& a, const Point& b) {
    if (a.position != b.position) return a.position < b.position;
    return node_ids_[static_cast<std::size_t>(a.node)] < node_ids_[static_cast<std::size_t>(b.node)];
  });
}

int HashRing::NodeFor(std::uint64_t key_hash) const noexcept {
  const auto it = std::lower_bound(points_.begin(), points_.end(), key_hash,
                                   [](const Point& p, std::uint64_t h) { return p.position < h; });
  return it == points_.end() ? points_.front().node : it->node;  // wrap around
}

std::vector<double> HashRing::Shares() const {
  std::vector<double> shares(node_ids_.size(), 0.0);
  constexpr double kRing = 18446744073709551616.0;  // 2^64
  for (std::size_t i = 0; i < points_.size(); ++i) {
    // Point i owns the arc (previous point, point i].
    const std::uint64_t previous = i == 0 ? points_.back().position : points_[i - 1].position;
    const std::uint64_t arc = points_[i].position - previous;  // wraps mod 2^64 for i == 0
    shares[static_cast<std::size_t>(points_[i].node)] +=
        (points_.size() == 1 ? kRing : static_cast<double>(arc)) / kRing;
  }
  return shares;
}

const char* Name(PlacementStrategy strategy) noexcept {
  switch (strategy) {
    case PlacementStrategy::kModulo:
      return "modulo";
    case PlacementStrategy::kRing:
      return "ring";
    case PlacementStrategy::kJump:
      return "jump";
    case PlacementStrategy::kRendezvous:
      return "rendezvous";
    case PlacementStrategy::kBucketTable:
      return "bucket table";
  }
  return "?";
}

std::string PlacementSimRow::Label() const {
  if (strategy == PlacementStrategy::kRing) return fmt::format("ring ({} vnode{})", vnodes, vnodes == 1 ? "" : "s");
  if (strategy == PlacementStrategy::kBucketTable) return fmt::format("bucket table ({} buckets)", kBucketCount);
  return Name(strategy);
}

namespace {

double MaxMin(const std::vector<std::int64_t>& load) {
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  if (*lo == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(*hi) / static_cast<double>(*lo);
}

// Places every key before and after with `node_of(key, hash, after)`.
template <class NodeOf>
PlacementSimRow Measure(PlacementStrategy strategy, int vnodes, double expected, const PlacementSimOptions& o,
                        NodeOf node_of) {
  PlacementSimRow row;
  row.strategy = strategy;
  row.vnodes = vnodes;
  row.expected_moved = expected;
  std::vector<std::int64_t> before(static_cast<std::size_t>(o.nodes), 0);
  std::vector<std::int64_t> after(static_cast<std::size_t>(o.nodes + o.add), 0);
  std::int64_t moved = 0;
  for (const std::int64_t key : o.keys) {
    const std::uint64_t hash = PlacementHash(key);
    const int a = node_of(key, hash, false);
    const int b = node_of(key, hash, true);
    ++before[static_cast<std::size_t>(a)];
    ++after[static_cast<std::size_t>(b)];
    if (a != b) ++moved;
  }
  row.moved_fraction = static_cast<double>(moved) / static_cast<double>(o.keys.size());
  row.max_min_before = MaxMin(before);
  row.max_min_after = MaxMin(after);
  row.load_after = std::move(after);
  return row;
}

}  // namespace

std::vector<PlacementSimRow> SimulatePlacement(const PlacementSimOptions& o) {
  if (o.nodes < 1) throw ConfigError("placement-sim.nodes", fmt::format("{} nodes: need at least 1", o.nodes));
  if (o.add < 0) throw ConfigError("placement-sim.add", fmt::format("cannot add {} nodes", o.add));
  if (o.keys.empty()) throw ConfigError("placement-sim.keys", "no keys to place");
  const int n = o.nodes;
  const int m = o.nodes + o.add;
  // Theory: a node-count-independent strategy moves the new nodes' share.
  const double consistent = static_cast<double>(o.add) / m;
  std::vector<PlacementSimRow> rows;

  // Modulo keeps a key only where hash % n == hash % m: for each residue
  // x < n one class modulo lcm(n, m), so n / lcm(n, m) = gcd(n, m) / m of
  // uniformly hashed keys stay (1/m when m = n + 1).
  const double modulo_stays = static_cast<double>(std::gcd(n, m)) / m;
  rows.push_back(Measure(PlacementStrategy::kModulo, 0, 1.0 - modulo_stays, o,
                         [&](std::int64_t, std::uint64_t h, bool after) { return ModuloNode(h, after ? m : n); }));

  for (const int v : o.ring_vnodes) {
    const HashRing before(n, v);
    const HashRing after(m, v);
    rows.push_back(Measure(PlacementStrategy::kRing, v, consistent, o, [&](std::int64_t, std::uint64_t h, bool a) {
      return a ? after.NodeFor(h) : before.NodeFor(h);
    }));
  }

  rows.push_back(Measure(PlacementStrategy::kJump, 0, consistent, o, [&](std::int64_t, std::uint64_t h, bool after) {
    return JumpConsistentHash(h, after ? m : n);
  }));

  const std::vector<std::uint64_t> ids_after = Iota(m);
  const std::span<const std::uint64_t> all(ids_after);
  rows.push_back(
      Measure(PlacementStrategy::kRendezvous, 0, consistent, o, [&](std::int64_t, std::uint64_t h, bool after) {
        return static_cast<int>(RendezvousNode(h, after ? all : all.first(static_cast<std::size_t>(n))));
      }));

  if (m <= kBucketCount) {
    const BucketDirectory before = BucketDirectory::EvenSplit(n);
    BucketDirectory after = before;
    for (int i = 0; i < o.add; ++i) after = after.WithShardAdded();
    int moved_buckets = 0;
    for (const BucketId b : AllBuckets()) moved_buckets += before.ShardOf(b) != after.ShardOf(b) ? 1 : 0;
    rows.push_back(Measure(PlacementStrategy::kBucketTable, 0, static_cast<double>(moved_buckets) / kBucketCount, o,
                           [&](std::int64_t key, std::uint64_t, bool a) {
                             const CustomerId customer{static_cast<std::int32_t>(key)};
                             return ToInt(a ? after.ShardFor(customer) : before.ShardFor(customer));
                           }));
  }
  return rows;
}

}  // namespace shardkit
