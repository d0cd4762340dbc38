// The Bookstore lab against the real servers, at scale 0.01, in scratch
// databases of its own: every demo runs and must make its point, checked
// against the unsharded reference server.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>

#include "dataset.hpp"
#include "demos.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::lab {
namespace {

constexpr double kScale = 0.01;
constexpr std::uint64_t kSeed = 1;

std::string FailedChecks(const DemoResult& r) {
  std::string out;
  for (const auto& c : r.checks) {
    if (!c.ok) out += "  " + c.name + ": " + c.detail + "\n";
  }
  return out;
}

const Check* FindCheck(const DemoResult& r, const std::string& name) {
  for (const auto& c : r.checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

void ExpectCheckPassed(const DemoResult& r, const std::string& name) {
  const Check* c = FindCheck(r, name);
  ASSERT_NE(c, nullptr) << "demo " << r.name << " has no check " << name;
  EXPECT_TRUE(c->ok) << name << ": " << c->detail;
}

class LabTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = std::make_unique<test::ScratchCluster>("lab_pgtest");
    lab_ = std::make_unique<Lab>(cluster_->Config());
    data_ = std::make_unique<Dataset>(GenerateDataset({kScale, kSeed}));
    load_ = std::make_unique<LoadReport>(LoadDataset(*lab_, *data_, {ProgressMode::kNone}));
  }
  static void TearDownTestSuite() {
    load_.reset();
    data_.reset();
    lab_.reset();
    cluster_.reset();
  }

  static std::int64_t Count(pqxx::connection_base& c, const std::string& table) {
    pqxx::nontransaction tx{c};
    return tx.exec1("SELECT count(*) FROM " + tx.quote_name(table))[0].as<std::int64_t>();
  }
  static std::int64_t ShardCount(ShardId s, const std::string& table) {
    auto lease = lab_->Resolver().Pool(s).Acquire();
    return Count(*lease, table);
  }

  static std::unique_ptr<test::ScratchCluster> cluster_;
  static std::unique_ptr<Lab> lab_;
  static std::unique_ptr<Dataset> data_;
  static std::unique_ptr<LoadReport> load_;
};

std::unique_ptr<test::ScratchCluster> LabTest::cluster_;
std::unique_ptr<Lab> LabTest::lab_;
std::unique_ptr<Dataset> LabTest::data_;
std::unique_ptr<LoadReport> LabTest::load_;

// --- the data

TEST(LabDataset, IsDeterministicAndHasTheSeedShape) {
  const Dataset a = GenerateDataset({kScale, kSeed});
  const Dataset b = GenerateDataset({kScale, kSeed});
  ASSERT_EQ(a.orders.size(), b.orders.size());
  ASSERT_EQ(a.items.size(), b.items.size());
  for (std::size_t i = 0; i < a.orders.size(); ++i) {
    ASSERT_EQ(a.orders[i].order_id, b.orders[i].order_id);
    ASSERT_EQ(a.orders[i].customer_id, b.orders[i].customer_id);
    ASSERT_EQ(a.orders[i].ordered_at, b.orders[i].ordered_at);
    ASSERT_EQ(a.orders[i].total_cents, b.orders[i].total_cents);
  }
  // Exact per-year counts of the seed, scaled; the last 30 days too.
  std::map<int, std::int64_t> years;
  std::int64_t window = 0;
  std::map<CustomerId, int> per_customer;
  for (const auto& o : a.orders) {
    ++years[YearOf(o.ordered_at)];
    window += o.ordered_at >= kWindowStart && o.ordered_at < kLabNow ? 1 : 0;
    ++per_customer[o.customer_id];
    EXPECT_EQ(o.bucket, BucketOf(o.customer_id));
  }
  for (const auto& [year, orders] : kSeedYears) EXPECT_EQ(years[year], Scaled(orders, kScale)) << year;
  EXPECT_EQ(window, Scaled(kSeedLast30Days, kScale));
  for (CustomerId c : kSeedCustomers) EXPECT_EQ(per_customer[c], kSeedCustomerOrders) << c;
  std::set<std::int64_t> ids;
  for (const auto& o : a.orders) ids.insert(o.order_id);
  EXPECT_EQ(ids.size(), a.orders.size());
  // A different seed gives different data.
  const Dataset c = GenerateDataset({kScale, kSeed + 1});
  EXPECT_FALSE(c.orders.front().ordered_at == a.orders.front().ordered_at &&
               c.orders.back().customer_id == a.orders.back().customer_id && c.items.size() == a.items.size());
}

TEST(LabDataset, FormatsTimestampsAndMoney) {
  EXPECT_EQ(FormatTimestamp(kLabNow), "2026-11-14 00:00:00+00");
  EXPECT_EQ(FormatTimestamp(kWindowStart), "2026-10-15 00:00:00+00");
  EXPECT_EQ(FormatTimestamp(UtcDate(2024, 2, 29) + 3723), "2024-02-29 01:02:03+00");
  EXPECT_EQ(YearOf(UtcDate(2025, 12, 31) + 86399), 2025);
  EXPECT_EQ(YearOf(UtcDate(2026, 1, 1)), 2026);
  EXPECT_EQ(FormatCents(1299), "12.99");
  EXPECT_EQ(FormatCents(5), "0.05");
}

// --- loading

TEST_F(LabTest, LoadPutsEveryRowOnItsShardAndAllOnTheReference) {
  EXPECT_TRUE(DescribeLoad(*load_).Ok()) << FailedChecks(DescribeLoad(*load_));
  std::string why;
  EXPECT_TRUE(IsLoaded(*lab_, {kScale, kSeed}, &why)) << why;
  EXPECT_FALSE(IsLoaded(*lab_, {kScale * 2, kSeed}));
  for (const std::string table : {"customers", "orders", "order_items"}) {
    std::int64_t on_shards = 0;
    for (const ShardId s : FirstShards(lab_->ShardCount())) on_shards += ShardCount(s, table);
    EXPECT_EQ(on_shards, Count(lab_->Reference(), table)) << table;
  }
  EXPECT_EQ(Count(lab_->Reference(), "orders"), static_cast<std::int64_t>(data_->orders.size()));
  EXPECT_EQ(Count(lab_->Reference(), "order_items"), static_cast<std::int64_t>(data_->items.size()));
  for (const ShardId s : FirstShards(lab_->ShardCount())) {
    EXPECT_EQ(ShardCount(s, "books"), static_cast<std::int64_t>(data_->books.size()));
    // Every row is on the shard that owns its bucket.
    auto lease = lab_->Resolver().Pool(s).Acquire();
    pqxx::nontransaction tx{*lease};
    std::string mine = "{";
    for (BucketId b : lab_->Resolver().Directory()->BucketsOf(s))
      mine += (mine.size() > 1 ? "," : "") + std::to_string(ToInt(b));
    mine += "}";
    for (const std::string table : {"customers", "orders", "order_items"}) {
      const auto foreign =
          tx.exec_params1("SELECT count(*) FROM " + table + " WHERE NOT (bucket = ANY($1::int[]))", mine)[0].as<int>();
      EXPECT_EQ(foreign, 0) << table << " on shard " << s;
    }
  }
}

TEST_F(LabTest, ReloadReplacesTheDataCleanly) {
  const Dataset other = GenerateDataset({kScale, kSeed + 1});
  (void)LoadDataset(*lab_, other, {ProgressMode::kNone});
  EXPECT_TRUE(IsLoaded(*lab_, {kScale, kSeed + 1}));
  EXPECT_FALSE(IsLoaded(*lab_, {kScale, kSeed}));
  EXPECT_EQ(Count(lab_->Reference(), "orders"), static_cast<std::int64_t>(other.orders.size()));
  EXPECT_EQ(Count(lab_->Reference(), "order_items"), static_cast<std::int64_t>(other.items.size()));
  // Back to the suite's data; nothing of the other load is left.
  *load_ = LoadDataset(*lab_, *data_, {ProgressMode::kNone});
  EXPECT_TRUE(IsLoaded(*lab_, {kScale, kSeed}));
  EXPECT_EQ(Count(lab_->Reference(), "orders"), static_cast<std::int64_t>(data_->orders.size()));
  EXPECT_EQ(Count(lab_->Reference(), "order_items"), static_cast<std::int64_t>(data_->items.size()));
  std::int64_t shard_items = 0;
  for (const ShardId s : FirstShards(lab_->ShardCount())) shard_items += ShardCount(s, "order_items");
  EXPECT_EQ(shard_items, static_cast<std::int64_t>(data_->items.size()));
}

TEST_F(LabTest, FailedLoadLeavesThePreviousData) {
  // A dataset that every server refuses (a negative book price violates the
  // CHECK on books, which goes everywhere): each server's transaction rolls
  // back and its previous rows stay.
  Dataset broken = GenerateDataset({kScale, kSeed + 2});
  broken.books.back().price_cents = -100;
  EXPECT_THROW((void)LoadDataset(*lab_, broken, {ProgressMode::kNone}), Error);
  EXPECT_TRUE(IsLoaded(*lab_, {kScale, kSeed}));
  EXPECT_EQ(Count(lab_->Reference(), "orders"), static_cast<std::int64_t>(data_->orders.size()));
  std::int64_t shard_orders = 0;
  for (const ShardId s : FirstShards(lab_->ShardCount())) shard_orders += ShardCount(s, "orders");
  EXPECT_EQ(shard_orders, static_cast<std::int64_t>(data_->orders.size()));
}

// --- the demos

TEST_F(LabTest, RoutingPrintsTheSeedLines) {
  const DemoResult r = RunRouting(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  EXPECT_NE(r.text.find("customer 4242: bucket 44, shard 1, 10 orders ("), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("customer 4243: bucket 20, shard 0, 10 orders ("), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("customer 77777: bucket 53, shard 1, 10 orders ("), std::string::npos) << r.text;
  // A fresh service: the first query on each shard opens its connection,
  // 77777 (shard 1 again) is served from the pool.
  const auto& customers = r.figures["customers"];
  ASSERT_EQ(customers.size(), 3U);
  EXPECT_TRUE(customers[0]["first_connection"].get<bool>());
  EXPECT_TRUE(customers[1]["first_connection"].get<bool>());
  EXPECT_FALSE(customers[2]["first_connection"].get<bool>());
  EXPECT_NE(r.text.find("first connection to that shard"), std::string::npos);
  EXPECT_NE(r.text.find("pooled"), std::string::npos);
  for (const std::string id : {"4242", "4243", "77777"}) {
    ExpectCheckPassed(r, "routing." + id + ".reference");
    ExpectCheckPassed(r, "routing." + id + ".sql_twin");
  }
}

TEST_F(LabTest, ShardKeyCountsAddUpToTheReference) {
  const DemoResult r = RunShardKey(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  ExpectCheckPassed(r, "shard-key.shards_add_up_to_reference");
  ExpectCheckPassed(r, "shard-key.range_makes_a_hot_shard");
  EXPECT_EQ(r.figures["orders"].get<std::int64_t>(), static_cast<std::int64_t>(data_->orders.size()));
  EXPECT_EQ(r.figures["last_30_days"].get<std::int64_t>(), Scaled(kSeedLast30Days, kScale));
  // Independently: per shard and year, the shards' numbers add up to the
  // generated data's.
  std::map<int, std::int64_t> generated;
  for (const auto& o : data_->orders) ++generated[YearOf(o.ordered_at)];
  std::map<int, std::int64_t> summed;
  for (const auto& shard : r.figures["hash_by_customer"]) {
    for (const auto& y : shard["years"]) summed[y["year"].get<int>()] += y["orders"].get<std::int64_t>();
  }
  EXPECT_EQ(summed, generated);
  EXPECT_EQ(r.figures["hot_year"].get<int>(), 2026);
  EXPECT_DOUBLE_EQ(r.figures["hot_share"].get<double>(), 1.0);
  EXPECT_NE(r.text.find("== shard0\n year | orders | last_30_days\n------+--------+--------------\n"),
            std::string::npos)
      << r.text;
}

TEST_F(LabTest, IdentityCollidesAndShardkitIdsDoNot) {
  const DemoResult r = RunIds(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  EXPECT_NE(r.text.find("customer 4242 on shard 1: order_id 1000001\ncustomer 4243 on shard 0: order_id 1000001\n"),
            std::string::npos)
      << r.text;
  EXPECT_EQ(r.figures["identity"]["ids_used_twice"].get<int>(), r.figures["identity"]["bulk_per_shard"].get<int>());
  EXPECT_EQ(r.figures["snowflake"]["ids_used_twice"].get<int>(), 0);
  const auto& snow = r.figures["snowflake"]["orders"];
  EXPECT_NE(snow[0]["order_id"].get<std::int64_t>(), snow[1]["order_id"].get<std::int64_t>());
  ExpectCheckPassed(r, "ids.loaded_orders_unique");
}

TEST_F(LabTest, ShortcutTop10IsWrongWhileExactAndTputEqualTheReference) {
  const DemoResult r = RunTop10(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  ExpectCheckPassed(r, "top10.exact_equals_reference");
  ExpectCheckPassed(r, "top10.tput_equals_reference");
  ExpectCheckPassed(r, "top10.shortcut_differs");
  ExpectCheckPassed(r, "top10.plain_sql_equals_reference");
  ExpectCheckPassed(r, "top10.plain_sql_uses_topk");
  EXPECT_EQ(r.figures["exact"]["top"], r.figures["reference"]);
  EXPECT_EQ(r.figures["tput"]["top"], r.figures["reference"]);
  EXPECT_EQ(r.figures["shortcut"]["rows"].get<int>(), 20);
  EXPECT_NE(r.text.find("top-10 per shard: 20 rows transferred, "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("rows transferred from 2 shards, "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("(really "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("Execute used exact top-k: "), std::string::npos) << r.text;
  // Independently of the lab's own comparison: the exact list from the
  // generated rows.
  std::map<std::int64_t, std::int64_t> sold;
  for (const auto& o : data_->orders) {
    if (o.ordered_at < kWindowStart) continue;
    for (std::uint32_t k = o.first_item; k < o.first_item + o.item_count; ++k)
      sold[data_->items[k].book_id] += data_->items[k].quantity;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> ranked;
  for (const auto& [book, n] : sold) ranked.emplace_back(-n, book);
  std::sort(ranked.begin(), ranked.end());
  const auto& exact = r.figures["exact"]["top"];
  ASSERT_EQ(exact.size(), 10U);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(exact[i]["book_id"].get<std::int64_t>(), ranked[i].second) << "#" << i + 1;
    EXPECT_EQ(exact[i]["sold"].get<std::int64_t>(), -ranked[i].first) << "#" << i + 1;
  }
}

TEST_F(LabTest, CategoryAveragesEqualTheReference) {
  const DemoResult r = RunCategoryAvg(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  const auto& categories = r.figures["categories"];
  EXPECT_EQ(categories.size(), Categories().size());
  for (const auto& c : categories) {
    EXPECT_EQ(c["merged_avg"], c["reference_avg"]) << c.dump();
  }
}

TEST_F(LabTest, PercentilesAndDistinctBooksEqualTheReferenceInFewRounds) {
  const DemoResult r = RunPercentiles(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  const auto& queries = r.figures["queries"];
  ASSERT_EQ(queries.size(), 2U);
  for (const auto& q : queries) {
    EXPECT_TRUE(q["equal_to_reference"].get<bool>()) << q.dump();
    EXPECT_LE(q["rounds"].get<int>(), 4) << q.dump();
    // At the tests' scale (0.01) small groups come whole in round 1: no
    // more rows than a gather, plus one per shard (the value's type).
    EXPECT_LE(q["rows_shipped"].get<std::int64_t>(), q["rows_all_values"].get<std::int64_t>() + 2) << q.dump();
    EXPECT_TRUE(q.contains("approximate")) << q.dump();
  }
  // Every category, each median and p95 the reference's text.
  const auto& categories = queries[0]["rows"];
  EXPECT_EQ(categories.size(), Categories().size());
  for (const auto& c : categories) {
    EXPECT_EQ(c["median"], c["reference_median"]) << c.dump();
    EXPECT_EQ(c["p95"], c["reference_p95"]) << c.dump();
  }
  EXPECT_EQ(queries[1]["exact"], queries[1]["reference"]);
}

TEST_F(LabTest, ThirdShardMovesTheBucketsTheDirectoriesImply) {
  const DemoResult r = RunThirdShard(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  EXPECT_EQ(r.figures["buckets_moved"].get<int>(), 21);
  // The moved buckets are exactly those whose shard differs between the two
  // directories, and the new one is valid.
  const auto after = BucketDirectory::EvenSplit(2).WithShardAdded();
  std::vector<BucketId> moved;
  for (const BucketId b : AllBuckets()) {
    if (after.ShardOf(b) != BucketDirectory::EvenSplit(2).ShardOf(b)) moved.push_back(b);
  }
  EXPECT_EQ(r.figures["moved_buckets"].get<std::vector<BucketId>>(), moved);
  // Customers moved, measured, = customers of the generated data in those buckets.
  std::int64_t expected = 0;
  for (const auto& c : data_->customers) {
    expected += std::find(moved.begin(), moved.end(), c.bucket) != moved.end() ? 1 : 0;
  }
  EXPECT_EQ(r.figures["measured"]["customers"]["bucket_moves"].get<std::int64_t>(), expected);
  std::int64_t modulo = 0;
  for (const auto& c : data_->customers) modulo += ToInt(c.customer_id) % 2 != ToInt(c.customer_id) % 3 ? 1 : 0;
  EXPECT_EQ(r.figures["measured"]["customers"]["modulo_moves"].get<std::int64_t>(), modulo);
  EXPECT_NEAR(r.figures["measured"]["customers"]["modulo_share"].get<double>(), 2.0 / 3.0, 0.02);
}

TEST(LabDirectory, FewestMovesForAnyShardCount) {
  for (int n = 1; n < 8; ++n) {
    const auto before = BucketDirectory::EvenSplit(n);
    const auto after = before.WithShardAdded();
    ASSERT_EQ(after.ShardCount(), n + 1);
    EXPECT_EQ(after.Version(), before.Version() + 1);
    int moved = 0;
    for (const BucketId b : AllBuckets()) {
      if (after.ShardOf(b) != before.ShardOf(b)) {
        ++moved;
        EXPECT_EQ(after.ShardOf(b), ShardId{n}) << "a moved bucket goes to the new shard";
      }
    }
    EXPECT_EQ(moved, kBucketCount / (n + 1)) << n << " -> " << n + 1;
    for (const ShardId s : FirstShards(n + 1)) {
      const auto held = static_cast<int>(after.BucketsOf(s).size());
      EXPECT_GE(held, kBucketCount / (n + 1));
      EXPECT_LE(held, (kBucketCount + n) / (n + 1));
    }
  }
}

TEST_F(LabTest, WorkerProcessesProcessEveryJobOnceThroughKillStopAndSalting) {
  WorkersDemoOptions options;
  options.executable = BOOKSTORE_LAB_EXE;  // the workers are real processes of the lab binary
  options.hot_burst_orders = 300;
  const DemoResult r = RunWorkers(*lab_, options);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  for (const char* check : {"workers.late_completion_refused_by_fence", "workers.double_processed_is_zero",
                            "workers.lost_is_zero", "workers.salting_spreads_over_s_partitions",
                            "workers.killed_workers_partitions_taken_over", "workers.orders_equal_reference"}) {
    ExpectCheckPassed(r, check);
  }
  EXPECT_EQ(r.figures["double_processed"].get<std::int64_t>(), 0);
  EXPECT_EQ(r.figures["lost"].get<std::int64_t>(), 0);
  EXPECT_GE(r.figures["stale_refused"].get<std::int64_t>(), 1);
  EXPECT_EQ(r.figures["per_partition_throughput"]["before_salting"]["hot_partitions"].size(), 1U);
  EXPECT_EQ(r.figures["per_partition_throughput"]["after_salting"]["hot_partitions"].size(), 8U);
  // The demo's orders are gone again: the other demos see the loaded data.
  std::int64_t orders = 0;
  for (const ShardId s : FirstShards(lab_->ShardCount())) orders += ShardCount(s, "orders");
  EXPECT_EQ(orders, static_cast<std::int64_t>(data_->orders.size()));
  EXPECT_EQ(Count(lab_->Reference(), "orders"), static_cast<std::int64_t>(data_->orders.size()));
}

TEST_F(LabTest, StatsSummariseTheRunsCrossShardQueries) {
  (void)RunShardKey(*lab_);
  const DemoResult r = RunStats(*lab_);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r);
  EXPECT_GE(r.figures["scatters"].get<std::int64_t>(), 1);
  EXPECT_EQ(r.figures["max_fanout"].get<int>(), lab_->ShardCount());
  EXPECT_FALSE(r.figures["queries"].empty());
  const Json j = r.ToJson();
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_TRUE(j["checks"].is_array());
}

// The rebalance demo at a small scale: two loaded shards of three, to three
// and back under writers and readers; its checker must pass.
TEST(LabRebalance, UnderLoadLosesNothingAndEndsWhereItStarted) {
  const BucketDirectory two_of_three =
      BucketDirectory::FromAssignments(BucketDirectory::EvenSplit(2).AssignmentTable(), 3, 1);
  test::ScratchCluster cluster{"lab_rebalance_pgtest", test::ScratchOptions().Shards(3).Directory(two_of_three)};
  Lab lab{cluster.Config()};
  (void)LoadDataset(lab, GenerateDataset({0.002, kSeed}), {ProgressMode::kNone});
  RebalanceDemoOptions options;
  options.writers = 2;
  options.readers = 2;
  options.orders_per_second_per_writer = 40;
  options.parallel = 2;
  options.cleanup_grace = std::chrono::milliseconds(0);
  options.settle = std::chrono::milliseconds(300);
  options.max_moves = 4;  // the whole plan runs in lab/run rebalance; here a few buckets there and back
  const DemoResult r = RunRebalance(lab, options);
  EXPECT_TRUE(r.Ok()) << FailedChecks(r) << r.text;
  for (const char* check : {"rebalance.moves_finished", "rebalance.no_lost_writes", "rebalance.no_duplicate_writes",
                            "rebalance.union_equals_reference", "rebalance.report_never_double_counted",
                            "rebalance.no_replication_objects_left", "rebalance.directory_back_to_start"}) {
    ExpectCheckPassed(r, check);
  }
  EXPECT_GT(r.figures["acknowledged_writes"].get<std::int64_t>(), 0) << r.text;
  EXPECT_EQ(r.figures["buckets_moved"].get<std::size_t>(), 2U * 4U) << r.text;  // there and back
  for (const char* key : {"lost_writes", "duplicate_writes", "unknown_writes", "max_stall_ms", "timeline"}) {
    EXPECT_TRUE(r.figures.contains(key)) << key;
  }
}

}  // namespace
}  // namespace shardkit::lab
