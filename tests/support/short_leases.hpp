// Partition-lease options for tests: leases short enough that expiry and
// hand-over happen within a test, ticked by the test itself (no background
// thread) unless the caller turns it on.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "shardkit/workers/partition_lease.hpp"

namespace shardkit::test {

inline PartitionLeaseOptions ShortPartitionLeases(std::string group, std::string owner) {
  using namespace std::chrono_literals;
  PartitionLeaseOptions o;
  o.group = std::move(group);
  o.owner = std::move(owner);
  o.lease_duration = 1500ms;
  o.safety_margin = 500ms;
  o.renew_interval = 300ms;
  o.claim_interval = 20ms;
  o.handoff_pause = 0ms;
  o.join_grace = 0ms;
  o.run_in_background = false;
  return o;
}

}  // namespace shardkit::test
