// The rebalance demo's checker (rebalance_demo.hpp), in the Jepsen style:
// every acknowledged order exists exactly once, with all its items, on the
// shard that owns its bucket; outcome-unknown writes are looked up; the
// union of the shards equals the reference; nothing of the moves is left.
#include <fmt/format.h>

#include <pqxx/pqxx>

#include "rebalance_demo.hpp"

namespace shardkit::lab::rebalance_demo {
namespace {

// Per table, a count and checksums of the rows (every row a shard holds,
// whichever bucket): the union of the shards must equal the reference.
const std::vector<std::pair<std::string, std::string>>& TableSums() {
  static const std::vector<std::pair<std::string, std::string>> sums{
      {"customers", "SELECT count(*)::bigint, coalesce(sum(customer_id::bigint), 0)::bigint, 0::bigint FROM customers"},
      {"orders",
       "SELECT count(*)::bigint, coalesce(sum(total * 100), 0)::bigint, coalesce(sum(order_id % 1000003), 0)::bigint "
       "FROM orders"},
      {"order_items",
       "SELECT count(*)::bigint, coalesce(sum(quantity::bigint * (line_no + 1)), 0)::bigint, "
       "coalesce(sum(order_id % 1000003), 0)::bigint FROM order_items"},
  };
  return sums;
}

Sums SumsOf(const Dsn& dsn, bool all_buckets) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::work tx{c};
  if (all_buckets) tx.exec("SET LOCAL shardkit.buckets = 'all'");
  Sums out;
  for (const auto& [table, sql] : TableSums()) {
    const auto row = tx.exec1(sql);
    out[table] = {row[0].as<std::int64_t>(), row[1].as<std::int64_t>(), row[2].as<std::int64_t>()};
  }
  return out;
}

// Unknown outcomes: looked up on the owning shard; one that committed joins
// the reference. Returns how many did.
std::int64_t ResolveUnknown(Lab& lab, const BucketDirectory& final_directory, const std::vector<DemoOrder>& unknown) {
  const ClusterConfig& config = lab.Config();
  std::int64_t unknown_committed = 0;
  pqxx::connection reference{lab.ReferenceDsn().Reveal()};
  for (const auto& o : unknown) {
    pqxx::connection c{
        config.shards[static_cast<std::size_t>(ToInt(final_directory.ShardFor(o.customer)))].dsn.Reveal()};
    pqxx::read_transaction tx{c};
    if (tx.exec_params1("SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id = $2", o.customer,
                        o.order_id)[0]
            .as<int>() > 0) {
      ++unknown_committed;
      pqxx::work ref{reference};
      InsertOrder(ref, o, BucketOf(o.customer));
      ref.commit();
    }
  }
  return unknown_committed;
}

// Every order of `checked`: where it is, how often, with how many items.
std::map<std::int64_t, std::vector<std::pair<ShardId, int>>> FindOrders(Lab& lab,
                                                                        const std::vector<DemoOrder>& checked) {
  const ClusterConfig& config = lab.Config();
  std::map<std::int64_t, std::vector<std::pair<ShardId, int>>> found;  // order -> (shard, items)
  std::vector<std::int64_t> order_ids;
  order_ids.reserve(checked.size());
  for (const auto& o : checked) order_ids.push_back(o.order_id);
  std::string array = "{";
  for (std::size_t i = 0; i < order_ids.size(); ++i) array += fmt::format("{}{}", i ? "," : "", order_ids[i]);
  array += "}";
  for (int s = 0; s < lab.ShardCount(); ++s) {
    pqxx::connection c{config.shards[static_cast<std::size_t>(s)].dsn.Reveal()};
    pqxx::work tx{c};
    tx.exec("SET LOCAL shardkit.buckets = 'all'");  // every row the shard holds
    for (const auto& row : tx.exec_params(
             "SELECT o.order_id, (SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id AND "
             "i.order_id = o.order_id) FROM orders o WHERE o.order_id = ANY($1::bigint[])",
             array)) {
      found[row[0].as<std::int64_t>()].emplace_back(ShardId{s}, row[1].as<int>());
    }
  }
  return found;
}

// The union of the shards (every row they hold) against the reference.
void CompareUnion(Lab& lab, CheckerResult& out) {
  for (const auto& shard : lab.Config().shards) {
    for (const auto& [table, v] : SumsOf(shard.dsn, true)) {
      auto& total = out.shards_sum[table];
      for (std::size_t i = 0; i < v.size(); ++i) total[i] += v[i];
    }
  }
  out.reference_sum = SumsOf(lab.ReferenceDsn(), false);
  for (const auto& [table, v] : out.reference_sum) {
    const auto& got = out.shards_sum[table];
    out.union_detail += fmt::format("{}{}: shards {} rows, reference {}{}", out.union_detail.empty() ? "" : "; ", table,
                                    got[0], v[0], got == v ? "" : " (checksums differ)");
  }
}

}  // namespace

CheckerResult CheckRebalance(Lab& lab, const BucketDirectory& start_directory, const BucketDirectory& final_directory,
                             const LoadResults& load) {
  const ClusterConfig& config = lab.Config();
  CheckerResult out;
  out.unknown_committed = ResolveUnknown(lab, final_directory, load.unknown);
  const std::vector<DemoOrder>& checked = load.acknowledged;
  const auto found = FindOrders(lab, checked);
  for (const auto& o : checked) {
    const auto it = found.find(o.order_id);
    if (it == found.end()) {
      ++out.lost;
      continue;
    }
    if (it->second.size() > 1) ++out.duplicated;
    for (const auto& [shard, items] : it->second) {
      if (shard != final_directory.ShardFor(o.customer)) ++out.misplaced;
      if (items != o.items) ++out.short_items;
    }
  }
  CompareUnion(lab, out);
  out.leftovers = LeftoverReplicationObjects(config);
  {
    BucketMover mover{config};
    out.live_moves = mover.List(true).size();
  }
  for (const BucketId b : AllBuckets()) {
    if (final_directory.ShardOf(b) != start_directory.ShardOf(b)) ++out.directory_differs;
  }
  return out;
}

}  // namespace shardkit::lab::rebalance_demo
