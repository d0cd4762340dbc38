// Distributed top-k against the local cluster: the same sales are loaded into
// the shards (by the customer's bucket) and, unsharded, into the reference
// server; TPUT and all-partials must equal the reference's
//   GROUP BY key ORDER BY coalesce(sum(measure), 0) DESC, key LIMIT k
// exactly, and the per-shard shortcut must differ on the Bookstore case's shape.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/topk.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"
#include "topk_shortcut.hpp"

namespace shardkit {
namespace {

using I64 = std::int64_t;

struct Sale {
  int dataset = 0;
  CustomerId customer{};
  std::optional<I64> item;          // bigint key (NULL sometimes)
  std::optional<std::string> name;  // text key (NULL sometimes)
  I64 qty = 0;
  std::string amount;  // numeric(12,2) text
};

// Data set ids.
constexpr int kUniform = 1;    // 3 seeds: 1..3
constexpr int kZipf = 11;      // 11..13
constexpr int kOneShard = 21;  // 21..23
constexpr int kTies = 31;
constexpr int kSeedLike = 41;
constexpr int kTextKeys = 51;
constexpr int kNegative = 61;
constexpr int kManyTies = 71;      // thousands of partials tied at phase 2's threshold
constexpr int kOneShardOnly = 81;  // every row on shard 0; the others have none
constexpr int kEmpty = 99;         // no rows

class TopKPg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("topk_pgtest");
    resolver_ = cluster_->MakeResolver().release();
    scatter_ = new ScatterGather(*resolver_);
    table_ = "topk_sales_" + std::to_string(::getpid());
    const std::string ddl =
        "CREATE TABLE " + table_ +
        " (dataset int NOT NULL, customer_id int NOT NULL, bucket smallint NOT NULL, item bigint, name text,"
        " qty bigint NOT NULL, amount numeric(12,2) NOT NULL)";
    cluster_->ExecEverywhere(ddl);
    Load(Generate());
  }
  static void TearDownTestSuite() {
    try {
      cluster_->ExecEverywhere("DROP TABLE IF EXISTS " + table_);
    } catch (const std::exception&) {
      // The scratch databases are dropped anyway.
    }
    delete scatter_;
    delete resolver_;
    delete cluster_;
  }

  // Customers of each shard, so a data set can place an item's sales.
  static std::vector<std::vector<CustomerId>> CustomersByShard() {
    const auto directory = BucketDirectory::EvenSplit(cluster_->ShardCount());
    std::vector<std::vector<CustomerId>> by_shard(static_cast<std::size_t>(cluster_->ShardCount()));
    for (std::int32_t id = 1; id <= 20000; ++id) {
      const CustomerId c{id};
      EXPECT_EQ(directory.ShardFor(c), resolver_->ShardFor(c));
      by_shard[static_cast<std::size_t>(directory.ShardFor(c))].push_back(c);
    }
    return by_shard;
  }

  static std::string NameOf(I64 item) {
    // Upper case, lower case and bytes >= 0x80: the C collation orders bytes.
    static const char* kPrefix[] = {"a", "B", "\xc3\xa9", "b", "A", "Z"};
    return std::string(kPrefix[item % 6]) + "-" + std::to_string(item);
  }

  static std::vector<Sale> Generate() {
    const auto customers = CustomersByShard();
    const int shards = cluster_->ShardCount();
    std::vector<Sale> sales;
    std::mt19937_64 rng(2024);
    auto any_customer = [&] { return CustomerId{std::uniform_int_distribution<std::int32_t>(1, 20000)(rng)}; };
    auto customer_on = [&](int shard) {
      const auto& list = customers[static_cast<std::size_t>(shard)];
      return list[std::uniform_int_distribution<std::size_t>(0, list.size() - 1)(rng)];
    };
    auto cents = [&] {
      const auto c = std::uniform_int_distribution<int>(0, 5000)(rng);
      return std::to_string(c / 100) + "." + (c % 100 < 10 ? "0" : "") + std::to_string(c % 100);
    };
    auto add = [&](int dataset, CustomerId customer, I64 item, I64 qty) {
      sales.push_back({dataset, customer, item, NameOf(item), qty, cents()});
    };
    for (int seed = 0; seed < 3; ++seed) {
      // Uniform: any item, any customer.
      for (int i = 0; i < 3000; ++i) {
        add(kUniform + seed, any_customer(), std::uniform_int_distribution<I64>(1, 300)(rng),
            std::uniform_int_distribution<I64>(1, 3)(rng));
      }
      // Zipf-skewed items.
      std::vector<double> cdf;
      double sum = 0;
      for (int r = 1; r <= 2000; ++r) cdf.push_back(sum += 1.0 / std::pow(r, 1.1));
      for (int i = 0; i < 6000; ++i) {
        const double u = std::uniform_real_distribution<double>(0, sum)(rng);
        const auto item = static_cast<I64>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin()) + 1;
        add(kZipf + seed, any_customer(), item, std::uniform_int_distribution<I64>(1, 2)(rng));
      }
      // One shard holds most of each item.
      for (I64 item = 1; item <= 400; ++item) {
        const int home = std::uniform_int_distribution<int>(0, shards - 1)(rng);
        const int n = std::uniform_int_distribution<int>(0, 20)(rng);
        for (int i = 0; i < n; ++i) {
          const bool at_home = std::bernoulli_distribution(0.85)(rng);
          add(kOneShard + seed, at_home ? customer_on(home) : any_customer(), item,
              std::uniform_int_distribution<I64>(1, 3)(rng));
        }
      }
    }
    // Ties everywhere: every item sells 1, 2 or 3.
    for (I64 item = 1; item <= 150; ++item) {
      const int n = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int i = 0; i < n; ++i) add(kTies, any_customer(), item, 1);
    }
    // The Bookstore case: ten books sell 9 on each shard (18), twenty books sell 16 on
    // one shard and 1 on the other (17), the tail at most 8 per shard.
    for (I64 book = 1; book <= 3000; ++book) {
      for (int s = 0; s < 2 && s < shards; ++s) {
        const I64 sold = std::uniform_int_distribution<I64>(0, 8)(rng);
        if (sold > 0) add(kSeedLike, customer_on(s), book, sold);
      }
    }
    for (I64 book : {90, 178, 266, 462, 550, 638, 834, 922, 1010, 1206}) {
      for (int unit = 0; unit < 9; ++unit) {
        add(kSeedLike, customer_on(0), book + 10000, 1);
        add(kSeedLike, customer_on(1), book + 10000, 1);
      }
    }
    for (I64 i = 0; i < 20; ++i) {
      const int home = static_cast<int>(i % 2);
      const I64 book = 20000 + i * 37;
      add(kSeedLike, customer_on(home), book, 10);
      add(kSeedLike, customer_on(home), book, 6);
      add(kSeedLike, customer_on(1 - home), book, 1);
    }
    // Text keys with NULLs (and NULL bigint keys).
    for (int i = 0; i < 1500; ++i) {
      const I64 item = std::uniform_int_distribution<I64>(0, 120)(rng);
      Sale s{kTextKeys, any_customer(), item, NameOf(item), std::uniform_int_distribution<I64>(1, 4)(rng), cents()};
      if (item % 40 == 0) s.name.reset();
      if (item % 30 == 0) s.item.reset();
      sales.push_back(std::move(s));
    }
    // 6,000 items sell 1 on every shard, five sell 10 on every shard: with
    // k = 10 the threshold is 1, so phase 2 reads every shard's cursor to
    // the end, over several fetches.
    for (I64 item = 1; item <= 6000; ++item) {
      for (int s = 0; s < shards; ++s) add(kManyTies, customer_on(s), item, item <= 5 ? 10 : 1);
    }
    // Rows on shard 0 only.
    for (I64 item = 1; item <= 100; ++item) {
      add(kOneShardOnly, customer_on(0), item, std::uniform_int_distribution<I64>(1, 9)(rng));
    }
    // A refund: a negative quantity.
    for (I64 item = 1; item <= 50; ++item) add(kNegative, any_customer(), item, item == 17 ? -5 : 3);
    return sales;
  }

  static void Load(const std::vector<Sale>& sales) {
    const int shards = cluster_->ShardCount();
    std::vector<std::string> per_shard(static_cast<std::size_t>(shards));
    std::string all;
    auto flush = [&](bool force) {
      for (int s = 0; s < shards; ++s) {
        auto& values = per_shard[static_cast<std::size_t>(s)];
        if (!values.empty() && (force || values.size() > 200000)) {
          cluster_->ExecOnShard(s, "INSERT INTO " + table_ + " VALUES " + values);
          values.clear();
        }
      }
      if (!all.empty() && (force || all.size() > 200000)) {
        cluster_->ExecOnReference("INSERT INTO " + table_ + " VALUES " + all);
        all.clear();
      }
    };
    for (const auto& s : sales) {
      const std::string name = s.name ? "'" + *s.name + "'" : std::string("NULL");  // no quotes in names
      const std::string row = "(" + std::to_string(s.dataset) + "," + std::to_string(ToInt(s.customer)) +
                              ",bucket_of(" + std::to_string(ToInt(s.customer)) + ")," +
                              (s.item ? std::to_string(*s.item) : "NULL") + "," + name + "," + std::to_string(s.qty) +
                              "," + s.amount + ")";
      auto& values = per_shard[static_cast<std::size_t>(resolver_->ShardFor(s.customer))];
      values += (values.empty() ? "" : ",") + row;
      all += (all.empty() ? "" : ",") + row;
      flush(false);
    }
    flush(true);
    for (int s = 0; s < shards; ++s) cluster_->ExecOnShard(s, "ANALYZE " + table_);
    cluster_->ExecOnReference("ANALYZE " + table_);
  }

  static TopKQuery Query(int dataset, std::size_t k, TopKKeyType type = TopKKeyType::kBigint,
                         const char* measure = "qty") {
    TopKQuery q;
    q.from = table_;
    q.key = type == TopKKeyType::kBigint ? "item" : "name";
    q.key_type = type;
    q.measure = measure;
    q.where = "dataset = $1";
    q.params = {std::to_string(dataset)};
    q.k = k;
    q.label = "topk_pgtest";
    return q;
  }

  // The reference server's answer, as text pairs (key or NULL, total).
  using Rows = std::vector<std::pair<std::optional<std::string>, std::string>>;
  static Rows Reference(const TopKQuery& q) {
    pqxx::connection c{cluster_->ReferenceDsn().Reveal()};
    pqxx::nontransaction tx{c};
    const std::string order_key = q.key_type == TopKKeyType::kText ? q.key + " COLLATE \"C\"" : q.key;
    const auto result =
        tx.exec_params("SELECT " + q.key + ", coalesce(sum(" + q.measure + "), 0) FROM " + q.from + " WHERE " +
                           q.where + " GROUP BY 1 ORDER BY 2 DESC, " + order_key + " LIMIT " + std::to_string(q.k),
                       *q.params[0]);
    Rows rows;
    for (const auto& r : result) {
      rows.emplace_back(r[0].is_null() ? std::nullopt : std::optional<std::string>(r[0].c_str()), r[1].c_str());
    }
    return rows;
  }

  // TopKResult, or the shortcut's result.
  template <class Result>
  static Rows AsRows(const Result& r) {
    using Measure = decltype(r.items.front().value);
    Rows rows;
    for (const auto& e : r.items) {
      std::optional<std::string> key;
      if (const auto* i = std::get_if<I64>(&e.key)) key = std::to_string(*i);
      if (const auto* s = std::get_if<std::string>(&e.key)) key = *s;
      rows.emplace_back(key, TopKMeasureTraits<Measure>::ToString(e.value));
    }
    return rows;
  }

  static std::string Show(const Rows& rows) {
    std::string s;
    for (const auto& [k, v] : rows) s += (k ? *k : "NULL") + ":" + v + " ";
    return s;
  }

  static test::ScratchCluster* cluster_;
  static BucketShardResolver* resolver_;
  static ScatterGather* scatter_;
  static std::string table_;
};

test::ScratchCluster* TopKPg::cluster_ = nullptr;
BucketShardResolver* TopKPg::resolver_ = nullptr;
ScatterGather* TopKPg::scatter_ = nullptr;
std::string TopKPg::table_;

TEST_F(TopKPg, TputAndAllPartialsEqualTheReferenceOnEveryDistribution) {
  int compared = 0;
  for (int dataset : {kUniform, kUniform + 1, kUniform + 2, kZipf, kZipf + 1, kZipf + 2, kOneShard, kOneShard + 1,
                      kOneShard + 2, kTies, kSeedLike, kTextKeys, kEmpty}) {
    for (std::size_t k : {1U, 3U, 10U, 20U}) {
      const auto q = Query(dataset, k);
      const Rows expected = Reference(q);
      const auto tput = TopKBySum(*scatter_, q, TopKMethod::kTput);
      EXPECT_EQ(AsRows(tput), expected) << "dataset " << dataset << " k " << k << "\n tput: " << Show(AsRows(tput))
                                        << "\n ref:  " << Show(expected);
      EXPECT_EQ(tput.phases.size(), 3U);
      EXPECT_TRUE(tput.warnings.empty()) << tput.warnings.front();
      const auto all = TopKBySum(*scatter_, q, TopKMethod::kAllPartials);
      EXPECT_EQ(AsRows(all), expected) << "dataset " << dataset << " k " << k;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 13 * 4);
}

TEST_F(TopKPg, TiesAtTheThresholdAnEmptyShardAndKBeyondTheKeys) {
  ASSERT_GE(cluster_->ShardCount(), 2);
  for (int dataset : {kManyTies, kOneShardOnly}) {
    for (std::size_t k : {1U, 10U, 500U, 10000U}) {
      const auto q = Query(dataset, k);
      const Rows expected = Reference(q);
      for (TopKMethod method : {TopKMethod::kTput, TopKMethod::kAuto, TopKMethod::kAllPartials}) {
        const auto result = TopKBySum(*scatter_, q, method);
        EXPECT_EQ(AsRows(result), expected) << TopKMethodName(method) << " dataset " << dataset << " k " << k
                                            << "\n got: " << Show(AsRows(result)) << "\n ref: " << Show(expected);
        EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
      }
    }
  }
  // Phase 2 on the ties: every shard sends all but its top 10 (threshold 1).
  const auto ties = TopKBySum(*scatter_, Query(kManyTies, 10), TopKMethod::kTput);
  ASSERT_EQ(ties.phases.size(), 3U);
  EXPECT_EQ(*ties.tau1, cluster_->ShardCount());  // items 6-10 sell 1 per shard
  EXPECT_GE(ties.phases[1].rows, static_cast<std::size_t>(cluster_->ShardCount()) * (6000 - 10));
}

// AtLeast and Partials without a phase 1 before them read the shards'
// current data (a plain scatter each), and agree with AllPartials.
TEST_F(TopKPg, SourceCallsWithoutPhase1AgreeWithAllPartials) {
  const auto q = Query(kUniform, 5);
  SqlTopKSource source(*scatter_, q);
  const auto all = source.AllPartials();
  const int m = source.ShardCount();
  const TopKThreshold<I64> threshold{40, m};
  std::vector<std::vector<TopKKey>> exclude(static_cast<std::size_t>(m));
  exclude[0] = {TopKKey{I64{13}}};
  const auto at_least = source.AtLeast(threshold, exclude);
  std::vector<std::vector<TopKKey>> keys(static_cast<std::size_t>(m));
  for (int s = 0; s < m; ++s) {
    std::set<std::pair<TopKKey, I64>> want, got;
    for (const auto& e : all.shards[static_cast<std::size_t>(s)]) {
      if (threshold.Admits(e.value) && !(s == 0 && e.key == TopKKey{I64{13}})) want.emplace(e.key, e.value);
      if (keys[static_cast<std::size_t>(s)].size() < 7) keys[static_cast<std::size_t>(s)].push_back(e.key);
    }
    for (const auto& e : at_least.shards[static_cast<std::size_t>(s)]) got.emplace(e.key, e.value);
    EXPECT_EQ(got, want) << "shard " << s;
    EXPECT_FALSE(want.empty()) << "shard " << s << ": lower the threshold, or this proves little";
  }
  const auto partials = source.Partials(keys);
  for (int s = 0; s < m; ++s) {
    std::map<TopKKey, I64> from_all;
    for (const auto& e : all.shards[static_cast<std::size_t>(s)]) from_all[e.key] = e.value;
    ASSERT_EQ(partials.shards[static_cast<std::size_t>(s)].size(), keys[static_cast<std::size_t>(s)].size());
    for (const auto& e : partials.shards[static_cast<std::size_t>(s)]) EXPECT_EQ(e.value, from_all.at(e.key));
  }
}

TEST_F(TopKPg, TextKeysInTheCCollationWithNullKeys) {
  for (std::size_t k : {1U, 5U, 20U, 200U}) {
    const auto q = Query(kTextKeys, k, TopKKeyType::kText);
    const Rows expected = Reference(q);
    const auto tput = TopKBySum(*scatter_, q);
    EXPECT_EQ(AsRows(tput), expected) << "k " << k << "\n tput: " << Show(AsRows(tput))
                                      << "\n ref:  " << Show(expected);
    EXPECT_EQ(AsRows(TopKBySum(*scatter_, q, TopKMethod::kAllPartials)), expected) << k;
  }
  // k larger than the number of keys: the NULL key is last among equals and present.
  const auto q = Query(kTextKeys, 1000, TopKKeyType::kText);
  const auto tput = TopKBySum(*scatter_, q);
  EXPECT_TRUE(std::any_of(tput.items.begin(), tput.items.end(),
                          [](const auto& e) { return std::holds_alternative<std::monostate>(e.key); }));
}

TEST_F(TopKPg, NumericMeasuresAreExactDecimals) {
  for (int dataset : {kUniform, kZipf, kOneShard, kTextKeys}) {
    for (std::size_t k : {1U, 10U}) {
      const auto q = Query(dataset, k, TopKKeyType::kBigint, "amount");
      const Rows expected = Reference(q);
      const auto tput = TopKBySum<Decimal>(*scatter_, q);
      // Same digits as the reference prints, scale included.
      EXPECT_EQ(AsRows(tput), expected) << "dataset " << dataset << " k " << k << "\n tput: " << Show(AsRows(tput))
                                        << "\n ref:  " << Show(expected);
    }
  }
  // An integer-typed source refuses a numeric sum instead of rounding it.
  EXPECT_THROW((void)TopKBySum(*scatter_, Query(kUniform, 3, TopKKeyType::kBigint, "amount")), UnmergeableQuery);
  // A numeric sum that is a whole number ("25.00") ranks as that integer, in
  // every method.
  const auto whole = Query(kUniform, 5, TopKKeyType::kBigint, "round(amount)::numeric(12,2)");
  const Rows expected = Reference(Query(kUniform, 5, TopKKeyType::kBigint, "round(amount)"));
  for (TopKMethod method : {TopKMethod::kTput, TopKMethod::kAllPartials, TopKMethod::kAuto}) {
    EXPECT_EQ(AsRows(TopKBySum(*scatter_, whole, method)), expected) << TopKMethodName(method);
  }
}

TEST_F(TopKPg, ShortcutDiffersOnTheBookstoreShapeTputDoesNot) {
  const auto q = Query(kSeedLike, 10);
  const Rows expected = Reference(q);
  ASSERT_EQ(expected.size(), 10U);
  for (const auto& [key, total] : expected) EXPECT_EQ(total, "18") << *key;

  SqlTopKSource source(*scatter_, q);
  const auto shortcut = lab::PerShardShortcutTopK(source, q.k);
  EXPECT_FALSE(shortcut.warnings.empty());
  EXPECT_NE(AsRows(shortcut), expected);
  std::set<std::optional<std::string>> right;
  for (const auto& row : expected) right.insert(row.first);
  for (const auto& row : AsRows(shortcut)) EXPECT_FALSE(right.contains(row.first)) << "shortcut found " << *row.first;
  EXPECT_EQ(shortcut.total_rows, 10U * static_cast<std::size_t>(cluster_->ShardCount()));

  const auto tput = TopKBySum(*scatter_, q);
  const auto all = TopKBySum(*scatter_, q, TopKMethod::kAllPartials);
  EXPECT_EQ(AsRows(tput), expected);
  EXPECT_EQ(AsRows(all), expected);
  EXPECT_LT(tput.total_rows, all.total_rows);
  std::string phases;
  for (const auto& p : tput.phases) phases += p.name + "=" + std::to_string(p.rows) + " ";
  std::cout << "seed-like: TPUT " << tput.total_rows << " rows (" << phases << "), all partials " << all.total_rows
            << " rows, shortcut " << shortcut.total_rows << " rows\n";
}

TEST_F(TopKPg, NegativePartialsAreRefusedByTput) {
  const auto q = Query(kNegative, 3);
  try {
    (void)TopKBySum(*scatter_, q);
    ADD_FAILURE() << "TPUT answered over a negative partial";
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("negative partial"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kAllPartials"), std::string::npos) << e.what();  // what to do
  }
  // kAuto refuses it too where it runs TPUT's phase 1; where its cost model
  // (with what earlier runs of the statement showed) picks all partials, it
  // answers, exactly.
  try {
    const auto automatic = TopKBySum(*scatter_, q, TopKMethod::kAuto);
    EXPECT_EQ(automatic.method, TopKMethod::kAllPartials) << automatic.choice;
    EXPECT_EQ(AsRows(automatic), Reference(q));
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("negative partial"), std::string::npos) << e.what();
  }
  EXPECT_EQ(AsRows(TopKBySum(*scatter_, q, TopKMethod::kAllPartials)), Reference(q));
}

TEST_F(TopKPg, ReportsRowsAndBytesPerPhase) {
  const auto q = Query(kZipf, 10);
  const auto tput = TopKBySum(*scatter_, q);
  ASSERT_EQ(tput.phases.size(), 3U);
  std::size_t rows = 0;
  for (const auto& p : tput.phases) {
    rows += p.rows;
    if (p.shards_asked > 0) {
      EXPECT_GT(p.elapsed.count(), 0) << p.name;
    }
  }
  // Phase 3 asks only shards that have candidates to confirm.
  EXPECT_EQ(tput.phases[2].shards_asked == 0, tput.fetched_keys == 0);
  EXPECT_EQ(rows, tput.total_rows);
  EXPECT_EQ(tput.phases[0].shards_asked, cluster_->ShardCount());
  EXPECT_EQ(tput.phases[0].rows, 10U * static_cast<std::size_t>(cluster_->ShardCount()));
  EXPECT_GT(tput.total_bytes, 0U);
  const auto stats = scatter_->Stats();
  EXPECT_GT(stats.scatters, 0U);
}

// Forwards to a source and runs `write` right after phase 1 returned.
class WriteAfterPhase1 final : public TopKShardSource<I64> {
 public:
  WriteAfterPhase1(TopKShardSource<I64>& inner, std::function<void()> write)
      : inner_(inner), write_(std::move(write)) {}
  int ShardCount() const override { return inner_.ShardCount(); }
  TopKReply<I64> LocalTopK(std::size_t k, bool want_min) override {
    auto reply = inner_.LocalTopK(k, want_min);
    write_();
    return reply;
  }
  TopKReply<I64> AtLeast(const TopKThreshold<I64>& t, const std::vector<std::vector<TopKKey>>& ex) override {
    return inner_.AtLeast(t, ex);
  }
  TopKReply<I64> Partials(const std::vector<std::vector<TopKKey>>& keys) override { return inner_.Partials(keys); }
  TopKReply<I64> AllPartials() override { return inner_.AllPartials(); }
  TopKReply<I64> RestOfPartials(const std::vector<std::vector<TopKKey>>& ex) override {
    return inner_.RestOfPartials(ex);
  }

 private:
  TopKShardSource<I64>& inner_;
  std::function<void()> write_;
};

TEST_F(TopKPg, WritesCommittedBetweenPhasesDoNotChangeTheAnswer) {
  // A new best seller appears on every shard right after phase 1: phases 2
  // and 3 must still read phase 1's snapshot, so the answer is the one from
  // before the write, with no warning.
  constexpr I64 kNewBook = 987654321;
  const auto q = Query(kZipf, 10);
  const Rows before = Reference(q);
  const auto customers = CustomersByShard();
  auto write = [&] {
    for (int s = 0; s < cluster_->ShardCount(); ++s) {
      const auto c = std::to_string(ToInt(customers[static_cast<std::size_t>(s)].front()));
      const std::string row = "(" + std::to_string(kZipf) + "," + c + ",bucket_of(" + c + ")," +
                              std::to_string(kNewBook) + ",NULL,1000000,0)";
      cluster_->ExecOnShard(s, "INSERT INTO " + table_ + " VALUES " + row);
      cluster_->ExecOnReference("INSERT INTO " + table_ + " VALUES " + row);
    }
  };
  for (TopKMethod method : {TopKMethod::kTput, TopKMethod::kAuto}) {
    SqlTopKSource sql(*scatter_, q);
    WriteAfterPhase1 source(sql, write);
    const auto result = RunTopK<I64>(source, q.k, method);
    const Rows after = Reference(q);
    cluster_->ExecEverywhere("DELETE FROM " + table_ + " WHERE item = " + std::to_string(kNewBook));
    ASSERT_NE(after, before) << "the write must change the answer, or this test proves nothing";
    EXPECT_EQ(AsRows(result), before) << TopKMethodName(method) << "\n got: " << Show(AsRows(result))
                                      << "\n before: " << Show(before) << "\n after: " << Show(after);
    EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
  }
}

TEST_F(TopKPg, ConcurrentWritersNeverMixMoments) {
  // Writers move sales between two books on each shard, in transactions
  // that keep each shard's total for the pair at 1000: in any one snapshot
  // per shard the pair sums to 1000 * shards, so both books' totals (k is
  // large enough for both to be in the answer) always add up to that.
  constexpr I64 kA = 555000001, kB = 555000002;
  const auto customers = CustomersByShard();
  const int shards = cluster_->ShardCount();
  for (int s = 0; s < shards; ++s) {
    const auto c = std::to_string(ToInt(customers[static_cast<std::size_t>(s)].front()));
    cluster_->ExecOnShard(s, "INSERT INTO " + table_ + " VALUES (" + std::to_string(kZipf + 1) + "," + c +
                                 ",bucket_of(" + c + ")," + std::to_string(kA) + ",NULL,1000,0), (" +
                                 std::to_string(kZipf + 1) + "," + c + ",bucket_of(" + c + ")," + std::to_string(kB) +
                                 ",NULL,0,0)");
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int s = 0; s < shards; ++s) {
    writers.emplace_back([&, s] {
      pqxx::connection c{cluster_->ShardDsn(s).Reveal()};
      std::mt19937 rng(static_cast<unsigned>(s));
      while (!stop.load()) {
        const int a = std::uniform_int_distribution<int>(0, 1000)(rng);
        pqxx::work tx{c};
        tx.exec("UPDATE " + table_ + " SET qty = CASE item WHEN " + std::to_string(kA) + " THEN " + std::to_string(a) +
                " ELSE " + std::to_string(1000 - a) + " END WHERE item IN (" + std::to_string(kA) + "," +
                std::to_string(kB) + ")");
        tx.commit();
      }
    });
  }
  auto q = Query(kZipf + 1, 200);
  int checked = 0;
  for (int run = 0; run < 15; ++run) {
    for (TopKMethod method : {TopKMethod::kTput, TopKMethod::kAuto}) {
      const auto result = TopKBySum(*scatter_, q, method);
      I64 pair = 0;
      int found = 0;
      for (const auto& e : result.items) {
        if (e.key == TopKKey{kA} || e.key == TopKKey{kB}) {
          pair += e.value;
          ++found;
        }
      }
      if (found == 2) {
        EXPECT_EQ(pair, 1000 * shards) << TopKMethodName(method) << " run " << run;
        ++checked;
      }
      EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
  cluster_->ExecEverywhere("DELETE FROM " + table_ + " WHERE item IN (" + std::to_string(kA) + "," +
                           std::to_string(kB) + ")");
  EXPECT_GT(checked, 0) << "the pair never made the top 200; make k larger";
}

TEST_F(TopKPg, AutoIsExactAndSaysWhatItChose) {
  for (int dataset : {kUniform, kZipf, kOneShard, kTies, kSeedLike, kTextKeys, kEmpty}) {
    for (std::size_t k : {1U, 10U}) {
      const auto q = Query(dataset, k);
      const auto result = TopKBySum(*scatter_, q, TopKMethod::kAuto);
      EXPECT_EQ(AsRows(result), Reference(q)) << "dataset " << dataset << " k " << k;
      EXPECT_TRUE(result.method == TopKMethod::kTput || result.method == TopKMethod::kAllPartials);
      EXPECT_FALSE(result.choice.empty());
      if (dataset != kEmpty) {
        ASSERT_TRUE(result.groups.has_value());
        EXPECT_GT(*result.groups, 0);
      }
    }
  }
  // Which method it picks depends on the measured links; the estimate says.
  const auto seed_like = TopKBySum(*scatter_, Query(kSeedLike, 10), TopKMethod::kAuto);
  ASSERT_TRUE(seed_like.estimate.has_value());
  EXPECT_EQ(seed_like.estimate->choice, seed_like.method) << seed_like.choice;
  EXPECT_GT(seed_like.estimate->measured_links, 0) << "the scatter measured no link: " << seed_like.choice;
}

// The SQL source with links of the test's choosing, so that the cost model's
// choice is known in advance; everything else goes to the real shards.
class LinkedSqlSource final : public TopKShardSource<I64> {
 public:
  LinkedSqlSource(ScatterGather& scatter, const TopKQuery& q, ShardLink link) : inner_(scatter, q), link_(link) {}
  int ShardCount() const override { return inner_.ShardCount(); }
  TopKReply<I64> LocalTopK(std::size_t k, bool want_min) override { return inner_.LocalTopK(k, want_min); }
  TopKReply<I64> AtLeast(const TopKThreshold<I64>& t, const std::vector<std::vector<TopKKey>>& ex) override {
    return inner_.AtLeast(t, ex);
  }
  TopKReply<I64> Partials(const std::vector<std::vector<TopKKey>>& keys) override { return inner_.Partials(keys); }
  TopKReply<I64> AllPartials() override { return inner_.AllPartials(); }
  TopKReply<I64> RestOfPartials(const std::vector<std::vector<TopKKey>>& ex) override {
    return inner_.RestOfPartials(ex);
  }
  void WantStatistics(bool wanted) override { inner_.WantStatistics(wanted); }
  std::vector<ShardLink> Links() const override {
    return std::vector<ShardLink>(static_cast<std::size_t>(ShardCount()), link_);
  }

 private:
  SqlTopKSource inner_;
  ShardLink link_;
};

ShardLink FakeLink(std::chrono::microseconds round_trip, double bytes_per_second) {
  ShardLink link;
  link.round_trip = round_trip;
  link.bytes_per_second = bytes_per_second;
  link.round_trip_samples = 1;
  link.transfer_samples = 1;
  return link;
}

TEST_F(TopKPg, AutoEqualsTheReferenceInBothRegimes) {
  // A link that makes every byte dear (TPUT) and one that makes every round
  // trip dear (all partials); each run twice: the first decides after phase
  // 1, the second from what the first saw (the source remembers).
  struct Regime {
    const char* name;
    ShardLink link;
    TopKMethod expected;
  };
  const Regime regimes[] = {
      {"bytes dear", FakeLink(std::chrono::microseconds(100), 1000), TopKMethod::kTput},
      {"round trips dear", FakeLink(std::chrono::seconds(5), 1e9), TopKMethod::kAllPartials},
  };
  for (int dataset : {kUniform, kZipf, kSeedLike, kTextKeys}) {
    const auto q = Query(dataset, 10);
    const auto reference = Reference(q);
    for (const Regime& regime : regimes) {
      LinkedSqlSource source(*scatter_, q, regime.link);
      for (int run = 0; run < 2; ++run) {
        const auto result = AutoTopK(source, q.k);
        const std::string where = fmt::format("dataset {}, {}, run {}: {}", dataset, regime.name, run, result.choice);
        EXPECT_EQ(AsRows(result), reference) << where;
        ASSERT_TRUE(result.estimate.has_value()) << where;
        EXPECT_EQ(result.estimate->after_phase1, run == 0) << where;
        EXPECT_EQ(result.method, regime.expected) << where;
        EXPECT_TRUE(result.warnings.empty()) << where;
      }
    }
  }
}

}  // namespace
}  // namespace shardkit
