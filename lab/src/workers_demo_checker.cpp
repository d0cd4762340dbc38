// The workers demo's checker (workers_demo.hpp): every job enqueued and
// every effect, read back from the shards; the demo's orders against the
// reference server.
#include <fmt/format.h>

#include <map>
#include <pqxx/pqxx>
#include <set>

#include "workers_demo.hpp"

namespace shardkit::lab::workers_demo {
namespace {

// The reference holds every row unsharded: the demo's orders too.
void MirrorToReference(Lab& lab, const std::vector<PlacedOrder>& placed) {
  pqxx::work tx{lab.Reference()};
  constexpr std::size_t kChunk = 2000;
  for (std::size_t i = 0; i < placed.size(); i += kChunk) {
    std::string customers = "{", buckets = "{", ids = "{", at = "{", totals = "{";
    for (std::size_t k = i; k < std::min(placed.size(), i + kChunk); ++k) {
      const auto& o = placed[k];
      const char* sep = k == i ? "" : ",";
      customers += sep + std::to_string(ToInt(o.customer));
      buckets += sep + std::to_string(ToInt(BucketOf(o.customer)));
      ids += sep + std::to_string(o.order_id);
      at += sep + o.ordered_at;
      totals += sep + std::to_string(o.total_cents);
    }
    customers += "}", buckets += "}", ids += "}", at += "}", totals += "}";
    tx.exec_params(
        "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
        "SELECT c, b, o, to_timestamp(a::double precision / 1000000), 'placed', t::numeric / 100 "
        "FROM unnest($1::int[], $2::smallint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(c, b, o, a, t)",
        customers, buckets, ids, at, totals);
    tx.exec_params(
        "INSERT INTO order_tracking (customer_id, bucket, order_id, status, status_seq) "
        "SELECT c, b, o, 'delivered', 3 FROM unnest($1::int[], $2::smallint[], $3::bigint[]) AS u(c, b, o)",
        customers, buckets, ids);
  }
  tx.commit();
}

}  // namespace

JobCheck CheckJobsAndEffects(Demo& d, const std::vector<PlacedOrder>& placed, const Leaving& leaving) {
  Lab& lab = d.lab;
  const std::string& queue_name = d.queue_name;
  DemoResult& r = d.r;
  std::map<std::int64_t, int> effects;  // job -> notifications sent
  std::map<std::int64_t, std::string> state;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row : tx.exec_params("SELECT job_id, state FROM shardkit_jobs WHERE queue = $1", queue_name)) {
      state[row[0].as<std::int64_t>()] = row[1].as<std::string>();
    }
    for (const auto& row : tx.exec("SELECT notification_id, count(*) FROM notification_log GROUP BY 1")) {
      effects[row[0].as<std::int64_t>()] += row[1].as<int>();
    }
  }
  JobCheck c;
  std::set<std::int64_t> mine;
  for (const auto& o : placed) {
    for (const auto id : o.jobs) {
      ++c.enqueued;
      mine.insert(id);
      const auto st = state.find(id);
      const auto ef = effects.find(id);
      const int n = ef == effects.end() ? 0 : ef->second;
      if (st == state.end()) ++c.missing_rows;
      if (st != state.end() && st->second == "done") ++c.done;
      if (n > 1) ++c.doubled;
      if (n == 0 || st == state.end() || st->second != "done") ++c.lost;
    }
  }
  for (const auto& [id, n] : effects) c.stray += mine.count(id) ? 0 : n;
  // Order statuses only ever moved forward: every order ends delivered.
  std::int64_t orders_delivered = 0, orders_total = 0;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    const auto row = tx.exec1(
        "SELECT count(*), count(*) FILTER (WHERE status = 'delivered' AND status_seq = 3) "
        "FROM order_tracking");
    orders_total += row[0].as<std::int64_t>();
    orders_delivered += row[1].as<std::int64_t>();
  }
  for (const auto& [name, w] : leaving.per_worker.items()) {
    c.guard_skips += w.value("guard_skips", std::int64_t{0});
  }
  r.text += fmt::format(
      "checker: {} jobs enqueued with {} orders, {} done; effects: double_processed = {}, lost = {}; stale "
      "completions refused by the fence: {}; orders delivered: {} of {} (statuses never went backwards; {} late "
      "updates ignored by the sequence guard)\n",
      Thousands(c.enqueued), Thousands(static_cast<std::int64_t>(placed.size())), Thousands(c.done), c.doubled, c.lost,
      leaving.refusals, Thousands(orders_delivered), Thousands(orders_total), c.guard_skips);
  r.Expect("workers.double_processed_is_zero", c.doubled == 0,
           fmt::format("{} jobs with more than one effect", c.doubled));
  r.Expect("workers.lost_is_zero", c.lost == 0 && c.missing_rows == 0,
           fmt::format("{} jobs without their effect or not done, {} missing rows", c.lost, c.missing_rows));
  r.Expect("workers.no_stray_effects", c.stray == 0, fmt::format("{} effects of jobs nobody enqueued", c.stray));
  r.Expect("workers.stale_completions_refused", leaving.refusals >= 1, fmt::format("{} refused", leaving.refusals));
  r.Expect("workers.order_status_never_backwards",
           orders_delivered == orders_total && orders_total == static_cast<std::int64_t>(placed.size()),
           fmt::format("{} of {} orders delivered", orders_delivered, orders_total));
  return c;
}

void CheckOrdersEqualReference(Demo& d, const std::vector<PlacedOrder>& placed) {
  Lab& lab = d.lab;
  DemoResult& r = d.r;
  MirrorToReference(lab, placed);
  std::int64_t shard_orders = 0, shard_cents = 0;
  const std::string demo_orders =
      "SELECT count(*), coalesce(sum(o.total * 100), 0)::bigint FROM orders o JOIN order_tracking t "
      "ON o.customer_id = t.customer_id AND o.order_id = t.order_id";
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    const auto row = tx.exec1(demo_orders);
    shard_orders += row[0].as<std::int64_t>();
    shard_cents += row[1].as<std::int64_t>();
  }
  pqxx::nontransaction ref{lab.Reference()};
  const auto ref_row = ref.exec1(demo_orders);
  ref.commit();
  r.Expect("workers.orders_equal_reference",
           shard_orders == ref_row[0].as<std::int64_t>() && shard_cents == ref_row[1].as<std::int64_t>() &&
               shard_orders == static_cast<std::int64_t>(placed.size()),
           fmt::format("shards {} orders {} cents, reference {} orders {} cents", shard_orders, shard_cents,
                       ref_row[0].as<std::int64_t>(), ref_row[1].as<std::int64_t>()));
}

}  // namespace shardkit::lab::workers_demo
