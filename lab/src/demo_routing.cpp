// Demo 1: "my orders" goes to the one shard that owns the customer.
#include <fmt/format.h>

#include <map>
#include <pqxx/pqxx>

#include "dataset.hpp"
#include "demos.hpp"

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;

// The Bookstore case's "my orders" query.
constexpr const char* kMyOrders =
    "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";

// The Bookstore case's vectors with the even 2-shard directory (0-31 -> 0, 32-63 -> 1).
const std::map<CustomerId, std::pair<BucketId, ShardId>>& SeedRoutes() {
  static const std::map<CustomerId, std::pair<BucketId, ShardId>> routes{
      {CustomerId{4242}, {BucketId{44}, ShardId{1}}},
      {CustomerId{4243}, {BucketId{20}, ShardId{0}}},
      {CustomerId{77777}, {BucketId{53}, ShardId{1}}}};
  return routes;
}

struct Visit {
  CustomerId customer{};
  BucketId bucket{};
  ShardId shard{};
  std::vector<std::int64_t> order_ids;
  std::chrono::microseconds elapsed{0};
  bool fresh = false;
};

// Acquire from the owning shard's pool and run the query, timed together:
// a first connection shows as connect + authentication time.
Visit MyOrders(const BucketShardResolver& resolver, CustomerId customer) {
  Visit v;
  const auto start = Clock::now();
  const Route route = resolver.Resolve(customer);
  v.customer = customer;
  v.bucket = route.bucket;
  v.shard = route.shard;
  auto lease = route.pool.Acquire();
  pqxx::nontransaction tx{*lease};
  const pqxx::result rows = tx.exec_params(kMyOrders, customer);
  v.elapsed = Micros(Clock::now() - start);
  v.fresh = lease.FreshConnection();
  for (const auto& row : rows) v.order_ids.push_back(row[0].as<std::int64_t>());
  return v;
}

}  // namespace

DemoResult RunRouting(Lab& lab) {
  DemoResult r;
  r.name = "routing";
  // A service that has just started: pools of its own, still empty, so the
  // first query on each shard pays for the connection.
  auto service = BucketShardResolver::FromConfig(lab.Config());
  std::vector<Visit> first;
  std::vector<Visit> again;
  for (CustomerId c : kSeedCustomers) first.push_back(MyOrders(*service, c));
  for (CustomerId c : kSeedCustomers) again.push_back(MyOrders(*service, c));

  const bool even_split = lab.ShardCount() == 2 &&
                          service->Directory()->AssignmentTable() == BucketDirectory::EvenSplit(2).AssignmentTable();
  std::vector<bool> shard_seen(static_cast<std::size_t>(lab.ShardCount()), false);
  Json customers = Json::array();
  for (std::size_t i = 0; i < first.size(); ++i) {
    const Visit& v = first[i];
    const bool expect_fresh = !shard_seen[static_cast<std::size_t>(ToInt(v.shard))];
    shard_seen[static_cast<std::size_t>(ToInt(v.shard))] = true;
    r.text += fmt::format("customer {}: bucket {}, shard {}, {} orders ({} ms, {})\n", v.customer, v.bucket, v.shard,
                          v.order_ids.size(), Ms(v.elapsed), v.fresh ? "first connection to that shard" : "pooled");
    customers.push_back({{"customer_id", v.customer},
                         {"bucket", v.bucket},
                         {"shard", v.shard},
                         {"orders", v.order_ids.size()},
                         {"first_ms", MsValue(v.elapsed)},
                         {"first_connection", v.fresh},
                         {"pooled_ms", MsValue(again[i].elapsed)}});
    const std::string id = std::to_string(ToInt(v.customer));
    if (const auto it = SeedRoutes().find(v.customer); it != SeedRoutes().end()) {
      r.Expect("routing." + id + ".bucket", v.bucket == it->second.first,
               fmt::format("bucket {} (the Bookstore case: {})", v.bucket, it->second.first));
      if (even_split) {
        r.Expect("routing." + id + ".shard", v.shard == it->second.second,
                 fmt::format("shard {} (the Bookstore case with buckets 0-31 -> 0, 32-63 -> 1: {})", v.shard,
                             it->second.second));
      }
    }
    r.Expect("routing." + id + ".orders", v.order_ids.size() == static_cast<std::size_t>(kSeedCustomerOrders),
             fmt::format("{} orders on shard {} (the generator gives every seed customer {})", v.order_ids.size(),
                         v.shard, kSeedCustomerOrders));
    r.Expect("routing." + id + ".connection", v.fresh == expect_fresh && !again[i].fresh,
             fmt::format("first visit {} a new connection (expected {}), second visit {} (expected pooled)",
                         v.fresh ? "opened" : "reused", expect_fresh ? "new" : "pooled",
                         again[i].fresh ? "opened one" : "pooled"));
  }
  std::string pooled = "again, with every pool warm:";
  for (std::size_t i = 0; i < again.size(); ++i) {
    pooled += fmt::format("{} {} {} ms", i == 0 ? "" : ",", again[i].customer, Ms(again[i].elapsed));
  }
  r.text += pooled + "\n";

  // Ground truth: the reference has the same orders in the same order, the
  // SQL twin agrees on the bucket, and no other shard has any of them.
  pqxx::nontransaction ref{lab.Reference()};
  std::size_t misplaced = 0;
  for (const Visit& v : first) {
    const std::string id = std::to_string(ToInt(v.customer));
    std::vector<std::int64_t> truth;
    for (const auto& row : ref.exec_params(kMyOrders, v.customer)) truth.push_back(row[0].as<std::int64_t>());
    r.Expect("routing." + id + ".reference", truth == v.order_ids,
             fmt::format("shard {} returned {} orders, the reference {}{}", v.shard, v.order_ids.size(), truth.size(),
                         truth == v.order_ids ? ", same ids in the same order" : ", DIFFERENT"));
    auto lease = lab.Resolver().Pool(v.shard).Acquire();
    pqxx::nontransaction tx{*lease};
    const auto sql_bucket = tx.exec_params1("SELECT bucket_of($1)", v.customer)[0].as<BucketId>();
    r.Expect("routing." + id + ".sql_twin", sql_bucket == v.bucket,
             fmt::format("bucket_of({}) on shard {} = {}, BucketOf = {}", v.customer, v.shard, sql_bucket, v.bucket));
    lease.Release();
    for (int index = 0; index < lab.ShardCount(); ++index) {
      const ShardId s{index};
      if (s == v.shard) continue;
      auto other = lab.Resolver().Pool(s).Acquire();
      pqxx::nontransaction otx{*other};
      const auto n =
          otx.exec_params1("SELECT count(*) FROM orders WHERE customer_id = $1", v.customer)[0].as<std::int64_t>();
      misplaced += static_cast<std::size_t>(n);
      r.Expect("routing." + id + ".only_on_its_shard." + lab.ShardLabel(s), n == 0,
               fmt::format("{} orders of customer {} on shard {} (must be 0)", n, v.customer, s));
    }
  }
  r.text += fmt::format(
      "checked: the reference server returns the same orders for each customer, bucket_of() in SQL "
      "agrees, and the other shard has {} of them\n",
      misplaced);
  r.figures = {{"query", kMyOrders}, {"customers", customers}};
  return r;
}

}  // namespace shardkit::lab
