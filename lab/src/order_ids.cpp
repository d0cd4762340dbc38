#include "order_ids.hpp"

#include "dataset.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::lab {

OrderIds ClaimOrderIds(const Dsn& catalog_dsn, const std::string& owner, int fallback_worker) {
  OrderIds out;
  SnowflakeOptions id_options;
  id_options.epoch_unix_ms = kLabIdEpochMs;
  try {
    WorkerLeaseOptions lo;
    lo.id_space = "bookstore-lab-orders";
    lo.owner = owner;
    out.lease = WorkerLease::Claim(catalog_dsn, lo);
    out.ids = std::make_unique<SnowflakeGenerator>(out.lease, id_options);
  } catch (const Error&) {
    out.ids = std::make_unique<SnowflakeGenerator>(fallback_worker, id_options);
  }
  return out;
}

}  // namespace shardkit::lab
