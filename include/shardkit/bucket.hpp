// shardkit/bucket.hpp — customer_id -> one of 64 fixed buckets.
//
// A bucket never changes for a customer; which shard holds a bucket is the
// directory's business (directory.hpp). The formula is Knuth's multiplicative
// hash, the top 6 of 32 bits, and has a SQL twin, bucket_of() in sql/.
//
//   static_assert(shardkit::BucketOf(4242) == 44);
//   int bucket = shardkit::BucketOf(customer_id);
#pragma once

#include <cstdint>

namespace shardkit {

using CustomerId = std::int32_t;
using BucketId = int;
using ShardId = int;

inline constexpr int kBucketCount = 64;
inline constexpr std::uint32_t kKnuthMultiplier = 2654435761U;

// (uint32(id) * 2654435761 mod 2^32) >> 26. The multiply must stay 32-bit:
// a 64-bit product shifted by 26 would not be the top 6 of 32 bits.
[[nodiscard]] constexpr BucketId BucketOf(CustomerId customer_id) noexcept {
  const auto id = static_cast<std::uint32_t>(customer_id);
  const std::uint32_t product = id * kKnuthMultiplier;  // wraps mod 2^32
  return static_cast<BucketId>(product >> 26);
}

static_assert(BucketOf(4242) == 44 && BucketOf(4243) == 20 && BucketOf(77777) == 53,
              "seed 001 test vectors");

}  // namespace shardkit
