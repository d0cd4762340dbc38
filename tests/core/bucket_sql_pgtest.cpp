// The SQL twins bucket_of() (sql/001, sql/038) must equal shardkit::BucketOf
// for every int32 and the ShardKey of every bigint, text and uuid; checked on
// edge values and large random samples on a real server.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <climits>
#include <pqxx/pqxx>
#include <random>
#include <sstream>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/core/shard_key_format.hpp"
#include "support/test_cluster.hpp"

namespace {

std::string ArrayLiteral(const std::vector<std::int32_t>& ids) {
  std::ostringstream text;
  text << '{';
  for (std::size_t i = 0; i < ids.size(); ++i) text << (i ? "," : "") << ids[i];
  text << '}';
  return text.str();
}

// Returns the ids whose SQL bucket differs from the C++ one.
std::vector<std::string> Mismatches(pqxx::connection& c, const std::vector<std::int32_t>& ids) {
  pqxx::read_transaction tx{c};
  const auto rows = tx.exec_params("SELECT id, bucket_of(id) FROM unnest($1::int[]) AS id", ArrayLiteral(ids));
  std::vector<std::string> bad;
  if (rows.size() != ids.size()) bad.push_back("row count differs");
  for (const auto& row : rows) {
    const auto id = row[0].as<shardkit::CustomerId>();
    const auto sql_bucket = row[1].as<shardkit::BucketId>();
    if (sql_bucket != shardkit::BucketOf(id)) {
      bad.push_back(std::to_string(ToInt(id)) + ": sql " + std::to_string(ToInt(sql_bucket)) + " vs c++ " +
                    std::to_string(ToInt(shardkit::BucketOf(id))));
    }
  }
  return bad;
}

class BucketSqlTwin : public ::testing::Test {
 protected:
  pqxx::connection connection_{shardkit::test::LoadTestConfig().reference_dsn->Reveal()};
};

TEST_F(BucketSqlTwin, SeedVectors) {
  pqxx::read_transaction tx{connection_};
  const auto row = tx.exec("SELECT bucket_of(4242), bucket_of(4243), bucket_of(77777)")[0];
  EXPECT_EQ(row[0].as<int>(), 44);
  EXPECT_EQ(row[1].as<int>(), 20);
  EXPECT_EQ(row[2].as<int>(), 53);
}

TEST_F(BucketSqlTwin, EdgeValues) {
  std::vector<std::int32_t> ids = {INT32_MIN, INT32_MIN + 1, -65537, -65536,        -2,       -1, 0, 1,
                                   2,         65535,         65536,  INT32_MAX - 1, INT32_MAX};
  for (int bit = 0; bit < 31; ++bit) {
    const auto power = static_cast<std::int32_t>(1U << bit);
    ids.insert(ids.end(), {power, -power, power - 1, power + 1});
  }
  const auto bad = Mismatches(connection_, ids);
  EXPECT_TRUE(bad.empty()) << bad.front();
}

TEST_F(BucketSqlTwin, LargeRandomSample) {
  std::mt19937 random(42);
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX);
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<std::int32_t> ids(50'000);
    for (auto& id : ids) id = any(random);
    const auto bad = Mismatches(connection_, ids);
    ASSERT_TRUE(bad.empty()) << bad.size() << " mismatches, first: " << bad.front();
  }
}

TEST_F(BucketSqlTwin, EveryBucketValueIsReachedBySequentialIds) {
  pqxx::read_transaction tx{connection_};
  const auto rows = tx.exec(
      "SELECT count(DISTINCT bucket_of(id)), min(bucket_of(id)), max(bucket_of(id)) "
      "FROM generate_series(1, 100000) AS id");
  EXPECT_EQ(rows[0][0].as<int>(), 64);
  EXPECT_EQ(rows[0][1].as<int>(), 0);
  EXPECT_EQ(rows[0][2].as<int>(), 63);
}

TEST_F(BucketSqlTwin, DeclaredImmutableAndParallelSafe) {
  pqxx::read_transaction tx{connection_};
  const auto rows = tx.exec("SELECT provolatile, proparallel FROM pg_proc WHERE proname ~ '^bucket_of(_|$)'");
  EXPECT_EQ(rows.size(), 4U);  // bucket_of, bucket_of_bigint, bucket_of_text, bucket_of_uuid
  for (const auto& row : rows) {
    EXPECT_STREQ(row[0].c_str(), "i");
    EXPECT_STREQ(row[1].c_str(), "s");
  }
}

}  // namespace

// The twins of the other key types (sql/038): bigint, text, uuid.
namespace {

class KeyTypeTwins : public BucketSqlTwin {
 protected:
  // Each value (as text) checked with its type's bucket function against the C++ key.
  std::vector<std::string> Mismatches(shardkit::ShardKeyType type, const std::vector<std::string>& values) {
    pqxx::read_transaction tx{connection_};
    const std::string sql = fmt::format(
        "SELECT v, {}(v::{}) FROM unnest($1::text[]) WITH ORDINALITY AS u(v, i) "
        "ORDER BY i",
        shardkit::BucketFunction(type), shardkit::SqlTypeName(type));
    std::string array = "{";
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::string quoted;
      for (const char c : values[i]) {
        if (c == '"' || c == '\\') quoted += '\\';
        quoted += c;
      }
      array += (i ? ",\"" : "\"") + quoted + "\"";
    }
    array += "}";
    const auto rows = tx.exec_params(sql, array);
    std::vector<std::string> bad;
    if (rows.size() != values.size()) bad.push_back("row count differs");
    for (std::size_t i = 0; i < rows.size() && i < values.size(); ++i) {
      const auto key = shardkit::ShardKey::Parse(type, values[i]);
      if (!key) {
        bad.push_back("C++ refused '" + values[i] + "' that the server read");
        continue;
      }
      if (rows[i][1].as<int>() != ToInt(key->bucket())) {
        bad.push_back(fmt::format("'{}': sql {} vs c++ {}", values[i], rows[i][1].as<int>(), ToInt(key->bucket())));
      }
    }
    return bad;
  }
};

TEST_F(KeyTypeTwins, BigintEdgeAndRandomValues) {
  std::vector<std::string> values;
  for (const std::int64_t v : {INT64_MIN, INT64_MIN + 1, std::int64_t{INT32_MIN} - 1, std::int64_t{INT32_MIN},
                               std::int64_t{-1}, std::int64_t{0}, std::int64_t{4242}, std::int64_t{INT32_MAX},
                               std::int64_t{INT32_MAX} + 1, INT64_MAX - 1, INT64_MAX}) {
    values.push_back(std::to_string(v));
  }
  for (int bit = 0; bit < 63; ++bit) {
    const std::int64_t power = std::int64_t{1} << bit;
    for (const std::int64_t v : {power, -power, power - 1, power + 1}) values.push_back(std::to_string(v));
  }
  std::mt19937_64 random(42);
  for (int i = 0; i < 20'000; ++i) values.push_back(std::to_string(static_cast<std::int64_t>(random())));
  const auto bad = Mismatches(shardkit::ShardKeyType::kInt8, values);
  EXPECT_TRUE(bad.empty()) << bad.size() << " mismatches, first: " << bad.front();
}

TEST_F(KeyTypeTwins, TextEdgeAndRandomValues) {
  std::vector<std::string> values = {"",       "a",          "foobar",      "Org-1", " padded ", "ünïcödé",
                                     "日本語", "\"quoted\"", "back\\slash", "NULL",  "4242",     std::string(300, 'x')};
  std::mt19937 random(7);
  std::uniform_int_distribution<int> length(0, 40);
  std::uniform_int_distribution<int> printable(32, 126);
  for (int i = 0; i < 5'000; ++i) {
    std::string s(static_cast<std::size_t>(length(random)), ' ');
    for (char& c : s) c = static_cast<char>(printable(random));
    values.push_back(std::move(s));
  }
  const auto bad = Mismatches(shardkit::ShardKeyType::kText, values);
  EXPECT_TRUE(bad.empty()) << bad.size() << " mismatches, first: " << bad.front();
}

TEST_F(KeyTypeTwins, UuidEdgeAndRandomValues) {
  std::vector<std::string> values = {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                                     "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}", "A0EEBC999C0B4EF8BB6D6BB9BD380A11"};
  std::mt19937_64 random(9);
  for (int i = 0; i < 10'000; ++i) {
    values.push_back(fmt::format("{:016x}{:016x}", random(), random()));
  }
  const auto bad = Mismatches(shardkit::ShardKeyType::kUuid, values);
  EXPECT_TRUE(bad.empty()) << bad.size() << " mismatches, first: " << bad.front();
}

// One bucket_of, so an untyped value is an integer as before sql/038 (an
// overload for text would take it and answer text's bucket), and a bigint is
// an error there, not another bucket.
TEST_F(KeyTypeTwins, BucketOfStaysTheIntegersOnly) {
  pqxx::read_transaction tx{connection_};
  EXPECT_EQ(tx.exec1("SELECT bucket_of('4242')")[0].as<int>(), 44);
  EXPECT_EQ(tx.exec_params1("SELECT bucket_of($1)", "4242")[0].as<int>(), 44);
  EXPECT_EQ(tx.exec1("SELECT bucket_of_bigint(9000000000)")[0].as<int>(), ToInt(shardkit::BucketOfInt8(9'000'000'000)));
  EXPECT_EQ(tx.exec1("SELECT bucket_of_text('abc')")[0].as<int>(), ToInt(shardkit::ShardKey::Text("abc").bucket()));
  EXPECT_THROW(tx.exec1("SELECT bucket_of(9000000000)"), pqxx::sql_error);
}

}  // namespace
