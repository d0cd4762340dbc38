// Scatter-gather against the local cluster: every shard answers, routing is
// visible per shard, parameters (NULL included) travel as parameters, a slow
// or dead shard is cut at the deadline and named, partial results carry a
// warning, small pools do not deadlock, and statistics add up. Answers are
// compared with the same query on the unsharded reference server.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Row = std::vector<std::optional<std::string>>;

// A shard's pg::Rows or the reference's pqxx::result.
template <class Result>
std::vector<Row> ToRows(const Result& result) {
  std::vector<Row> rows;
  for (const auto& r : result) {
    Row row;
    for (const auto& f : r) row.push_back(f.is_null() ? std::nullopt : std::optional<std::string>(f.c_str()));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<Row> Gathered(const ScatterResult& result) {
  std::vector<Row> rows;
  for (const auto& shard : result.shards) {
    auto part = ToRows(shard.rows);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

std::vector<Row> OnReference(const Dsn& dsn, const std::string& sql, const SqlParams& params = {}) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  auto rows = ToRows(tx.exec_params(sql, pqxx::prepare::make_dynamic_params(values)));
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Rows per shard: shard 0 gets customers 1..30, shard 1 customers 31..50 (by
// the resolver's routing); the reference gets all of them.
class ScatterPg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("scatter_pgtest");
    auto resolver = cluster_->MakeResolver();
    std::string per_shard[2];
    std::string all;
    for (int id = 1; id <= 200; ++id) {
      const ShardId shard = resolver->ShardFor(CustomerId{id});
      const std::string row = "(" + std::to_string(id) + ", bucket_of(" + std::to_string(id) + "), 'c" +
                              std::to_string(id) + "', 'c" + std::to_string(id) + "@example.org')";
      auto& list = per_shard[ToInt(shard)];
      list += (list.empty() ? "" : ",") + row;
      all += (all.empty() ? "" : ",") + row;
    }
    for (int s = 0; s < 2; ++s) {
      cluster_->ExecOnShard(s, "INSERT INTO customers (customer_id, bucket, name, email) VALUES " + per_shard[s]);
    }
    cluster_->ExecOnReference("INSERT INTO customers (customer_id, bucket, name, email) VALUES " + all);
    // A per-shard knob: how long this shard's "slow" statement sleeps.
    cluster_->ExecOnShard(0,
                          "CREATE TABLE scatter_knob (shard int, sleep_s float8); "
                          "INSERT INTO scatter_knob VALUES (0, 0)");
    cluster_->ExecOnShard(1,
                          "CREATE TABLE scatter_knob (shard int, sleep_s float8); "
                          "INSERT INTO scatter_knob VALUES (1, 5)");
  }
  static void TearDownTestSuite() {
    delete temporary_;
    temporary_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
  }
  // initdb is slow: one throwaway server, made on first use, for the tests
  // that stop or freeze a shard.
  static test::TemporaryServer& TemporaryShard() {
    if (temporary_ == nullptr) temporary_ = new test::TemporaryServer();
    return *temporary_;
  }

  // A resolver whose shard 1 is a port nothing listens on.
  static std::unique_ptr<BucketShardResolver> ResolverWithDeadShard1() {
    PoolOptions options;
    options.max_size = 2;
    std::vector<std::unique_ptr<ConnectionPool>> pools;
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{0}, cluster_->ShardDsn(0), options));
    const Dsn dead{"host=127.0.0.1 port=1 dbname=nowhere user=bookstore password=s3cr3t-pw connect_timeout=2"};
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{1}, dead, options));
    return std::make_unique<BucketShardResolver>(BucketDirectory::EvenSplit(2), std::move(pools),
                                                 std::vector<std::string>{"shard0", "dead1"});
  }

  // How many statements of the slow-shard test still run on shard 1 (waits
  // up to 2 s for them to go away).
  static int ShardSleeps() {
    pqxx::connection c{cluster_->ShardDsn(1).Reveal()};
    pqxx::nontransaction tx{c};
    int running = -1;
    for (int i = 0; i < 40 && running != 0; ++i) {
      running = tx.exec1(
                      "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND state = 'active' AND query LIKE '%pg_sleep(sleep_s)%' AND pid <> pg_backend_pid()")[0]
                    .as<int>();
      if (running != 0) std::this_thread::sleep_for(50ms);
    }
    return running;
  }

  static test::ScratchCluster* cluster_;
  static test::TemporaryServer* temporary_;
};

test::ScratchCluster* ScatterPg::cluster_ = nullptr;
test::TemporaryServer* ScatterPg::temporary_ = nullptr;

TEST_F(ScatterPg, EveryShardAnswersAndTheUnionEqualsTheReference) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  const std::string sql = "SELECT customer_id, bucket, name FROM customers";
  auto result = scatter.Run(sql);
  ASSERT_EQ(result.shards.size(), 2u);
  EXPECT_TRUE(result.failures.empty());
  EXPECT_FALSE(result.warning);
  EXPECT_EQ(result.shards[0].shard, ShardId{0});
  EXPECT_EQ(result.shards[1].shard, ShardId{1});
  EXPECT_EQ(Gathered(result), OnReference(cluster_->ReferenceDsn(), sql));
  EXPECT_EQ(result.TotalRows(), 200u);

  // Metadata: rows, bytes, elapsed, slowest shard.
  std::size_t bytes = 0;
  for (const auto& shard : result.shards) {
    EXPECT_GT(shard.rows.size(), 0u);
    std::size_t payload = 0;  // the values' lengths, as libpq gave them
    for (const auto& row : shard.rows) {
      for (const auto& field : row) payload += field.size();
    }
    EXPECT_EQ(shard.bytes, payload);
    EXPECT_GT(shard.elapsed.count(), 0);
    bytes += shard.bytes;
  }
  EXPECT_EQ(result.TotalBytes(), bytes);
  ASSERT_TRUE(result.slowest_shard);
  const auto& slowest = result.shards[static_cast<std::size_t>(*result.slowest_shard)];
  EXPECT_EQ(result.slowest_elapsed, slowest.elapsed);
  for (const auto& shard : result.shards) EXPECT_LE(shard.elapsed, result.slowest_elapsed);
  EXPECT_GE(result.elapsed, result.slowest_elapsed);
}

// The bucket step a scatter sends is made once per directory: a newer
// directory must reach the very next scatter (here one that gives shard 1 a
// bucket shard 0 owns, which shard 1 refuses), and the one after it too.
TEST_F(ScatterPg, EachScatterSendsTheBucketsOfTheCurrentDirectory) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  const std::string sql = "SELECT current_setting('shardkit.buckets')";
  const auto settings = [&] {
    std::vector<std::string> out;
    for (const auto& shard : scatter.Run(sql).shards) out.push_back(shard.rows[0][0].c_str());
    return out;
  };
  const auto expected = [&] {
    std::vector<std::string> out;
    for (const ShardId s : FirstShards(2)) out.push_back(BucketSet::Of(*resolver->Directory(), s).Setting());
    return out;
  };
  ASSERT_EQ(settings(), expected());

  const auto original = resolver->Directory();
  BucketId owned_by_0{0};
  while (original->ShardOf(owned_by_0) != ShardId{0}) owned_by_0 = BucketId{ToInt(owned_by_0) + 1};
  resolver->PublishDirectory(original->WithBucketMoved(owned_by_0, ShardId{1}));
  try {
    (void)scatter.Run(sql);
    ADD_FAILURE() << "shard 1 accepted bucket " << owned_by_0 << ", which it does not own";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_TRUE(e.failures()[0].stale_directory) << e.what();
  }

  BucketDirectory back = *original;
  back = back.WithBucketMoved(owned_by_0, ShardId{0});  // same placement, a newer version
  while (back.Version() <= resolver->Directory()->Version()) back = back.WithBucketMoved(owned_by_0, ShardId{0});
  resolver->PublishDirectory(back);
  EXPECT_EQ(settings(), expected());
}

TEST_F(ScatterPg, EachShardReturnsOnlyTheCustomersRoutedToIt) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  auto result = scatter.Run("SELECT customer_id, bucket, bucket_of(customer_id) FROM customers");
  ASSERT_EQ(result.shards.size(), 2u);
  for (const auto& shard : result.shards) {
    for (const auto& row : shard.rows) {
      const auto id = row[0].as<CustomerId>();
      EXPECT_EQ(resolver->ShardFor(id), shard.shard) << "customer " << id;
      EXPECT_EQ(row[1].as<BucketId>(), BucketOf(id));
      EXPECT_EQ(row[2].as<BucketId>(), BucketOf(id));
    }
  }
  // A chosen subset of shards: only shard 1 is asked.
  ScatterOptions only1;
  only1.shards = std::vector<ShardId>{ShardId{1}};
  const std::string sql = "SELECT customer_id FROM customers WHERE customer_id = ANY($1::int[])";
  auto one = scatter.Run(sql, {"{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20}"}, only1);
  ASSERT_EQ(one.shards.size(), 1u);
  EXPECT_EQ(one.shards[0].shard, ShardId{1});
  EXPECT_EQ(Gathered(one), OnReference(cluster_->ReferenceDsn(),
                                       "SELECT customer_id FROM customers WHERE customer_id <= 20 AND bucket >= 32"));
  EXPECT_GT(one.TotalRows(), 0u);
}

// ScatterOptions::buckets: the owners of those buckets in the scatter's own
// directory snapshot, the one its bucket step fences with.
TEST_F(ScatterPg, BucketsRunOnTheirOwnersInTheScattersDirectory) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  const auto original = resolver->Directory();
  BucketId owned_by_0{0};
  while (original->ShardOf(owned_by_0) != ShardId{0}) owned_by_0 = BucketId{ToInt(owned_by_0) + 1};
  BucketId owned_by_1{0};
  while (original->ShardOf(owned_by_1) != ShardId{1}) owned_by_1 = BucketId{ToInt(owned_by_1) + 1};
  const std::string sql = "SELECT count(*) FROM customers WHERE bucket = ANY($1::int[])";
  ScatterOptions options;
  options.buckets = std::vector<BucketId>{owned_by_0};
  const auto one = scatter.Run(sql, {fmt::format("{{{}}}", ToInt(owned_by_0))}, options);
  ASSERT_EQ(one.shards.size(), 1u);
  EXPECT_EQ(one.shards[0].shard, ShardId{0});
  EXPECT_EQ(one.directory_version, original->Version());
  options.buckets = std::vector<BucketId>{owned_by_1, owned_by_0, owned_by_1};
  const auto both = scatter.Run(sql, {fmt::format("{{{},{}}}", ToInt(owned_by_0), ToInt(owned_by_1))}, options);
  ASSERT_EQ(both.shards.size(), 2u);
  // With `shards`: only those of them.
  options.shards = std::vector<ShardId>{ShardId{1}};
  const auto only1 = scatter.Run(sql, {"{}"}, options);
  ASSERT_EQ(only1.shards.size(), 1u);
  EXPECT_EQ(only1.shards[0].shard, ShardId{1});
  options.shards.reset();
  options.buckets = std::vector<BucketId>{};
  EXPECT_TRUE(scatter.Run(sql, {"{}"}, options).shards.empty());

  // A newer directory gives shard 1 the bucket: the very next scatter goes
  // there (and shard 1, which does not own it, refuses it as stale).
  resolver->PublishDirectory(original->WithBucketMoved(owned_by_0, ShardId{1}));
  options.buckets = std::vector<BucketId>{owned_by_0};
  try {
    (void)scatter.Run(sql, {"{}"}, options);
    ADD_FAILURE() << "shard 1 accepted bucket " << owned_by_0 << ", which it does not own";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_TRUE(e.failures()[0].stale_directory) << e.what();
  }
}

TEST_F(ScatterPg, ParametersIncludingNullAreSentAsParameters) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  const std::string sql =
      "SELECT customer_id + $1::int, $2::text IS NULL, coalesce($2::text, 'was null'), $3::text "
      "FROM customers WHERE customer_id <= $4::int";
  const SqlParams params{"1000", std::nullopt, "O'Reilly; DROP TABLE customers; --", "20"};
  auto result = scatter.Run(sql, params);
  EXPECT_EQ(Gathered(result), OnReference(cluster_->ReferenceDsn(), sql, params));
  ASSERT_EQ(result.TotalRows(), 20u);
  for (const auto& shard : result.shards) {
    for (const auto& row : shard.rows) {
      EXPECT_TRUE(row[1].as<bool>());
      EXPECT_EQ(row[2].as<std::string>(), "was null");
      EXPECT_EQ(row[3].as<std::string>(), "O'Reilly; DROP TABLE customers; --");
    }
  }
  // A NULL compared with = matches nothing, on every shard.
  auto none = scatter.Run("SELECT 1 FROM customers WHERE customer_id = $1::int", {std::nullopt});
  EXPECT_EQ(none.TotalRows(), 0u);
  EXPECT_EQ(none.shards.size(), 2u);
}

TEST_F(ScatterPg, RunPerShardSendsEachShardItsOwnStatement) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  std::vector<std::pair<ShardId, ScatterGather::Statement>> statements;
  statements.push_back({ShardId{1}, {"SELECT count(*) FROM customers WHERE customer_id > $1::int", {"100"}}});
  statements.push_back({ShardId{0}, {"SELECT count(*) FROM customers WHERE customer_id <= $1::int", {"100"}}});
  auto result = scatter.RunPerShard(statements);
  ASSERT_EQ(result.shards.size(), 2u);
  EXPECT_EQ(result.shards[0].shard, ShardId{0});  // shard order, whatever the input order
  const auto above =
      OnReference(cluster_->ReferenceDsn(), "SELECT count(*) FROM customers WHERE customer_id > 100 AND bucket >= 32");
  const auto below =
      OnReference(cluster_->ReferenceDsn(), "SELECT count(*) FROM customers WHERE customer_id <= 100 AND bucket < 32");
  EXPECT_EQ(ToRows(result.shards[0].rows), below);
  EXPECT_EQ(ToRows(result.shards[1].rows), above);
}

TEST_F(ScatterPg, SlowShardIsCutAtTheDeadlineAndNamed) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  const std::string sql = "SELECT shard, pg_sleep(sleep_s) IS NULL FROM scatter_knob";
  ScatterOptions options;
  options.label = "slow-probe";
  const auto start = Clock::now();
  options.deadline = start + 500ms;
  try {
    (void)scatter.Run(sql, {}, options);
    FAIL() << "a 5 s statement finished within a 500 ms deadline";
  } catch (const ScatterError& e) {
    const auto took = Clock::now() - start;
    // Returned by the deadline plus a slack, nowhere near the 5 s sleep.
    EXPECT_LT(took, 500ms + 1500ms);
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_NE(std::string(e.what()).find("shard 1 (shard1)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("slow-probe"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("password=bookstore"), std::string::npos) << e.what();
  }

  // The server stopped the statement too (statement_timeout / cancel).
  EXPECT_EQ(ShardSleeps(), 0);

  // Partial: shard 0's rows and a warning naming shard 1.
  options.allow_partial = true;
  const auto start2 = Clock::now();
  options.deadline = start2 + 500ms;
  auto result = scatter.Run(sql, {}, options);
  EXPECT_LT(Clock::now() - start2, 500ms + 1500ms);
  ASSERT_EQ(result.shards.size(), 1u);
  EXPECT_EQ(result.shards[0].shard, ShardId{0});
  ASSERT_EQ(result.shards[0].rows.size(), 1u);
  EXPECT_EQ(result.shards[0].rows[0][0].as<int>(), 0);
  ASSERT_EQ(result.failures.size(), 1u);
  EXPECT_EQ(result.failures[0].shard, ShardId{1});
  ASSERT_TRUE(result.warning);
  EXPECT_NE(result.warning->find("shard 1 missing"), std::string::npos) << *result.warning;
  EXPECT_NE(result.warning->find("shard 1 (shard1)"), std::string::npos) << *result.warning;

  // Without allow_partial the slow shard fails the whole scatter, by the
  // deadline.
  options.allow_partial = false;
  const auto start3 = Clock::now();
  options.deadline = start3 + 500ms;
  try {
    (void)scatter.Run(sql, {}, options);
    FAIL() << "a 5 s statement finished within a 500 ms deadline";
  } catch (const ScatterError& e) {
    EXPECT_LT(Clock::now() - start3, 500ms + 1500ms);
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_NE(std::string(e.what()).find("shard 1 (shard1)"), std::string::npos) << e.what();
  }

  // The pools are healthy afterwards: the next scatter answers fully.
  auto after = scatter.Run("SELECT count(*) FROM customers");
  EXPECT_EQ(after.shards.size(), 2u);
  const auto stats = scatter.Stats();
  EXPECT_EQ(stats.failed, 2u);
  EXPECT_EQ(stats.partial, 1u);
  EXPECT_EQ(stats.shard_failures, 3u);
  EXPECT_EQ(ShardSleeps(), 0);
}

TEST_F(ScatterPg, ADeadShardIsNamedWithinTheConnectTimeout) {
  auto resolver = ResolverWithDeadShard1();
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  const auto start = Clock::now();
  options.deadline = start + 10s;
  try {
    (void)scatter.Run("SELECT count(*) FROM customers", {}, options);
    FAIL() << "shard 1 is down";
  } catch (const ScatterError& e) {
    // Connection refused comes back at once; connect_timeout (2 s) bounds it anyway.
    EXPECT_LT(Clock::now() - start, 2s + 1s);
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    const std::string message = e.what();
    EXPECT_NE(message.find("shard 1 (dead1)"), std::string::npos) << message;
    EXPECT_NE(message.find("port=1"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cr3t-pw"), std::string::npos) << message;
    EXPECT_EQ(e.failures()[0].cause.find("s3cr3t-pw"), std::string::npos);
  }
  options.allow_partial = true;
  auto result = scatter.Run("SELECT count(*) FROM customers", {}, options);
  ASSERT_EQ(result.shards.size(), 1u);
  EXPECT_EQ(result.shards[0].shard, ShardId{0});
  EXPECT_EQ(ToRows(result.shards[0].rows),
            OnReference(cluster_->ReferenceDsn(), "SELECT count(*) FROM customers WHERE bucket < 32"));
  ASSERT_TRUE(result.warning);
  EXPECT_NE(result.warning->find("shard 1 missing"), std::string::npos) << *result.warning;
  EXPECT_EQ(result.warning->find("s3cr3t-pw"), std::string::npos);

  // Only the dead shard asked: no partial answer is possible.
  options.shards = std::vector<ShardId>{ShardId{1}};
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, options), ScatterError);
}

// Shard 0 is the scratch shard 0, shard 1 a throwaway server of this test
// that can be stopped or frozen without disturbing the shared cluster.
struct WithTemporaryShard1 {
  test::TemporaryServer& server;
  std::unique_ptr<BucketShardResolver> resolver;

  WithTemporaryShard1(test::TemporaryServer& temporary, const Dsn& shard0_dsn) : server(temporary) {
    std::vector<std::unique_ptr<ConnectionPool>> pools;
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{0}, shard0_dsn));
    pools.push_back(std::make_unique<ConnectionPool>(ShardId{1}, server.Dsn()));
    resolver = std::make_unique<BucketShardResolver>(BucketDirectory::EvenSplit(2), std::move(pools),
                                                     std::vector<std::string>{"shard0", "temporary1"});
  }
  // Sleeps 30 s on shard 1 only.
  [[nodiscard]] SqlParams SleepParams() const { return {std::to_string(server.Port())}; }
  static constexpr const char* kSleepSql =
      "SELECT current_setting('port'), pg_sleep(CASE WHEN current_setting('port') = $1 THEN 30 ELSE 0 END) "
      "IS NULL";
  // The pid of the backend running the sleep on shard 1 (waits for it).
  [[nodiscard]] int SleepingBackend() const {
    pqxx::connection c{server.Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    for (int i = 0; i < 200; ++i) {
      auto rows = tx.exec(
          "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(CASE%' "
          "AND pid <> pg_backend_pid()");
      if (!rows.empty()) return rows[0][0].as<int>();
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
};

TEST_F(ScatterPg, AShardStoppedMidScatterIsNamedBeforeTheDeadline) {
  WithTemporaryShard1 shards{TemporaryShard(), cluster_->ShardDsn(0)};
  ScatterGather scatter{*shards.resolver};
  ScatterOptions options;
  options.directory_buckets = false;  // the temporary server is not a migrated shard
  const auto start = Clock::now();
  options.deadline = start + 20s;
  std::optional<std::string> message;
  std::vector<ScatterError::Failure> failures;
  std::thread caller([&] {
    try {
      (void)scatter.Run(WithTemporaryShard1::kSleepSql, shards.SleepParams(), options);
    } catch (const ScatterError& e) {
      message = e.what();
      failures = e.failures();
    }
  });
  ASSERT_GT(shards.SleepingBackend(), 0);
  shards.server.Stop();  // fast shutdown: the backend is terminated mid-statement
  caller.join();
  EXPECT_LT(Clock::now() - start, 20s);
  ASSERT_TRUE(message) << "the scatter succeeded although shard 1 stopped";
  ASSERT_EQ(failures.size(), 1u) << *message;
  EXPECT_EQ(failures[0].shard, ShardId{1});
  EXPECT_NE(message->find("shard 1 (temporary1)"), std::string::npos) << *message;

  // With partial results the other shard still answers while 1 is down...
  options.allow_partial = true;
  options.deadline = Clock::now() + 5s;
  auto partial = scatter.Run(WithTemporaryShard1::kSleepSql, shards.SleepParams(), options);
  ASSERT_EQ(partial.shards.size(), 1u);
  EXPECT_EQ(partial.shards[0].shard, ShardId{0});
  ASSERT_TRUE(partial.warning);
  EXPECT_NE(partial.warning->find("shard 1 missing"), std::string::npos) << *partial.warning;

  // ...and once it is back, the pool reconnects and the scatter is whole again.
  shards.server.Start();
  options.allow_partial = false;
  auto whole = scatter.Run("SELECT 1", {}, options);
  EXPECT_EQ(whole.shards.size(), 2u);
}

TEST_F(ScatterPg, AFrozenShardDoesNotHoldTheCallerPastTheDeadline) {
  WithTemporaryShard1 shards{TemporaryShard(), cluster_->ShardDsn(0)};
  int frozen = -1;
  {
    ScatterGather scatter{*shards.resolver};
    ScatterOptions options;
    options.directory_buckets = false;  // the temporary server is not a migrated shard
    options.allow_partial = true;
    Clock::time_point start;
    std::optional<ScatterResult> result;
    std::thread caller([&] {
      start = Clock::now();
      options.deadline = start + 1500ms;
      result = scatter.Run(WithTemporaryShard1::kSleepSql, shards.SleepParams(), options);
    });
    frozen = shards.SleepingBackend();
    ASSERT_GT(frozen, 0);
    // A stopped backend neither honours statement_timeout nor a cancel
    // request: only the caller's own deadline can bring it back.
    ASSERT_EQ(::kill(frozen, SIGSTOP), 0);
    caller.join();
    const auto took = Clock::now() - start;
    ::kill(frozen, SIGCONT);  // before any assertion can return early
    EXPECT_LT(took, 1500ms + 1000ms);
    ASSERT_TRUE(result);
    ASSERT_EQ(result->shards.size(), 1u);
    EXPECT_EQ(result->shards[0].shard, ShardId{0});
    ASSERT_EQ(result->failures.size(), 1u);
    EXPECT_EQ(result->failures[0].shard, ShardId{1});
    ASSERT_TRUE(result->warning);
    EXPECT_NE(result->warning->find("shard 1 (temporary1)"), std::string::npos) << *result->warning;
    EXPECT_NE(result->failures[0].cause.find("no answer within the deadline"), std::string::npos)
        << result->failures[0].cause;
    // The destructor waits for the thawed statement to be cut by the server.
  }
  // The thawed backend was cancelled and its connection discarded, not reused.
  pqxx::connection c{shards.server.Dsn().Reveal()};
  pqxx::nontransaction tx{c};
  int running = -1;
  for (int i = 0; i < 100 && running != 0; ++i) {
    running = tx.exec1(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(CASE%' "
                    "AND state = 'active' AND pid <> pg_backend_pid()")[0]
                  .as<int>();
    if (running != 0) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(shards.resolver->Pool(ShardId{1}).Stats().idle, 0);
}

TEST_F(ScatterPg, ConcurrentScattersOverPoolsOfOneDoNotDeadlock) {
  PoolOptions tiny;
  tiny.max_size = 1;
  tiny.max_waiters = 64;
  auto resolver = cluster_->MakeResolver(tiny);
  // Two independent scatter engines on the same pools, each driven by
  // several threads: every scatter needs the single connection of both pools.
  ScatterGather first{*resolver, 4};
  ScatterGather second{*resolver, 4};
  const auto expected =
      OnReference(cluster_->ReferenceDsn(), "SELECT count(*) FROM customers WHERE customer_id <= 150");
  constexpr int kThreads = 8;
  constexpr int kPerThread = 15;
  std::atomic<int> ok{0};
  std::atomic<int> wrong{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ScatterGather& engine = (t % 2 == 0) ? first : second;
      for (int i = 0; i < kPerThread; ++i) {
        ScatterOptions options;
        options.deadline = Clock::now() + 60s;
        try {
          auto r = engine.Run(
              "SELECT count(*) FROM customers WHERE customer_id <= $1::int AND "
              "(SELECT pg_sleep(0.002)) IS NOT NULL",
              {"150"}, options);
          long long total = 0;
          for (const auto& s : r.shards) total += s.rows[0][0].as<long long>();
          if (r.shards.size() == 2 && std::to_string(total) == *expected[0][0]) {
            ++ok;
          } else {
            ++wrong;
          }
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(t)] = e.what();
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  EXPECT_EQ(wrong.load(), 0);
  const auto a = first.Stats();
  const auto b = second.Stats();
  EXPECT_EQ(a.scatters + b.scatters, static_cast<std::uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(a.shard_requests + b.shard_requests, static_cast<std::uint64_t>(2 * kThreads * kPerThread));
  EXPECT_EQ(resolver->Pool(ShardId{0}).Stats().in_use, 0);
  EXPECT_EQ(resolver->Pool(ShardId{1}).Stats().in_use, 0);
  EXPECT_LE(resolver->Pool(ShardId{0}).Stats().connects, 1u);
}

TEST_F(ScatterPg, SessionsAndScattersOverPoolsOfOneDoNotDeadlock) {
  // Sessions hold both pools' single connection across statements while
  // plain scatters queue for them on few worker threads.
  PoolOptions tiny;
  tiny.max_size = 1;
  tiny.max_waiters = 64;
  auto resolver = cluster_->MakeResolver(tiny);
  ScatterGather engine{*resolver, 2};
  std::atomic<int> ok{0};
  std::vector<std::string> errors(6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        try {
          if (t % 2 == 0) {
            SessionOptions options;
            options.deadline = Clock::now() + 60s;
            ScatterSession session{engine, options};
            const auto first = session.Run("SELECT txid_current_snapshot()::text, pg_sleep(0.002)::text");
            const auto second = session.Run("SELECT txid_current_snapshot()::text, ''");
            bool same = first.shards.size() == 2 && second.shards.size() == 2;
            for (std::size_t s = 0; same && s < 2; ++s) {
              same = std::string(first.shards[s].rows[0][0].c_str()) == second.shards[s].rows[0][0].c_str();
            }
            if (same) ++ok;
          } else {
            ScatterOptions options;
            options.deadline = Clock::now() + 60s;
            const auto r = engine.Run("SELECT pg_sleep(0.002)", {}, options);
            if (r.shards.size() == 2) ++ok;
          }
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(t)] = e.what();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_EQ(ok.load(), 6 * 8);
}

TEST_F(ScatterPg, ASessionSeesOneSnapshotPerShardAndIsReadOnly) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather engine{*resolver};
  for (int s = 0; s < 2; ++s) cluster_->ExecOnShard(s, "CREATE TABLE IF NOT EXISTS session_probe (v int)");
  {
    SessionOptions options;
    options.setup = {"CREATE TEMP TABLE carried (v int) ON COMMIT DROP"};
    ScatterSession session{engine, options};
    const auto before = session.Run("SELECT count(*) FROM session_probe");
    for (int s = 0; s < 2; ++s) cluster_->ExecOnShard(s, "INSERT INTO session_probe VALUES (1)");
    const auto after = session.Run("SELECT count(*) FROM session_probe");
    ASSERT_EQ(after.shards.size(), 2u);
    for (std::size_t s = 0; s < 2; ++s) {
      EXPECT_EQ(std::string(before.shards[s].rows[0][0].c_str()), after.shards[s].rows[0][0].c_str());
    }
    // The temporary table carries rows from one fan-out to the next.
    (void)session.Run("INSERT INTO carried VALUES (7)");
    const auto carried = session.Run("SELECT sum(v) FROM carried");
    EXPECT_EQ(std::string(carried.shards[0].rows[0][0].c_str()), "7");
    // Read-only for everything else; the failure ends the session.
    EXPECT_THROW((void)session.Run("INSERT INTO session_probe VALUES (2)"), ScatterError);
    EXPECT_THROW((void)session.Run("SELECT 1"), Error);
  }
  // The session's connections come back once its background COMMITs ran.
  const auto give_up = Clock::now() + 10s;
  while (resolver->Pool(ShardId{0}).Stats().in_use + resolver->Pool(ShardId{1}).Stats().in_use > 0 &&
         Clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(resolver->Pool(ShardId{0}).Stats().in_use + resolver->Pool(ShardId{1}).Stats().in_use, 0);
  for (int s = 0; s < 2; ++s) cluster_->ExecOnShard(s, "DROP TABLE session_probe");
}

TEST_F(ScatterPg, ASessionSendsFollowUpStatementsInTheSameRoundTrip) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather engine{*resolver};
  ScatterSession session{engine};
  // A cursor declared with a parameter, and its first rows, in one fan-out.
  std::vector<std::pair<ShardId, ScatterGather::Statement>> declare;
  for (int s = 0; s < 2; ++s) {
    declare.emplace_back(ShardId{s}, ScatterGather::Statement{
                                         "DECLARE c NO SCROLL CURSOR FOR SELECT g FROM generate_series(1, $1::int) g",
                                         SqlParams{std::to_string(10 + s)}});
  }
  const auto first = session.RunPerShardThen(declare, {"FETCH FORWARD 3 FROM c"});
  ASSERT_EQ(first.shards.size(), 2u);
  for (const auto& shard : first.shards) {
    ASSERT_EQ(shard.rows.size(), 3u) << shard.shard;
    EXPECT_EQ(std::string(shard.rows[0][0].c_str()), "1");
  }
  // Later fan-outs go on reading it.
  const auto rest = session.Run("FETCH ALL FROM c");
  ASSERT_EQ(rest.shards.size(), 2u);
  EXPECT_EQ(rest.shards[0].rows.size(), 7u);
  EXPECT_EQ(rest.shards[1].rows.size(), 8u);
  EXPECT_EQ(std::string(rest.shards[1].rows[0][0].c_str()), "4");
  // A failing follow-up fails the fan-out with its SQLSTATE, and the session.
  std::vector<std::pair<ShardId, ScatterGather::Statement>> again;
  again.emplace_back(ShardId{1}, ScatterGather::Statement{"SELECT 1", {}});
  try {
    (void)session.RunPerShardThen(again, {"FETCH 1 FROM no_such_cursor"});
    ADD_FAILURE() << "a FETCH from a cursor that does not exist succeeded";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1u);
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_EQ(e.failures()[0].sqlstate, "34000");  // invalid_cursor_name
  }
  EXPECT_THROW((void)session.Run("SELECT 1"), Error);
}

// A session's transaction begins in each shard's first pipeline, whichever
// fan-out that is; a fan-out naming a shard outside the session is refused
// before anything is sent.
TEST_F(ScatterPg, ASessionBeginsEachShardWithItsFirstStatement) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather engine{*resolver};
  const std::string probe =
      "SELECT current_setting('transaction_isolation') || ' ' || current_setting('transaction_read_only')";
  const auto on = [&](std::initializer_list<int> shards) {
    std::vector<std::pair<ShardId, ScatterGather::Statement>> out;
    for (int s : shards) out.emplace_back(ShardId{s}, ScatterGather::Statement{probe, {}});
    return out;
  };
  {
    ScatterSession session{engine};
    const auto first = session.RunPerShard(on({1}));
    ASSERT_EQ(first.shards.size(), 1u);
    EXPECT_EQ(std::string(first.shards[0].rows[0][0].c_str()), "repeatable read on");
    const auto all = session.Run(probe);
    ASSERT_EQ(all.shards.size(), 2u);
    for (const auto& shard : all.shards) {
      EXPECT_EQ(std::string(shard.rows[0][0].c_str()), "repeatable read on") << shard.shard;
    }
  }
  {
    SessionOptions options;
    options.shards = std::vector<ShardId>{ShardId{0}};
    ScatterSession session{engine, options};
    EXPECT_THROW((void)session.RunPerShard(on({0, 1})), Error);  // shard 1 is not in the session
    const auto first = session.Run(probe);
    ASSERT_EQ(first.shards.size(), 1u);
    EXPECT_EQ(std::string(first.shards[0].rows[0][0].c_str()), "repeatable read on");
  }
}

// Finish commits every shard in one round trip before it returns: the
// connections are idle in their pools, so the next session or scatter
// reuses them instead of opening more.
TEST_F(ScatterPg, FinishGivesTheConnectionsBackIdle) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather engine{*resolver};
  const auto in_use = [&] {
    return resolver->Pool(ShardId{0}).Stats().in_use + resolver->Pool(ShardId{1}).Stats().in_use;
  };
  const auto connects = [&] {
    return resolver->Pool(ShardId{0}).Stats().connects + resolver->Pool(ShardId{1}).Stats().connects;
  };
  (void)engine.Run("SELECT 1");
  const auto opened = connects();
  for (int round = 0; round < 5; ++round) {
    ScatterSession session{engine};
    (void)session.Run("SELECT 1");
    session.Finish();
    EXPECT_EQ(in_use(), 0u) << "round " << round;
    const auto after = engine.Run("SELECT txid_current_if_assigned() IS NULL");
    for (const auto& shard : after.shards) EXPECT_EQ(std::string(shard.rows[0][0].c_str()), "t");
  }
  EXPECT_EQ(connects(), opened);  // the same connections throughout
}

// A session's statements are driven from the caller's thread: its deadline
// still bounds them, the session fails, and the next scatter gets clean
// connections.
TEST_F(ScatterPg, ASessionStatementIsCutAtTheSessionDeadline) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather engine{*resolver};
  SessionOptions options;
  options.deadline = Clock::now() + 1500ms;
  {
    ScatterSession session{engine, options};
    const auto start = Clock::now();
    EXPECT_THROW((void)session.Run("SELECT pg_sleep(5)"), ScatterError);
    EXPECT_LT(Clock::now() - start, 4s);
    EXPECT_THROW((void)session.Run("SELECT 1"), Error);
  }
  const auto again = engine.Run("SELECT 1");
  EXPECT_EQ(again.shards.size(), 2u);
  EXPECT_TRUE(again.failures.empty());
}

TEST_F(ScatterPg, StatisticsCountCrossShardQueries) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  for (int i = 0; i < 3; ++i) (void)scatter.Run("SELECT customer_id FROM customers WHERE customer_id <= 10");
  ScatterOptions one;
  one.shards = std::vector<ShardId>{ShardId{0}};
  (void)scatter.Run("SELECT 1", {}, one);
  EXPECT_THROW((void)scatter.Run("SELECT * FROM no_such_table"), ScatterError);
  const auto stats = scatter.Stats();
  EXPECT_EQ(stats.scatters, 4u);  // three good, one failed
  EXPECT_EQ(stats.single_shard, 1u);
  EXPECT_EQ(stats.shard_requests, 4u * 2u + 1u);
  EXPECT_EQ(stats.max_fanout, 2u);
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(stats.partial, 0u);
  EXPECT_EQ(stats.shard_failures, 2u);
  EXPECT_EQ(stats.rows, 3u * 10u + 1u);
  EXPECT_GT(stats.bytes, 0u);
  EXPECT_GT(stats.total_slowest.count(), 0);
  EXPECT_GE(stats.total_slowest, stats.max_slowest);
}

TEST_F(ScatterPg, SqlErrorsNameTheShardAndTheSqlState) {
  cluster_->ExecOnShard(0, "CREATE TABLE only_on_shard0 (x int); INSERT INTO only_on_shard0 VALUES (7)");
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  try {
    (void)scatter.Run("SELECT x FROM only_on_shard0");
    FAIL();
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1u);
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    EXPECT_NE(e.failures()[0].cause.find("42P01"), std::string::npos) << e.failures()[0].cause;
  }
  ScatterOptions partial;
  partial.allow_partial = true;
  auto result = scatter.Run("SELECT x FROM only_on_shard0", {}, partial);
  ASSERT_EQ(result.shards.size(), 1u);
  EXPECT_EQ(result.shards[0].rows[0][0].as<int>(), 7);
  // The failed transaction was rolled back and the connection reused.
  EXPECT_EQ(resolver->Pool(ShardId{1}).Stats().discarded_in_transaction, 0u);
  EXPECT_EQ(resolver->Pool(ShardId{1}).Stats().broken, 0u);
}

TEST_F(ScatterPg, StatementsAreReadOnlyUnlessAskedOtherwise) {
  cluster_->ExecOnShard(0, "CREATE TABLE scatter_writes (x int)");
  cluster_->ExecOnShard(1, "CREATE TABLE scatter_writes (x int)");
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  try {
    (void)scatter.Run("INSERT INTO scatter_writes VALUES ($1::int)", {"1"});
    FAIL();
  } catch (const ScatterError& e) {
    EXPECT_EQ(e.failures().size(), 2u);
    EXPECT_NE(e.failures()[0].cause.find("25006"), std::string::npos) << e.failures()[0].cause;
    EXPECT_NE(e.failures()[0].cause.find("read_only"), std::string::npos) << e.failures()[0].cause;
  }
  ScatterOptions writes;
  writes.read_only = false;
  (void)scatter.Run("INSERT INTO scatter_writes VALUES ($1::int)", {"2"}, writes);
  auto rows = scatter.Run("SELECT x FROM scatter_writes");
  ASSERT_EQ(rows.shards.size(), 2u);
  for (const auto& s : rows.shards) {
    ASSERT_EQ(s.rows.size(), 1u);
    EXPECT_EQ(s.rows[0][0].as<int>(), 2);
  }
}

// Each shard's BEGIN, timeout, statement and COMMIT travel together: a
// failing statement on one shard gives its SQLSTATE, and the connection
// (the same backend, a pool of one) is rolled back and reused, not dropped.
TEST_F(ScatterPg, AStatementFailingInsideTheTransactionLeavesTheConnectionReusable) {
  PoolOptions one;
  one.max_size = 1;
  auto resolver = cluster_->MakeResolver(one);
  ScatterGather scatter{*resolver};
  const std::string pid_sql = "SELECT pg_backend_pid()";
  const auto before = scatter.Run(pid_sql);
  ASSERT_EQ(before.shards.size(), 2u);
  // scatter_knob holds shard 0's row on shard 0 and shard 1's on shard 1.
  const std::string divide =
      "SELECT count(*) / (SELECT count(*) FROM scatter_knob WHERE shard = $1::int) FROM customers";
  for (int round = 0; round < 3; ++round) {
    try {
      (void)scatter.Run(divide, {"0"});
      FAIL() << "a division by zero on shard 1 went unnoticed";
    } catch (const ScatterError& e) {
      ASSERT_EQ(e.failures().size(), 1u) << e.what();
      EXPECT_EQ(e.failures()[0].shard, ShardId{1});
      EXPECT_EQ(e.failures()[0].sqlstate, "22012") << e.failures()[0].cause;
      EXPECT_NE(e.failures()[0].cause.find("SQLSTATE 22012"), std::string::npos) << e.failures()[0].cause;
      EXPECT_NE(e.failures()[0].cause.find("division by zero"), std::string::npos) << e.failures()[0].cause;
    }
  }
  const auto after = scatter.Run(pid_sql);
  ASSERT_EQ(after.shards.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(std::string(after.shards[s].rows[0][0].c_str()), before.shards[s].rows[0][0].c_str());
    const auto stats = resolver->Pool(ShardId{static_cast<int>(s)}).Stats();
    EXPECT_EQ(stats.connects, 1u);
    EXPECT_EQ(stats.discarded_in_transaction, 0u);
    EXPECT_EQ(stats.broken, 0u);
  }
  // Back in the pool idle, outside any transaction, with the timeout gone.
  auto lease = resolver->Pool(ShardId{1}).Acquire();
  pqxx::nontransaction tx{lease.Connection()};
  EXPECT_EQ(std::string(tx.exec1("SHOW statement_timeout")[0].c_str()), "0");
  EXPECT_EQ(std::string(tx.exec1("SHOW transaction_read_only")[0].c_str()), "off");
  EXPECT_EQ(std::string(tx.exec1("SELECT count(*) / (SELECT count(*) FROM scatter_knob WHERE shard = 1) "
                                 "FROM scatter_knob")[0]
                            .c_str()),
            "1");
}

// The statement sees the transaction it was sent with: read-only, with the
// time left to the deadline as its statement_timeout; neither outlives it.
TEST_F(ScatterPg, TheStatementRunsReadOnlyWithTheDeadlineAsItsTimeout) {
  PoolOptions one;
  one.max_size = 1;
  auto resolver = cluster_->MakeResolver(one);
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  options.deadline = Clock::now() + 60s;
  const auto result = scatter.Run(
      "SELECT current_setting('transaction_read_only'), "
      "extract(epoch FROM current_setting('statement_timeout')::interval), "
      "pg_current_xact_id_if_assigned() IS NULL, $1::text",
      {"with a parameter"}, options);
  ASSERT_EQ(result.shards.size(), 2u);
  for (const auto& shard : result.shards) {
    ASSERT_EQ(shard.rows.size(), 1u);
    EXPECT_EQ(std::string(shard.rows[0][0].c_str()), "on");
    const double timeout_s = shard.rows[0][1].as<double>();
    EXPECT_GT(timeout_s, 0.0);
    EXPECT_LE(timeout_s, 60.0);
    EXPECT_EQ(std::string(shard.rows[0][2].c_str()), "t");
    EXPECT_EQ(std::string(shard.rows[0][3].c_str()), "with a parameter");
  }
  // Read-only holds: a write fails with 25006 on every shard, and the
  // connections are reused afterwards.
  try {
    (void)scatter.Run("UPDATE scatter_knob SET sleep_s = sleep_s");
    FAIL() << "a write ran in a read-only scatter";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 2u) << e.what();
    for (const auto& f : e.failures()) EXPECT_EQ(f.sqlstate, "25006") << f.cause;
  }
  // The timeout cuts a statement that runs past the deadline (57014, by the
  // server's statement_timeout or the cancel sent at the deadline).
  options.deadline = Clock::now() + 300ms;
  try {
    (void)scatter.Run("SELECT pg_sleep(sleep_s) FROM scatter_knob", {}, options);
    FAIL() << "a 5 s statement finished within a 300 ms deadline";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 1u) << e.what();
    EXPECT_EQ(e.failures()[0].shard, ShardId{1});
    // On a loaded machine the report may miss the short grace after the
    // deadline; then the cause says so instead of carrying a SQLSTATE.
    if (e.failures()[0].cause.find("no answer within the deadline") == std::string::npos) {
      EXPECT_EQ(e.failures()[0].sqlstate, "57014") << e.failures()[0].cause;
    }
  }
  // Nothing of either transaction stays on the connections.
  for (const ShardId s : FirstShards(2)) {
    auto lease = resolver->Pool(s).Acquire(Clock::now() + 10s);
    pqxx::nontransaction tx{lease.Connection()};
    EXPECT_EQ(std::string(tx.exec1("SHOW statement_timeout")[0].c_str()), "0");
    EXPECT_EQ(std::string(tx.exec1("SHOW transaction_read_only")[0].c_str()), "off");
  }
  EXPECT_EQ(scatter.Run("SELECT 1").shards.size(), 2u);
}

TEST_F(ScatterPg, AnExpiredDeadlineFailsEveryShardAtOnce) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  options.deadline = Clock::now() - 1ms;
  try {
    (void)scatter.Run("SELECT 1", {}, options);
    FAIL();
  } catch (const ScatterError& e) {
    EXPECT_EQ(e.failures().size(), 2u) << e.what();
  }
}

TEST_F(ScatterPg, OptionsAreValidated) {
  auto resolver = cluster_->MakeResolver();
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  options.shards = std::vector<ShardId>{ShardId{0}, ShardId{2}};
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, options), UnknownShard);
  options.shards = std::vector<ShardId>{ShardId{1}, ShardId{1}};
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, options), Error);
  options.shards = std::vector<ShardId>{};
  auto empty = scatter.Run("SELECT 1", {}, options);
  EXPECT_TRUE(empty.shards.empty());
  EXPECT_TRUE(empty.failures.empty());
  // A deadline "never" is capped, not overflowed.
  ScatterOptions forever;
  forever.deadline = Clock::time_point::max();
  EXPECT_EQ(scatter.Run("SELECT 1", {}, forever).shards.size(), 2u);
  // Two statements in one string are refused by the extended protocol.
  EXPECT_THROW((void)scatter.Run("SELECT 1; SELECT 2"), ScatterError);
}

}  // namespace
}  // namespace shardkit
