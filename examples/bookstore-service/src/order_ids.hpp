// Order ids for the Bookstore: 64-bit Snowflake IDs (shardkit/ids/snowflake.hpp)
// whose worker id is leased from PostgreSQL (shardkit/ids/worker_lease.hpp), so
// two service processes can never issue the same id, and a process that
// loses its lease stops issuing rather than risk a duplicate.
//
// The orders column holds one layout, shared with the Bookstore lab: epoch
// 2020-01-01, worker ids leased in the id space "bookstore-lab-orders",
// worker 1023 reserved for the lab's historical orders (lab/src/dataset.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <shardkit/config.hpp>
#include <shardkit/ids/snowflake.hpp>
#include <shardkit/ids/worker_lease.hpp>

namespace bookstore {

inline constexpr std::int64_t kOrderIdEpochUnixMs = 1'577'836'800'000;  // 2020-01-01T00:00:00Z
inline constexpr const char* kOrderIdSpace = "bookstore-lab-orders";
inline constexpr int kOrderIdWorkers = 1023;  // ids 0..1022; 1023 is the lab's history

// The one place that decides where the service's worker-id leases live: the
// catalog database ([catalog] dsn), shared by every process of the fleet and
// the lab. Throws shardkit::ConfigError when the configuration has none.
[[nodiscard]] shardkit::Dsn LeaseDatabaseDsn(const shardkit::ClusterConfig& config);

// Thread-safe.
class OrderIds {
 public:
  // Claims a worker id now. Throws shardkit::IdGeneratorError (every id
  // held, table unreachable) or shardkit::ConfigError.
  OrderIds(shardkit::Dsn lease_dsn, std::string owner);
  ~OrderIds();
  OrderIds(const OrderIds&) = delete;
  OrderIds& operator=(const OrderIds&) = delete;

  // The next id. When the lease was lost (its database unreachable for
  // longer than the lease, or taken over) a new one is claimed, at most
  // once a second; until then this throws shardkit::IdGeneratorError.
  [[nodiscard]] std::int64_t Next();

  [[nodiscard]] int WorkerId() const;
  [[nodiscard]] bool Valid() const;
  [[nodiscard]] std::string RedactedDsn() const;
  // Frees the worker id for another process; Next() throws afterwards.
  // Idempotent. Returns the worker id released (-1 if already released).
  int Release();

 private:
  struct Generation {
    std::shared_ptr<shardkit::WorkerLease> lease;
    std::shared_ptr<shardkit::SnowflakeGenerator> generator;
  };
  [[nodiscard]] Generation Claim() const;

  const shardkit::Dsn dsn_;
  const std::string owner_;
  mutable std::mutex mutex_;
  Generation current_;
  bool released_ = false;
  std::chrono::steady_clock::time_point next_reclaim_{};
};

}  // namespace bookstore
