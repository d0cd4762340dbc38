// TPUT against brute force, on in-memory shards.
#include "shardkit/queries/topk.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "memory_topk_source.hpp"
#include "shardkit/errors.hpp"
#include "topk_shortcut.hpp"

namespace shardkit {
namespace {

using I64 = std::int64_t;
using Shards = std::vector<std::vector<TopKEntry<I64>>>;

// What one server computes: totals over all shards, ORDER BY total DESC, key ASC LIMIT k.
template <class Measure>
std::vector<TopKEntry<Measure>> BruteForce(const std::vector<std::vector<TopKEntry<Measure>>>& shards, std::size_t k) {
  std::map<TopKKey, Measure> totals;
  for (const auto& rows : shards) {
    for (const auto& e : rows) totals[e.key] = totals[e.key] + e.value;
  }
  std::vector<TopKEntry<Measure>> all;
  for (const auto& [key, total] : totals) all.push_back({key, total});
  std::vector<std::size_t> idx(all.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return RanksBefore(all[a], all[b]); });
  std::vector<TopKEntry<Measure>> out;
  for (std::size_t i = 0; i < std::min(k, idx.size()); ++i) out.push_back(all[idx[i]]);
  return out;
}

std::string Describe(const std::vector<TopKEntry<I64>>& items) {
  std::string s;
  for (const auto& e : items) s += TopKKeyToString(e.key) + ":" + std::to_string(e.value) + " ";
  return s;
}

// Accumulates sales into per-shard partials.
class Builder {
 public:
  explicit Builder(int shards) : partial_(static_cast<std::size_t>(shards)) {}
  void Add(int shard, const TopKKey& key, I64 amount) { partial_[static_cast<std::size_t>(shard)][key] += amount; }
  [[nodiscard]] Shards Build() const {
    Shards out(partial_.size());
    for (std::size_t s = 0; s < partial_.size(); ++s) {
      for (const auto& [key, v] : partial_[s]) out[s].push_back({key, v});
    }
    return out;
  }

 private:
  std::vector<std::map<TopKKey, I64>> partial_;
};

enum class Distribution { kUniform, kZipf, kOneShardHolds, kTies };

const char* Name(Distribution d) {
  switch (d) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kZipf:
      return "zipf";
    case Distribution::kOneShardHolds:
      return "one-shard-holds";
    case Distribution::kTies:
      return "ties";
  }
  return "?";
}

// Zipf(s) over 1..n by inverse CDF.
class Zipf {
 public:
  Zipf(int n, double s) {
    double sum = 0;
    cdf_.reserve(static_cast<std::size_t>(n));
    for (int i = 1; i <= n; ++i) cdf_.push_back(sum += 1.0 / std::pow(i, s));
    for (auto& c : cdf_) c /= sum;
  }
  int operator()(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) + 1;
  }

 private:
  std::vector<double> cdf_;
};

Shards Generate(Distribution d, int shards, std::uint64_t seed, bool text_keys = false) {
  std::mt19937_64 rng(seed);
  Builder b(shards);
  auto pick_shard = [&] { return std::uniform_int_distribution<int>(0, shards - 1)(rng); };
  const int keys = std::uniform_int_distribution<int>(1, 300)(rng);
  auto key_of = [&](int i) -> TopKKey {
    if (!text_keys) return static_cast<I64>(i) * 7 - 500;  // negatives too
    if (i == 0) return std::monostate{};                   // a NULL key
    // Mixed case and bytes >= 0x80: byte order, as the C collation.
    static const char* kPrefix[] = {"a", "B", "\xc3\xa9", "b", "A", "Z"};
    return std::string(kPrefix[i % 6]) + std::to_string(i / 6);
  };
  switch (d) {
    case Distribution::kUniform: {
      const int sales = std::uniform_int_distribution<int>(0, 3000)(rng);
      for (int i = 0; i < sales; ++i) {
        b.Add(pick_shard(), key_of(std::uniform_int_distribution<int>(0, keys - 1)(rng)),
              std::uniform_int_distribution<I64>(1, 3)(rng));
      }
      break;
    }
    case Distribution::kZipf: {
      Zipf zipf(keys, 1.1);
      const int sales = std::uniform_int_distribution<int>(0, 5000)(rng);
      for (int i = 0; i < sales; ++i)
        b.Add(pick_shard(), key_of(zipf(rng) - 1), std::uniform_int_distribution<I64>(1, 2)(rng));
      break;
    }
    case Distribution::kOneShardHolds: {
      // Each key: most of its sales on one "home" shard, a trickle elsewhere.
      for (int i = 0; i < keys; ++i) {
        const int home = pick_shard();
        const I64 big = std::uniform_int_distribution<I64>(0, 60)(rng);
        b.Add(home, key_of(i), big);
        for (int s = 0; s < shards; ++s) {
          if (s != home && std::bernoulli_distribution(0.5)(rng)) {
            b.Add(s, key_of(i), std::uniform_int_distribution<I64>(0, 4)(rng));
          }
        }
      }
      break;
    }
    case Distribution::kTies: {
      // Tiny values: many equal totals, so the key decides.
      for (int i = 0; i < keys; ++i) {
        for (int s = 0; s < shards; ++s) {
          if (std::bernoulli_distribution(0.6)(rng)) b.Add(s, key_of(i), std::uniform_int_distribution<I64>(0, 2)(rng));
        }
      }
      break;
    }
  }
  return b.Build();
}

TEST(TopKKey, OrdersLikeOrderByKeyAscInTheCCollation) {
  EXPECT_LT(TopKKey{I64{-5}}, TopKKey{I64{3}});
  EXPECT_LT(TopKKey{std::string("B")}, TopKKey{std::string("a")});         // upper case first
  EXPECT_LT(TopKKey{std::string("z")}, TopKKey{std::string("\xc3\xa9")});  // bytes, not letters
  EXPECT_LT(TopKKey{std::string("ab")}, TopKKey{std::string("abc")});
  EXPECT_LT(TopKKey{std::string("zzz")}, TopKKey{std::monostate{}});  // NULLS LAST
  EXPECT_LT(TopKKey{I64{1} << 62}, TopKKey{std::monostate{}});
  EXPECT_EQ(TopKKeyToString(TopKKey{std::monostate{}}), "NULL");
  EXPECT_EQ(TopKKeyToString(TopKKey{std::string("x")}), "'x'");
}

TEST(TopK, IntegerMeasuresReadWholeNumbersOnly) {
  using Traits = TopKMeasureTraits<std::int64_t>;
  EXPECT_EQ(Traits::FromText("25"), 25);
  EXPECT_EQ(Traits::FromText("25.00"), 25);  // a numeric sum that is whole
  EXPECT_EQ(Traits::FromText("-3.0"), -3);
  EXPECT_EQ(Traits::FromText("25.50"), std::nullopt);
  EXPECT_EQ(Traits::FromText("25.001"), std::nullopt);
  EXPECT_EQ(Traits::FromText("1e3"), std::nullopt);
  EXPECT_EQ(Traits::FromText("25x"), std::nullopt);
  EXPECT_EQ(Traits::FromText(""), std::nullopt);
  EXPECT_EQ(Traits::FromText("99999999999999999999"), std::nullopt);  // beyond 64 bits
}

TEST(TopK, RanksByTotalThenKey) {
  std::vector<TopKEntry<I64>> items = {{I64{5}, 10}, {I64{3}, 10}, {I64{9}, 11}};
  EXPECT_TRUE(RanksBefore(items[2], items[0]));
  EXPECT_TRUE(RanksBefore(items[1], items[0]));
}

// The heart of it: exact equality with brute force on many data sets.
TEST(Tput, EqualsBruteForceOnRandomDataSets) {
  int cases = 0;
  for (Distribution d :
       {Distribution::kUniform, Distribution::kZipf, Distribution::kOneShardHolds, Distribution::kTies}) {
    for (int m = 2; m <= 8; ++m) {
      for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        const bool text = seed % 3 == 0;
        const Shards shards = Generate(d, m, seed * 1000 + static_cast<std::uint64_t>(m), text);
        lab::MemoryTopKSource<I64> source(shards);
        for (std::size_t k = 1; k <= 20; ++k) {
          const auto expected = BruteForce(shards, k);
          const auto tput = TputTopK(source, k);
          ASSERT_EQ(tput.items, expected) << Name(d) << " m=" << m << " seed=" << seed << " k=" << k
                                          << "\n tput:  " << Describe(tput.items) << "\n brute: " << Describe(expected);
          ASSERT_EQ(tput.phases.size(), 3U) << "TPUT never stops after phase 2";
          ASSERT_TRUE(tput.warnings.empty());
          const auto all = AllPartialsTopK(source, k);
          ASSERT_EQ(all.items, expected) << Name(d) << " m=" << m << " seed=" << seed << " k=" << k;
          ASSERT_LE(tput.total_rows, all.total_rows + static_cast<std::size_t>(m) * k)
              << "TPUT ships at most the all-partials rows plus phase 1's lists";
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 7 * 12 * 20);
}

// A key whose total equals the k-th total but loses the tie on the key, and a
// key that wins it with partials only below the phase-2 threshold.
TEST(Tput, TiesAtTheBoundaryGoToTheSmallerKey) {
  // m = 2, k = 2. Key 1: 10 + 0 (lower bound 10 in phase 1).
  // Key 2: 10 on shard 1. Key 0: 5 + 5 = 10 ties both and wins on the key,
  // although neither partial is in a local top 2 list... it is: lists are
  // shard0 {1:10, 0:5}, shard1 {2:10, 0:5}. Make it harder with fillers.
  Shards shards(2);
  shards[0] = {{I64{1}, 10}, {I64{0}, 5}, {I64{7}, 6}};
  shards[1] = {{I64{2}, 10}, {I64{0}, 5}, {I64{8}, 6}};
  lab::MemoryTopKSource<I64> source(shards);
  const auto top = TputTopK(source, 2);
  EXPECT_EQ(top.items, BruteForce(shards, 2)) << Describe(top.items);
  EXPECT_EQ(top.items[0].key, TopKKey{I64{0}});
  EXPECT_EQ(top.items[1].key, TopKKey{I64{1}});
}

// The Bookstore case: books that sold 18 (9 + 9) are in no shard's top 10, while each
// shard's top 10 is full of books that sold 16 there and 1 on the other shard.
Shards SeedLikeBooks() {
  std::vector<std::map<I64, I64>> partial(2);
  std::mt19937_64 rng(1);
  for (I64 book = 1; book <= 5000; ++book) {  // the long tail: at most 8 per shard
    for (std::size_t s = 0; s < 2; ++s) {
      if (const I64 sold = std::uniform_int_distribution<I64>(0, 8)(rng); sold > 0) partial[s][book] = sold;
    }
  }
  for (I64 book : {90, 178, 266, 462, 550, 638, 834, 922, 1010, 1206}) partial[0][book] = partial[1][book] = 9;
  const I64 one_shard[] = {278, 954, 1510, 1746, 2166, 2422, 2578, 3078, 4310, 4390,
                           281, 957, 1513, 1749, 2169, 2425, 2581, 3081, 4313, 4393};
  for (std::size_t i = 0; i < 20; ++i) {
    const std::size_t home = i % 2;
    partial[home][one_shard[i]] = 16;
    partial[1 - home][one_shard[i]] = 1;
  }
  Shards shards(2);
  for (std::size_t s = 0; s < 2; ++s) {
    for (const auto& [book, sold] : partial[s]) shards[s].push_back({book, sold});
  }
  return shards;
}

TEST(Shortcut, GetsTheBookstoreCasesWrongListTputGetsTheRightOne) {
  const Shards shards = SeedLikeBooks();
  lab::MemoryTopKSource<I64> source(shards);
  const auto expected = BruteForce(shards, 10);
  ASSERT_EQ(expected.size(), 10U);
  for (const auto& e : expected) EXPECT_EQ(e.value, 18) << TopKKeyToString(e.key);

  const auto shortcut = lab::PerShardShortcutTopK(source, 10);
  EXPECT_FALSE(shortcut.warnings.empty());
  EXPECT_EQ(shortcut.total_rows, 20U);
  EXPECT_NE(shortcut.items, expected);
  std::set<TopKKey> right;
  for (const auto& e : expected) right.insert(e.key);
  for (const auto& e : shortcut.items) {
    EXPECT_FALSE(right.contains(e.key)) << "none of the ten match, as in the Bookstore case";
    EXPECT_EQ(e.value, 16) << "the shortcut only sees the 16 of a book that really sold 17";
  }

  const auto tput = TputTopK(source, 10);
  EXPECT_EQ(tput.items, expected) << Describe(tput.items);
  EXPECT_EQ(*tput.tau1, 16);
  EXPECT_EQ(AllPartialsTopK(source, 10).items, expected);
}

TEST(Tput, ShipsFarFewerRowsThanAllPartialsOnSkewedData) {
  // 50,000 keys with Zipf-skewed sales over 4 shards.
  const int m = 4;
  Builder b(m);
  std::mt19937_64 rng(42);
  Zipf zipf(50000, 1.0);
  for (int i = 0; i < 400000; ++i) {
    b.Add(std::uniform_int_distribution<int>(0, m - 1)(rng), I64{zipf(rng)},
          std::uniform_int_distribution<I64>(1, 3)(rng));
  }
  const Shards shards = b.Build();
  lab::MemoryTopKSource<I64> source(shards);
  const auto tput = TputTopK(source, 10);
  const auto all = AllPartialsTopK(source, 10);
  EXPECT_EQ(tput.items, all.items);
  EXPECT_EQ(tput.items, BruteForce(shards, 10));
  EXPECT_LT(tput.total_rows * 100, all.total_rows)
      << "TPUT " << tput.total_rows << " rows vs all partials " << all.total_rows;
}

TEST(Tput, RefusesNegativePartialsEvenOutsideTheTopK) {
  Shards visible(2);
  visible[0] = {{I64{1}, 10}, {I64{2}, -3}};
  visible[1] = {{I64{1}, 4}};
  lab::MemoryTopKSource<I64> source(visible);
  EXPECT_THROW((void)TputTopK(source, 2), UnmergeableQuery);
  // Key 2's -3 is not in shard 0's top 1: the smallest-partial check sees it.
  EXPECT_THROW((void)TputTopK(source, 1), UnmergeableQuery);
  try {
    (void)TputTopK(source, 1);
  } catch (const UnmergeableQuery& e) {
    EXPECT_NE(std::string(e.what()).find("shard 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kAllPartials"), std::string::npos) << e.what();
  }
  // The all-partials method is exact for any sign.
  EXPECT_EQ(AllPartialsTopK(source, 2).items, BruteForce(visible, 2));
}

TEST(Tput, EdgeCases) {
  // Nothing anywhere.
  Shards empty(3);
  lab::MemoryTopKSource<I64> none(empty);
  EXPECT_TRUE(TputTopK(none, 5).items.empty());
  EXPECT_TRUE(AllPartialsTopK(none, 5).items.empty());
  // k == 0 asks nothing.
  Shards some(2);
  some[0] = {{I64{1}, 3}};
  some[1] = {{I64{2}, 4}};
  lab::MemoryTopKSource<I64> source(some);
  const auto zero = TputTopK(source, 0);
  EXPECT_TRUE(zero.items.empty());
  EXPECT_TRUE(zero.phases.empty());
  // Fewer keys than k: tau1 = 0, everything comes in phase 2, nothing to fetch.
  const auto few = TputTopK(source, 10);
  EXPECT_EQ(few.items, BruteForce(some, 10));
  EXPECT_EQ(*few.tau1, 0);
  EXPECT_EQ(few.fetched_keys, 0U);
  // One shard only, and one shard empty.
  Shards lopsided(2);
  lopsided[0] = {{I64{1}, 3}, {I64{2}, 3}, {I64{3}, 0}, {I64{4}, 9}};
  lab::MemoryTopKSource<I64> l(lopsided);
  for (std::size_t k = 1; k <= 5; ++k) EXPECT_EQ(TputTopK(l, k).items, BruteForce(lopsided, k)) << k;
  // Zero totals and NULL keys rank like the reference: 0s last, NULL after keys.
  Shards zeros(2);
  zeros[0] = {{TopKKey{std::monostate{}}, 0}, {TopKKey{std::string("b")}, 0}};
  zeros[1] = {{TopKKey{std::string("a")}, 0}, {TopKKey{std::monostate{}}, 0}};
  lab::MemoryTopKSource<I64> z(zeros);
  for (std::size_t k = 1; k <= 3; ++k) EXPECT_EQ(TputTopK(z, k).items, BruteForce(zeros, k)) << k;
  EXPECT_EQ(TputTopK(z, 3).items.back().key, TopKKey{std::monostate{}});
}

TEST(Tput, RefusesASumThatOverflows) {
  Shards big(2);
  big[0] = {{I64{1}, std::numeric_limits<I64>::max() - 1}};
  big[1] = {{I64{1}, 5}};
  lab::MemoryTopKSource<I64> source(big);
  EXPECT_THROW((void)AllPartialsTopK(source, 1), UnmergeableQuery);
  EXPECT_THROW((void)TputTopK(source, 1), UnmergeableQuery);
}

TEST(Tput, ReportsPhasesAndPrunes) {
  const Shards shards = Generate(Distribution::kZipf, 4, 7);
  lab::MemoryTopKSource<I64> source(shards);
  const auto r = TputTopK(source, 5);
  ASSERT_EQ(r.phases.size(), 3U);
  EXPECT_EQ(r.phases[0].name, "1 local top-k");
  EXPECT_EQ(r.phases[1].name, "2 threshold");
  EXPECT_EQ(r.phases[2].name, "3 exact partials");
  EXPECT_EQ(r.phases[0].shards_asked, 4);
  std::size_t rows = 0;
  for (const auto& p : r.phases) rows += p.rows;
  EXPECT_EQ(rows, r.total_rows);
  EXPECT_EQ(r.phases[2].rows <= r.fetched_keys, true);
  EXPECT_LE(*r.tau1, *r.tau2);
  EXPECT_LE(r.candidates, r.seen_after_phase2);
  EXPECT_GE(r.candidates, r.items.size());
}

// Data that changes between phases is reported, not silently mixed.
class ChangingSource final : public TopKShardSource<I64> {
 public:
  ChangingSource(Shards before, Shards after) : before_(std::move(before)), after_(std::move(after)) {}
  int ShardCount() const override { return before_.ShardCount(); }
  TopKReply<I64> LocalTopK(std::size_t k, bool want_min) override { return before_.LocalTopK(k, want_min); }
  TopKReply<I64> AtLeast(const TopKThreshold<I64>& t, const std::vector<std::vector<TopKKey>>& ex) override {
    return before_.AtLeast(t, ex);
  }
  TopKReply<I64> Partials(const std::vector<std::vector<TopKKey>>& keys) override { return after_.Partials(keys); }
  TopKReply<I64> AllPartials() override { return before_.AllPartials(); }

 private:
  lab::MemoryTopKSource<I64> before_;
  lab::MemoryTopKSource<I64> after_;
};

TEST(Tput, WarnsWhenDataChangedBetweenPhases) {
  Shards before(2);
  before[0] = {{I64{1}, 10}, {I64{2}, 8}, {I64{3}, 1}};
  before[1] = {{I64{4}, 10}, {I64{2}, 3}, {I64{3}, 1}};
  Shards after = before;
  after[1][1].value = 30;  // key 2 sold a lot on shard 1 after phase 2
  ChangingSource source(before, after);
  const auto r = TputTopK(source, 1);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("changed between phases"), std::string::npos) << r.warnings[0];
}

TEST(Tput, DecimalMeasures) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 30; ++round) {
    const int m = 2 + round % 5;
    std::vector<std::vector<TopKEntry<Decimal>>> shards(static_cast<std::size_t>(m));
    for (int s = 0; s < m; ++s) {
      for (int key = 0; key < 60; ++key) {
        if (!std::bernoulli_distribution(0.7)(rng)) continue;
        // Cents with varying scales: 1.5 and 1.50 are the same amount.
        const auto cents = std::uniform_int_distribution<int>(0, 2000)(rng);
        const int scale = 2 + (key % 2);
        const Decimal v(Decimal::Mantissa(cents) * (scale == 3 ? 10 : 1), scale);
        shards[static_cast<std::size_t>(s)].push_back({I64{key}, v});
      }
    }
    lab::MemoryTopKSource<Decimal> source(shards);
    for (std::size_t k : {1U, 3U, 10U}) {
      const auto expected = BruteForce(shards, k);
      const auto tput = TputTopK(source, k);
      ASSERT_EQ(tput.items.size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(tput.items[i].key, expected[i].key) << "round " << round << " k " << k << " i " << i;
        ASSERT_EQ(tput.items[i].value, expected[i].value);
      }
    }
  }
  std::vector<std::vector<TopKEntry<Decimal>>> negative(2);
  negative[0] = {{I64{1}, Decimal::Parse("-0.01")}};
  lab::MemoryTopKSource<Decimal> bad(negative);
  EXPECT_THROW((void)TputTopK(bad, 1), UnmergeableQuery);
}

TEST(TopKSql, ArrayLiteralsQuoteText) {
  EXPECT_EQ(TopKKeysArrayLiteral({TopKKey{I64{1}}, TopKKey{I64{-2}}}), "{1,-2}");
  EXPECT_EQ(TopKKeysArrayLiteral({}), "{}");
  EXPECT_EQ(
      TopKKeysArrayLiteral({TopKKey{std::string("a\"b\\c")}, TopKKey{std::monostate{}}, TopKKey{std::string("NULL")}}),
      "{\"a\\\"b\\\\c\",\"NULL\"}");
}

TEST(TopKSql, StatementsNumberTheirParametersAfterTheCallers) {
  TopKQuery q;
  q.from = "order_items i JOIN orders o USING (customer_id, order_id)";
  q.key = "i.book_id";
  q.measure = "i.quantity";
  q.where = "o.ordered_at >= $1 AND o.status <> $2";
  q.params = {"2026-01-01", "cancelled"};
  const auto st = BuildTopKStatements(q);
  EXPECT_NE(st.local_top_k.find("LIMIT $3"), std::string::npos) << st.local_top_k;
  EXPECT_NE(st.at_least.find("$3::integer >= $4::numeric"), std::string::npos) << st.at_least;
  EXPECT_NE(st.at_least.find("ANY($5::bigint[])"), std::string::npos) << st.at_least;
  EXPECT_NE(st.partials.find("ANY($3::bigint[])"), std::string::npos) << st.partials;
  EXPECT_NE(st.partials.find("(o.ordered_at >= $1 AND o.status <> $2) AND"), std::string::npos) << st.partials;
  EXPECT_EQ(st.all_partials.find("LIMIT"), std::string::npos);
  q.key_type = TopKKeyType::kText;
  EXPECT_NE(BuildTopKStatements(q).local_top_k.find("COLLATE \"C\""), std::string::npos);
  q.measure.clear();
  EXPECT_THROW((void)BuildTopKStatements(q), UnmergeableQuery);
}

}  // namespace
}  // namespace shardkit
