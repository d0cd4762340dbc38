// The workers demo's load (workers_demo.hpp): orders that enqueue their
// notification jobs in their own transaction, and the demo's rows cleaned up.
#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "workers_demo.hpp"

namespace shardkit::lab::workers_demo {

PlacedOrder OrderPlacer::Place(CustomerId customer, std::uint64_t random) {
  PlacedOrder o;
  o.customer = customer;
  o.order_id = ids_.Next();
  o.total_cents = 500 + static_cast<std::int64_t>(random % 9500);
  o.ordered_at = fmt::format(
      "{}", std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count());
  static constexpr std::array<const char*, 3> kKinds{"order_confirmed", "order_shipped", "order_delivered"};
  auto lease = lab_.Resolver().PoolFor(customer).Acquire();
  pqxx::work tx{*lease, "place_order"};
  tx.exec_params(
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
      "VALUES ($1, $2, $3, to_timestamp($4::double precision / 1000000), 'placed', $5::numeric / 100)",
      customer, BucketOf(customer), o.order_id, o.ordered_at, o.total_cents);
  tx.exec_params(
      "INSERT INTO order_tracking (customer_id, bucket, order_id, status, status_seq) VALUES ($1, $2, $3, 'placed', 0)",
      customer, BucketOf(customer), o.order_id);
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    o.jobs[i] = ids_.Next();
    NewJob job;
    job.customer_id = customer;
    job.job_id = o.jobs[i];
    job.kind = kKinds[i];
    job.payload = fmt::format(R"({{"order_id":{}}})", o.order_id);
    job.stream_key = o.order_id;  // one order's notifications: one partition, in order
    job.seq = static_cast<std::int64_t>(i + 1);
    (void)queue_.Enqueue(tx, job);
  }
  tx.commit();
  std::lock_guard lock(mutex_);
  placed_.push_back(o);
  return o;
}

std::vector<CustomerId> Customers(Lab& lab) {
  std::vector<CustomerId> customers;
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    for (const auto& row : tx.exec("SELECT customer_id FROM customers")) customers.push_back(row[0].as<CustomerId>());
  }
  std::sort(customers.begin(), customers.end());
  return customers;
}

SteadyLoad::SteadyLoad(const WorkersDemoOptions& options, const std::vector<CustomerId>& customers, OrderPlacer& placer)
    : producer_([this, &options, &customers, &placer](std::stop_token stop) {
        const double rate = options.orders_per_second;
        Rng local(options.seed + 1);
        auto next = Clock::now();
        while (!stop.stop_requested() && producing_.load()) {
          const auto c = customers[static_cast<std::size_t>(local.Below(customers.size()))];
          try {
            (void)placer.Place(c, local.Next());
            produced_ += 1;
          } catch (const std::exception& e) {
            fmt::print(stderr, "workers demo: placing an order failed: {}\n", e.what());
          }
          next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
          std::this_thread::sleep_until(next);
        }
      }) {}

void SteadyLoad::Stop() {
  producing_ = false;
  producer_.request_stop();
  producer_.join();
}

void CleanUp(Lab& lab, const Dsn& catalog_dsn, const std::string& queue, bool keep_jobs) {
  const std::string orders =
      "DELETE FROM orders o USING order_tracking t WHERE o.customer_id = t.customer_id AND o.order_id = t.order_id";
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    pqxx::work tx{*lease};
    tx.exec(orders);
    tx.exec("DELETE FROM order_tracking");
    if (!keep_jobs) {
      tx.exec_params("DELETE FROM shardkit_jobs WHERE queue = $1", queue);
      tx.exec("DELETE FROM notification_log");
    }
    tx.commit();
  }
  {
    pqxx::work tx{lab.Reference()};
    tx.exec(orders);
    tx.exec("DELETE FROM order_tracking");
    tx.commit();
  }
  if (!keep_jobs) {
    pqxx::connection c{catalog_dsn.Reveal()};
    pqxx::work tx{c};
    tx.exec_params("DELETE FROM shardkit_partition_groups WHERE worker_group = $1", queue);
    tx.exec_params("DELETE FROM shardkit_hot_keys WHERE queue = $1", queue);
    tx.commit();
  }
}

}  // namespace shardkit::lab::workers_demo
