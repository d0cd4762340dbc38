// The rebalance demo's load (rebalance_demo.hpp): writer threads placing
// orders through the routed write API, reader threads asking "my orders"
// and a cross-shard report, each compared with the reference.
#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <random>

#include "dataset.hpp"
#include "rebalance_demo.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::lab::rebalance_demo {
namespace {

using namespace std::chrono_literals;

std::string LabNowParam() {
  return fmt::format("{}", kLabNow);
}

// The cross-shard report: orders and their total up to the lab's "now" (the
// loaded data; the demo's own orders come later), in cents.
constexpr const char* kReportSql =
    "SELECT count(*)::bigint, coalesce(sum(total * 100), 0)::bigint FROM orders WHERE ordered_at <= to_timestamp($1)";
// "My orders" up to the lab's "now".
constexpr const char* kMyOrdersSql =
    "SELECT count(*)::bigint FROM orders WHERE customer_id = $1 AND ordered_at <= to_timestamp($2)";

// A writer thread: orders at its pace until the stop, each acknowledged
// one mirrored to the reference.
void Writer(Load& load, int w) {
  LoadResults& res = load.results;
  std::mt19937_64 random(static_cast<std::uint64_t>(w) * 7919 + 1);
  pqxx::connection reference{load.lab.ReferenceDsn().Reveal()};
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / std::max(1.0, load.options.orders_per_second_per_writer)));
  auto next = Clock::now();
  while (!load.stop.load()) {
    next += period;
    std::this_thread::sleep_until(next);  // pacing the load, not synchronising
    DemoOrder o;
    o.customer = load.truth.sample[random() % load.truth.sample.size()].first;
    o.order_id = load.ids.Next();
    o.items = 1 + static_cast<int>(random() % 3);
    o.total_cents = 999 * o.items;
    o.ordered_at = fmt::format(
        "{}", std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count());
    RoutedOptions ro;
    ro.deadline = Clock::now() + 5s;
    ro.label = "place order";
    RoutedOutcome outcome;
    const auto began = Clock::now();
    try {
      load.routed.Run(
          o.customer, [&](pqxx::transaction_base& tx, const RoutedContext& at) { InsertOrder(tx, o, at.bucket); }, ro,
          &outcome);
      load.recorder.Write(began, Clock::now(), true, outcome.attempts > 1, false);
      {
        std::lock_guard lock(res.orders_mutex);
        res.acknowledged.push_back(o);
      }
      // The reference keeps the acknowledged orders, for the union check
      // (a failure here shows there as a difference).
      try {
        pqxx::work ref{reference};
        InsertOrder(ref, o, BucketOf(o.customer));
        ref.commit();
      } catch (const std::exception& e) {
        std::lock_guard lock(res.orders_mutex);
        if (res.write_errors.size() < 3) {
          res.write_errors.push_back(std::string("mirroring to the reference: ") + e.what());
        }
      }
    } catch (const OutcomeUnknown&) {
      load.recorder.Write(began, Clock::now(), false, false, true);
      std::lock_guard lock(res.orders_mutex);
      res.unknown.push_back(o);
    } catch (const std::exception& e) {
      load.recorder.Write(began, Clock::now(), false, false, false);
      std::lock_guard lock(res.orders_mutex);
      ++res.failed_writes;
      if (res.write_errors.size() < 3) res.write_errors.emplace_back(e.what());
    }
  }
}

// The cross-shard report: each shard answers for the buckets the
// scatter's directory version gives it.
void ReadReport(Load& load) {
  LoadResults& res = load.results;
  try {
    ScatterOptions so;
    so.deadline = Clock::now() + 10s;
    const auto result = load.scatter.Run(kReportSql, {LabNowParam()}, so);
    std::int64_t count = 0, cents = 0;
    for (const auto& shard : result.shards) {
      for (const auto& row : shard.rows) {
        count += row[0].as<std::int64_t>();
        cents += row[1].as<std::int64_t>();
      }
    }
    ++res.report_runs;
    if (count != load.truth.report_count || cents != load.truth.report_cents) {
      ++res.report_wrong;
      std::lock_guard lock(res.orders_mutex);
      if (res.read_errors.size() < 3) {
        res.read_errors.push_back(fmt::format("report: {} orders / {} cents, the reference {} / {}", count, cents,
                                              load.truth.report_count, load.truth.report_cents));
      }
    }
    load.recorder.Read(Clock::now(), true, false);
  } catch (const std::exception& e) {
    ++res.report_failed;
    load.recorder.Read(Clock::now(), false, false);
    std::lock_guard lock(res.orders_mutex);
    if (res.read_errors.size() < 3) res.read_errors.emplace_back(e.what());
  }
}

// "My orders" of a sample customer, routed.
void ReadMyOrders(Load& load, std::mt19937_64& random) {
  LoadResults& res = load.results;
  const auto& [customer, expected] = load.truth.sample[random() % load.truth.sample.size()];
  RoutedOptions ro;
  ro.deadline = Clock::now() + 5s;
  ro.read_only = true;
  ro.label = "my orders";
  RoutedOutcome outcome;
  try {
    const auto got = load.routed.Run(
        customer,
        [&](pqxx::transaction_base& tx, const RoutedContext&) {
          return tx.exec_params1(kMyOrdersSql, customer, LabNowParam())[0].as<std::int64_t>();
        },
        ro, &outcome);
    ++res.my_orders_runs;
    if (got != expected) {
      ++res.my_orders_wrong;
      std::lock_guard lock(res.orders_mutex);
      if (res.read_errors.size() < 3) {
        res.read_errors.push_back(fmt::format("my orders of {}: {}, the reference {}", customer, got, expected));
      }
    }
    load.recorder.Read(Clock::now(), true, outcome.attempts > 1);
  } catch (const std::exception& e) {
    ++res.my_orders_failed;
    load.recorder.Read(Clock::now(), false, false);
    std::lock_guard lock(res.orders_mutex);
    if (res.read_errors.size() < 3) res.read_errors.emplace_back(e.what());
  }
}

// A reader thread: every fourth read the report, the others "my orders".
void Reader(Load& load, int rd) {
  std::mt19937_64 random(static_cast<std::uint64_t>(rd) * 104729 + 7);
  std::uint64_t n = 0;
  while (!load.stop.load()) {
    ++n;
    if (n % 4 == 0) {
      ReadReport(load);
    } else {
      ReadMyOrders(load, random);
    }
  }
}

}  // namespace

std::int64_t RemoveDemoOrders(Lab& lab, const LoadResults& load) {
  std::vector<std::int64_t> ids;
  for (const auto* orders : {&load.acknowledged, &load.unknown}) {
    for (const DemoOrder& o : *orders) ids.push_back(o.order_id);
  }
  const std::string array = fmt::format("{{{}}}", fmt::join(ids, ","));
  std::int64_t left = 0;
  const auto remove = [&](pqxx::connection_base& c) {
    pqxx::work tx{c};
    tx.exec_params("DELETE FROM order_items WHERE order_id = ANY($1::bigint[])", array);
    tx.exec_params("DELETE FROM orders WHERE order_id = ANY($1::bigint[])", array);
    left +=
        tx.exec_params1("SELECT count(*) FROM orders WHERE order_id = ANY($1::bigint[])", array)[0].as<std::int64_t>();
    tx.commit();
  };
  for (const ShardId s : FirstShards(lab.ShardCount())) {
    auto lease = lab.Resolver().Pool(s).Acquire();
    remove(*lease);
  }
  remove(lab.Reference());
  return left;
}

void InsertOrder(pqxx::transaction_base& tx, const DemoOrder& o, BucketId bucket) {
  tx.exec_params(
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
      "VALUES ($1, $2, $3, to_timestamp($4::double precision / 1000000), 'placed', $5::numeric / 100)",
      o.customer, bucket, o.order_id, o.ordered_at, o.total_cents);
  tx.exec_params(
      "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
      "SELECT $1, $2, $3::bigint, n, 1 + (($3::bigint + n) % 50), 1 + n % 2, 9.99 FROM generate_series(1, $4::int) AS "
      "n",
      o.customer, bucket, o.order_id, o.items);
}

GroundTruth ReadGroundTruth(Lab& lab) {
  GroundTruth truth;
  pqxx::read_transaction tx{lab.Reference()};
  const auto row = tx.exec_params1(kReportSql, LabNowParam());
  truth.report_count = row[0].as<std::int64_t>();
  truth.report_cents = row[1].as<std::int64_t>();
  for (const auto& c : tx.exec_params("SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = "
                                      "c.customer_id AND o.ordered_at <= to_timestamp($1)) FROM customers c "
                                      "ORDER BY hashint4(c.customer_id) LIMIT 1000",
                                      LabNowParam())) {
    truth.sample.emplace_back(CustomerId{c[0].as<int>()}, c[1].as<std::int64_t>());
  }
  return truth;
}

std::vector<std::thread> StartLoad(Load& load) {
  std::vector<std::thread> threads;
  for (int w = 0; w < load.options.writers; ++w) {
    threads.emplace_back([&load, w] { Writer(load, w); });
  }
  for (int rd = 0; rd < load.options.readers; ++rd) {
    threads.emplace_back([&load, rd] { Reader(load, rd); });
  }
  return threads;
}

}  // namespace shardkit::lab::rebalance_demo
