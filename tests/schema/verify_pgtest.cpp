// shardctl verify against real servers: three shards (an uneven directory)
// on the local cluster's two shard servers. A clean cluster passes; each
// planted problem is found and named: a misplaced row, an orphan bucket, a
// differing books row, a wrong bucket value, a bucket short of rows, a
// server behind on migrations, a column changed by hand, a server that does
// not answer.
#include "shardkit/schema/verify.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::ScratchCluster;
using test::ScratchOptions;

constexpr int kCustomers = 600;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The Bookstore rows of the customers whose bucket is in `buckets` (the
// reference server gets all of them), and every book.
std::string DataSql(const std::vector<BucketId>& buckets) {
  std::string list;
  for (const BucketId b : buckets) list += (list.empty() ? "" : ",") + std::to_string(ToInt(b));
  const std::string where = fmt::format("bucket_of(g) = ANY ('{{{}}}'::int[])", list);
  return fmt::format(
      "INSERT INTO customers (customer_id, bucket, name, email, created_at) "
      "  SELECT g, bucket_of(g), 'c' || g, 'c' || g || '@example.com', '2026-01-01' FROM generate_series(1, {0}) g "
      "  WHERE {1};"
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
      "  SELECT g, bucket_of(g), g * 10 + k, timestamptz '2026-01-01' + g * interval '1 hour', 10 + k "
      "  FROM generate_series(1, {0}) g, generate_series(1, 2) k WHERE {1};"
      "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
      "  SELECT g, bucket_of(g), g * 10 + k, 1, 1 + g % 50, 1, 5.00 "
      "  FROM generate_series(1, {0}) g, generate_series(1, 2) k WHERE {1};",
      kCustomers, where);
}

constexpr const char* kBooks =
    "INSERT INTO books (book_id, title, category, price) "
    "SELECT b, 'book ' || b, 'category ' || b % 5, b % 40 + 0.99 FROM generate_series(1, 50) b";

class VerifyPg : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    cluster_ = std::make_unique<ScratchCluster>(fmt::format("verify_{}_pgtest", info->line()),
                                                ScratchOptions().Shards(3).Directory(test::UnevenSplit(3)));
    const BucketDirectory& directory = cluster_->Directory();
    std::vector<BucketId> all;
    for (const BucketId b : AllBuckets()) all.push_back(b);
    cluster_->ExecOnReference(DataSql(all));
    cluster_->ExecEverywhere(kBooks);
    for (const ShardId s : FirstShards(3)) cluster_->ExecOnShard(ToInt(s), DataSql(directory.BucketsOf(s)));
    options_.migrations = test::ClusterMigrations();
  }

  // The first customer (1..kCustomers) whose bucket `shard` owns, other than `except`.
  CustomerId CustomerOn(ShardId shard, std::vector<BucketId> except = {}) const {
    for (int id = 1; id <= kCustomers; ++id) {
      const CustomerId c{id};
      const BucketId b = BucketOf(c);
      if (cluster_->Directory().ShardOf(b) == shard && std::find(except.begin(), except.end(), b) == except.end()) {
        return c;
      }
    }
    ADD_FAILURE() << "no customer on shard " << shard;
    return CustomerId{0};
  }

  static std::vector<const VerifyFinding*> Of(const VerifyReport& report, FindingKind kind) {
    std::vector<const VerifyFinding*> out;
    for (const auto& f : report.findings) {
      if (f.kind == kind) out.push_back(&f);
    }
    return out;
  }

  static std::string All(const VerifyReport& report) {
    std::string text;
    for (const auto& f : report.findings) text += "\n  " + f.detail;
    return text;
  }

  std::unique_ptr<ScratchCluster> cluster_;
  VerifyOptions options_;
};

TEST_F(VerifyPg, ACleanClusterPassesAndIsCountedPerShardAndBucket) {
  const VerifyReport report = VerifyCluster(cluster_->Config(), options_);
  EXPECT_TRUE(report.Ok()) << All(report);
  EXPECT_EQ(report.shard_count, 3);
  EXPECT_EQ(report.directory_source, "catalog");
  EXPECT_EQ(report.sharded_tables,
            (std::vector<std::string>{"customers", "notification_log", "order_items", "order_tracking", "orders",
                                      "shardkit_jobs", "store_credit", "store_credit_transfers"}));
  EXPECT_EQ(report.schema_version, test::BookstoreMigrations().LatestVersion());
  ASSERT_EQ(report.servers.size(), 4U);  // three shards and the reference
  std::int64_t customers = 0;
  for (int s = 0; s < 3; ++s) {
    const ServerCounts& server = report.servers[static_cast<std::size_t>(s)];
    ASSERT_TRUE(server.reachable);
    ASSERT_EQ(server.tables.size(), report.sharded_tables.size());
    EXPECT_EQ(server.tables[0].table, "customers");
    customers += server.tables[0].rows;
    for (int b = 0; b < kBucketCount; ++b) {
      const bool owned = cluster_->Directory().ShardOf(BucketId{b}) == ShardId{s};
      if (!owned) {
        EXPECT_EQ(server.tables[0].by_bucket[static_cast<std::size_t>(b)], 0) << "shard" << s << " bucket " << b;
      }
    }
  }
  EXPECT_EQ(customers, kCustomers);
  const auto& reference_tables = report.servers[3].tables;
  const auto items = std::find_if(reference_tables.begin(), reference_tables.end(),
                                  [](const TableCounts& t) { return t.table == "order_items"; });
  ASSERT_NE(items, reference_tables.end());
  EXPECT_EQ(items->rows, 2 * kCustomers);  // the reference's order_items
}

TEST_F(VerifyPg, FindsAndNamesEachPlantedProblem) {
  const BucketDirectory& directory = cluster_->Directory();
  // 1. A row on the wrong shard only: an order of a shard-2 customer on shard 0.
  const CustomerId stray = CustomerOn(ShardId{2});
  // The shards' fence refuses such writes: plant them past it, as a hand
  // edit with the triggers disabled might.
  const auto unfenced = [](const std::string& sql) {
    return "BEGIN; ALTER TABLE orders DISABLE TRIGGER USER; ALTER TABLE order_items DISABLE TRIGGER USER; "
           "ALTER TABLE customers DISABLE TRIGGER USER; " +
           sql +
           "; ALTER TABLE orders ENABLE TRIGGER USER; ALTER TABLE order_items ENABLE TRIGGER USER; "
           "ALTER TABLE customers ENABLE TRIGGER USER; COMMIT";
  };
  cluster_->ExecOnShard(0, unfenced(fmt::format("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
                                                "VALUES ({}, {}, 999999, '2026-02-01', 1)",
                                                stray, BucketOf(stray))));
  // 2. A whole bucket of shard 1 copied onto shard 0: an orphan, as an interrupted move leaves it.
  const BucketId orphan = BucketOf(CustomerOn(ShardId{1}));
  cluster_->ExecOnShard(0, unfenced(DataSql({orphan})));
  // 3. One books row differs on shard 2.
  cluster_->ExecOnShard(2, "UPDATE books SET price = price + 1 WHERE book_id = 17");
  // 4. A wrong bucket value on shard 1 (past a dropped CHECK).
  const CustomerId wrong = CustomerOn(ShardId{1}, {orphan});
  const BucketId stored{(ToInt(BucketOf(wrong)) + 1) % kBucketCount};
  cluster_->ExecOnShard(1, "ALTER TABLE customers DROP CONSTRAINT customers_check");
  cluster_->ExecOnShard(1, fmt::format("UPDATE customers SET bucket = {} WHERE customer_id = {}", stored, wrong));
  // 5. An order lost on its owner (the reference still has it).
  const CustomerId short_one = CustomerOn(ShardId{2}, {BucketOf(stray)});
  cluster_->ExecOnShard(2, fmt::format("DELETE FROM orders WHERE customer_id = {} AND order_id = {}", short_one,
                                       ToInt(short_one) * 10 + 1));
  // 6. shard2 behind on migrations.
  cluster_->ExecOnShard(2, "DELETE FROM shardkit_migrations WHERE version = 2");
  // 7. A column changed by hand on shard 0.
  cluster_->ExecOnShard(0, "ALTER TABLE order_items ALTER COLUMN quantity TYPE bigint");

  const VerifyReport report = VerifyCluster(cluster_->Config(), options_);
  EXPECT_FALSE(report.Ok());

  const auto misplaced = Of(report, FindingKind::kMisplacedRows);
  ASSERT_EQ(misplaced.size(), 1U) << All(report);
  EXPECT_EQ(misplaced[0]->server, "shard0");
  EXPECT_EQ(misplaced[0]->table, "orders");
  EXPECT_EQ(misplaced[0]->bucket, BucketOf(stray));
  EXPECT_EQ(misplaced[0]->rows, 1);
  EXPECT_EQ(misplaced[0]->sample_key, fmt::format("(customer_id, order_id) = ({}, 999999)", stray));
  EXPECT_TRUE(Contains(misplaced[0]->detail, "shard2 lacks that row")) << misplaced[0]->detail;

  const auto orphans = Of(report, FindingKind::kOrphanBucket);
  ASSERT_EQ(orphans.size(), 3U) << All(report);  // customers, order_items, orders
  for (const auto* f : orphans) {
    EXPECT_EQ(f->server, "shard0");
    EXPECT_EQ(f->bucket, orphan);
    EXPECT_TRUE(Contains(f->detail, "shard1 has that row too")) << f->detail;
    EXPECT_FALSE(f->sample_key.empty());
  }
  const auto orphan_customers = orphans[0]->rows;
  EXPECT_GT(orphan_customers, 0);

  const auto books = Of(report, FindingKind::kReferenceDiffers);
  ASSERT_EQ(books.size(), 1U) << All(report);
  EXPECT_EQ(books[0]->server, "shard2");
  EXPECT_EQ(books[0]->table, "books");
  EXPECT_EQ(books[0]->rows, 1);
  EXPECT_EQ(books[0]->sample_key, "(book_id) = (17) differs");

  const auto wrong_bucket = Of(report, FindingKind::kWrongBucket);
  ASSERT_EQ(wrong_bucket.size(), 1U) << All(report);
  EXPECT_EQ(wrong_bucket[0]->server, "shard1");
  EXPECT_EQ(wrong_bucket[0]->table, "customers");
  EXPECT_EQ(wrong_bucket[0]->bucket, stored);
  EXPECT_EQ(wrong_bucket[0]->sample_key, fmt::format("(customer_id) = ({})", wrong));

  const auto counts = Of(report, FindingKind::kCountDiffers);
  ASSERT_EQ(counts.size(), 1U) << All(report);
  EXPECT_EQ(counts[0]->server, "shard2");
  EXPECT_EQ(counts[0]->table, "orders");
  EXPECT_EQ(counts[0]->bucket, BucketOf(short_one));
  EXPECT_EQ(counts[0]->rows, 1);

  const auto schema = Of(report, FindingKind::kSchemaVersion);
  ASSERT_EQ(schema.size(), 1U) << All(report);
  EXPECT_EQ(schema[0]->server, "shard2");
  EXPECT_TRUE(Contains(schema[0]->detail, "002")) << schema[0]->detail;

  const auto definition = Of(report, FindingKind::kTableDefinition);
  ASSERT_EQ(definition.size(), 1U) << All(report);
  EXPECT_EQ(definition[0]->server, "shard0");
  EXPECT_EQ(definition[0]->table, "order_items");
  EXPECT_TRUE(Contains(definition[0]->detail, "quantity bigint not null here, quantity integer not null on reference"))
      << definition[0]->detail;

  EXPECT_EQ(report.findings.size(), 1U + 3U + 1U + 1U + 1U + 1U + 1U) << All(report);
  (void)directory;
}

TEST_F(VerifyPg, AServerThatDoesNotAnswerIsAFindingWithoutItsPassword) {
  ClusterConfig config = cluster_->Config();
  config.shards[1].dsn = Dsn("host=127.0.0.1 port=1 dbname=x user=bookstore password=s3cret connect_timeout=2");
  const VerifyReport report = VerifyCluster(config, options_);
  EXPECT_FALSE(report.Ok());
  const auto down = Of(report, FindingKind::kUnreachable);
  ASSERT_EQ(down.size(), 1U) << All(report);
  EXPECT_EQ(down[0]->server, "shard1");
  for (const auto& f : report.findings) EXPECT_FALSE(Contains(f.detail, "s3cret")) << f.detail;
  // Its buckets' counts are not compared; the others still are, and pass.
  EXPECT_TRUE(Of(report, FindingKind::kCountDiffers).empty()) << All(report);
}

// The reference tables are the configuration's ([sql] reference_tables)
// unless the options name them: a schema without books verifies clean.
TEST_F(VerifyPg, ReferenceTablesComeFromTheConfiguration) {
  ClusterConfig config = cluster_->Config();
  config.reference_tables = {};
  const VerifyReport none = VerifyCluster(config, options_);
  EXPECT_TRUE(none.reference_tables.empty());
  EXPECT_TRUE(none.Ok()) << All(none);

  config.reference_tables = {"books", "price_list"};
  const VerifyReport two = VerifyCluster(config, options_);
  EXPECT_EQ(two.reference_tables, (std::vector<std::string>{"books", "price_list"}));
  const auto missing = Of(two, FindingKind::kMissingTable);
  ASSERT_FALSE(missing.empty()) << All(two);
  for (const auto* f : missing) EXPECT_EQ(f->table, "price_list") << f->detail;

  VerifyOptions named = options_;
  named.reference_tables = std::vector<std::string>{"books"};
  EXPECT_TRUE(VerifyCluster(config, named).Ok());
}

}  // namespace
}  // namespace shardkit
