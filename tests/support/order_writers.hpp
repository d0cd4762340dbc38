// Writer threads placing orders of some customers through a Cluster until
// stopped, keeping what was acknowledged: a failover or a rebuild test
// checks afterwards that every acknowledged order is where it must be.
//
//   test::OrderWriters writers;
//   writers.Start(*cluster, customers, 4);          // order ids from 900000000 up
//   ASSERT_TRUE(test::WaitFor([&] { return writers.Acknowledged() >= 50; }));
//   writers.Stop();                                 // then writers.acknowledged, .failed, .unknown
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "support/replica_reads.hpp"

namespace shardkit::test {

struct OrderWriters {
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> next_id{900000000};
  std::mutex mutex;
  std::set<std::int64_t> acknowledged;
  int failed = 0;
  int unknown = 0;
  std::vector<std::string> errors;  // the first few failures' texts
  std::vector<std::thread> threads;

  ~OrderWriters() { Stop(); }

  void Start(Cluster& cluster, const std::vector<int>& customers, int count) {
    for (int t = 0; t < count; ++t) {
      threads.emplace_back([this, &cluster, &customers, t] {
        for (std::size_t i = 0; !stop.load(); ++i) {
          const int customer = customers[(i * 7 + static_cast<std::size_t>(t)) % customers.size()];
          const std::int64_t id = next_id++;
          RoutedOptions options;
          options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          try {
            (void)WriteOrder(cluster, customer, id, options);
            std::lock_guard lock(mutex);
            acknowledged.insert(id);
          } catch (const OutcomeUnknown& e) {
            std::lock_guard lock(mutex);
            ++unknown;
            if (errors.size() < 5) errors.emplace_back(e.what());
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            ++failed;
            if (errors.size() < 5) errors.emplace_back(e.what());
          }
        }
      });
    }
  }
  void Stop() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }
  std::size_t Acknowledged() {
    std::lock_guard lock(mutex);
    return acknowledged.size();
  }
};

}  // namespace shardkit::test
