// Worker partition leases against a real catalog: fair shares converge for
// 1..8 workers, concurrent claims never overlap, an expired lease is taken
// over with a higher token (and the old holder stops first), a catalog that
// goes away stops the worker before its leases end, and surplus partitions
// are handed over one at a time, each only after its in-flight work.
#include "shardkit/workers/partition_lease.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "support/short_leases.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class PartitionLeasePg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = std::make_unique<test::ScratchCluster>("partition_lease_pgtest"); }
  static void TearDownTestSuite() { cluster_.reset(); }

  // The lease tables live in the catalog (the scratch catalog database).
  static const Dsn& Catalog() { return cluster_->CatalogDsn(); }

  static PartitionLeaseOptions Manual(std::string group, std::string owner) {
    return test::ShortPartitionLeases(std::move(group), std::move(owner));
  }

  static pqxx::result Query(const std::string& sql) {
    pqxx::connection c{Catalog().Reveal()};
    pqxx::nontransaction tx{c};
    return tx.exec(sql);
  }

  // partition -> owner, for unexpired leases of the group.
  static std::map<int, std::string> Owners(const std::string& group) {
    std::map<int, std::string> out;
    pqxx::connection c{Catalog().Reveal()};
    pqxx::nontransaction tx{c};
    for (const auto& row : tx.exec_params("SELECT partition, owner FROM shardkit_partition_leases "
                                          "WHERE worker_group = $1 AND owner IS NOT NULL "
                                          "AND lease_until > clock_timestamp()",
                                          group)) {
      out[row[0].as<int>()] = row[1].as<std::string>();
    }
    return out;
  }

  static std::set<int> HeldNow(const PartitionLeases& w) {
    std::set<int> out;
    const auto now = Clock::now();
    for (const auto& h : w.Held()) {
      if (now < h.deadline) out.insert(h.partition);
    }
    return out;
  }

  static std::unique_ptr<test::ScratchCluster> cluster_;
};

std::unique_ptr<test::ScratchCluster> PartitionLeasePg::cluster_;

TEST_F(PartitionLeasePg, FairShareConvergesForOneToEightWorkers) {
  for (int n = 1; n <= 8; ++n) {
    const std::string group = "fair-" + std::to_string(n);
    std::vector<std::shared_ptr<PartitionLeases>> workers;
    // They arrive one by one, each ticking once as it joins.
    for (int i = 0; i < n; ++i)
      workers.push_back(PartitionLeases::Join(Catalog(), Manual(group, "w" + std::to_string(i))));
    bool converged = false;
    for (int round = 0; round < 200 && !converged; ++round) {
      for (auto& w : workers) (void)w->Tick();
      converged = true;
      int total = 0;
      for (int i = 0; i < n; ++i) {
        const int expected = 64 / n + (i < 64 % n ? 1 : 0);  // by join order
        const auto held = static_cast<int>(workers[static_cast<std::size_t>(i)]->Held().size());
        total += held;
        converged = converged && held == expected && workers[static_cast<std::size_t>(i)]->Stats().share == expected;
      }
      converged = converged && total == 64;
    }
    ASSERT_TRUE(converged) << n << " workers did not converge to their fair shares";
    // The catalog agrees: every partition held by exactly the worker that
    // thinks it holds it, max - min <= 1.
    const auto owners = Owners(group);
    ASSERT_EQ(owners.size(), 64U) << n << " workers";
    std::map<std::string, int> counts;
    for (const auto& w : workers) {
      for (const int p : HeldNow(*w)) {
        EXPECT_EQ(owners.at(p), w->Owner()) << "partition " << p;
        ++counts[w->Owner()];
      }
    }
    int lo = 64, hi = 0;
    for (const auto& [owner, c] : counts) {
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    EXPECT_LE(hi - lo, 1) << n << " workers";
    EXPECT_EQ(static_cast<int>(counts.size()), n);
    for (auto& w : workers) w->Leave(Clock::now() + 1s);
    EXPECT_TRUE(Owners(group).empty()) << "Leave released everything";
  }
}

TEST_F(PartitionLeasePg, ConcurrentClaimsNeverOverlap) {
  constexpr int kWorkers = 8;
  const std::string group = "race";
  std::vector<std::shared_ptr<PartitionLeases>> workers(kWorkers);
  std::vector<std::vector<PartitionGrant>> claims(kWorkers);
  std::vector<std::vector<int>> releases(kWorkers);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      workers[i] = PartitionLeases::Join(Catalog(), Manual(group, "racer-" + std::to_string(i)));
      for (const auto& h : workers[i]->Held()) claims[i].push_back({h.partition, h.version});
      for (int round = 0; round < 40; ++round) {
        const PartitionTick tick = workers[i]->Tick();
        claims[i].insert(claims[i].end(), tick.claimed.begin(), tick.claimed.end());
        releases[i].insert(releases[i].end(), tick.released.begin(), tick.released.end());
        EXPECT_TRUE(tick.lost.empty()) << "racer-" << i << " lost partitions it held: claimed twice";
      }
    });
  }
  for (auto& t : threads) t.join();
  // No (partition, version) was handed to two workers: every claim bumped
  // the fencing token past every earlier one.
  std::map<std::pair<int, std::int64_t>, std::size_t> seen;
  std::size_t total = 0;
  for (std::size_t i = 0; i < kWorkers; ++i) {
    for (const auto& g : claims[i]) {
      ++total;
      const auto [it, inserted] = seen.emplace(std::make_pair(g.partition, g.version), i);
      EXPECT_TRUE(inserted) << "partition " << g.partition << " version " << g.version << " claimed by racer-"
                            << it->second << " and racer-" << i;
    }
  }
  EXPECT_GE(total, 64U);
  // Nothing expires here (every worker renews all the time), so a partition
  // is claimed again only after its holder released it: claims - releases
  // is 1 while it is held and 0 while it is free, never more.
  std::map<int, int> claimed_per_partition, released_per_partition;
  for (std::size_t i = 0; i < kWorkers; ++i) {
    for (const auto& g : claims[i]) ++claimed_per_partition[g.partition];
    for (const int p : releases[i]) ++released_per_partition[p];
  }
  const auto held_now = Owners(group);
  for (int p = 0; p < 64; ++p) {
    EXPECT_EQ(claimed_per_partition[p] - released_per_partition[p], held_now.count(p) ? 1 : 0)
        << "partition " << p << " claimed while someone held it";
  }
  // Settle what is still being handed over, then what the workers hold is
  // disjoint, complete, and agrees with the catalog.
  for (int round = 0; round < 200 && Owners(group).size() < 64; ++round) {
    for (auto& w : workers) (void)w->Tick();
  }
  const auto owners = Owners(group);
  std::set<int> union_held;
  for (const auto& w : workers) {
    for (const auto& h : w->Held()) {
      EXPECT_TRUE(union_held.insert(h.partition).second) << "partition " << h.partition << " held twice";
      EXPECT_EQ(owners.at(h.partition), w->Owner());
    }
  }
  EXPECT_EQ(union_held.size(), 64U);
  for (auto& w : workers) w->Leave(Clock::now() + 1s);
}

TEST_F(PartitionLeasePg, WorkersStartedTogetherSplitWithoutHandingOver) {
  constexpr int kWorkers = 4;
  std::vector<std::shared_ptr<PartitionLeases>> workers(kWorkers);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      PartitionLeaseOptions o = Manual("deploy", "d" + std::to_string(i));
      o.join_grace = 1000ms;  // they start within a few ms of each other
      workers[i] = PartitionLeases::Join(Catalog(), o);
    });
  }
  for (auto& t : threads) t.join();
  // A few ticks for claims that raced on the same rows (SKIP LOCKED).
  for (int round = 0; round < 5; ++round) {
    for (auto& w : workers) (void)w->Tick();
  }
  for (const auto& w : workers) {
    EXPECT_EQ(w->Held().size(), 16U) << w->Owner();
    EXPECT_EQ(w->Stats().released, 0U) << w->Owner() << " had to hand partitions over";
  }
  for (auto& w : workers) w->Leave(Clock::now() + 1s);
}

TEST_F(PartitionLeasePg, ExpiredLeaseIsTakenOverWithAHigherToken) {
  const std::string group = "takeover";
  auto frozen = PartitionLeases::Join(Catalog(), Manual(group, "frozen"));
  ASSERT_EQ(frozen->Held().size(), 64U);
  std::map<int, std::int64_t> before;
  Clock::time_point frozen_deadline = Clock::time_point::max();
  for (const auto& h : frozen->Held()) {
    before[h.partition] = h.version;
    frozen_deadline = std::min(frozen_deadline, h.deadline);
  }
  // "frozen" stops ticking. The newcomer can only take partitions once they
  // expire on the server.
  auto newcomer = PartitionLeases::Join(Catalog(), Manual(group, "newcomer"));
  EXPECT_TRUE(newcomer->Held().empty()) << "claimed partitions that were still leased";
  Clock::time_point first_claim{};
  const auto deadline = Clock::now() + 20s;
  while (newcomer->Held().size() < 64 && Clock::now() < deadline) {
    const auto tick = newcomer->Tick();
    if (!tick.claimed.empty() && first_claim == Clock::time_point{}) first_claim = Clock::now();
    std::this_thread::sleep_for(20ms);  // polling the catalog, not synchronising
  }
  ASSERT_EQ(newcomer->Held().size(), 64U);
  // The frozen worker's local deadline passed before anything was taken over.
  EXPECT_LT(frozen_deadline, first_claim);
  EXPECT_TRUE(frozen->StartTake().empty());
  for (const auto& h : newcomer->Held()) {
    EXPECT_EQ(h.version, before.at(h.partition) + 1) << "partition " << h.partition;
    EXPECT_FALSE(frozen->Holds(h.partition, before.at(h.partition)));
  }
  // It wakes up: its renewal finds every pair taken over, all lost at once.
  const PartitionTick woke = frozen->Tick();
  EXPECT_EQ(woke.lost.size(), 64U);
  EXPECT_TRUE(frozen->Held().empty());
  EXPECT_EQ(frozen->Stats().lost, 64U);
  frozen->Leave(Clock::now() + 1s);
  // Leaving must not release what the newcomer holds.
  EXPECT_EQ(Owners(group).size(), 64U);
  newcomer->Leave(Clock::now() + 1s);
}

TEST_F(PartitionLeasePg, SurplusIsHandedOverOneAtATimeAfterItsWorkFinishes) {
  const std::string group = "handoff";
  PartitionLeaseOptions options = Manual(group, "old");
  options.handoff_pause = 50ms;
  auto old_owner = PartitionLeases::Join(Catalog(), options);
  ASSERT_EQ(old_owner->Held().size(), 64U);
  // A job of partition 63 is in flight.
  const auto grants = old_owner->StartTake();
  ASSERT_EQ(grants.size(), 64U);
  std::vector<int> taken(grants.size(), 0);
  PartitionGrant busy{};
  for (std::size_t i = 0; i < grants.size(); ++i) {
    if (grants[i].partition == 63) {
      taken[i] = 1;
      busy = grants[i];
    }
  }
  old_owner->EndTake(grants, taken);

  auto new_owner = PartitionLeases::Join(Catalog(), Manual(group, "new"));
  EXPECT_TRUE(new_owner->Held().empty());
  PartitionTick t = old_owner->Tick();
  EXPECT_EQ(t.share, 32);
  ASSERT_EQ(t.started_draining, 63) << "the highest-numbered partition is handed over first";
  // Draining: no new work for it, but the job in flight may finish.
  const auto more = old_owner->StartTake();
  EXPECT_TRUE(std::none_of(more.begin(), more.end(), [](const PartitionGrant& g) { return g.partition == 63; }));
  old_owner->EndTake(more, std::vector<int>(more.size(), 0));
  EXPECT_TRUE(old_owner->Holds(63, busy.version));
  for (int i = 0; i < 3; ++i) {
    t = old_owner->Tick();
    EXPECT_TRUE(t.released.empty()) << "released a partition with a job in flight";
  }
  // The runner confirms; the next tick hands it over.
  old_owner->Finished(busy);
  t = old_owner->Tick();
  ASSERT_EQ(t.released, std::vector<int>{63});
  EXPECT_FALSE(old_owner->Holds(63, busy.version));
  t = new_owner->Tick();
  ASSERT_EQ(t.claimed.size(), 1U);
  EXPECT_EQ(t.claimed[0].partition, 63);
  EXPECT_EQ(t.claimed[0].version, busy.version + 1);
  ASSERT_TRUE(new_owner->Stats().last_handoff_gap.has_value());

  // The rest: one at a time, never held by both, handoff_pause apart.
  const auto deadline = Clock::now() + 30s;
  std::vector<Clock::time_point> releases;
  while ((old_owner->Held().size() != 32 || new_owner->Held().size() != 32) && Clock::now() < deadline) {
    const PartitionTick r = old_owner->Tick();
    EXPECT_LE(r.released.size(), 1U);
    if (!r.released.empty()) releases.push_back(Clock::now());
    (void)new_owner->Tick();
    const auto a = HeldNow(*old_owner);
    for (const int p : HeldNow(*new_owner)) EXPECT_EQ(a.count(p), 0U) << "partition " << p << " held by both";
    std::this_thread::sleep_for(5ms);  // polling, not synchronising
  }
  EXPECT_EQ(old_owner->Held().size(), 32U);
  EXPECT_EQ(new_owner->Held().size(), 32U);
  ASSERT_EQ(releases.size(), 31U);
  for (std::size_t i = 1; i < releases.size(); ++i) {
    EXPECT_GE(releases[i] - releases[i - 1], options.handoff_pause) << "release " << i;
  }
  EXPECT_EQ(old_owner->Stats().released, 32U);
  old_owner->Leave(Clock::now() + 1s);
  new_owner->Leave(Clock::now() + 1s);
}

TEST_F(PartitionLeasePg, CatalogUnreachableStopsTheWorkerBeforeItsLeasesEnd) {
  test::TemporaryServer catalog;
  {
    std::ifstream in(std::filesystem::path(SHARDKIT_SOURCE_DIR) / "sql" / "021_partition_leases.sql");
    std::stringstream sql;
    sql << in.rdbuf();
    pqxx::connection c{catalog.Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    tx.exec(sql.str());
  }
  PartitionLeaseOptions o = Manual("unreachable", "lonely");
  auto worker = PartitionLeases::Join(catalog.Dsn(), o);
  (void)worker->Tick();
  auto grants = worker->StartTake();
  ASSERT_EQ(grants.size(), 64U);
  worker->EndTake(grants, std::vector<int>(grants.size(), 0));
  // The server's view of the leases, just before it goes away (the same
  // host, so the same clock).
  std::int64_t server_until_ms = 0;
  {
    pqxx::connection c{catalog.Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    server_until_ms = tx.exec1(
                            "SELECT (extract(epoch FROM min(lease_until)) * 1000)::bigint "
                            "FROM shardkit_partition_leases WHERE owner = 'lonely'")[0]
                          .as<std::int64_t>();
  }
  catalog.Stop();
  EXPECT_THROW((void)worker->Tick(), LeaseError);
  ASSERT_TRUE(worker->Stats().last_error.has_value());
  // It keeps trying; meanwhile it stops working on its own.
  const auto deadline = Clock::now() + 10s;
  while (!worker->StartTake().empty() && Clock::now() < deadline) {
    worker->EndTake(grants, std::vector<int>(grants.size(), 0));
    EXPECT_THROW((void)worker->Tick(), LeaseError);
    std::this_thread::sleep_for(10ms);  // polling, not synchronising
  }
  const std::int64_t stopped_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_TRUE(worker->StartTake().empty()) << "still working without a catalog";
  EXPECT_LT(stopped_ms, server_until_ms) << "stopped " << stopped_ms - server_until_ms
                                         << " ms after the leases could have expired";
  for (const auto& g : grants) EXPECT_FALSE(worker->Holds(g.partition, g.version));
  EXPECT_THROW(worker->Leave(Clock::now() + 100ms), LeaseError);
}

TEST_F(PartitionLeasePg, GroupsAgreeOnTheirPartitionCountAndMissingTablesAreNamed) {
  auto first = PartitionLeases::Join(Catalog(), Manual("counted", "a"));
  PartitionLeaseOptions other = Manual("counted", "b");
  other.partition_count = 128;
  try {
    (void)PartitionLeases::Join(Catalog(), other);
    FAIL() << "joined with another partition count";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has 64 partitions"), std::string::npos) << e.what();
  }
  other.partition_count = 48;
  EXPECT_THROW((void)PartitionLeases::Join(Catalog(), other), ConfigError);
  try {
    (void)PartitionLeases::Join(test::WithDatabase(Catalog(), "postgres"), Manual("x", "y"));
    FAIL();
  } catch (const LeaseError& e) {
    EXPECT_NE(std::string(e.what()).find("sql/021_partition_leases.sql"), std::string::npos) << e.what();
  }
  try {
    (void)PartitionLeases::Join(Dsn("host=127.0.0.1 port=1 dbname=x user=x password=secret"), Manual("x", "y"));
    FAIL();
  } catch (const LeaseError& e) {
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  // The view shardctl shows.
  pqxx::connection c{Catalog().Reveal()};
  const auto groups = ReadPartitionGroups(c, std::string("counted"));
  ASSERT_EQ(groups.size(), 1U);
  EXPECT_EQ(groups[0].partition_count, 64);
  ASSERT_EQ(groups[0].workers.size(), 1U);
  EXPECT_EQ(groups[0].workers[0].owner, "a");
  EXPECT_TRUE(groups[0].workers[0].live);
  ASSERT_EQ(groups[0].partitions.size(), 64U);
  EXPECT_EQ(groups[0].partitions[5].owner.value_or(""), "a");
  EXPECT_GE(groups[0].partitions[5].version, 1);
  first->Leave(Clock::now() + 1s);
}

TEST_F(PartitionLeasePg, BackgroundRenewalKeepsThePartitions) {
  PartitionLeaseOptions o = Manual("renewed", "busy");
  o.run_in_background = true;
  auto worker = PartitionLeases::Join(Catalog(), o);
  const auto first = worker->Held();
  ASSERT_EQ(first.size(), 64U);
  std::this_thread::sleep_for(2500ms);  // longer than a whole lease
  const auto grants = worker->StartTake();
  EXPECT_EQ(grants.size(), 64U) << worker->Stats().last_error.value_or("");
  worker->EndTake(grants, std::vector<int>(grants.size(), 0));
  for (const auto& h : worker->Held()) EXPECT_EQ(h.version, first[static_cast<std::size_t>(h.partition)].version);
  EXPECT_GT(worker->Stats().ticks, 3U);
}

}  // namespace
}  // namespace shardkit
