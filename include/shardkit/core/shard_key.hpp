// shardkit/core/shard_key.hpp — a shard key of any supported type, and its bucket.
//
// A sharded table's key column is integer, bigint, uuid or text (varchar
// too). Each type has its bucket rule, fixed forever and twinned in SQL by
// bucket_of, bucket_of_bigint, bucket_of_text and bucket_of_uuid (sql/001,
// sql/038; BucketFunction() names it):
//
//   integer  (uint32(v) * 2654435761 mod 2^32) >> 26          (core/bucket.hpp)
//   bigint   as that integer when -2^31 <= v < 2^31 (a column widened from
//            integer to bigint keeps its buckets); otherwise
//            (uint64(v) * 11400714819323198485 mod 2^64) >> 58
//   text     FNV-1a (32 bits) of its UTF-8 bytes, then the integer rule
//   uuid     FNV-1a (32 bits) of its 16 bytes (network order), then the integer rule
//
//   shardkit::ShardKey tenant = shardkit::ShardKey::Int8(9'000'000'000);
//   cluster->Transact(tenant, [&](shardkit::SqlTransaction& tx) { ... });
//   auto key = shardkit::ShardKey::Parse(shardkit::ShardKeyType::kUuid, text);   // nullopt: not a uuid
//
// A CustomerId converts to a ShardKey (integer), so every call that takes a
// ShardKey takes the Bookstore's customers as before.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

enum class ShardKeyType { kInt4, kInt8, kUuid, kText };

// "integer", "bigint", "uuid", "text": the SQL type's name.
[[nodiscard]] std::string_view SqlTypeName(ShardKeyType type) noexcept;
// The SQL twin of the type's rule: "bucket_of", "bucket_of_bigint",
// "bucket_of_uuid", "bucket_of_text".
[[nodiscard]] std::string_view BucketFunction(ShardKeyType type) noexcept;
// The key type of a column of this SQL type (format_type's name, or
// int4/int8/varchar): nullopt for a type a shard key cannot have.
[[nodiscard]] std::optional<ShardKeyType> ShardKeyTypeOfSql(std::string_view type_name) noexcept;

inline constexpr std::uint64_t kFibonacciMultiplier64 = 11400714819323198485ULL;

// bigint's rule (see above).
[[nodiscard]] constexpr BucketId BucketOfInt8(std::int64_t value) noexcept {
  if (value >= INT32_MIN && value <= INT32_MAX) return BucketOf(CustomerId{static_cast<std::int32_t>(value)});
  return BucketId{static_cast<int>((static_cast<std::uint64_t>(value) * kFibonacciMultiplier64) >> 58)};
}

// text's and uuid's rule (see above).
[[nodiscard]] constexpr BucketId BucketOfBytes(std::span<const std::uint8_t> bytes) noexcept {
  std::uint32_t hash = 2166136261U;  // FNV-1a offset basis
  for (const std::uint8_t byte : bytes) hash = (hash ^ byte) * 16777619U;
  return BucketOf(CustomerId{static_cast<std::int32_t>(hash)});
}

class ShardKey {
 public:
  // An integer key: the Bookstore's customers.
  constexpr ShardKey(CustomerId customer) noexcept  // NOLINT(google-explicit-constructor): every customer is a key
      : type_(ShardKeyType::kInt4), integer_(ToInt(customer)), bucket_(BucketOf(customer)) {}

  [[nodiscard]] static constexpr ShardKey Int4(std::int32_t value) noexcept { return ShardKey(CustomerId{value}); }
  [[nodiscard]] static constexpr ShardKey Int8(std::int64_t value) noexcept {
    return ShardKey(ShardKeyType::kInt8, value, {}, BucketOfInt8(value));
  }
  [[nodiscard]] static ShardKey Text(std::string text);
  [[nodiscard]] static ShardKey Uuid(const std::array<std::uint8_t, 16>& bytes);
  // The value in PostgreSQL's text form, read as the type's input function
  // reads it (PostgreSQL 15): integers with white space around and one sign,
  // uuids as 32 hex digits with optional hyphens after a group of four and
  // optional braces, any text as is. nullopt when the server would refuse it
  // too (or an integer out of the type's range).
  [[nodiscard]] static std::optional<ShardKey> Parse(ShardKeyType type, std::string_view text);

  [[nodiscard]] constexpr ShardKeyType type() const noexcept { return type_; }
  [[nodiscard]] constexpr BucketId bucket() const noexcept { return bucket_; }
  // integer and bigint keys: the value.
  [[nodiscard]] constexpr std::optional<std::int64_t> Integer() const noexcept {
    if (type_ == ShardKeyType::kInt4 || type_ == ShardKeyType::kInt8) return integer_;
    return std::nullopt;
  }
  // An integer key in the int32 range, as the Bookstore's customer.
  [[nodiscard]] std::optional<CustomerId> Customer() const noexcept;
  // As PostgreSQL prints it: 4242, 9000000000, 0189...-..., the text itself.
  [[nodiscard]] std::string ToString() const;

  // Equal keys name the same rows: an integer and a bigint of the same value
  // are equal (one column may be widened from the other).
  friend bool operator==(const ShardKey& a, const ShardKey& b) noexcept;
  friend bool operator<(const ShardKey& a, const ShardKey& b) noexcept;

 private:
  constexpr ShardKey(ShardKeyType type, std::int64_t integer, std::string bytes, BucketId bucket)
      : type_(type), integer_(integer), bytes_(std::move(bytes)), bucket_(bucket) {}

  ShardKeyType type_;
  std::int64_t integer_ = 0;
  std::string bytes_;  // text: its bytes; uuid: its 16 bytes
  BucketId bucket_;
};

[[nodiscard]] inline BucketId BucketOf(const ShardKey& key) noexcept {
  return key.bucket();
}
// In messages: "customer 4242" (integer keys, the Bookstore's), "key <value>".
[[nodiscard]] inline std::string Describe(const ShardKey& key) {
  return (key.type() == ShardKeyType::kInt4 ? "customer " : "key ") + key.ToString();
}
// The same when the key's column is known: "customer 4242" for the
// Bookstore's customer_id, else "tenant_id 7".
[[nodiscard]] inline std::string Describe(const ShardKey& key, const std::string& column) {
  return column == "customer_id" ? Describe(key) : column + " " + key.ToString();
}
inline std::ostream& operator<<(std::ostream& out, const ShardKey& key) {
  return out << key.ToString();
}

static_assert(BucketOfInt8(4242) == BucketId{44} && BucketOfInt8(-1) == BucketOf(CustomerId{-1}),
              "bigint keys in the integer range keep their buckets");

}  // namespace shardkit

// A key is a parameter in its text form (the server reads it as the column's type).
namespace pqxx {
template <>
struct string_traits<shardkit::ShardKey> {
  static constexpr const char* name() noexcept { return "shardkit::ShardKey"; }
  static constexpr bool has_null() noexcept { return false; }
  static bool is_null(const shardkit::ShardKey&) noexcept { return false; }
  [[noreturn]] static shardkit::ShardKey null() { internal::throw_null_conversion(name()); }
  static std::string to_string(const shardkit::ShardKey& key) { return key.ToString(); }
};
}  // namespace pqxx
