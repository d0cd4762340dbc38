// ConnectionPool against real servers: bounds, deadlines, the fate of
// returned connections, liveness checks, recovery after a server comes back,
// cancel handles, leases that outlive their pool.
#include "shardkit/pool/pool.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <pqxx/pqxx>
#include <regex>
#include <thread>

#include "pool/pool_connect.hpp"
#include "pool/pooled_connection.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using shardkit::ConnectionPool;
using shardkit::PoolOptions;
using shardkit::test::WaitFor;

PoolOptions Small(int size, int waiters = 16) {
  PoolOptions options;
  options.max_size = size;
  options.max_waiters = waiters;
  options.connect_timeout = 2s;
  options.acquire_timeout = 1s;
  return options;
}

shardkit::Dsn ShardDsn(int shard) {
  return shardkit::test::LoadTestConfig().shards.at(static_cast<std::size_t>(shard)).dsn;
}

int BackendPid(pqxx::connection_base& c) {
  pqxx::nontransaction tx{c};
  return tx.exec("SELECT pg_backend_pid()")[0][0].as<int>();
}

// Is this backend still running on shard `shard`'s server?
bool BackendAlive(int shard, int pid) {
  pqxx::connection admin{ShardDsn(shard).Reveal()};
  pqxx::nontransaction tx{admin};
  return tx.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)[0][0].as<int>() == 1;
}

void Terminate(int shard, int pid) {
  pqxx::connection admin{ShardDsn(shard).Reveal()};
  pqxx::nontransaction tx{admin};
  tx.exec_params("SELECT pg_terminate_backend($1)", pid);
}

int SocketOption(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof value;
  if (::getsockopt(fd, level, name, &value, &size) != 0) return -1;
  return value;
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
  ASSERT_TRUE(WaitFor([&] { return pool.Stats().waiting == 1; }));
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

// A holder that SETs a pinned setting the server reports and gives the
// connection back unreset: the next caller must not get that session.
TEST(ConnectionPool, ConnectionGivenBackWithAChangedSessionIsDiscarded) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(2)};
  for (const char* change :
       {"SET DateStyle = 'SQL, DMY'", "SET TimeZone = 'Asia/Tokyo'", "SET standard_conforming_strings = off"}) {
    {
      auto lease = pool.Acquire();
      pqxx::nontransaction tx{*lease};
      tx.exec(change);
    }
    auto lease = pool.Acquire();
    EXPECT_TRUE(lease.FreshConnection()) << change;
    pqxx::nontransaction tx{*lease};
    EXPECT_EQ(std::string(tx.exec("SHOW DateStyle")[0][0].c_str()), "ISO, MDY") << change;
    EXPECT_EQ(std::string(tx.exec("SHOW TimeZone")[0][0].c_str()), "UTC") << change;
  }
  EXPECT_EQ(pool.Stats().discarded_changed_session, 3U);
  {
    // RESET puts the pinned value back: the connection is kept.
    auto lease = pool.Acquire();
    pqxx::nontransaction tx{*lease};
    tx.exec("SET DateStyle = 'German'");
    tx.exec("RESET DateStyle");
  }
  EXPECT_FALSE(pool.Acquire().FreshConnection());
  EXPECT_EQ(pool.Stats().discarded_changed_session, 3U);
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

// The server closes an idle connection: the pool notices by itself (its
// socket reports the hang-up) and prunes it; the next caller gets a new one.
TEST(ConnectionPool, IdleConnectionKilledByTheServerIsReplacedUnnoticed) {
  ConnectionPool pool{shardkit::ShardId{1}, ShardDsn(1), Small(2)};
  int pid = 0;
  {
    auto lease = pool.Acquire();
    pid = BackendPid(*lease);
  }
  Terminate(1, pid);
  ASSERT_TRUE(WaitFor([&] { return pool.Stats().broken == 1; })) << "the pool never noticed";
  EXPECT_EQ(pool.Stats().idle, 0);
  auto lease = pool.Acquire();
  EXPECT_TRUE(lease.FreshConnection());
  EXPECT_NE(BackendPid(*lease), pid);
}

// Without waiting for the pool to notice: a connection idle for longer than
// the bypass window is checked before it is handed out, so the caller never
// sees the dead one, whichever of the check and the hang-up watcher is first.
TEST(ConnectionPool, IdleConnectionOlderThanTheBypassWindowIsCheckedBeforeUse) {
  PoolOptions options = Small(2);
  options.alive_bypass_window = 0ms;
  ConnectionPool pool{shardkit::ShardId{1}, ShardDsn(1), options};
  int pid = 0;
  {
    auto lease = pool.Acquire();
    pid = BackendPid(*lease);
  }
  Terminate(1, pid);
  // Gone from pg_stat_activity: its FATAL message was sent before it exited.
  ASSERT_TRUE(WaitFor([&] { return !BackendAlive(1, pid); }));
  auto lease = pool.Acquire();
  pqxx::nontransaction tx{*lease};
  EXPECT_EQ(tx.exec("SELECT 1")[0][0].as<int>(), 1);
  EXPECT_TRUE(lease.FreshConnection());
  EXPECT_EQ(pool.Stats().broken, 1U);
}

// Data the server sends to an idle session (here a notification) is not a
// hang-up, so only the check sees it; it takes the conservative view.
TEST(ConnectionPool, AnIdleSessionWithUnreadDataIsNotHandedOut) {
  PoolOptions options = Small(1);
  options.alive_bypass_window = 0ms;
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), options};
  int pid = 0;
  {
    auto lease = pool.Acquire();
    pid = BackendPid(*lease);
    pqxx::nontransaction tx{*lease};
    tx.exec("LISTEN pool_pgtest_channel");
  }
  {
    pqxx::connection admin{ShardDsn(0).Reveal()};
    pqxx::nontransaction tx{admin};
    tx.exec("NOTIFY pool_pgtest_channel");
  }
  // Until the notification arrives the same connection comes back.
  ASSERT_TRUE(WaitFor([&] { return pool.Acquire().FreshConnection(); }));
  EXPECT_EQ(pool.Stats().broken, 1U);
  EXPECT_GE(pool.Stats().checked, 1U);
  EXPECT_TRUE(WaitFor([&] { return !BackendAlive(0, pid); }));  // closed, not leaked
}

// HikariCP's alive bypass window: a connection returned recently is handed
// out without a check; one idle for longer is checked.
TEST(ConnectionPool, RecentlyUsedConnectionsAreTrustedOlderOnesChecked) {
  PoolOptions trusting = Small(1);
  trusting.alive_bypass_window = std::chrono::hours(1);
  ConnectionPool fast{shardkit::ShardId{0}, ShardDsn(0), trusting};
  for (int i = 0; i < 10; ++i) (void)fast.Acquire();
  EXPECT_EQ(fast.Stats().checked, 0U);
  EXPECT_EQ(fast.Stats().acquired, 10U);

  PoolOptions checking = Small(1);
  checking.alive_bypass_window = 0ms;
  ConnectionPool careful{shardkit::ShardId{0}, ShardDsn(0), checking};
  for (int i = 0; i < 10; ++i) (void)careful.Acquire();
  EXPECT_EQ(careful.Stats().checked, 9U);  // every reuse; the first one connected
  EXPECT_EQ(careful.Stats().connects, 1U);
}

// The liveness check itself: one poll() of an idle socket.
TEST(PooledConnection, UnreadDataFailsTheLivenessCheck) {
  std::string error;
  bool timed_out = false;
  const shardkit::detail::ConnectParameters parameters{ShardDsn(0), shardkit::SessionChoices{}};
  auto open = shardkit::detail::ConnectBefore(parameters, Clock::now() + 10s, &error, &timed_out);
  ASSERT_TRUE(open) << error;
  shardkit::detail::PooledConnection c{std::move(open)};
  {
    pqxx::nontransaction tx{*c.connection};
    tx.exec("LISTEN pool_pgtest_check");
  }
  EXPECT_TRUE(c.LooksAliveWhileIdle());
  pqxx::connection admin{ShardDsn(0).Reveal()};
  pqxx::nontransaction tx{admin};
  tx.exec("NOTIFY pool_pgtest_check");
  EXPECT_TRUE(WaitFor([&] { return !c.LooksAliveWhileIdle(); }));
  EXPECT_EQ(c.CurrentState(), shardkit::detail::PooledConnection::State::kIdle);  // libpq has not read it
}

TEST(ConnectionPool, WrongPasswordIsReportedWithoutThePassword) {
  const std::string real = ShardDsn(0).Reveal();
  ASSERT_NE(real.find("password="), std::string::npos) << "the lab config uses password authentication";
  const shardkit::Dsn dsn{std::regex_replace(real, std::regex(R"(password=\S+)"), "password=not-the-real-pw9")};
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
  // The pool notices by itself that the server closed its idle connection.
  ASSERT_TRUE(WaitFor([&] { return resolver.Pool(shardkit::ShardId{1}).Stats().idle == 0; }));
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
  EXPECT_GE(stats.broken, 1U);  // the idle connection from before the stop
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

TEST(ConnectionPool, TryAcquireTakesIdleOrConnectsButNeverWaits) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(2, 0)};
  auto first = pool.TryAcquire();
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->FreshConnection());
  const int pid = BackendPid(**first);
  first->Release();
  auto again = pool.TryAcquire();  // the idle one
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->FreshConnection());
  EXPECT_EQ(BackendPid(**again), pid);
  auto second = pool.TryAcquire();  // below max_size: a new one
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->FreshConnection());
  // Full: nothing, at once, even though max_waiters = 0 would reject a waiter.
  EXPECT_FALSE(pool.TryAcquire());
  auto stats = pool.Stats();
  EXPECT_EQ(stats.in_use, 2);
  EXPECT_EQ(stats.waited, 0U);
  EXPECT_EQ(stats.rejected, 0U);
  EXPECT_EQ(stats.timeouts, 0U);
  second.reset();
  auto third = pool.TryAcquire();
  ASSERT_TRUE(third);
  EXPECT_FALSE(third->FreshConnection());
  EXPECT_EQ(pool.Stats().acquired, 4U);
}

TEST(ConnectionPool, TryAcquireReportsAnUnreachableServer) {
  ConnectionPool pool{shardkit::ShardId{1}, shardkit::Dsn("host=127.0.0.1 port=1 dbname=x user=x password=try-secret"),
                      Small(1)};
  try {
    (void)pool.TryAcquire();
    FAIL() << "expected ShardUnavailable";
  } catch (const shardkit::ShardUnavailable& e) {
    EXPECT_EQ(e.shard(), shardkit::ShardId{1});
    EXPECT_EQ(std::string(e.what()).find("try-secret"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.Stats().connect_failures, 1U);
  EXPECT_EQ(pool.Stats().connecting, 0);
}

TEST(ConnectionPool, CloseIdleClosesOnlyIdleConnections) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(3)};
  auto held = pool.Acquire();
  int idle_pids[2] = {0, 0};
  {
    auto a = pool.Acquire();
    auto b = pool.Acquire();
    idle_pids[0] = BackendPid(*a);
    idle_pids[1] = BackendPid(*b);
  }
  ASSERT_EQ(pool.Stats().idle, 2);
  pool.CloseIdle();
  const auto stats = pool.Stats();
  EXPECT_EQ(stats.idle, 0);
  EXPECT_EQ(stats.in_use, 1);
  EXPECT_EQ(stats.broken, 0U);  // closing on purpose is not a failure
  for (int pid : idle_pids) EXPECT_TRUE(WaitFor([&] { return !BackendAlive(0, pid); })) << pid;
  // The leased one is untouched and still works.
  pqxx::nontransaction tx{*held};
  EXPECT_EQ(tx.exec("SELECT 1")[0][0].as<int>(), 1);
  tx.commit();
  // Room again: the next caller connects anew.
  auto next = pool.Acquire();
  EXPECT_TRUE(next.FreshConnection());
}

TEST(ConnectionPool, WaitPercentilesCountTheTimeSpentWaiting) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(1)};
  {
    auto warm = pool.Acquire();  // connects
  }
  {
    auto immediate = pool.Acquire();  // idle at once: waits 0
  }
  auto stats = pool.Stats();
  EXPECT_EQ(stats.acquire_wait_p50.count(), 0);
  EXPECT_GT(stats.acquire_wait_max.count(), 0);  // the first one connected

  // Two acquisitions: one connects (C), one waits for the other's lease (W).
  ConnectionPool waiting_pool{shardkit::ShardId{0}, ShardDsn(0), Small(1)};
  const auto connect_called = Clock::now();
  auto held = std::make_unique<ConnectionPool::Lease>(waiting_pool.Acquire());
  const auto connect_took = Clock::now() - connect_called;
  Clock::time_point called;
  Clock::time_point got;
  auto waiter = std::async(std::launch::async, [&] {
    called = Clock::now();
    auto lease = waiting_pool.Acquire(Clock::now() + 20s);
    got = Clock::now();
  });
  ASSERT_TRUE(WaitFor([&] { return waiting_pool.Stats().waiting == 1; }));
  const auto seen_waiting = Clock::now();
  {
    // Work done while the other caller waits: its wait lasts at least this.
    pqxx::nontransaction tx{**held};
    tx.exec("SELECT pg_sleep(0.05)");
  }
  const auto releasing = Clock::now();  // the waiter may have its lease before reset() returns
  held.reset();
  waiter.get();
  stats = waiting_pool.Stats();
  ASSERT_EQ(stats.acquired, 2U);
  EXPECT_EQ(stats.waited, 1U);
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  // W lasted at least from when the test saw it waiting until the release
  // began, and at most the whole call; C at most the whole first call.
  const auto is_w = [&](microseconds w) {
    return w >= duration_cast<microseconds>(releasing - seen_waiting) - 1us &&
           w <= duration_cast<microseconds>(got - called) + 1us;
  };
  const auto is_c = [&](microseconds c) { return c <= duration_cast<microseconds>(connect_took) + 1us; };
  // With two samples p50 is the smaller, max the larger.
  EXPECT_TRUE((is_c(stats.acquire_wait_p50) && is_w(stats.acquire_wait_max)) ||
              (is_w(stats.acquire_wait_p50) && is_c(stats.acquire_wait_max)))
      << "p50 " << stats.acquire_wait_p50.count() << " us, max " << stats.acquire_wait_max.count() << " us";
  EXPECT_EQ(stats.acquire_wait_p99, stats.acquire_wait_max);  // nearest rank: 99% of 2 samples is both
}

// A lease may outlive its pool: its connection keeps working until it is
// released, then it is closed (no reuse, no dangling pointer: the sanitizer
// builds check the latter).
TEST(ConnectionPool, ALeaseMayOutliveItsPool) {
  auto pool = std::make_unique<ConnectionPool>(shardkit::ShardId{0}, ShardDsn(0), Small(2));
  auto lease = pool->Acquire();
  int idle_pid = 0;
  {
    auto other = pool->Acquire();
    idle_pid = BackendPid(*other);
  }
  const int leased_pid = BackendPid(*lease);
  pool.reset();
  EXPECT_TRUE(WaitFor([&] { return !BackendAlive(0, idle_pid); }));  // the idle one closed with the pool
  EXPECT_EQ(lease.Shard(), shardkit::ShardId{0});
  EXPECT_TRUE(BackendAlive(0, leased_pid));
  {
    pqxx::nontransaction tx{*lease};
    EXPECT_EQ(tx.exec("SELECT 1")[0][0].as<int>(), 1);
  }
  ConnectionPool::Lease moved = std::move(lease);
  moved.Release();
  EXPECT_TRUE(WaitFor([&] { return !BackendAlive(0, leased_pid); }));
  EXPECT_EQ(moved.Shard(), shardkit::ShardId{-1});
}

// The cancel handle is built when the connection opens; another thread may
// use it while the owner runs a statement.
TEST(ConnectionPool, CancelHandleCancelsTheRunningStatementFromAnotherThread) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(1)};
  auto lease = pool.Acquire();
  const int pid = BackendPid(*lease);
  const auto canceller = lease.Canceller();
  ASSERT_TRUE(canceller);
  auto running = std::async(std::launch::async, [&lease]() -> std::string {
    try {
      pqxx::nontransaction tx{*lease};
      tx.exec("SELECT pg_sleep(60)");
      return "not cancelled";
    } catch (const pqxx::sql_error& e) {
      return e.sqlstate();
    }
  });
  ASSERT_TRUE(WaitFor([&] {
    pqxx::connection admin{ShardDsn(0).Reveal()};
    pqxx::nontransaction tx{admin};
    return tx.exec_params(
                 "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' "
                 "AND query LIKE '%pg_sleep(60)%'",
                 pid)[0][0]
               .as<int>() == 1;
  }));
  std::string error;
  EXPECT_TRUE(canceller->Send(&error)) << error;
  EXPECT_EQ(running.get(), "57014");  // query_canceled
  lease.Discard();
}

// Keepalives and tcp_user_timeout are on unless the DSN says otherwise.
TEST(ConnectionPool, ConnectionsGetTcpKeepalivesAndUserTimeoutUnlessTheDsnSetsThem) {
  ConnectionPool pool{shardkit::ShardId{0}, ShardDsn(0), Small(1)};
  auto lease = pool.Acquire();
  const int fd = lease->sock();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SocketOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(SocketOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), shardkit::detail::kKeepalivesIdleSeconds);
  EXPECT_EQ(SocketOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), shardkit::detail::kKeepalivesIntervalSeconds);
  EXPECT_EQ(SocketOption(fd, IPPROTO_TCP, TCP_KEEPCNT), shardkit::detail::kKeepalivesCount);
  EXPECT_EQ(SocketOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), shardkit::detail::kTcpUserTimeoutMillis);

  const shardkit::Dsn own_settings{ShardDsn(0).Reveal() + " keepalives_idle=7 tcp_user_timeout=1234"};
  ConnectionPool own{shardkit::ShardId{0}, own_settings, Small(1)};
  auto mine = own.Acquire();
  EXPECT_EQ(SocketOption(mine->sock(), IPPROTO_TCP, TCP_KEEPIDLE), 7);
  EXPECT_EQ(SocketOption(mine->sock(), IPPROTO_TCP, TCP_USER_TIMEOUT), 1234);
  EXPECT_EQ(SocketOption(mine->sock(), IPPROTO_TCP, TCP_KEEPCNT), shardkit::detail::kKeepalivesCount);
  pqxx::nontransaction tx{*mine};
  const auto name = tx.exec("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()");
  EXPECT_EQ(name[0][0].as<std::string>(), "shardkit");
}

}  // namespace
