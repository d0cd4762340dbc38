// Worker-id leases against a real PostgreSQL server: concurrent claimants
// never share an id; an expired lease is taken over; the loser stops issuing
// before that can happen; a released id is reused after the last
// millisecond its previous holder used.
#include "shardkit/ids/worker_lease.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <thread>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/ids/bucketed_id.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;

class WorkerLeasePg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = std::make_unique<test::ScratchCluster>("worker_lease_pgtest"); }
  static void TearDownTestSuite() { cluster_.reset(); }

  // The lease table lives in the catalog (sql/004_worker_ids.sql).
  static const shardkit::Dsn& Dsn() { return cluster_->CatalogDsn(); }

  // Short leases for tests that wait for expiry; no background renewal.
  static WorkerLeaseOptions Short(std::string space, int worker_count) {
    WorkerLeaseOptions o;
    o.id_space = std::move(space);
    o.worker_count = worker_count;
    o.lease_duration = 1500ms;
    o.safety_margin = 500ms;
    o.renew_interval = 300ms;
    o.renew_in_background = false;
    return o;
  }

  static pqxx::result Query(const std::string& sql) {
    pqxx::connection c{Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    return tx.exec(sql);
  }

  static std::unique_ptr<test::ScratchCluster> cluster_;
};

std::unique_ptr<test::ScratchCluster> WorkerLeasePg::cluster_;

TEST_F(WorkerLeasePg, ConcurrentClaimantsNeverGetTheSameId) {
  constexpr int kClaimants = 12;
  std::vector<std::shared_ptr<WorkerLease>> leases(kClaimants);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kClaimants; ++i) {
    threads.emplace_back([&leases, i] {
      WorkerLeaseOptions o;
      o.id_space = "race";
      o.owner = "claimant-" + std::to_string(i);
      o.renew_in_background = false;
      leases[i] = WorkerLease::Claim(Dsn(), o);
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> ids;
  for (const auto& lease : leases) {
    ASSERT_TRUE(lease);
    EXPECT_TRUE(lease->Valid());
    EXPECT_EQ(lease->ClaimVersion(), 1);
    ids.insert(lease->WorkerId());
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kClaimants)) << "two claimants got the same worker id";
  EXPECT_EQ(*ids.rbegin(), kClaimants - 1);  // the lowest free ids, no gaps
  const auto rows = Query(
      "SELECT count(*), count(DISTINCT owner) FROM shardkit_worker_ids "
      "WHERE id_space = 'race' AND owner IS NOT NULL");
  EXPECT_EQ(rows[0][0].as<int>(), kClaimants);
  EXPECT_EQ(rows[0][1].as<int>(), kClaimants);
}

TEST_F(WorkerLeasePg, ConcurrentClaimantsForTooFewIdsFailClearly) {
  constexpr int kClaimants = 6;
  std::vector<std::shared_ptr<WorkerLease>> leases(kClaimants);
  std::vector<std::string> errors(kClaimants);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kClaimants; ++i) {
    threads.emplace_back([&, i] {
      try {
        leases[i] = WorkerLease::Claim(Dsn(), Short("scarce", 4));
      } catch (const IdGeneratorError& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> ids;
  int failed = 0;
  for (std::size_t i = 0; i < kClaimants; ++i) {
    if (leases[i]) {
      ids.insert(leases[i]->WorkerId());
    } else {
      ++failed;
      EXPECT_NE(errors[i].find("all 4 worker ids of id space 'scarce'"), std::string::npos) << errors[i];
    }
  }
  EXPECT_EQ(ids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(failed, kClaimants - 4);
}

TEST_F(WorkerLeasePg, ExpiredLeaseIsTakenOverAndTheLoserStopsIssuing) {
  // One id in the space, so the newcomer can only get it by taking it over.
  auto loser = WorkerLease::Claim(Dsn(), Short("takeover", 1));
  SnowflakeGenerator loser_ids{loser};
  const std::int64_t loser_last = loser_ids.Next();
  EXPECT_THROW(WorkerLease::Claim(Dsn(), Short("takeover", 1)), IdGeneratorError);  // still held

  // The process stalls (no renewals). Its local deadline (duration - margin)
  // passes before the server's lease_until: it stops issuing first.
  ASSERT_TRUE(test::WaitFor([&] { return !loser->Valid(); }));
  EXPECT_THROW((void)loser_ids.Next(), IdGeneratorError);

  // After the server-side expiry another process takes the id over.
  std::shared_ptr<WorkerLease> winner;
  ASSERT_TRUE(test::WaitFor([&] {
    try {
      winner = WorkerLease::Claim(Dsn(), Short("takeover", 1));
      return true;
    } catch (const IdGeneratorError&) {
      return false;  // still held on the server
    }
  }));
  EXPECT_EQ(winner->WorkerId(), loser->WorkerId());
  EXPECT_EQ(winner->ClaimVersion(), loser->ClaimVersion() + 1);  // the fencing token moved on
  // The winner starts after the loser's lease_until: no millisecond overlap.
  EXPECT_GT(winner->IssueFloorUnixMs(), DecodeSnowflake(loser_last).unix_ms);

  // The stalled process wakes up and tries to renew: the lease is lost for good.
  try {
    loser->Renew();
    FAIL() << "a taken-over lease was renewed";
  } catch (const IdGeneratorError& e) {
    EXPECT_NE(std::string(e.what()).find("taken over"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(loser->Lost());
  try {
    (void)loser_ids.Next();
    FAIL() << "the loser issued an ID after losing its worker id";
  } catch (const IdGeneratorError& e) {
    EXPECT_NE(std::string(e.what()).find("was lost"), std::string::npos) << e.what();
  }

  SnowflakeGenerator winner_ids{winner};
  const std::int64_t first = winner_ids.Next();
  EXPECT_GT(first, loser_last);
  EXPECT_GT(DecodeSnowflake(first).unix_ms, winner->IssueFloorUnixMs());

  // The loser's release must not free the winner's id.
  loser->Release();
  const auto rows = Query(
      "SELECT owner IS NOT NULL, claim_version FROM shardkit_worker_ids "
      "WHERE id_space = 'takeover'");
  EXPECT_TRUE(rows[0][0].as<bool>());
  EXPECT_EQ(rows[0][1].as<std::int64_t>(), winner->ClaimVersion());
}

TEST_F(WorkerLeasePg, BackgroundRenewalKeepsTheLease) {
  WorkerLeaseOptions o = Short("renewed", 1);
  o.renew_in_background = true;
  auto lease = WorkerLease::Claim(Dsn(), o);
  SnowflakeGenerator ids{lease};
  const auto first_deadline = lease->IssueDeadline();
  // Renewed past the end of the whole first lease: by then the first
  // lease_until on the server (first deadline + margin) has passed too.
  ASSERT_TRUE(test::WaitFor([&] { return lease->IssueDeadline() > first_deadline + o.lease_duration; }))
      << lease->LastRenewError().value_or("no renewal error");
  EXPECT_GT(WorkerLease::Clock::now(), first_deadline + o.safety_margin);
  EXPECT_TRUE(lease->Valid()) << lease->LastRenewError().value_or("");
  EXPECT_NO_THROW((void)ids.Next());
  EXPECT_THROW(WorkerLease::Claim(Dsn(), Short("renewed", 1)), IdGeneratorError);
}

TEST_F(WorkerLeasePg, ReleasedIdIsReusedAfterTheLastMillisecondIssued) {
  auto first = WorkerLease::Claim(Dsn(), Short("released", 1));
  std::int64_t last = 0;
  {
    SnowflakeGenerator ids{first};
    for (int i = 0; i < 10'000; ++i) last = ids.Next();
  }
  first->Release();
  EXPECT_FALSE(first->Valid());
  first->Release();  // idempotent

  auto second = WorkerLease::Claim(Dsn(), Short("released", 1));
  EXPECT_EQ(second->WorkerId(), first->WorkerId());
  EXPECT_EQ(second->ClaimVersion(), first->ClaimVersion() + 1);
  EXPECT_GE(second->IssueFloorUnixMs(), DecodeSnowflake(last).unix_ms);
  SnowflakeGenerator ids{second};
  EXPECT_GT(ids.Next(), last);
}

TEST_F(WorkerLeasePg, OneGeneratorPerLease) {
  auto lease = WorkerLease::Claim(Dsn(), Short("single", 8));
  {
    SnowflakeGenerator a{lease};
    EXPECT_THROW(SnowflakeGenerator{lease}, IdGeneratorError);
    EXPECT_THROW(BucketedIdGenerator{lease}, IdGeneratorError);
    (void)a.Next();
  }
  // Once the first generator is gone another may use the lease, after its
  // last millisecond.
  SnowflakeGenerator b{lease};
  EXPECT_NO_THROW((void)b.Next());
}

TEST_F(WorkerLeasePg, BucketedIdsFromALeasedWorker) {
  WorkerLeaseOptions o = Short("orders", 256);
  auto lease = WorkerLease::Claim(Dsn(), o);
  BucketedIdGenerator ids{lease};
  const std::int64_t id = ids.NextFor(CustomerId{4242});
  EXPECT_EQ(BucketOfId(id), BucketId{44});
  EXPECT_EQ(DecodeBucketedId(id).worker_id, lease->WorkerId());
}

TEST_F(WorkerLeasePg, MissingTableAndUnreachableServerAreClearErrors) {
  WorkerLeaseOptions o = Short("x", 1);
  o.table = "no_such_worker_table";
  try {
    (void)WorkerLease::Claim(Dsn(), o);
    FAIL();
  } catch (const IdGeneratorError& e) {
    EXPECT_NE(std::string(e.what()).find("sql/004_worker_ids.sql"), std::string::npos) << e.what();
  }
  try {
    const shardkit::Dsn unreachable{"host=127.0.0.1 port=1 dbname=x user=x password=secret connect_timeout=2"};
    (void)WorkerLease::Claim(unreachable, Short("x", 1));
    FAIL();
  } catch (const IdGeneratorError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << "password in message: " << e.what();
  }
  WorkerLeaseOptions bad = Short("x", 1);
  bad.renew_interval = 2000ms;  // longer than duration - margin
  EXPECT_THROW((void)WorkerLease::Claim(Dsn(), bad), ConfigError);
}

TEST_F(WorkerLeasePg, AReleaseThatCannotBeWrittenIsALibraryError) {
  Query("CREATE TABLE release_probe (LIKE shardkit_worker_ids INCLUDING ALL)");
  WorkerLeaseOptions o = Short("release_probe", 2);
  o.table = "release_probe";
  auto lease = WorkerLease::Claim(Dsn(), o);
  ASSERT_TRUE(lease->Valid());
  Query("DROP TABLE release_probe");
  try {
    lease->Release();
    FAIL() << "release into a dropped table did not fail";
  } catch (const IdGeneratorError& e) {
    EXPECT_NE(std::string(e.what()).find("releasing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(lease->Valid());       // it stopped issuing before it tried to write
  EXPECT_NO_THROW(lease->Release());  // idempotent: nothing left to do
}

}  // namespace
}  // namespace shardkit
