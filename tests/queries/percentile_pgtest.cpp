// Exact distributed percentiles and COUNT(DISTINCT) against the local
// cluster: the same rows are loaded into the shards (by the customer's
// bucket) and, unsharded, into the reference server, and every answer must
// be the reference's text for text: every supported type, ties, NULLs, NaN
// and infinities, a single row, empty shards, every value on one shard,
// fractions 0 and 1, GROUP BY, and a random property run whose small
// samples force many narrowing rounds.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/queries/percentile.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/sketches.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/reference_answer.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

// One row of the test table; every value column may be NULL.
struct Row {
  int dataset = 0;
  CustomerId customer{};
  std::string grp;                             // SQL literal
  std::string i2, i4, i8, num, f4, f8, d, ts;  // SQL literals ("NULL" allowed)
};

constexpr int kUniform = 1;       // ties, NULLs, groups
constexpr int kSingle = 2;        // one row
constexpr int kEmpty = 3;         // no row
constexpr int kOneShard = 4;      // every row on shard 0
constexpr int kSpecial = 5;       // NaN, infinities, BC dates, huge numbers
constexpr int kAllNull = 6;       // rows, but every value NULL
constexpr int kSkewed = 7;        // most rows one value, a long tail
constexpr int kRandomBase = 100;  // the property run's data sets

const char* kColumns[] = {"i2", "i4", "i8", "num", "f4", "f8", "d", "ts"};
const char* kNumberColumns[] = {"i2", "i4", "i8", "num", "f4", "f8"};

class PercentilePg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("percentile_pgtest");
    resolver_ = cluster_->MakeResolver().release();
    scatter_ = new ScatterGather(*resolver_);
    table_ = "pct_values_" + std::to_string(::getpid());
    cluster_->ExecEverywhere("CREATE TABLE " + table_ +
                             " (dataset int NOT NULL, customer_id int NOT NULL, bucket smallint NOT NULL, grp text,"
                             " i2 smallint, i4 integer, i8 bigint, num numeric, f4 real, f8 double precision,"
                             " d date, ts timestamp)");
    Load(Generate());
  }
  static void TearDownTestSuite() {
    delete scatter_;
    delete resolver_;
    delete cluster_;
  }

  static CustomerId CustomerOn(int shard, std::mt19937_64& rng) {
    for (;;) {
      const CustomerId c{std::uniform_int_distribution<std::int32_t>(1, 100000)(rng)};
      if (ToInt(resolver_->ShardFor(c)) == shard) return c;
    }
  }

  static Row Values(int dataset, CustomerId customer, std::int64_t v, std::string grp) {
    Row r;
    r.dataset = dataset;
    r.customer = customer;
    r.grp = std::move(grp);
    r.i2 = std::to_string(v % 30000);
    r.i4 = std::to_string(v);
    r.i8 = std::to_string(v * 1000003);
    r.num = std::to_string(v / 100) + "." + std::to_string(100 + std::abs(v) % 100).substr(1);
    if (v < 0 && v > -100) r.num = "-" + r.num;
    r.f4 = std::to_string(v) + ".1";
    r.f8 = std::to_string(v) + ".3";
    r.d = "'2026-01-01'::date + " + std::to_string(v % 5000);
    r.ts = "'2026-01-01 00:00:00'::timestamp + interval '1 minute' * " + std::to_string(v);
    return r;
  }

  static void Nullify(Row& r) { r.i2 = r.i4 = r.i8 = r.num = r.f4 = r.f8 = r.d = r.ts = "NULL"; }

  static std::vector<Row> Generate() {
    std::vector<Row> rows;
    std::mt19937_64 rng(25);
    const int shards = cluster_->ShardCount();
    const auto any = [&] { return CustomerOn(std::uniform_int_distribution<int>(0, shards - 1)(rng), rng); };
    const char* groups[] = {"'a'", "'b'", "'c'", "NULL"};
    for (int i = 0; i < 3000; ++i) {
      Row r = Values(kUniform, any(), std::uniform_int_distribution<std::int64_t>(-50, 400)(rng), groups[i % 4]);
      if (i % 17 == 0) Nullify(r);
      rows.push_back(std::move(r));
    }
    rows.push_back(Values(kSingle, any(), 42, "'a'"));
    for (int i = 0; i < 500; ++i) {
      rows.push_back(Values(kOneShard, CustomerOn(0, rng), std::uniform_int_distribution<std::int64_t>(0, 90)(rng),
                            groups[i % 2]));
    }
    // NaN and infinities (float and numeric), BC dates, big integers.
    for (int i = 0; i < 60; ++i) {
      Row r = Values(kSpecial, any(), i - 20, groups[i % 2]);
      if (i % 7 == 0) r.f8 = r.f4 = r.num = "'NaN'";
      if (i % 11 == 0) r.f8 = r.f4 = r.num = "'Infinity'";
      if (i % 13 == 0) r.f8 = r.f4 = r.num = "'-Infinity'";
      if (i % 5 == 0) r.d = "'0044-03-15 BC'::date";
      if (i % 9 == 0) r.i8 = std::to_string(std::int64_t{9007199254740993} + i);  // beyond 2^53
      rows.push_back(std::move(r));
    }
    for (int i = 0; i < 40; ++i) {
      Row r = Values(kAllNull, any(), i, "'a'");
      Nullify(r);
      rows.push_back(std::move(r));
    }
    for (int i = 0; i < 4000; ++i) {
      const std::int64_t v = i % 10 != 0 ? 7 : std::uniform_int_distribution<std::int64_t>(0, 100000)(rng);
      rows.push_back(Values(kSkewed, any(), v, "'a'"));
    }
    // The property run: small data sets, few distinct values (ties), some
    // on one shard only.
    for (int set = 0; set < 24; ++set) {
      const int n = std::uniform_int_distribution<int>(0, 120)(rng);
      const std::int64_t spread = std::uniform_int_distribution<std::int64_t>(1, 300)(rng);
      const bool one_shard = set % 5 == 0;
      for (int i = 0; i < n; ++i) {
        Row r = Values(kRandomBase + set, one_shard ? CustomerOn(1 % shards, rng) : any(),
                       std::uniform_int_distribution<std::int64_t>(-spread, spread)(rng), groups[i % 3]);
        if (i % 9 == 4) Nullify(r);
        rows.push_back(std::move(r));
      }
    }
    return rows;
  }

  static void Load(const std::vector<Row>& rows) {
    const int shards = cluster_->ShardCount();
    std::vector<std::string> per_shard(static_cast<std::size_t>(shards));
    std::string all;
    for (const Row& r : rows) {
      const std::string text = "(" + std::to_string(r.dataset) + "," + std::to_string(ToInt(r.customer)) + "," +
                               std::to_string(ToInt(BucketOf(r.customer))) + "," + r.grp + "," + r.i2 + "," + r.i4 +
                               "," + r.i8 + "," + r.num + "," + r.f4 + "," + r.f8 + "," + r.d + "," + r.ts + ")";
      auto& values = per_shard[static_cast<std::size_t>(ToInt(resolver_->ShardFor(r.customer)))];
      values += (values.empty() ? "" : ",") + text;
      all += (all.empty() ? "" : ",") + text;
    }
    for (int s = 0; s < shards; ++s) {
      if (!per_shard[static_cast<std::size_t>(s)].empty()) {
        cluster_->ExecOnShard(s, "INSERT INTO " + table_ + " VALUES " + per_shard[static_cast<std::size_t>(s)]);
      }
    }
    cluster_->ExecOnReference("INSERT INTO " + table_ + " VALUES " + all);
  }

  static test::Rows Texts(const ResultSet& r) {
    test::Rows out;
    for (const auto& row : r.rows) {
      auto& o = out.emplace_back();
      for (const Value& v : row) o.push_back(v.IsNull() ? std::nullopt : std::optional<std::string>(v.ToString()));
    }
    return out;
  }

  static std::string Function(OrderStatistic kind) {
    return kind == OrderStatistic::kPercentileCont ? "percentile_cont" : "percentile_disc";
  }

  struct Stat {
    OrderStatistic kind = OrderStatistic::kPercentileCont;
    std::string column;
    std::optional<double> fraction;
  };

  // Ours against the reference's for several statistics in one statement
  // (one snapshot per shard, several value columns at once).
  static PercentileResult CheckAll(int dataset, const std::vector<Stat>& stats, bool grouped, int samples = 64,
                                   std::int64_t fetch_all = 8192) {
    PercentileQuery q;
    q.from = table_;
    q.where = "dataset = $1";
    q.params = {std::to_string(dataset)};
    if (grouped) {
      q.group_by = {{"grp", "grp"}};
      q.order_by = {{"grp"}};
    }
    std::string list = grouped ? "grp" : "";
    for (std::size_t i = 0; i < stats.size(); ++i) {
      const Stat& st = stats[i];
      q.columns.push_back({st.kind, st.column, st.fraction, fmt::format("p{}", i)});
      const std::string f = st.fraction ? fmt::format("{:.17g}", *st.fraction) : "NULL";
      list += list.empty() ? "" : ", ";
      list += st.kind == OrderStatistic::kCountDistinct
                  ? fmt::format("count(DISTINCT {})", st.column)
                  : fmt::format("{}({}::float8) WITHIN GROUP (ORDER BY {})", Function(st.kind), f, st.column);
    }
    q.samples_per_shard = samples;
    q.fetch_all_at_most = fetch_all;
    const PercentileResult got = ExactPercentiles(*scatter_, q);
    const std::string sql = fmt::format("SELECT {} FROM {} WHERE dataset = $1{}", list, table_,
                                        grouped ? " GROUP BY grp ORDER BY grp" : "");
    const test::ReferenceAnswer want = test::AnswerOnReference(*cluster_, sql, q.params);
    EXPECT_EQ(Texts(got), want.rows) << sql << " (dataset " << dataset << ", " << got.rounds << " rounds)";
    std::vector<unsigned> types;
    for (const auto& t : got.column_types) types.push_back(TypeOidNamed(t));
    EXPECT_EQ(types, want.types) << sql;
    return got;
  }

  static PercentileResult Check(int dataset, const std::string& column, OrderStatistic kind,
                                std::optional<double> fraction, bool grouped, int samples = 64,
                                std::int64_t fetch_all = 8192) {
    return CheckAll(dataset, {{kind, column, fraction}}, grouped, samples, fetch_all);
  }

  // Every fraction of Fractions() over the columns, as disc and (numbers) cont.
  static std::vector<Stat> Everything(const std::vector<double>& fractions) {
    std::vector<Stat> stats;
    for (const char* column : kColumns) {
      for (const double f : fractions) stats.push_back({OrderStatistic::kPercentileDisc, column, f});
    }
    for (const char* column : kNumberColumns) {
      for (const double f : fractions) stats.push_back({OrderStatistic::kPercentileCont, column, f});
    }
    return stats;
  }

  static std::vector<double> Fractions() { return {0, 1, 0.5, 0.25, 0.9, 0.95, 0.01, 1.0 / 3, 0.999}; }

  static test::ScratchCluster* cluster_;
  static BucketShardResolver* resolver_;
  static ScatterGather* scatter_;
  static std::string table_;
};

test::ScratchCluster* PercentilePg::cluster_ = nullptr;
BucketShardResolver* PercentilePg::resolver_ = nullptr;
ScatterGather* PercentilePg::scatter_ = nullptr;
std::string PercentilePg::table_;

TEST_F(PercentilePg, EveryTypeAndFractionEqualsTheReference) {
  const PercentileResult all = CheckAll(kUniform, Everything(Fractions()), false);
  EXPECT_LE(all.rounds, 4);
  CheckAll(kUniform, Everything(Fractions()), true);
}

TEST_F(PercentilePg, SingleRowEmptyAllNullAndOneShard) {
  for (const int dataset : {kSingle, kEmpty, kAllNull, kOneShard}) {
    CheckAll(dataset, Everything({0.0, 0.5, 1.0, 0.3}), false);
    CheckAll(dataset, Everything({0.0, 0.5, 1.0, 0.3}), true);
  }
}

TEST_F(PercentilePg, NanInfinitiesBcDatesAndBigIntegers) {
  CheckAll(kSpecial, Everything(Fractions()), false);
  CheckAll(kSpecial, Everything(Fractions()), true);
}

TEST_F(PercentilePg, NullFractionGivesNullAndOutOfRangeIsRefused) {
  Check(kUniform, "num", OrderStatistic::kPercentileCont, std::nullopt, true);
  PercentileQuery q;
  q.from = table_;
  q.columns = {{OrderStatistic::kPercentileCont, "num", 1.5, "p"}};
  EXPECT_THROW((void)ExactPercentiles(*scatter_, q), Error);
}

TEST_F(PercentilePg, RoundsStayFewAndShipFarLessThanEveryValue) {
  const PercentileResult uniform = Check(kUniform, "num", OrderStatistic::kPercentileCont, 0.5, true);
  EXPECT_LE(uniform.rounds, 4);
  EXPECT_EQ(uniform.rows_all_values, 3000);
  const PercentileResult skewed = Check(kSkewed, "i4", OrderStatistic::kPercentileCont, 0.95, false);
  EXPECT_LE(skewed.rounds, 4);
  EXPECT_LT(skewed.rows_shipped, static_cast<std::size_t>(skewed.rows_all_values) / 4);
  EXPECT_EQ(skewed.round_stats.size(), static_cast<std::size_t>(skewed.rounds));
}

TEST_F(PercentilePg, TinySamplesNarrowOverManyRoundsToTheSameAnswer) {
  // Two samples a shard and no fetching of whole ranges: every narrowing
  // step of the selection runs.
  const PercentileResult uniform = CheckAll(kUniform, Everything({0.5, 0.9, 1.0 / 3}), true, 2, 1);
  EXPECT_GT(uniform.rounds, 4);
  CheckAll(kSkewed, Everything({0.0, 0.5, 0.95, 1.0}), false, 3, 2);
  CheckAll(kSpecial, Everything({0.25, 0.5, 0.999}), true, 2, 1);
}

TEST_F(PercentilePg, PropertyRunOverRandomShapesEqualsTheReference) {
  std::mt19937_64 rng(7);
  for (int set = 0; set < 24; ++set) {
    for (int i = 0; i < 2; ++i) {
      std::vector<Stat> stats;
      for (int k = 0; k < 4; ++k) {
        const bool cont = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
        const char* column = cont ? kNumberColumns[std::uniform_int_distribution<int>(0, 5)(rng)]
                                  : kColumns[std::uniform_int_distribution<int>(0, 7)(rng)];
        const double f = std::uniform_int_distribution<int>(0, 4)(rng) == 0
                             ? static_cast<double>(std::uniform_int_distribution<int>(0, 1)(rng))
                             : std::uniform_real_distribution<double>(0, 1)(rng);
        stats.push_back({cont ? OrderStatistic::kPercentileCont : OrderStatistic::kPercentileDisc, column, f});
      }
      const int samples = std::uniform_int_distribution<int>(2, 16)(rng);
      const std::int64_t fetch_all = std::uniform_int_distribution<std::int64_t>(1, 64)(rng);
      CheckAll(kRandomBase + set, stats, std::uniform_int_distribution<int>(0, 1)(rng) == 1, samples, fetch_all);
    }
  }
}

TEST_F(PercentilePg, SeveralPercentilesAndCountDistinctInOneSnapshot) {
  PercentileQuery q;
  q.from = table_;
  q.where = "dataset = $1";
  q.params = {std::to_string(kUniform)};
  q.group_by = {{"grp", "grp"}};
  q.order_by = {{"grp", SortDirection::kDesc}};
  q.columns = {{OrderStatistic::kPercentileCont, "num", 0.5, "median"},
               {OrderStatistic::kPercentileCont, "num", 0.95, "p95"},
               {OrderStatistic::kPercentileDisc, "d", 0.5, "median_day"},
               {OrderStatistic::kCountDistinct, "i4", std::nullopt, "distinct_i4"},
               {OrderStatistic::kCountDistinct, "num", std::nullopt, "distinct_num"}};
  const PercentileResult got = ExactPercentiles(*scatter_, q);
  const test::ReferenceAnswer want = test::AnswerOnReference(
      *cluster_,
      "SELECT grp, percentile_cont(0.5) WITHIN GROUP (ORDER BY num), percentile_cont(0.95) WITHIN GROUP (ORDER BY "
      "num), percentile_disc(0.5) WITHIN GROUP (ORDER BY d), count(DISTINCT i4), count(DISTINCT num) FROM " +
          table_ + " WHERE dataset = $1 GROUP BY grp ORDER BY grp DESC",
      q.params);
  EXPECT_EQ(Texts(got), want.rows);
  EXPECT_EQ(got.column_names,
            (std::vector<std::string>{"grp", "median", "p95", "median_day", "distinct_i4", "distinct_num"}));
  EXPECT_LE(got.rounds, 5);
}

TEST_F(PercentilePg, CountDistinctEqualsTheReferenceAndIsRefusedAboveItsLimit) {
  std::vector<Stat> stats;
  for (const char* column : kColumns) stats.push_back({OrderStatistic::kCountDistinct, column, std::nullopt});
  for (const int dataset : {kUniform, kEmpty, kSingle, kSpecial, kOneShard, kAllNull}) {
    CheckAll(dataset, stats, false);
    CheckAll(dataset, stats, true);
  }
  PercentileQuery q;
  q.from = table_;
  q.columns = {{OrderStatistic::kCountDistinct, "i8", std::nullopt, "n"}};
  q.max_distinct = 100;
  try {
    (void)ExactPercentiles(*scatter_, q);
    ADD_FAILURE() << "a count(DISTINCT) above max_distinct was answered";
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("max_distinct"), std::string::npos) << e.what();
  }
}

TEST_F(PercentilePg, UnsupportedTypesAreRefusedWithTheReason) {
  PercentileQuery q;
  q.from = table_;
  q.columns = {{OrderStatistic::kPercentileCont, "d", 0.5, "p"}};  // PostgreSQL has no percentile_cont(date)
  EXPECT_THROW((void)ExactPercentiles(*scatter_, q), UnmergeableQuery);
  q.columns = {{OrderStatistic::kPercentileDisc, "grp", 0.5, "p"}};
  EXPECT_THROW((void)ExactPercentiles(*scatter_, q), UnmergeableQuery);
}

TEST_F(PercentilePg, SketchesAreApproximateWithinTheirBounds) {
  for (const int dataset : {kUniform, kSkewed}) {
    SketchQuery q;
    q.from = table_;
    q.where = "dataset = $1";
    q.params = {std::to_string(dataset)};
    q.value = "i8";
    const ApproximateResult distinct = ApproxCountDistinct(*scatter_, q);
    EXPECT_TRUE(distinct.approximate);
    EXPECT_NE(distinct.error_bound.find("HyperLogLog"), std::string::npos);
    const double exact =
        std::stod(*test::AnswerOnReference(*cluster_,
                                           "SELECT count(DISTINCT i8) FROM " + table_ + " WHERE dataset = $1", q.params)
                       .rows.at(0)
                       .at(0));
    const auto estimate = static_cast<double>(distinct.rows.at(0).at(0).AsInt());
    EXPECT_NEAR(estimate, exact, 4 * distinct.relative_error * exact + 1) << dataset;

    q.value = "i4";
    for (const double f : {0.05, 0.5, 0.95}) {
      q.fraction = f;
      const ApproximateResult p = ApproxPercentile(*scatter_, q);
      EXPECT_EQ(p.column_types.back(), "double precision");
      // Its rank among the reference's values, as a fraction of them.
      const auto rank = test::AnswerOnReference(
          *cluster_,
          "SELECT avg((i4 <= $2::float8)::int)::float8, avg((i4 < $2::float8)::int)::float8 FROM " + table_ +
              " WHERE dataset = $1 AND i4 IS NOT NULL",
          {q.params[0], p.rows.at(0).at(0).ToString()});
      const double at_most = std::stod(*rank.rows.at(0).at(0));
      const double below = std::stod(*rank.rows.at(0).at(1));
      EXPECT_GE(at_most, f - 0.03 - p.relative_error) << dataset << " " << f;
      EXPECT_LE(below, f + 0.03 + p.relative_error) << dataset << " " << f;
    }
  }
  // Empty input: a count of 0 and a NULL percentile, still marked approximate.
  SketchQuery none;
  none.from = table_;
  none.where = "dataset = " + std::to_string(kEmpty);
  none.value = "num";
  EXPECT_EQ(ApproxCountDistinct(*scatter_, none).rows.at(0).at(0).AsInt(), 0);
  EXPECT_TRUE(ApproxPercentile(*scatter_, none).rows.at(0).at(0).IsNull());
}

}  // namespace
}  // namespace shardkit
