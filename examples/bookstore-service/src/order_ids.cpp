#include "order_ids.hpp"

#include <shardkit/errors.hpp>

namespace bookstore {

shardkit::Dsn LeaseDatabaseDsn(const shardkit::ClusterConfig& config) {
  if (!config.catalog_dsn) {
    throw shardkit::ConfigError("catalog.dsn", config.origin +
                                                   " has no [catalog] database, where the service leases "
                                                   "the worker ids of its order ids (table shardkit_worker_ids)");
  }
  // Connecting may not take longer than the pools allow.
  return shardkit::WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
}

OrderIds::OrderIds(shardkit::Dsn lease_dsn, std::string owner) : dsn_(std::move(lease_dsn)), owner_(std::move(owner)) {
  current_ = Claim();
}

OrderIds::~OrderIds() {
  Release();
}

OrderIds::Generation OrderIds::Claim() const {
  shardkit::WorkerLeaseOptions options;
  options.id_space = kOrderIdSpace;
  options.worker_count = kOrderIdWorkers;
  options.owner = owner_;
  Generation next;
  next.lease = shardkit::WorkerLease::Claim(dsn_, options);
  shardkit::SnowflakeOptions snowflake;
  snowflake.epoch_unix_ms = kOrderIdEpochUnixMs;
  next.generator = std::make_shared<shardkit::SnowflakeGenerator>(next.lease, snowflake);
  return next;
}

std::int64_t OrderIds::Next() {
  std::shared_ptr<shardkit::SnowflakeGenerator> generator;
  std::shared_ptr<shardkit::WorkerLease> lease;
  {
    std::lock_guard lock(mutex_);
    if (released_) throw shardkit::IdGeneratorError("order ids: the worker-id lease was released (shutting down)");
    generator = current_.generator;
    lease = current_.lease;
  }
  try {
    return generator->Next();
  } catch (const shardkit::IdGeneratorError&) {
    if (lease->Valid()) throw;  // not the lease (the clock): nothing to re-claim
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (released_ || current_.lease != lease) {
      if (released_) throw;
    } else {
      if (now < next_reclaim_) throw;
      next_reclaim_ = now + std::chrono::seconds(1);
      Generation fresh = Claim();  // throws IdGeneratorError while the database is unreachable
      try {
        current_.lease->Release();
      } catch (const std::exception&) {
        // Best effort: the old lease expires by itself.
      }
      current_ = std::move(fresh);
    }
    return current_.generator->Next();
  }
}

int OrderIds::WorkerId() const {
  std::lock_guard lock(mutex_);
  return current_.lease->WorkerId();
}

bool OrderIds::Valid() const {
  std::lock_guard lock(mutex_);
  return !released_ && current_.lease->Valid();
}

std::string OrderIds::RedactedDsn() const {
  return dsn_.Redacted();
}

int OrderIds::Release() {
  std::lock_guard lock(mutex_);
  if (released_) return -1;
  released_ = true;
  try {
    current_.lease->Release();
  } catch (const std::exception&) {
    // The lease expires by itself; nothing else to do on the way out.
  }
  return current_.lease->WorkerId();
}

}  // namespace bookstore
