// The order ids of the demos that place orders while they run: Snowflake ids
// from a worker id leased in the catalog, or a fixed worker id when the
// catalog has no lease to give (a cluster without one).
#pragma once

#include <memory>
#include <string>

#include "shardkit/core/dsn.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"

namespace shardkit::lab {

struct OrderIds {
  std::shared_ptr<WorkerLease> lease;
  std::unique_ptr<SnowflakeGenerator> ids;
};
// owner names the demo in the lease table; fallback_worker is used without a lease.
[[nodiscard]] OrderIds ClaimOrderIds(const Dsn& catalog_dsn, const std::string& owner, int fallback_worker);

}  // namespace shardkit::lab
