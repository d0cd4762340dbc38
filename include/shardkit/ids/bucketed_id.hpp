// shardkit/ids/bucketed_id.hpp — 64-bit IDs that carry their customer's bucket.
//
// Instagram put the logical shard into every ID, so an ID alone finds its
// data. A bucketed ID carries the owning customer's bucket (bucket.hpp), so
// the link in an order e-mail (".../orders/<order_id>") is routed without
// knowing the customer:
//
//   shardkit::BucketedIdGenerator ids{lease};               // a lease from id space e.g. "orders",
//                                                            // worker_count = 256
//   std::int64_t order_id = ids.NextFor(customer_id);       // bucket = BucketOf(customer_id)
//   shardkit::ShardId shard = shardkit::ShardOfId(*resolver.Directory(), order_id);
//   // == resolver.ShardFor(customer_id), today and after any bucket move
//
// Layout:
//
//   bit 63   62 .......... 22   21 ..... 14   13 ...... 6   5 .... 0
//   0      | 41 bits ms since | 8 bits      | 8 bits      | 6 bits
//          | the epoch        | worker id   | sequence    | bucket
//
// Trade-offs, against plain Snowflake (10 worker + 12 sequence bits):
//  - The bucket, not the shard, is stored: buckets never change for a
//    customer, shards do (bucket moves), so the directory resolves it at
//    read time and old IDs keep routing right.
//  - The 6 bucket bits are paid with 2 worker bits and 4 sequence bits:
//    256 workers (enough for a fleet plus rolling deploys; lease ids from a
//    separate id space with worker_count = 256) and 256 IDs per millisecond
//    per worker = 256,000/s, far more than one process can insert into
//    PostgreSQL. More workers would cost throughput per worker, and vice
//    versa.
//  - Time stays in the top bits and the bucket goes to the bottom, so IDs
//    still sort by time (B-tree friendly, range scans by time) and one
//    generator's IDs are strictly increasing whatever the buckets. The IDs of
//    one bucket are not contiguous: do not range-partition by ID.
//  - 6 bits fix the bucket count at 64 (kBucketCount). Growing to 128 or 256
//    buckets later needs a new layout for new IDs; old IDs still name their
//    64-bucket ancestor.
//  - Uniqueness does not depend on the bucket: (millisecond, worker,
//    sequence) is unique on its own, one sequence per worker for all buckets.
//  - A column holds one layout: a bucketed ID and a Snowflake with the same
//    bits decode differently, and they can collide with each other.
#pragma once

#include <cstdint>
#include <memory>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/ids/snowflake.hpp"

namespace shardkit {

class BucketDirectory;

inline constexpr int kBucketedIdBucketBits = 6;
inline constexpr int kBucketedIdWorkerBits = 8;
inline constexpr int kBucketedIdSequenceBits = 8;
static_assert(kBucketCount == 1 << kBucketedIdBucketBits, "the bucket field holds exactly kBucketCount buckets");

class BucketedIdGenerator {
 public:
  static constexpr int kMaxWorkerId = (1 << kBucketedIdWorkerBits) - 1;  // 255
  static constexpr int kIdsPerMs = 1 << kBucketedIdSequenceBits;         // 256

  // Configured worker id in 0..255 (IdGeneratorError otherwise).
  explicit BucketedIdGenerator(int worker_id, SnowflakeOptions options = {});
  // A leased worker id (claim it with worker_count = 256).
  explicit BucketedIdGenerator(std::shared_ptr<WorkerLease> lease, SnowflakeOptions options = {});
  ~BucketedIdGenerator();
  BucketedIdGenerator(const BucketedIdGenerator&) = delete;
  BucketedIdGenerator& operator=(const BucketedIdGenerator&) = delete;

  // An ID carrying `bucket` (0..63, else IdGeneratorError). Thread-safe,
  // lock-free; waits and throws like SnowflakeGenerator::Next.
  [[nodiscard]] std::int64_t Next(BucketId bucket);
  [[nodiscard]] std::int64_t NextFor(const ShardKey& key) { return Next(key.bucket()); }

  [[nodiscard]] int WorkerId() const noexcept { return worker_id_; }
  [[nodiscard]] std::int64_t EpochUnixMs() const noexcept;

 private:
  int worker_id_;
  std::unique_ptr<detail::TickSequencer> sequencer_;
};

struct BucketedIdParts {
  std::int64_t unix_ms = 0;
  BucketId bucket{};
  int worker_id = 0;
  int sequence = 0;
  friend bool operator==(const BucketedIdParts&, const BucketedIdParts&) = default;
};

// The bucket inside a bucketed ID (the low 6 bits). For a negative number,
// which no generator makes, the result is meaningless: ShardOfId checks.
[[nodiscard]] constexpr BucketId BucketOfId(std::int64_t id) noexcept {
  return BucketId{static_cast<int>(static_cast<std::uint64_t>(id) & (kBucketCount - 1))};
}
// The shard holding the ID's data under `directory`. IdFormatError if the
// ID is negative.
[[nodiscard]] ShardId ShardOfId(const BucketDirectory& directory, std::int64_t id);

// IdFormatError if the ID is negative.
[[nodiscard]] BucketedIdParts DecodeBucketedId(std::int64_t id, std::int64_t epoch_unix_ms = kDefaultIdEpochUnixMs);
// IdFormatError if a part does not fit its bits.
[[nodiscard]] std::int64_t ComposeBucketedId(const BucketedIdParts& parts,
                                             std::int64_t epoch_unix_ms = kDefaultIdEpochUnixMs);

}  // namespace shardkit
