// ConnectionPool without a database: connecting honours the caller's
// deadline against a server that accepts and never answers, and the
// connection parameters the pool adds to a DSN.
#include "shardkit/pool/pool.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pool/pool_connect.hpp"
#include "shardkit/errors.hpp"
#include "support/wait.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using shardkit::ConnectionPool;
using shardkit::PoolOptions;
using shardkit::ShardId;
using shardkit::test::WaitFor;

// A TCP listener on 127.0.0.1 that accepts every connection, reads what the
// client sends, and never answers: a host that hangs after the handshake.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t size = sizeof address;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      ::close(fd_);
      throw std::runtime_error("bind/listen");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~SilentListener() {
    stop_ = true;
    thread_.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  [[nodiscard]] int Port() const noexcept { return port_; }
  [[nodiscard]] int Accepted() const noexcept { return accepted_.load(); }
  [[nodiscard]] int ClosedByClient() const noexcept { return closed_.load(); }
  [[nodiscard]] long BytesReceived() const noexcept { return bytes_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (int c : open_) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if ((fds[0].revents & POLLIN) != 0) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          open_.push_back(c);
          clients_.push_back(c);
          ++accepted_;
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        std::array<char, 512> buffer{};
        const auto n = ::read(fds[i].fd, buffer.data(), buffer.size());
        if (n > 0) {
          bytes_ += n;
        } else {
          ++closed_;  // the client gave up and closed: nothing leaked
          std::erase(open_, fds[i].fd);
        }
      }
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> closed_{0};
  std::atomic<long> bytes_{0};
  std::vector<int> open_;     // the serving thread's
  std::vector<int> clients_;  // closed by the destructor
  std::thread thread_;
};

shardkit::Dsn SilentDsn(const SilentListener& listener) {
  return shardkit::Dsn("host=127.0.0.1 port=" + std::to_string(listener.Port()) +
                       " dbname=nowhere user=nobody password=silent-secret");
}

// Acquire(now + 200 ms) against a server that never answers returns at its
// deadline, not after connect_timeout (30 s here), and abandons the attempt.
TEST(ConnectionPoolConnect, TheCallersDeadlineBoundsConnectingToASilentServer) {
  SilentListener listener;
  PoolOptions options;
  options.max_size = 1;
  options.connect_timeout = 30s;
  ConnectionPool pool{ShardId{3}, SilentDsn(listener), options};
  const auto started = Clock::now();
  try {
    (void)pool.Acquire(started + 200ms);
    FAIL() << "a silent server gave a connection";
  } catch (const shardkit::PoolTimeout& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.shard(), ShardId{3});
    EXPECT_NE(message.find("shard 3"), std::string::npos) << message;
    EXPECT_NE(message.find("connecting did not finish before the deadline"), std::string::npos) << message;
    EXPECT_EQ(message.find("silent-secret"), std::string::npos) << message;
  }
  const auto took = Clock::now() - started;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, options.connect_timeout);  // the deadline ended it, not connect_timeout
  EXPECT_EQ(listener.Accepted(), 1);
  EXPECT_GT(listener.BytesReceived(), 0);  // libpq did speak (SSL or startup request)
  EXPECT_TRUE(WaitFor([&] { return listener.ClosedByClient() == 1; })) << "the abandoned attempt was leaked";
  const auto stats = pool.Stats();
  EXPECT_EQ(stats.timeouts, 1U);
  EXPECT_EQ(stats.connect_failures, 1U);
  EXPECT_EQ(stats.connecting, 0);
  EXPECT_EQ(stats.in_use, 0);
  EXPECT_EQ(stats.idle, 0);
}

// Without a tighter deadline, connect_timeout bounds one attempt, in
// milliseconds (libpq's own connect_timeout has whole seconds, at least 2).
TEST(ConnectionPoolConnect, ConnectTimeoutBoundsAnAttemptToASilentServer) {
  SilentListener listener;
  PoolOptions options;
  options.max_size = 1;
  options.connect_timeout = 300ms;
  ConnectionPool pool{ShardId{1}, SilentDsn(listener), options};
  const auto started = Clock::now();
  try {
    (void)pool.Acquire(started + 60s);
    FAIL() << "a silent server gave a connection";
  } catch (const shardkit::ShardUnavailable& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("pool.connect_timeout_ms = 300 ms"), std::string::npos) << message;
    EXPECT_NE(message.find("password=***"), std::string::npos) << message;
    EXPECT_EQ(message.find("silent-secret"), std::string::npos) << message;
  }
  const auto took = Clock::now() - started;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 60s);
  // TryAcquire never waits for others but may connect: bounded the same way.
  EXPECT_THROW((void)pool.TryAcquire(), shardkit::ShardUnavailable);
  EXPECT_TRUE(WaitFor([&] { return listener.ClosedByClient() == 2; }));
  EXPECT_EQ(pool.Stats().connect_failures, 2U);
  EXPECT_EQ(pool.Stats().timeouts, 0U);
}

// While one caller is stuck connecting, the pool's other callers are not
// blocked behind a lock: with room for two connections a second caller
// starts its own attempt and meets its own deadline.
TEST(ConnectionPoolConnect, ASlowConnectHoldsNoLock) {
  SilentListener listener;
  PoolOptions options;
  options.max_size = 2;
  options.connect_timeout = 30s;
  ConnectionPool pool{ShardId{0}, SilentDsn(listener), options};
  std::thread slow([&] { EXPECT_THROW((void)pool.Acquire(Clock::now() + 3s), shardkit::PoolTimeout); });
  ASSERT_TRUE(WaitFor([&] { return pool.Stats().connecting == 1; }));
  const auto started = Clock::now();
  EXPECT_THROW((void)pool.Acquire(started + 100ms), shardkit::PoolTimeout);
  EXPECT_LT(Clock::now() - started, 3s);  // did not wait for the slow one
  slow.join();
  EXPECT_EQ(pool.Stats().connecting, 0);
}

TEST(ConnectParameters, DefaultsComeBeforeTheDsnSoThatTheDsnWins) {
  const shardkit::detail::ConnectParameters parameters{shardkit::Dsn("host=h keepalives_idle=7"),
                                                       shardkit::SessionChoices{}};
  EXPECT_TRUE(parameters.DsnParses());
  const auto& pairs = parameters.Pairs();
  auto position = [&](const std::string& key) {
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (pairs[i].first == key) return static_cast<int>(i);
    }
    return -1;
  };
  ASSERT_GE(position("dbname"), 0);
  for (const char* key : {"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
                          "tcp_user_timeout", "fallback_application_name"}) {
    EXPECT_GE(position(key), 0) << key;
    EXPECT_LT(position(key), position("dbname")) << key;
  }
  // The DSN itself, with the session settings in its options (session.hpp).
  const std::string& dsn = pairs[static_cast<std::size_t>(position("dbname"))].second;
  EXPECT_NE(dsn.find("host='h'"), std::string::npos) << dsn;
  EXPECT_NE(dsn.find("keepalives_idle='7'"), std::string::npos) << dsn;
  EXPECT_NE(dsn.find("TimeZone=UTC"), std::string::npos) << dsn;
  // Null-terminated arrays of the same pairs.
  std::size_t n = 0;
  while (parameters.Keywords()[n] != nullptr) {
    EXPECT_EQ(pairs[n].first, parameters.Keywords()[n]);
    EXPECT_EQ(pairs[n].second, parameters.Values()[n]);
    ++n;
  }
  EXPECT_EQ(n, pairs.size());
  EXPECT_EQ(parameters.Values()[n], nullptr);
}

// libpq's message for a string it cannot parse may quote the password.
TEST(ConnectionPoolConnect, AnUnparsableDsnIsReportedWithoutLibpqsMessage) {
  ConnectionPool pool{ShardId{2}, shardkit::Dsn("host=127.0.0.1 password='unterminated-secret"), PoolOptions{}};
  try {
    (void)pool.Acquire(Clock::now() + 5s);
    FAIL() << "connected with an unparsable connection string";
  } catch (const shardkit::ShardUnavailable& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot parse the connection string"), std::string::npos) << message;
    EXPECT_EQ(message.find("unterminated-secret"), std::string::npos) << message;
  }
}

TEST(ConnectionPool, RejectsAnEmptyPool) {
  PoolOptions options;
  options.max_size = 0;
  EXPECT_THROW(ConnectionPool(ShardId{0}, shardkit::Dsn("host=h"), options), shardkit::ConfigError);
}

TEST(ConnectionPool, AnEmptyLeaseSaysSo) {
  ConnectionPool::Lease lease;
  EXPECT_EQ(lease.Shard(), ShardId{-1});
  EXPECT_EQ(lease.Canceller(), nullptr);
  EXPECT_THROW((void)lease.Connection(), shardkit::Error);
  lease.Release();  // harmless
}

}  // namespace
