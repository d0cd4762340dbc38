// ShardKey: each type's bucket rule, its parsing as PostgreSQL's input
// functions read values, and its text form.
#include "shardkit/core/shard_key.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <random>

namespace shardkit {
namespace {

TEST(ShardKey, IntegerKeysAreTheBookstoresCustomers) {
  for (const std::int32_t id : {INT32_MIN, -1, 0, 1, 4242, 4243, 77777, INT32_MAX}) {
    EXPECT_EQ(ShardKey(CustomerId{id}).bucket(), BucketOf(CustomerId{id}));
    EXPECT_EQ(ShardKey::Int4(id), ShardKey(CustomerId{id}));
    // A column widened to bigint keeps every bucket.
    EXPECT_EQ(ShardKey::Int8(id).bucket(), BucketOf(CustomerId{id})) << id;
    EXPECT_EQ(ShardKey::Int8(id), ShardKey::Int4(id));
  }
  EXPECT_EQ(ShardKey::Int4(4242).bucket(), BucketId{44});
  EXPECT_EQ(ShardKey::Int4(4242).Customer(), CustomerId{4242});
  EXPECT_EQ(ShardKey::Int8(9'000'000'000).Customer(), std::nullopt);
}

TEST(ShardKey, BigintsBeyondIntegerUseFibonacciHashing) {
  // (uint64(v) * 11400714819323198485 mod 2^64) >> 58, computed here by halves.
  const auto expected = [](std::int64_t v) {
    const auto u = static_cast<std::uint64_t>(v);
    const std::uint64_t m = 11400714819323198485ULL;
    const std::uint64_t low = (u & 0xFFFFFFFFU) * (m & 0xFFFFFFFFU);
    const std::uint64_t cross = (u >> 32) * (m & 0xFFFFFFFFU) + (u & 0xFFFFFFFFU) * (m >> 32);
    const std::uint64_t product = low + (cross << 32);
    return BucketId{static_cast<int>(product >> 58)};
  };
  for (const std::int64_t v :
       {std::int64_t{INT32_MAX} + 1, std::int64_t{INT32_MIN} - 1, std::int64_t{9'000'000'000}, INT64_MAX, INT64_MIN}) {
    EXPECT_EQ(ShardKey::Int8(v).bucket(), expected(v)) << v;
  }
  // Spread: 100,000 consecutive large ids reach every bucket, none with more than twice its share.
  std::array<int, kBucketCount> counts{};
  for (std::int64_t v = 0; v < 100'000; ++v) ++counts[static_cast<std::size_t>(ToInt(BucketOfInt8(v + (1LL << 40))))];
  for (const int c : counts) {
    EXPECT_GT(c, 100'000 / kBucketCount / 2);
    EXPECT_LT(c, 100'000 / kBucketCount * 2);
  }
}

TEST(ShardKey, TextAndUuidHashTheirBytesWithFnv1a) {
  // FNV-1a of "" is the offset basis 2166136261; of "a" 0xe40c292c (the published vectors).
  EXPECT_EQ(ShardKey::Text("").bucket(), BucketOf(CustomerId{static_cast<std::int32_t>(2166136261U)}));
  EXPECT_EQ(ShardKey::Text("a").bucket(), BucketOf(CustomerId{static_cast<std::int32_t>(0xe40c292cU)}));
  EXPECT_EQ(ShardKey::Text("foobar").bucket(), BucketOf(CustomerId{static_cast<std::int32_t>(0xbf9cf968U)}));
  const std::array<std::uint8_t, 16> nil{};
  std::string zeros(16, '\0');
  EXPECT_EQ(ShardKey::Uuid(nil).bucket(), ShardKey::Text(zeros).bucket());
  EXPECT_NE(ShardKey::Text("a"), ShardKey::Text("b"));
  EXPECT_NE(ShardKey::Text("1"), ShardKey::Int4(1));  // different kinds of keys name different rows
}

TEST(ShardKey, ParsesIntegersAsPostgresDoes) {
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt4, " 1259"), ShardKey::Int4(1259));
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt4, "+1259"), ShardKey::Int4(1259));
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt4, "\t-7\n"), ShardKey::Int4(-7));
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt4, "-2147483648"), ShardKey::Int4(INT32_MIN));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt4, "2147483648"));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt4, "12a"));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt4, "1 2"));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt4, ""));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt4, "+-1"));
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt8, "-9223372036854775808"), ShardKey::Int8(INT64_MIN));
  EXPECT_EQ(ShardKey::Parse(ShardKeyType::kInt8, "9223372036854775807"), ShardKey::Int8(INT64_MAX));
  EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kInt8, "9223372036854775808"));
}

TEST(ShardKey, ParsesUuidsAsPostgresDoes) {
  const auto canonical = ShardKey::Parse(ShardKeyType::kUuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
  ASSERT_TRUE(canonical);
  EXPECT_EQ(canonical->ToString(), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
  // The forms uuid_in accepts (PostgreSQL's documentation lists them).
  for (const char* text : {"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
                           "a0eebc999c0b4ef8bb6d6bb9bd380a11", "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
                           "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}"}) {
    EXPECT_EQ(ShardKey::Parse(ShardKeyType::kUuid, text), canonical) << text;
  }
  for (const char* text : {"", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
                           "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
                           "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11", " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                           "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-", "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}) {
    EXPECT_FALSE(ShardKey::Parse(ShardKeyType::kUuid, text)) << text;
  }
}

TEST(ShardKey, TextIsTakenAsItIs) {
  const auto key = ShardKey::Parse(ShardKeyType::kText, " Org-1 ");
  ASSERT_TRUE(key);
  EXPECT_EQ(key->ToString(), " Org-1 ");
  EXPECT_EQ(*key, ShardKey::Text(" Org-1 "));
}

TEST(ShardKey, SqlTypeNames) {
  EXPECT_EQ(ShardKeyTypeOfSql("integer"), ShardKeyType::kInt4);
  EXPECT_EQ(ShardKeyTypeOfSql("bigint"), ShardKeyType::kInt8);
  EXPECT_EQ(ShardKeyTypeOfSql("uuid"), ShardKeyType::kUuid);
  EXPECT_EQ(ShardKeyTypeOfSql("character varying(40)"), ShardKeyType::kText);
  EXPECT_EQ(ShardKeyTypeOfSql("numeric"), std::nullopt);
  EXPECT_EQ(SqlTypeName(ShardKeyType::kUuid), "uuid");
}

}  // namespace
}  // namespace shardkit
