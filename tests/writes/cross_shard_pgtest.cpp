// Cross-shard transactions against the local servers (Cluster::TransactAcross):
// two customers on different shards change together or not at all, checked
// on each shard's rows, its pg_prepared_xacts and the catalog's coordinator
// log; and the recovery pass settles parts left prepared by a coordinator
// that stopped, by the catalog's decision.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <pqxx/pqxx>
#include <string>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "support/shardctl_runner.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;

class CrossShard : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = std::make_unique<test::ScratchCluster>("cross_shard_pgtest");
    ClusterOptions options;
    options.in_doubt_interval = 0ms;  // the tests run their passes themselves
    cluster_ = Cluster::Open(scratch_->Config(), options);
    // A customer on each shard (even split: buckets 0-31 on shard 0).
    for (int id = 1; alice_ == 0 || bob_ == 0 || carol_ == 0; ++id) {
      const int shard = ToInt(cluster_->Route(CustomerId{id}).shard);
      if (shard == 0 && alice_ == 0) {
        alice_ = id;
      } else if (shard == 0 && carol_ == 0) {
        carol_ = id;
      } else if (shard == 1 && bob_ == 0) {
        bob_ = id;
      }
    }
    for (const int id : {alice_, bob_, carol_}) {
      (void)cluster_->Execute("INSERT INTO store_credit (customer_id, balance_cents) VALUES ($1, 100)",
                              {std::to_string(id)});
    }
  }

  // Moves `cents` from one customer to another in one transaction.
  CrossShardOutcome Transfer(int from, int to, std::int64_t cents, const CrossShardOptions& options = {}) {
    CrossShardOutcome outcome;
    cluster_->TransactAcross(
        {CustomerId{from}, CustomerId{to}},
        [&](CrossShardTransaction& tx) {
          tx.On(CustomerId{from})
              .Execute("UPDATE store_credit SET balance_cents = balance_cents - $2 WHERE customer_id = $1",
                       {std::to_string(from), std::to_string(cents)});
          tx.On(CustomerId{to})
              .Execute("UPDATE store_credit SET balance_cents = balance_cents + $2 WHERE customer_id = $1",
                       {std::to_string(to), std::to_string(cents)});
        },
        options, &outcome);
    return outcome;
  }

  // The balance as the customer's shard has it, read there directly.
  std::int64_t Balance(int customer) const {
    const int shard = ToInt(cluster_->Route(CustomerId{customer}).shard);
    pqxx::connection c{scratch_->ShardDsn(shard).Reveal()};
    pqxx::nontransaction tx{c};
    return tx.exec_params("SELECT balance_cents FROM store_credit WHERE customer_id = $1", customer)[0][0]
        .as<std::int64_t>();
  }

  // Prepared transactions of shardkit's in shard `shard`'s database.
  int Prepared(int shard) const {
    pqxx::connection c{scratch_->ShardDsn(shard).Reveal()};
    pqxx::nontransaction tx{c};
    return tx
        .exec(
            "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE "
            "'shardkit:%'")[0][0]
        .as<int>();
  }

  int LogRows(const std::string& state = "") const {
    pqxx::connection c{scratch_->CatalogDsn().Reveal()};
    pqxx::nontransaction tx{c};
    return tx.exec_params("SELECT count(*) FROM shardkit_transactions WHERE $1 = '' OR state = $1", state)[0][0]
        .as<int>();
  }

  // A part prepared by hand on `shard`, as a coordinator that stopped
  // after its PREPARE would leave it: adds `cents` to the customer.
  void PrepareByHand(int shard, const std::string& id, int customer, std::int64_t cents) const {
    pqxx::connection c{scratch_->ShardDsn(shard).Reveal()};
    pqxx::nontransaction tx{c};
    tx.exec(
        fmt::format("BEGIN; UPDATE store_credit SET balance_cents = balance_cents + {} WHERE customer_id = {}; "
                    "PREPARE TRANSACTION 'shardkit:{}:{}'",
                    cents, customer, id, scratch_->Config().shards.at(static_cast<std::size_t>(shard)).name));
  }

  std::unique_ptr<test::ScratchCluster> scratch_;
  std::unique_ptr<Cluster> cluster_;
  int alice_ = 0;  // shard 0
  int bob_ = 0;    // shard 1
  int carol_ = 0;  // shard 0
};

TEST_F(CrossShard, TwoShardsCommitTogetherThroughTheCatalog) {
  std::vector<std::string> steps;
  CrossShardOptions options;
  options.on_step = [&](const CrossShardStep& step) {
    steps.push_back(step.shard ? fmt::format("{} {}", ToString(step.kind), ToInt(*step.shard)) : ToString(step.kind));
  };
  const CrossShardOutcome outcome = Transfer(alice_, bob_, 25, options);
  EXPECT_TRUE(outcome.two_phase);
  EXPECT_FALSE(outcome.transaction_id.empty());
  ASSERT_EQ(outcome.shards.size(), 2U);
  EXPECT_TRUE(outcome.left_to_recovery.empty());
  EXPECT_EQ(outcome.attempts, 1);
  EXPECT_NE(outcome.token.Find(ShardId{0}), nullptr);
  EXPECT_NE(outcome.token.Find(ShardId{1}), nullptr);
  EXPECT_EQ(steps,
            (std::vector<std::string>{"logged", "prepared 0", "prepared 1", "decided", "committed 0", "committed 1"}));
  EXPECT_EQ(Balance(alice_), 75);
  EXPECT_EQ(Balance(bob_), 125);
  EXPECT_EQ(Prepared(0) + Prepared(1), 0);
  // Its row is left to the next recovery pass past the bound (no round
  // trip for it on the commit path).
  EXPECT_EQ(LogRows("commit"), 1);
  InDoubtOptions soon;
  soon.settle_after = 1ms;
  std::this_thread::sleep_for(5ms);
  const InDoubtReport pass = RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn(), soon);
  EXPECT_EQ(pass.rows_forgotten, 1);
  EXPECT_TRUE(pass.committed.empty() && pass.rolled_back.empty());
  EXPECT_EQ(LogRows(), 0);
}

TEST_F(CrossShard, KeysOnOneShardCommitPlainly) {
  int steps = 0;
  CrossShardOptions options;
  options.on_step = [&](const CrossShardStep&) { ++steps; };
  const CrossShardOutcome outcome = Transfer(alice_, carol_, 40, options);
  EXPECT_FALSE(outcome.two_phase);
  EXPECT_TRUE(outcome.transaction_id.empty());
  ASSERT_EQ(outcome.shards.size(), 1U);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(outcome.token.Find(ShardId{0}), nullptr);
  EXPECT_EQ(Balance(alice_), 60);
  EXPECT_EQ(Balance(carol_), 140);
  EXPECT_EQ(LogRows(), 0);
}

TEST_F(CrossShard, AStatementErrorOnOneShardKeepsNothingOnEither) {
  // Bob's part succeeds first, then Alice's would go below zero (CHECK).
  try {
    cluster_->TransactAcross({CustomerId{bob_}, CustomerId{alice_}}, [&](CrossShardTransaction& tx) {
      tx.On(CustomerId{bob_})
          .Execute("UPDATE store_credit SET balance_cents = balance_cents + 500 WHERE customer_id = $1",
                   {std::to_string(bob_)});
      tx.On(CustomerId{alice_})
          .Execute("UPDATE store_credit SET balance_cents = balance_cents - 500 WHERE customer_id = $1",
                   {std::to_string(alice_)});
    });
    FAIL() << "a CHECK violation must fail the transaction";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "23514") << e.what();
    EXPECT_EQ(ToInt(e.shard()), 0) << e.what();
  }
  // The function's own exception: passed on, nothing kept.
  EXPECT_THROW(cluster_->TransactAcross({CustomerId{alice_}, CustomerId{bob_}},
                                        [&](CrossShardTransaction& tx) {
                                          tx.On(CustomerId{bob_})
                                              .Execute(
                                                  "UPDATE store_credit SET balance_cents = 0 WHERE customer_id = $1",
                                                  {std::to_string(bob_)});
                                          throw std::runtime_error("the caller changed its mind");
                                        }),
               std::runtime_error);
  // A key it was not opened with is refused.
  EXPECT_THROW(cluster_->TransactAcross({CustomerId{alice_}, CustomerId{bob_}},
                                        [&](CrossShardTransaction& tx) { (void)tx.On(CustomerId{carol_}); }),
               Error);
  EXPECT_EQ(Balance(alice_), 100);
  EXPECT_EQ(Balance(bob_), 100);
  EXPECT_EQ(Prepared(0) + Prepared(1), 0);
  EXPECT_EQ(LogRows(), 0);
}

TEST_F(CrossShard, APrepareThatFailsRollsBackThePartsAlreadyPrepared) {
  // A deferred constraint on shard 1 fails at PREPARE, after shard 0's part
  // is prepared (parts prepare in shard order).
  scratch_->ExecOnShard(1,
                        "CREATE FUNCTION no_thirteen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF "
                        "NEW.balance_cents = 113 THEN RAISE EXCEPTION 'no 113' USING ERRCODE = 'P0013'; END IF; "
                        "RETURN NULL; END $$; CREATE CONSTRAINT TRIGGER no_thirteen AFTER UPDATE ON store_credit "
                        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION no_thirteen()");
  std::vector<std::string> steps;
  CrossShardOptions options;
  options.on_step = [&](const CrossShardStep& step) { steps.push_back(ToString(step.kind)); };
  try {
    (void)Transfer(alice_, bob_, 13, options);
    FAIL() << "the PREPARE on shard 1 must fail";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "P0013") << e.what();
    EXPECT_EQ(ToInt(e.shard()), 1) << e.what();
    // The message names the customers, the step and the shard.
    const std::string what = e.what();
    EXPECT_NE(what.find("at PREPARE TRANSACTION on shard 1"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("customer {}", bob_)), std::string::npos) << what;
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"logged", "prepared"}));
  EXPECT_EQ(Balance(alice_), 100);
  EXPECT_EQ(Balance(bob_), 100);
  EXPECT_EQ(Prepared(0) + Prepared(1), 0) << "shard 0's prepared part is rolled back";
  EXPECT_EQ(LogRows(), 0);
}

TEST_F(CrossShard, AfterTheDecisionTheTransactionIsCommittedByRecovery) {
  // The coordinator stops right after the decision (its step callback
  // throws there): both parts stay prepared, neither shard shows it yet.
  CrossShardOptions options;
  options.on_step = [](const CrossShardStep& step) {
    if (step.kind == CrossShardStep::Kind::kDecided) throw std::runtime_error("coordinator stops here");
  };
  EXPECT_THROW((void)Transfer(alice_, bob_, 30, options), std::runtime_error);
  EXPECT_EQ(Prepared(0), 1);
  EXPECT_EQ(Prepared(1), 1);
  EXPECT_EQ(Balance(alice_), 100);
  EXPECT_EQ(LogRows("commit"), 1);

  std::vector<std::string> failures;
  const auto listed = ListInDoubt(cluster_->Resolver(), scratch_->Config().catalog_dsn, failures);
  ASSERT_EQ(listed.size(), 2U);
  EXPECT_EQ(listed[0].decision, "commit");
  EXPECT_TRUE(failures.empty());

  // Shard 0's part committed by someone else (a coordinator stopped between
  // its commits leaves this); the pass commits the other one.
  {
    pqxx::connection c{scratch_->ShardDsn(0).Reveal()};
    pqxx::nontransaction tx{c};
    tx.exec("COMMIT PREPARED " + tx.quote(listed[0].gid));
  }
  EXPECT_EQ(Balance(alice_), 70);
  EXPECT_EQ(Balance(bob_), 100);
  // Decided: committed at once, whatever its age.
  const InDoubtReport report = RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn());
  EXPECT_EQ(report.committed.size(), 1U);
  EXPECT_TRUE(report.rolled_back.empty());
  EXPECT_TRUE(report.failures.empty()) << report.failures.front();
  EXPECT_EQ(Balance(alice_), 70);
  EXPECT_EQ(Balance(bob_), 130);
  EXPECT_EQ(Prepared(0) + Prepared(1), 0);
  // Its row goes once a pass past the bound finds no part of it.
  InDoubtOptions soon;
  soon.settle_after = 1ms;
  std::this_thread::sleep_for(5ms);
  const InDoubtReport later = RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn(), soon);
  EXPECT_EQ(later.rows_forgotten, 1) << (later.failures.empty() ? "" : later.failures.front());
  EXPECT_EQ(LogRows(), 0);
}

TEST_F(CrossShard, UndecidedPartsAreRolledBackOnlyPastTheBound) {
  // Coordinators that stopped before their decision: one with its row
  // still 'preparing', one whose row is gone (or never written).
  // (Ids of this database's own: gids are unique per server.)
  const std::string t1 = scratch_->DatabaseName() + "-t1";
  scratch_->ExecOnCatalog(
      fmt::format("INSERT INTO shardkit_transactions (transaction_id, state, shards) VALUES ('{}', 'preparing', "
                  "'{{shard0,shard1}}')",
                  t1));
  PrepareByHand(0, t1, alice_, 7);
  PrepareByHand(1, t1, bob_, 7);
  PrepareByHand(0, scratch_->DatabaseName() + "-t2", carol_, 9);  // (bob's row is locked by t1)
  InDoubtOptions options;
  options.settle_after = 2s;
  InDoubtReport young = RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn(), options);
  EXPECT_EQ(young.waiting.size(), 3U) << "younger than the bound: left to their coordinators";
  EXPECT_EQ(Prepared(0) + Prepared(1), 3);

  options.settle_after = 100ms;
  std::this_thread::sleep_for(200ms);
  const InDoubtReport old = RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn(), options);
  EXPECT_EQ(old.rolled_back.size(), 3U);
  EXPECT_TRUE(old.committed.empty());
  EXPECT_EQ(old.rows_aborted, 1);
  EXPECT_EQ(LogRows("abort"), 1) << "the row says abort before any part is rolled back";
  EXPECT_EQ(Prepared(0) + Prepared(1), 0);
  EXPECT_EQ(Balance(alice_), 100);
  EXPECT_EQ(Balance(bob_), 100);
  EXPECT_EQ(Balance(carol_), 100);
  // A coordinator that comes back now cannot decide 'commit': its UPDATE
  // finds no 'preparing' row.
  scratch_->ExecOnCatalog(fmt::format(
      "UPDATE shardkit_transactions SET state = 'commit' WHERE transaction_id = '{}' AND state = 'preparing'", t1));
  EXPECT_EQ(LogRows("abort"), 1);
  // Decided before this pass listed the shards, and no part left: deleted.
  EXPECT_EQ(RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn(), options).rows_forgotten, 1);
}

TEST_F(CrossShard, ShardctlShowsThePartsInDoubtAndRecoverSettlesThem) {
  CrossShardOptions options;
  options.on_step = [](const CrossShardStep& step) {
    if (step.kind == CrossShardStep::Kind::kDecided) throw std::runtime_error("coordinator stops here");
  };
  EXPECT_THROW((void)Transfer(alice_, bob_, 10, options), std::runtime_error);
  const ClusterConfig& config = scratch_->Config();
  const auto shards = test::RunShardctl(SHARDCTL_PATH, config, "--json shards");
  ASSERT_EQ(shards.status, 0) << shards.out;
  for (const auto& shard : nlohmann::json::parse(shards.out).at("shards")) {
    ASSERT_EQ(shard.at("in_doubt").size(), 1U) << shards.out;
    EXPECT_EQ(shard.at("in_doubt").at(0).at("decision"), "commit");
    EXPECT_GE(shard.at("in_doubt").at(0).at("age_ms").get<std::int64_t>(), 0);
  }
  const auto text = test::RunShardctl(SHARDCTL_PATH, config, "shards");
  EXPECT_NE(text.out.find("in doubt   1 prepared cross-shard part(s)"), std::string::npos) << text.out;

  const auto recover = test::RunShardctl(SHARDCTL_PATH, config, "--json recover");
  ASSERT_EQ(recover.status, 0) << recover.out;
  const auto report = nlohmann::json::parse(recover.out);
  EXPECT_EQ(report.at("committed").size(), 2U) << recover.out;
  EXPECT_EQ(report.at("failures").size(), 0U) << recover.out;
  EXPECT_EQ(Balance(alice_), 90);
  EXPECT_EQ(Balance(bob_), 110);
  EXPECT_EQ(Prepared(0) + Prepared(1), 0);

  // A catalog it cannot reach: exit 1, named.
  ClusterConfig broken = config;
  broken.catalog_dsn = Dsn("host=127.0.0.1 port=1 dbname=nowhere user=nobody connect_timeout=1");
  const auto failed = test::RunShardctl(SHARDCTL_PATH, broken, "recover");
  EXPECT_EQ(failed.status, 1) << failed.out;
  EXPECT_NE(failed.out.find("catalog"), std::string::npos) << failed.out;
}

TEST_F(CrossShard, APreparedPartHoldsItsBucketsMoveUntilItIsSettled) {
  // Decided and prepared on both shards, not committed (the coordinator
  // stopped after the decision).
  CrossShardOptions options;
  options.on_step = [](const CrossShardStep& step) {
    if (step.kind == CrossShardStep::Kind::kDecided) throw std::runtime_error("coordinator stops here");
  };
  EXPECT_THROW((void)Transfer(alice_, bob_, 30, options), std::runtime_error);
  ASSERT_EQ(Prepared(0), 1);

  // A move of Alice's bucket cannot pass it: the prepared part holds the
  // bucket's write lock and counts as a running transaction for the move's
  // starting point. The move is aborted, the data untouched.
  const BucketId bucket = ShardKey(CustomerId{alice_}).bucket();
  MoveOptions quick;
  quick.slot_timeout = 1s;
  quick.drain_timeout = 1s;
  quick.cleanup_grace = 0ms;
  {
    BucketMover mover{scratch_->Config(), quick};
    EXPECT_THROW((void)mover.Move(bucket, ShardId{1}), MoveError);
  }
  EXPECT_EQ(Prepared(0), 1);
  EXPECT_EQ(ToInt(cluster_->Route(CustomerId{alice_}).shard), 0);

  // Settled, the move goes through and carries the committed balance.
  EXPECT_EQ(RecoverInDoubt(cluster_->Resolver(), scratch_->CatalogDsn()).committed.size(), 2U);
  {
    BucketMover mover{scratch_->Config(), quick};
    (void)mover.Move(bucket, ShardId{1});
  }
  (void)cluster_->Watcher()->RefreshNow();
  ASSERT_EQ(ToInt(cluster_->Route(CustomerId{alice_}).shard), 1);
  EXPECT_EQ(Balance(alice_), 70);
  // And the next transfer between them runs on one shard, plainly.
  EXPECT_FALSE(Transfer(alice_, bob_, 5).two_phase);
  EXPECT_EQ(Balance(alice_), 65);
  EXPECT_EQ(Balance(bob_), 135);
}

TEST_F(CrossShard, WithoutACatalogSeveralShardsAreRefused) {
  ClusterConfig config = scratch_->Config();
  config.catalog_dsn.reset();
  config.directory_source = DirectorySource::kConfig;
  config.directory = BucketDirectory::EvenSplit(2, 1);
  const auto plain = Cluster::Open(config);
  try {
    plain->TransactAcross({CustomerId{alice_}, CustomerId{bob_}}, [](CrossShardTransaction&) {});
    FAIL() << "two shards without a coordinator log";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[catalog]"), std::string::npos) << e.what();
  }
  // One shard needs no catalog.
  plain->TransactAcross({CustomerId{alice_}, CustomerId{carol_}}, [&](CrossShardTransaction& tx) {
    tx.On(CustomerId{carol_})
        .Execute("UPDATE store_credit SET balance_cents = 1 WHERE customer_id = $1", {std::to_string(carol_)});
  });
  EXPECT_EQ(Balance(carol_), 1);
}

}  // namespace
}  // namespace shardkit
