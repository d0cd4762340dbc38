// Routed transactions against the local servers: a one-statement write's
// whole transaction in one round trip (its rows, count and read token), and
// the retry classifier's decisions, each checked on the shard's data: a
// statement's error is thrown at once and writes nothing, a refusal naming
// the new owner is followed, a serialization failure and a session lost
// before COMMIT are run again, a connection lost once COMMIT was sent is
// OutcomeUnknown and never run again.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <pqxx/pqxx>
#include <string>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/writes/routed.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;

// 4242 is in bucket 44: shard 1 of the even split over two shards.
constexpr CustomerId kCustomer{4242};
constexpr int kHome = 1;

const std::string kInsert =
    "INSERT INTO customers (customer_id, bucket, name, email) VALUES ($1::int, bucket_of($1::int), $2::text, $2::text "
    "|| '@example.com') "
    "RETURNING customer_id";

class RoutedWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<test::ScratchCluster>("routed_pgtest");
    resolver_ = cluster_->MakeResolver();
    routed_ = std::make_unique<RoutedTransactions>(*resolver_);
  }

  // The customer's name on shard `shard`, read there directly ("" if absent).
  std::string NameOn(int shard) const {
    pqxx::connection c{cluster_->ShardDsn(shard).Reveal()};
    pqxx::nontransaction tx{c};
    const auto r = tx.exec_params("SELECT name FROM customers WHERE customer_id = $1", ToInt(kCustomer));
    return r.empty() ? std::string() : r[0][0].as<std::string>();
  }

  void Insert(const std::string& name) {
    (void)routed_->Write(kCustomer, kInsert, {std::to_string(ToInt(kCustomer)), name});
  }

  std::unique_ptr<test::ScratchCluster> cluster_;
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<RoutedTransactions> routed_;
};

TEST_F(RoutedWrites, AWriteCommitsWithItsRowsCountAndReadToken) {
  RoutedOutcome outcome;
  const pg::Rows rows = routed_->Write(kCustomer, kInsert, {std::to_string(ToInt(kCustomer)), "ada"}, {}, &outcome);
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(std::string(rows[0][0].c_str()), "4242");
  EXPECT_EQ(rows.affected_rows(), 1U);
  EXPECT_EQ(ToInt(outcome.shard), kHome);
  EXPECT_EQ(outcome.attempts, 1);
  const auto* at = outcome.token.Find(ShardId{kHome});
  ASSERT_NE(at, nullptr) << "a write returns its read token";
  EXPECT_GT(at->lsn, 0U);
  EXPECT_LE(at->lsn, test::WalPosition(cluster_->ShardDsn(kHome)));
  EXPECT_EQ(NameOn(kHome), "ada");
  EXPECT_EQ(NameOn(0), "");

  // Without a token: committed the same, no position read.
  RoutedOptions no_token;
  no_token.read_token = false;
  const pg::Rows updated = routed_->Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                                          {std::to_string(ToInt(kCustomer)), "grace"}, no_token, &outcome);
  EXPECT_EQ(updated.affected_rows(), 1U);
  EXPECT_TRUE(outcome.token.Empty());
  EXPECT_EQ(NameOn(kHome), "grace");
  // The pool's connection went back clean after each.
  EXPECT_EQ(resolver_->Pool(ShardId{kHome}).Stats().broken, 0U);
}

// A statement the deadline's statement_timeout cuts: shardkit's error with
// 57014 (the call ran out of time), one attempt, nothing kept; as a
// one-statement write and inside a transaction's callback alike.
TEST_F(RoutedWrites, AStatementCutByTheDeadlineIsAShardErrorAndKeepsNothing) {
  Insert("ada");
  const std::string slow =
      "UPDATE customers SET name = 'slow' WHERE customer_id = $1 AND (SELECT true FROM pg_sleep(5))";
  const auto quick = [] {
    RoutedOptions options;
    options.deadline = std::chrono::steady_clock::now() + 400ms;
    return options;
  };
  RoutedOutcome outcome;
  try {
    (void)routed_->Write(kCustomer, slow, {std::to_string(ToInt(kCustomer))}, quick(), &outcome);
    FAIL() << "a statement past the deadline committed";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "57014") << e.what();
    EXPECT_NE(std::string(e.what()).find("the deadline passed"), std::string::npos) << e.what();
    EXPECT_EQ(ToInt(e.shard()), kHome);
  }
  EXPECT_EQ(outcome.attempts, 1);
  try {
    routed_->Run(
        kCustomer, [&](pqxx::transaction_base& tx, const RoutedContext&) { tx.exec_params(slow, ToInt(kCustomer)); },
        quick());
    FAIL() << "a transaction past the deadline committed";
  } catch (const ShardQueryError& e) {
    EXPECT_EQ(e.sqlstate(), "57014") << e.what();
  }
  EXPECT_EQ(NameOn(kHome), "ada");
}

TEST_F(RoutedWrites, AStatementsErrorIsThrownAtOnceAndWritesNothing) {
  Insert("ada");
  RoutedOutcome outcome;
  try {
    (void)routed_->Write(kCustomer, kInsert, {std::to_string(ToInt(kCustomer)), "twice"}, {}, &outcome);
    FAIL() << "a duplicate key was written";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "23505") << e.what();
  }
  EXPECT_EQ(outcome.attempts, 1);
  EXPECT_EQ(NameOn(kHome), "ada");

  // A parameter count the statement does not take (08P01 from a server that
  // stays up): the statement's error, not a lost connection to retry.
  try {
    (void)routed_->Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                         {std::to_string(ToInt(kCustomer))}, {}, &outcome);
    FAIL() << "a statement short of a parameter ran";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "08P01") << e.what();
  }
  EXPECT_EQ(outcome.attempts, 1);
  // The connections are still good: the next write runs on one.
  EXPECT_EQ(routed_
                ->Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                        {std::to_string(ToInt(kCustomer)), "grace"})
                .affected_rows(),
            1U);
  EXPECT_EQ(NameOn(kHome), "grace");
}

TEST_F(RoutedWrites, ARefusalNamingTheNewOwnerIsFollowedAtOnce) {
  // Bucket 44 moved to shard 0 behind this router's back: shard 1 retired
  // it naming shard 0, which owns it now; the directory still says shard 1.
  const int bucket = ToInt(BucketOf(kCustomer));
  cluster_->ExecOnShard(kHome, fmt::format("UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 0 "
                                           "WHERE bucket = {}",
                                           bucket));
  cluster_->ExecOnShard(0, fmt::format("INSERT INTO shardkit_bucket_ownership (bucket, state, directory_version) "
                                       "VALUES ({}, 'owned', 2)",
                                       bucket));
  RoutedOutcome outcome;
  (void)routed_->Write(kCustomer, kInsert, {std::to_string(ToInt(kCustomer)), "ada"}, {}, &outcome);
  EXPECT_EQ(ToInt(outcome.shard), 0);
  EXPECT_EQ(outcome.attempts, 2);
  // Refused at the fence's check of the bucket, before the statement.
  EXPECT_EQ(outcome.refused_not_owned + outcome.refused_not_readable, 1);
  EXPECT_EQ(NameOn(0), "ada");
  EXPECT_EQ(NameOn(kHome), "");
}

// Holds the customer's row locked on its shard until Release().
class RowLock {
 public:
  RowLock(const Dsn& dsn, CustomerId customer) : connection_(dsn.Reveal()), tx_(connection_) {
    tx_.exec_params("UPDATE customers SET name = name WHERE customer_id = $1", ToInt(customer));
  }
  void Release() { tx_.commit(); }

 private:
  pqxx::connection connection_;
  pqxx::work tx_;
};

// Waits until a session on the shard waits for a lock while running `like`.
int WaitForLockWaiter(const Dsn& admin, const std::string& like) {
  pqxx::connection c{admin.Reveal()};
  for (int i = 0; i < 200; ++i) {
    pqxx::nontransaction tx{c};
    const auto r = tx.exec_params(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND datname = "
        "current_database()",
        like);
    if (!r.empty()) return r[0][0].as<int>();
    std::this_thread::sleep_for(25ms);
  }
  ADD_FAILURE() << "no session waited for the row lock";
  return 0;
}

TEST_F(RoutedWrites, ASerializationFailureIsRunAgain) {
  Insert("ada");
  RowLock lock{cluster_->ShardDsn(kHome), kCustomer};
  RoutedOptions repeatable;
  repeatable.isolation = Isolation::kRepeatableRead;
  RoutedOutcome outcome;
  auto write = std::async(std::launch::async, [&] {
    return routed_->Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                          {std::to_string(ToInt(kCustomer)), "grace"}, repeatable, &outcome);
  });
  (void)WaitForLockWaiter(cluster_->AdminDsn(kHome), "UPDATE customers SET name = $2%");
  // The row changes under the waiting REPEATABLE READ update: 40001.
  lock.Release();
  EXPECT_EQ(write.get().affected_rows(), 1U);
  EXPECT_EQ(outcome.attempts, 2);
  EXPECT_EQ(outcome.retried_other, 1);
  EXPECT_EQ(NameOn(kHome), "grace");
}

TEST_F(RoutedWrites, AWriteWhoseSessionTheServerEndedBeforeCommitRunsAgain) {
  Insert("ada");
  RowLock lock{cluster_->ShardDsn(kHome), kCustomer};
  RoutedOutcome outcome;
  auto write = std::async(std::launch::async, [&] {
    return routed_->Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                          {std::to_string(ToInt(kCustomer)), "grace"}, {}, &outcome);
  });
  const int pid = WaitForLockWaiter(cluster_->AdminDsn(kHome), "UPDATE customers SET name = $2%");
  {
    // The server answers the waiting UPDATE with its FATAL: the steps after
    // it, the COMMIT among them, never ran.
    pqxx::connection admin{cluster_->AdminDsn(kHome).Reveal()};
    pqxx::nontransaction tx{admin};
    tx.exec_params("SELECT pg_terminate_backend($1)", pid);
  }
  (void)WaitForLockWaiter(cluster_->AdminDsn(kHome), "UPDATE customers SET name = $2%");
  lock.Release();
  EXPECT_EQ(write.get().affected_rows(), 1U);
  EXPECT_EQ(outcome.attempts, 2);
  EXPECT_EQ(outcome.retried_other, 1);
  EXPECT_EQ(NameOn(kHome), "grace");
}

TEST(RoutedWritesOnACrashingServer, AConnectionLostOnceCommitWasSentIsOutcomeUnknownAndNotRunAgain) {
  test::TemporaryServer server;
  const ShardConfig on_it{"tmp", server.AppDsn(), server.Dsn()};
  test::ScratchCluster cluster{"routed_crash_pgtest", test::ScratchOptions().Shards(2).On({on_it})};
  auto resolver = cluster.MakeResolver();
  RoutedTransactions routed{*resolver};
  (void)routed.Write(kCustomer, kInsert, {std::to_string(ToInt(kCustomer)), "ada"});
  auto lock = std::make_unique<RowLock>(cluster.ShardDsn(kHome), kCustomer);
  RoutedOutcome outcome;
  auto write = std::async(std::launch::async, [&] {
    (void)routed.Write(kCustomer, "UPDATE customers SET name = $2 WHERE customer_id = $1",
                       {std::to_string(ToInt(kCustomer)), "grace"}, {}, &outcome);
  });
  (void)WaitForLockWaiter(cluster.AdminDsn(kHome), "UPDATE customers SET name = $2%");
  // The server dies without a word to its clients: the write's COMMIT went
  // out with its statement, and nothing says how far the server got.
  server.Kill();
  EXPECT_THROW(write.get(), OutcomeUnknown);
  EXPECT_EQ(outcome.attempts, 1) << "never run again";
  EXPECT_EQ(routed.Stats().outcome_unknown, 1U);
  lock.reset();
  server.Start();
  pqxx::connection c{cluster.ShardDsn(kHome).Reveal()};
  pqxx::nontransaction tx{c};
  EXPECT_EQ(tx.exec_params1("SELECT name FROM customers WHERE customer_id = $1", ToInt(kCustomer))[0].as<std::string>(),
            "ada")
      << "killed while it waited: the update never ran";
}

TEST_F(RoutedWrites, AFunctionsSessionEndedBeforeCommitRunsAgain) {
  RoutedOutcome outcome;
  routed_->Run(
      kCustomer,
      [&](pqxx::transaction_base& tx, const RoutedContext& at) {
        tx.exec_params(kInsert, ToInt(kCustomer), "ada");
        // The first attempt's session ends before its COMMIT: nothing of it stays.
        if (at.attempt == 1) tx.exec("SELECT pg_terminate_backend(pg_backend_pid())");
      },
      {}, &outcome);
  EXPECT_EQ(outcome.attempts, 2);
  EXPECT_EQ(outcome.retried_other, 1);
  EXPECT_EQ(NameOn(kHome), "ada");
}

TEST_F(RoutedWrites, AFunctionThatSwallowsAStatementsErrorCommitsNothing) {
  Insert("ada");
  try {
    routed_->Run(kCustomer, [&](pqxx::transaction_base& tx, const RoutedContext&) {
      tx.exec_params("UPDATE customers SET name = 'grace' WHERE customer_id = $1", ToInt(kCustomer));
      try {
        tx.exec("SELECT 1 / 0");
      } catch (const pqxx::sql_error&) {
        // swallowed: the transaction is aborted all the same
      }
    });
    FAIL() << "an aborted transaction was reported committed";
  } catch (const ShardQueryError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing was committed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(NameOn(kHome), "ada");
}

}  // namespace
}  // namespace shardkit
