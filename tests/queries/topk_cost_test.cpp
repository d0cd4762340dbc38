// kAuto's cost model: given inputs, which method it picks and why; and
// AutoTopK over in-memory shards in both regimes (the decision after phase
// 1, and from the last run's statistics), always equal to brute force.
#include "shardkit/queries/topk_cost.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "memory_topk_source.hpp"
#include "queries/link_estimates.hpp"
#include "shardkit/queries/topk.hpp"

namespace shardkit {
namespace {

using I64 = std::int64_t;
using std::chrono::microseconds;

ShardLink Link(double round_trip_ms, double megabytes_per_s) {
  ShardLink l;
  l.round_trip = microseconds(static_cast<std::int64_t>(round_trip_ms * 1000));
  l.bytes_per_second = megabytes_per_s * 1e6;
  l.round_trip_samples = 16;
  l.transfer_samples = 16;
  return l;
}

TopKCostInputs Inputs(int shards, std::int64_t groups_per_shard, std::int64_t phase2_per_shard, ShardLink link) {
  TopKCostInputs in;
  in.k = 10;
  in.data.groups.assign(static_cast<std::size_t>(shards), groups_per_shard);
  in.data.phase2_rows.assign(static_cast<std::size_t>(shards), phase2_per_shard);
  in.data.bytes_per_row = 9;
  in.links.assign(static_cast<std::size_t>(shards), link);
  return in;
}

TEST(TopKCost, FewGroupsOnLoopbackShipEverything) {
  // The lab's flat best sellers: ~15,000 books a shard, ~1,500 of them past tau1/m.
  const auto e = EstimateTopKCosts(Inputs(2, 15000, 1500, Link(0.15, 200)));
  EXPECT_EQ(e.choice, TopKMethod::kAllPartials) << e.Describe();
  EXPECT_LT(e.all_partials_ms, e.tput_ms);
  EXPECT_EQ(e.groups, 30000);
  EXPECT_EQ(e.phase2_rows, 3000);
  EXPECT_DOUBLE_EQ(e.all_partials_bytes, 30000 * 9.0);
  EXPECT_EQ(e.tput_round_trips, 4);
  EXPECT_EQ(e.all_partials_round_trips, 1);
  EXPECT_EQ(e.measured_links, 2);
  EXPECT_NEAR(e.round_trip_ms, 0.15, 1e-9);
}

TEST(TopKCost, FiftyBooksShipEverythingEvenOverASlowLink) {
  // 50 groups: the three more round trips cost more than 50 rows anywhere.
  for (const ShardLink link : {Link(0.1, 500), Link(2.5, 12.5), Link(50, 1)}) {
    const auto e = EstimateTopKCosts(Inputs(2, 50, 20, link));
    EXPECT_EQ(e.choice, TopKMethod::kAllPartials) << e.Describe();
  }
}

TEST(TopKCost, ManyKeysOverAConstrainedLinkRunTput) {
  // 8 shards, 1,000,000 keys, Zipf: phase 2 sends a few rows.
  const auto e = EstimateTopKCosts(Inputs(8, 125000, 5, Link(2.5, 12.5)));
  EXPECT_EQ(e.choice, TopKMethod::kTput) << e.Describe();
  EXPECT_LT(e.tput_ms * 2, e.all_partials_ms) << e.Describe();
  EXPECT_LT(e.tput_bytes, e.all_partials_bytes / 100);
}

TEST(TopKCost, TheSameDataFlipsWithTheLink) {
  // 60,000 groups a shard: cheap to ship on loopback, not at 100 Mbit/s.
  const auto loopback = EstimateTopKCosts(Inputs(2, 60000, 100, Link(0.05, 2000)));
  const auto link = EstimateTopKCosts(Inputs(2, 60000, 100, Link(2.5, 12.5)));
  EXPECT_EQ(link.choice, TopKMethod::kTput) << link.Describe();
  EXPECT_GT(loopback.all_partials_ms, 0);
  // A longer round trip alone makes TPUT dearer, all partials less so.
  const auto far = EstimateTopKCosts(Inputs(2, 60000, 100, Link(25, 12.5)));
  EXPECT_GT(far.tput_ms - link.tput_ms, far.all_partials_ms - link.all_partials_ms);
}

TEST(TopKCost, AfterPhase1OnlyTheRestIsCompared) {
  auto in = Inputs(2, 15000, 1500, Link(2.5, 12.5));
  in.after_phase1 = true;
  const auto e = EstimateTopKCosts(in);
  EXPECT_TRUE(e.after_phase1);
  EXPECT_EQ(e.tput_round_trips, 3);
  EXPECT_EQ(e.all_partials_round_trips, 2);
  EXPECT_DOUBLE_EQ(e.all_partials_bytes, 2 * (15000 - 10) * 9.0);  // the rest: the top k were sent
  EXPECT_NE(e.Describe().find("after phase 1"), std::string::npos) << e.Describe();
  // Phase 2 would send as much as the rest: the rest, one round trip fewer.
  in.data.phase2_rows = {14990, 14990};
  EXPECT_EQ(EstimateTopKCosts(in).choice, TopKMethod::kAllPartials);
  // Phase 2 sends little of a large rest over a slow link: TPUT.
  in.data.phase2_rows = {100, 100};
  EXPECT_EQ(EstimateTopKCosts(in).choice, TopKMethod::kTput);
}

TEST(TopKCost, UnmeasuredLinksTakeTheDefaults) {
  TopKCostInputs in;
  in.data.groups = {1000, 1000};
  in.data.phase2_rows = {10, 10};
  const auto e = EstimateTopKCosts(in);
  EXPECT_EQ(e.measured_links, 0);
  EXPECT_DOUBLE_EQ(e.round_trip_ms, static_cast<double>(in.default_round_trip.count()) / 1000);
  EXPECT_NE(e.Describe().find("not measured"), std::string::npos) << e.Describe();
}

TEST(LinkEstimates, MedianRoundTripAndSummedRate) {
  detail::LinkEstimates links;
  EXPECT_EQ(links.Get(ShardId{1}).round_trip_samples, 0);
  for (int ms : {2, 3, 100, 2, 3}) links.Record(ShardId{1}, std::chrono::milliseconds(ms), 0, std::nullopt);
  const ShardLink one = links.Get(ShardId{1});
  EXPECT_EQ(one.round_trip_samples, 5);
  EXPECT_EQ(one.round_trip, microseconds(3000));  // one slow reply does not move it
  EXPECT_EQ(one.transfer_samples, 0);
  // Small results say nothing about the rate; of the large ones, the fastest.
  links.Record(ShardId{1}, std::nullopt, 100, std::chrono::milliseconds(50));
  links.Record(ShardId{1}, std::nullopt, 1'000'000, std::chrono::milliseconds(80));
  links.Record(ShardId{1}, std::nullopt, 3'000'000, std::chrono::milliseconds(240));
  const ShardLink two = links.Get(ShardId{1});
  EXPECT_EQ(two.transfer_samples, 2);
  EXPECT_NEAR(two.bytes_per_second, 1e6 / 0.08, 1);
  EXPECT_EQ(links.Get(ShardId{0}).round_trip_samples, 0);
}

// An in-memory source with links of our choosing.
class LinkedSource final : public TopKShardSource<I64> {
 public:
  LinkedSource(std::vector<std::vector<TopKEntry<I64>>> shards, ShardLink link)
      : inner_(std::move(shards)), link_(link) {}
  int ShardCount() const override { return inner_.ShardCount(); }
  TopKReply<I64> LocalTopK(std::size_t k, bool want_min) override {
    auto r = inner_.LocalTopK(k, want_min);
    r.bytes = 9 * Rows(r);
    return r;
  }
  TopKReply<I64> AtLeast(const TopKThreshold<I64>& t, const std::vector<std::vector<TopKKey>>& ex) override {
    auto r = inner_.AtLeast(t, ex);
    r.bytes = 9 * Rows(r);
    return r;
  }
  TopKReply<I64> Partials(const std::vector<std::vector<TopKKey>>& keys) override { return inner_.Partials(keys); }
  TopKReply<I64> AllPartials() override {
    auto r = inner_.AllPartials();
    r.bytes = 9 * Rows(r);
    return r;
  }
  std::vector<ShardLink> Links() const override {
    return std::vector<ShardLink>(static_cast<std::size_t>(ShardCount()), link_);
  }

 private:
  static std::size_t Rows(const TopKReply<I64>& r) {
    std::size_t n = 0;
    for (const auto& s : r.shards) n += s.size();
    return n;
  }
  lab::MemoryTopKSource<I64> inner_;
  ShardLink link_;
};

// Zipf sales of `keys` items over `shards` shards.
std::vector<std::vector<TopKEntry<I64>>> ZipfShards(int shards, int keys, int sales, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> weights;
  for (int i = 1; i <= keys; ++i) weights.push_back(1.0 / std::pow(i, 1.1));
  std::discrete_distribution<int> item(weights.begin(), weights.end());
  std::vector<std::map<I64, I64>> partial(static_cast<std::size_t>(shards));
  for (int n = 0; n < sales; ++n) partial[static_cast<std::size_t>(n % shards)][item(rng)] += 1 + n % 3;
  std::vector<std::vector<TopKEntry<I64>>> out(partial.size());
  for (std::size_t s = 0; s < partial.size(); ++s) {
    for (const auto& [key, v] : partial[s]) {
      // Built in place: a temporary entry trips GCC 12's false -Wmaybe-uninitialized.
      auto& e = out[s].emplace_back();
      e.key = key;
      e.value = v;
    }
  }
  return out;
}

TEST(AutoTopK, BothRegimesEqualAllPartialsAndRemember) {
  const auto shards = ZipfShards(4, 5000, 60000, 3);
  lab::MemoryTopKSource<I64> plain(shards);
  const auto expected = AllPartialsTopK(plain, 10).items;
  struct Case {
    const char* name;
    ShardLink link;
    TopKMethod expected;
  };
  // A far, slow link: shipping every partial costs more than three round
  // trips; a near, fast one: the round trips and the table cost more.
  for (const Case& c : {Case{"slow link", Link(2.5, 0.5), TopKMethod::kTput},
                        Case{"far link", Link(500, 1000), TopKMethod::kAllPartials}}) {
    LinkedSource source(shards, c.link);
    EXPECT_FALSE(source.Recall().has_value());
    // First run: phase 1 with statistics, then the rest is priced.
    const auto first = AutoTopK(source, 10);
    EXPECT_EQ(first.items, expected) << c.name;
    ASSERT_TRUE(first.estimate.has_value()) << c.name;
    EXPECT_TRUE(first.estimate->after_phase1);
    EXPECT_EQ(first.method, c.expected) << c.name << ": " << first.choice;
    EXPECT_NE(first.choice.find("phase 1's statistics"), std::string::npos) << first.choice;
    // What it saw is remembered, and counted exactly.
    const auto seen = source.Recall();
    ASSERT_TRUE(seen.has_value()) << c.name;
    ASSERT_EQ(seen->groups.size(), 4U);
    for (std::size_t s = 0; s < 4; ++s) EXPECT_EQ(seen->groups[s], static_cast<I64>(shards[s].size()));
    EXPECT_DOUBLE_EQ(seen->bytes_per_row, 9);
    // Second run: both methods priced whole from the last run.
    const auto second = AutoTopK(source, 10);
    EXPECT_EQ(second.items, expected) << c.name;
    ASSERT_TRUE(second.estimate.has_value());
    EXPECT_FALSE(second.estimate->after_phase1);
    EXPECT_EQ(second.method, c.expected) << c.name << ": " << second.choice;
    EXPECT_NE(second.choice.find("the last run's statistics"), std::string::npos) << second.choice;
    // Whichever ran, the phase-2 rows it remembers are the same count.
    const auto again = source.Recall();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->phase2_rows, seen->phase2_rows) << c.name;
    EXPECT_EQ(again->groups, seen->groups) << c.name;
  }
}

TEST(AutoTopK, TheCountedPhase2RowsAreWhatTputSends) {
  const auto shards = ZipfShards(3, 2000, 20000, 9);
  LinkedSource source(shards, Link(500, 1000));  // all partials
  (void)AutoTopK(source, 5);
  const auto counted = source.Recall();
  ASSERT_TRUE(counted.has_value());
  lab::MemoryTopKSource<I64> plain(shards);
  const auto tput = TputTopK(plain, 5);
  ASSERT_GE(tput.phases.size(), 2U);
  I64 total = 0;
  for (I64 r : counted->phase2_rows) total += r;
  EXPECT_EQ(static_cast<std::size_t>(total), tput.phases[1].rows);
}

}  // namespace
}  // namespace shardkit
