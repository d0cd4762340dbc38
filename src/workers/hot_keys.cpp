// Job partitions and salted hot keys (hot_keys.hpp, sql/021_partition_leases.sql).
#include "shardkit/workers/hot_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "ids/lease_support.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

std::vector<BucketId> BucketsOfPartition(int partition, int partitions) {
  if (!ValidPartitionCount(partitions)) {
    throw ConfigError("jobs.partition_count",
                      fmt::format("{} is not a power of two in 1..{}", partitions, kMaxPartitions));
  }
  if (partition < 0 || partition >= partitions) {
    throw ConfigError("jobs.partition", fmt::format("partition {} is outside 0..{}", partition, partitions - 1));
  }
  std::vector<BucketId> buckets;
  if (partitions >= kBucketCount) {
    buckets.push_back(BucketId{partition / (partitions / kBucketCount)});
  } else {
    const int per = kBucketCount / partitions;
    for (int b = partition * per; b < (partition + 1) * per; ++b) buckets.push_back(BucketId{b});
  }
  return buckets;
}

HotKeys::HotKeys(int partitions, std::map<CustomerId, Entry> entries)
    : partitions_(partitions), entries_(std::move(entries)) {
  if (!ValidPartitionCount(partitions)) {
    throw ConfigError("jobs.partition_count",
                      fmt::format("{} is not a power of two in 1..{}", partitions, kMaxPartitions));
  }
  for (auto& [customer, e] : entries_) {
    if (!ValidPartitionCount(e.salt) || e.salt > partitions || !ValidPartitionCount(e.max_salt) ||
        e.max_salt > partitions) {
      throw ConfigError("hot_keys.salt", fmt::format("customer {}: salt {} (max {}) must be a power of two in 1..{} "
                                                     "(the partition count)",
                                                     customer, e.salt, e.max_salt, partitions));
    }
    e.max_salt = std::max(e.max_salt, e.salt);
  }
}

int HotKeys::SaltOf(CustomerId customer_id) const noexcept {
  const auto it = entries_.find(customer_id);
  return it == entries_.end() ? 1 : it->second.salt;
}

int HotKeys::PartitionFor(CustomerId customer_id, std::int64_t salt_key) const noexcept {
  return SaltedPartition(customer_id, salt_key, SaltOf(customer_id), partitions_);
}

std::vector<int> HotKeys::PartitionsOf(CustomerId customer_id) const {
  const auto it = entries_.find(customer_id);
  const int most = it == entries_.end() ? 1 : it->second.max_salt;
  // Salts are powers of two, so they nest: the partitions of any salt used
  // so far are among those of the largest one.
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(most));
  const int home = HomePartition(customer_id, partitions_);
  for (int i = 0; i < most; ++i) out.push_back((home + i * (partitions_ / most)) % partitions_);
  return out;
}

// ------------------------------------------------------------ registry

HotKeyRegistry::HotKeyRegistry(Dsn catalog_dsn, std::string queue, int partitions)
    : dsn_(std::move(catalog_dsn)), queue_(std::move(queue)), partitions_(partitions) {
  if (queue_.empty()) throw ConfigError("jobs.queue", "must not be empty");
  current_ = std::make_shared<const HotKeys>(partitions_);
}

HotKeyRegistry::~HotKeyRegistry() = default;

pqxx::connection_base& HotKeyRegistry::Connection() {
  if (!connection_ || !connection_->connection.is_open()) {
    connection_.reset();
    connection_ = std::make_unique<detail::LeaseConnection>(
        std::make_unique<pqxx::connection>(WithConnectTimeout(dsn_, std::chrono::milliseconds{2000}).Reveal()));
  }
  return connection_->connection;
}

std::shared_ptr<const HotKeys> HotKeyRegistry::Current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::shared_ptr<const HotKeys> HotKeyRegistry::Refresh() {
  std::lock_guard lock(mutex_);
  try {
    pqxx::read_transaction tx{Connection()};
    std::map<CustomerId, HotKeys::Entry> entries;
    for (const auto& row :
         tx.exec_params("SELECT customer_id, salt, max_salt FROM shardkit_hot_keys WHERE queue = $1", queue_)) {
      entries[CustomerId{row[0].as<std::int32_t>()}] = {row[1].as<int>(), row[2].as<int>()};
    }
    current_ = std::make_shared<const HotKeys>(partitions_, std::move(entries));
    loaded_at_ = std::chrono::steady_clock::now();
    loaded_ = true;
    return current_;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    throw JobError(
        fmt::format("hot keys of queue '{}': cannot read shardkit_hot_keys at {} ({}); apply "
                    "sql/021_partition_leases.sql to the catalog if it is missing",
                    queue_, dsn_, RedactDsn(e.what())));
  }
}

std::shared_ptr<const HotKeys> HotKeyRegistry::RefreshIfOlder(std::chrono::milliseconds max_age) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (loaded_ && std::chrono::steady_clock::now() - loaded_at_ < max_age) return current_;
  }
  try {
    return Refresh();
  } catch (...) {
    std::lock_guard lock(mutex_);
    loaded_at_ = std::chrono::steady_clock::now();  // retry after max_age, not in a tight loop
    loaded_ = true;
    return current_;
  }
}

void HotKeyRegistry::Salt(CustomerId customer_id, int salt) {
  if (!ValidPartitionCount(salt) || salt > partitions_) {
    throw ConfigError("hot_keys.salt",
                      fmt::format("salt {} for customer {} must be a power of two in 1..{} (the partition count of "
                                  "queue '{}'), so that salts nest",
                                  salt, customer_id, partitions_, queue_));
  }
  std::lock_guard lock(mutex_);
  try {
    pqxx::work tx{Connection()};
    tx.exec_params(
        "INSERT INTO shardkit_hot_keys AS h (queue, customer_id, salt, max_salt) VALUES ($1, $2, $3, $3) "
        "ON CONFLICT (queue, customer_id) DO UPDATE SET salt = EXCLUDED.salt, "
        "max_salt = greatest(h.max_salt, EXCLUDED.salt), updated_at = clock_timestamp()",
        queue_, customer_id, salt);
    tx.commit();
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    throw JobError(fmt::format("hot keys of queue '{}': cannot salt customer {} at {} ({})", queue_, customer_id, dsn_,
                               RedactDsn(e.what())));
  }
}

}  // namespace shardkit
