// Options the replica tests share: a read policy as RoutedOptions, and
// probes quicker than the default so that a test sees a replica's state
// change within a few tens of milliseconds.
//
//   auto cluster = Cluster::Open(config, test::QuickProbes(milliseconds(20)));
//   cluster->Transactions().Read(customer, sql, params, test::Reading(policy));
#pragma once

#include <algorithm>
#include <chrono>

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

}  // namespace shardkit::test
