// The SQL twin bucket_of() (sql/001_bucket_of.sql) must equal shardkit::BucketOf
// for every int32; checked on edge values and a large random sample on a
// real server.
#include <gtest/gtest.h>

#include <climits>
#include <pqxx/pqxx>
#include <random>
#include <sstream>

#include "shardkit/core/bucket.hpp"
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
  const auto row = tx.exec("SELECT provolatile, proparallel FROM pg_proc WHERE proname = 'bucket_of'")[0];
  EXPECT_STREQ(row[0].c_str(), "i");
  EXPECT_STREQ(row[1].c_str(), "s");
}

}  // namespace
