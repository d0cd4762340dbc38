// shardkit/core/bucket.hpp — customer_id -> one of 64 fixed buckets.
//
// A bucket never changes for a customer; which shard holds a bucket is the
// directory's business (directory.hpp). The formula is Knuth's multiplicative
// hash, the top 6 of 32 bits, and has a SQL twin, bucket_of() in sql/.
//
//   static_assert(shardkit::BucketOf(shardkit::CustomerId{4242}) == shardkit::BucketId{44});
//   shardkit::BucketId bucket = shardkit::BucketOf(customer_id);
#pragma once

#include <cstdint>
#include <ostream>
#include <pqxx/strconv>

namespace shardkit {

// Customers, buckets and shards are numbered, but a bucket is not a customer
// and a shard is not a bucket: each has its own type, so ShardFor(bucket)
// does not compile where ShardFor(customer) was meant. Make one from a number
// with braces (CustomerId{4242}, ShardId{1}); ToInt() gives the number back;
// fmt, iostreams and libpqxx (parameters, field.as<ShardId>()) see the number.
enum class CustomerId : std::int32_t {};
enum class BucketId : int {};
enum class ShardId : int {};

[[nodiscard]] constexpr std::int32_t ToInt(CustomerId id) noexcept {
  return static_cast<std::int32_t>(id);
}
[[nodiscard]] constexpr int ToInt(BucketId id) noexcept {
  return static_cast<int>(id);
}
[[nodiscard]] constexpr int ToInt(ShardId id) noexcept {
  return static_cast<int>(id);
}
// Found by fmt (argument-dependent lookup): fmt::format("{}", shard) prints 1.
[[nodiscard]] constexpr std::int32_t format_as(CustomerId id) noexcept {
  return ToInt(id);
}
[[nodiscard]] constexpr int format_as(BucketId id) noexcept {
  return ToInt(id);
}
[[nodiscard]] constexpr int format_as(ShardId id) noexcept {
  return ToInt(id);
}
inline std::ostream& operator<<(std::ostream& out, CustomerId id) {
  return out << ToInt(id);
}
inline std::ostream& operator<<(std::ostream& out, BucketId id) {
  return out << ToInt(id);
}
inline std::ostream& operator<<(std::ostream& out, ShardId id) {
  return out << ToInt(id);
}

inline constexpr int kBucketCount = 64;

// Ids first..last-1, for range-for loops over buckets or shards:
//   for (BucketId b : AllBuckets()) ...      for (ShardId s : FirstShards(n)) ...
template <class Id>
class IdRange {
 public:
  class iterator {
   public:
    constexpr explicit iterator(int at) noexcept : at_(at) {}
    constexpr Id operator*() const noexcept { return Id{at_}; }
    constexpr iterator& operator++() noexcept {
      ++at_;
      return *this;
    }
    constexpr bool operator==(const iterator&) const noexcept = default;

   private:
    int at_;
  };
  constexpr IdRange(int first, int last) noexcept : first_(first), last_(last < first ? first : last) {}
  [[nodiscard]] constexpr iterator begin() const noexcept { return iterator(first_); }
  [[nodiscard]] constexpr iterator end() const noexcept { return iterator(last_); }

 private:
  int first_;
  int last_;
};
[[nodiscard]] constexpr IdRange<BucketId> AllBuckets() noexcept {
  return {0, kBucketCount};
}
[[nodiscard]] constexpr IdRange<ShardId> FirstShards(int count) noexcept {
  return {0, count};
}
inline constexpr std::uint32_t kKnuthMultiplier = 2654435761U;

// (uint32(id) * 2654435761 mod 2^32) >> 26. The multiply must stay 32-bit:
// a 64-bit product shifted by 26 would not be the top 6 of 32 bits.
[[nodiscard]] constexpr BucketId BucketOf(CustomerId customer_id) noexcept {
  const auto id = static_cast<std::uint32_t>(ToInt(customer_id));
  const std::uint32_t product = id * kKnuthMultiplier;  // wraps mod 2^32
  return BucketId{static_cast<int>(product >> 26)};
}

static_assert(BucketOf(CustomerId{4242}) == BucketId{44} && BucketOf(CustomerId{4243}) == BucketId{20} &&
                  BucketOf(CustomerId{77777}) == BucketId{53},
              "the Bookstore case test vectors");

}  // namespace shardkit

// SQL parameters and results: the ids travel as their numbers.
namespace pqxx {
template <class Id>
struct shardkit_id_traits : enum_traits<Id> {
  static constexpr bool is_null(Id) noexcept { return false; }
  [[noreturn]] static Id null() { internal::throw_null_conversion(string_traits<Id>::name()); }
};
template <>
struct string_traits<shardkit::CustomerId> : shardkit_id_traits<shardkit::CustomerId> {
  static constexpr const char* name() noexcept { return "shardkit::CustomerId"; }
};
template <>
struct string_traits<shardkit::BucketId> : shardkit_id_traits<shardkit::BucketId> {
  static constexpr const char* name() noexcept { return "shardkit::BucketId"; }
};
template <>
struct string_traits<shardkit::ShardId> : shardkit_id_traits<shardkit::ShardId> {
  static constexpr const char* name() noexcept { return "shardkit::ShardId"; }
};
}  // namespace pqxx
