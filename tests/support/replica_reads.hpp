// What the replica tests share: a read policy as RoutedOptions, probes
// quicker than the default so that a test sees a replica's state change
// within a few tens of milliseconds, and the routed write they read back.
//
//   auto cluster = Cluster::Open(config, test::QuickProbes(milliseconds(20)));
//   const RoutedOutcome written = test::WriteOrder(*cluster, customer, order_id);
//   cluster->Transactions().Read(customer, sql, params, test::Reading(policy));
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <pqxx/pqxx>

#include "shardkit/cluster.hpp"

namespace shardkit::test {

[[nodiscard]] inline RoutedOptions Reading(const ReadPolicy& read, bool read_only = false) {
  RoutedOptions options;
  options.read = read;
  options.read_only = read_only;
  return options;
}

// Probes every `interval`; a replica silent for `silence` is unreachable.
[[nodiscard]] inline ClusterOptions QuickProbes(std::chrono::milliseconds interval,
                                                std::chrono::milliseconds silence = std::chrono::milliseconds(2000)) {
  ClusterOptions options;
  ReplicaMonitorOptions probes;
  probes.probe_interval = interval;
  probes.probe_timeout = std::min(probes.probe_timeout, silence);
  probes.silence_limit = silence;
  options.replicas = probes;
  return options;
}

// One order of `customer` (total 1) through a routed write; its outcome
// (shard, server, read token).
inline RoutedOutcome WriteOrder(Cluster& cluster, int customer, std::int64_t order_id,
                                const RoutedOptions& options = {}) {
  RoutedOutcome outcome;
  cluster.Run(
      CustomerId{customer},
      [&](pqxx::transaction_base& tx, const RoutedContext& at) {
        tx.exec_params(
            "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, $3, now(), 1)",
            customer, at.bucket, order_id);
      },
      options, &outcome);
  return outcome;
}

}  // namespace shardkit::test
