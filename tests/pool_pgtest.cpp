// ConnectionPool against real servers: bounds, deadlines, the fate of
// returned connections, and recovery after a server comes back.
#include "shardkit/pool.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <pqxx/pqxx>
#include <regex>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/resolver.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using shardkit::ConnectionPool;
using shardkit::PoolOptions;

PoolOptions Small(int size, int waiters = 16) {
  PoolOptions options;
  options.max_size = size;
  options.max_waiters = waiters;
  options.connect_timeout = 2s;
  options.acquire_timeout = 1s;
  return options;
}

std::string ShardDsn(int shard) { return shardkit::test::LoadTestConfig().shards.at(static_cast<std::size_t>(shard)).dsn; }

int BackendPid(pqxx::connection_base& c) {
  pqxx::nontransaction tx{c};
  return tx.exec("SELECT pg_backend_pid()")[0][0].as<int>();
}

TEST(ConnectionPool, ReusesAnIdleConnection) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(2)};
  int first_pid = 0;
  {
    auto lease = pool.Acquire();
    EXPECT_TRUE(lease.FreshConnection());
    first_pid = BackendPid(*lease);
  }
  auto lease = pool.Acquire();
  EXPECT_FALSE(lease.FreshConnection());
  EXPECT_EQ(BackendPid(*lease), first_pid);
  const auto stats = pool.Stats();
  EXPECT_EQ(stats.acquired, 2U);
  EXPECT_EQ(stats.connects, 1U);
  EXPECT_EQ(stats.in_use, 1);
}

TEST(ConnectionPool, ExhaustionTimesOutWithCountsInsteadOfHanging) {
  ConnectionPool pool{shardkit::ShardId{1}, ShardDsn(1), Small(2)};
  auto a = pool.Acquire();
  auto b = pool.Acquire();
  const auto started = Clock::now();
  try {
    (void)pool.Acquire(Clock::now() + 200ms);
    FAIL() << "expected PoolTimeout";
  } catch (const shardkit::PoolTimeout& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.shard(), shardkit::ShardId{1});
    EXPECT_NE(message.find("2 of 2 in use"), std::string::npos) << message;
    EXPECT_NE(message.find("shard 1"), std::string::npos) << message;
  }
  const auto waited = Clock::now() - started;
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 5s);  // returned at its deadline, not hung
  const auto stats = pool.Stats();
  EXPECT_EQ(stats.timeouts, 1U);
  EXPECT_EQ(stats.in_use, 2);
}

TEST(ConnectionPool, WaiterBoundRejectsAtOnce) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(1, 0)};
  auto held = pool.Acquire();
  const auto started = Clock::now();
  EXPECT_THROW((void)pool.Acquire(Clock::now() + 5s), shardkit::PoolExhausted);
  EXPECT_LT(Clock::now() - started, 1s);
  EXPECT_EQ(pool.Stats().rejected, 1U);
}

TEST(ConnectionPool, AWaiterGetsTheReleasedConnection) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(1)};
  auto held = std::make_unique<ConnectionPool::Lease>(pool.Acquire());
  auto waiter = std::async(std::launch::async, [&] {
    auto lease = pool.Acquire(Clock::now() + 5s);
    return BackendPid(*lease);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(pool.Stats().waiting, 1);
  const int pid = BackendPid(**held);
  held.reset();
  EXPECT_EQ(waiter.get(), pid);
  EXPECT_EQ(pool.Stats().waited, 1U);
}

TEST(ConnectionPool, ConnectionLeftMidTransactionIsDiscarded) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(2)};
  int pid = 0;
  {
    auto lease = pool.Acquire();
    pid = BackendPid(*lease);
    pqxx::nontransaction tx{*lease};
    tx.exec("BEGIN");  // the session is now inside a transaction the pool did not see end
  }
  auto stats = pool.Stats();
  EXPECT_EQ(stats.discarded_in_transaction, 1U);
  EXPECT_EQ(stats.idle, 0);
  auto lease = pool.Acquire();
  EXPECT_TRUE(lease.FreshConnection());
  EXPECT_NE(BackendPid(*lease), pid);
}

TEST(ConnectionPool, BrokenConnectionIsDroppedOnRelease) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(2)};
  {
    auto lease = pool.Acquire();
    pqxx::nontransaction tx{*lease};
    EXPECT_THROW(tx.exec("SELECT pg_terminate_backend(pg_backend_pid())"), pqxx::broken_connection);
  }
  EXPECT_EQ(pool.Stats().broken, 1U);
  EXPECT_EQ(pool.Stats().idle, 0);
  auto lease = pool.Acquire();
  pqxx::nontransaction tx{*lease};
  EXPECT_EQ(tx.exec("SELECT 1")[0][0].as<int>(), 1);
}

TEST(ConnectionPool, IdleConnectionKilledByTheServerIsReplacedUnnoticed) {
  ConnectionPool pool{shardkit::ShardId{1}, ShardDsn(1), Small(2)};
  int pid = 0;
  {
    auto lease = pool.Acquire();
    pid = BackendPid(*lease);
  }
  {
    pqxx::connection admin{ShardDsn(1)};
    pqxx::nontransaction tx{admin};
    tx.exec_params("SELECT pg_terminate_backend($1)", pid);
  }
  std::this_thread::sleep_for(100ms);  // let the termination reach the socket
  auto lease = pool.Acquire();
  pqxx::nontransaction tx{*lease};
  EXPECT_EQ(tx.exec("SELECT 1")[0][0].as<int>(), 1);
  EXPECT_EQ(pool.Stats().broken, 1U);
}

TEST(ConnectionPool, WrongPasswordIsReportedWithoutThePassword) {
  const std::string real = ShardDsn(0);
  ASSERT_NE(real.find("password="), std::string::npos) << "the lab config uses password authentication";
  const std::string dsn = std::regex_replace(real, std::regex(R"(password=\S+)"), "password=not-the-real-pw9");
  ConnectionPool pool{shardkit::ShardId{0}, dsn, Small(1)};
  try {
    (void)pool.Acquire();
    FAIL() << "expected ShardUnavailable";
  } catch (const shardkit::ShardUnavailable& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find("not-the-real-pw9"), std::string::npos) << message;
    EXPECT_NE(message.find("password=***"), std::string::npos) << message;
    EXPECT_NE(message.find("shard 0"), std::string::npos) << message;
  }
  EXPECT_EQ(pool.Stats().connect_failures, 1U);
  EXPECT_EQ(pool.Stats().in_use, 0);
}

// A stopped shard fails fast and clearly, the other keeps serving, and the
// pool serves again once the server is back, without being rebuilt.
TEST(ConnectionPool, StoppedShardFailsClearlyAndRecoversWhenStarted) {
  shardkit::test::TemporaryServer server;
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  pools.push_back(std::make_unique<ConnectionPool>(shardkit::ShardId{0}, ShardDsn(0), Small(2)));
  pools.push_back(std::make_unique<ConnectionPool>(shardkit::ShardId{1}, server.Dsn(), Small(2)));
  shardkit::BucketShardResolver resolver{shardkit::BucketDirectory::EvenSplit(2), std::move(pools)};
  auto query_one = [](ConnectionPool& pool) {
    auto lease = pool.Acquire();
    pqxx::nontransaction tx{*lease};
    return tx.exec("SELECT 1")[0][0].as<int>();
  };
  ASSERT_EQ(query_one(resolver.PoolFor(shardkit::CustomerId{4242})), 1);  // shard 1 works and leaves an idle connection

  server.Stop();
  const auto started = Clock::now();
  try {
    (void)query_one(resolver.PoolFor(shardkit::CustomerId{4242}));
    FAIL() << "expected ShardUnavailable";
  } catch (const shardkit::ShardUnavailable& e) {
    EXPECT_EQ(e.shard(), shardkit::ShardId{1});
    EXPECT_NE(std::string(e.what()).find("shard 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unreachable"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - started, resolver.Pool(shardkit::ShardId{1}).Options().connect_timeout + 1s);
  EXPECT_EQ(query_one(resolver.PoolFor(shardkit::CustomerId{4243})), 1);  // shard 0 keeps serving

  server.Start();
  EXPECT_EQ(query_one(resolver.PoolFor(shardkit::CustomerId{4242})), 1);  // same pool, no restart
  const auto stats = resolver.Pool(shardkit::ShardId{1}).Stats();
  EXPECT_GE(stats.broken, 1U);           // the idle connection from before the stop
  EXPECT_GE(stats.connect_failures, 1U);
  EXPECT_EQ(stats.in_use, 0);
}

TEST(ConnectionPool, ManyThreadsShareASmallPool) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(3, 64)};
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto lease = pool.Acquire(Clock::now() + 10s);
        pqxx::nontransaction tx{*lease};
        if (tx.exec("SELECT 1")[0][0].as<int>() == 1) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 200);
  const auto stats = pool.Stats();
  EXPECT_LE(stats.connects, 3U);
  EXPECT_EQ(stats.acquired, 200U);
  EXPECT_EQ(stats.in_use, 0);
  EXPECT_EQ(stats.timeouts, 0U);
}

}  // namespace
