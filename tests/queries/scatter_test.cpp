// Scatter-gather without database servers: option checks, every shard down,
// and a server that accepts the TCP connection but never answers (the
// caller must still get control back at its deadline).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<BucketShardResolver> ResolverOver(const std::vector<std::string>& dsns) {
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  for (std::size_t i = 0; i < dsns.size(); ++i) {
    pools.push_back(std::make_unique<ConnectionPool>(static_cast<ShardId>(i), Dsn(dsns[i])));
  }
  return std::make_unique<BucketShardResolver>(BucketDirectory::EvenSplit(static_cast<int>(dsns.size())),
                                               std::move(pools));
}

// Port 1 on loopback: nothing listens, connect is refused at once.
const std::string kRefused = "host=127.0.0.1 port=1 dbname=x user=u password=hunter2 connect_timeout=2";

// A loopback socket that completes the TCP handshake (the kernel's backlog)
// but never reads or answers: libpq waits for the server's reply.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("cannot open a loopback listener");
    }
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  [[nodiscard]] int Port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(Scatter, EveryShardDownListsEveryShardWithoutPasswords) {
  auto resolver = ResolverOver({kRefused, kRefused});
  ScatterGather scatter{*resolver};
  try {
    (void)scatter.Run("SELECT 1");
    FAIL() << "no shard is up";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), 2u);
    EXPECT_EQ(e.failures()[0].shard, ShardId{0});
    EXPECT_EQ(e.failures()[1].shard, ShardId{1});
    const std::string message = e.what();
    EXPECT_NE(message.find("shard 0 (shard0)"), std::string::npos) << message;
    EXPECT_NE(message.find("shard 1 (shard1)"), std::string::npos) << message;
    EXPECT_NE(message.find("failed on 2 of 2 shards"), std::string::npos) << message;
    EXPECT_EQ(message.find("hunter2"), std::string::npos) << message;
    for (const auto& f : e.failures()) EXPECT_EQ(f.cause.find("hunter2"), std::string::npos) << f.cause;
  }
  // allow_partial cannot turn "nobody answered" into an empty answer.
  ScatterOptions partial;
  partial.allow_partial = true;
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, partial), ScatterError);

  const auto stats = scatter.Stats();
  EXPECT_EQ(stats.scatters, 2u);
  EXPECT_EQ(stats.failed, 2u);
  EXPECT_EQ(stats.partial, 0u);
  EXPECT_EQ(stats.shard_failures, 4u);
  EXPECT_EQ(stats.rows, 0u);
}

TEST(Scatter, ASilentServerDoesNotHoldTheCallerPastTheDeadline) {
  SilentListener silent;
  auto resolver = ResolverOver(
      {kRefused, "host=127.0.0.1 port=" + std::to_string(silent.Port()) + " dbname=x user=u connect_timeout=2"});
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  const auto start = Clock::now();
  options.deadline = start + 300ms;
  try {
    (void)scatter.Run("SELECT 1", {}, options);
    FAIL();
  } catch (const ScatterError& e) {
    // libpq would wait 2 s (connect_timeout) for the silent server; the caller does not.
    EXPECT_LT(Clock::now() - start, 300ms + 1000ms);
    ASSERT_EQ(e.failures().size(), 2u) << e.what();
    EXPECT_EQ(e.failures()[1].shard, ShardId{1});
    // The pool gives up connecting at the deadline itself, so the shard
    // normally reports that; if its worker reports later than the grace, the
    // caller names the phase it was stuck in.
    const std::string& cause = e.failures()[1].cause;
    EXPECT_TRUE(cause.find("connecting did not finish before the deadline") != std::string::npos ||
                (cause.find("no answer within the deadline") != std::string::npos &&
                 cause.find("acquiring a connection") != std::string::npos))
        << cause;
  }
}

TEST(Scatter, StatementsQueuedBehindABusyWorkerAreNamedToo) {
  SilentListener silent;
  auto resolver = ResolverOver(
      {"host=127.0.0.1 port=" + std::to_string(silent.Port()) + " dbname=x user=u connect_timeout=2", kRefused});
  ScatterGather scatter{*resolver, 1};  // one worker: shard 1 waits behind shard 0
  ScatterOptions options;
  const auto start = Clock::now();
  options.deadline = start + 300ms;
  try {
    (void)scatter.Run("SELECT 1", {}, options);
    FAIL();
  } catch (const ScatterError& e) {
    EXPECT_LT(Clock::now() - start, 300ms + 1000ms);
    ASSERT_EQ(e.failures().size(), 2u) << e.what();
    // Shard 0 held the only worker connecting until the deadline; shard 1
    // never started (the worker came free only at the deadline).
    const std::string& first = e.failures()[0].cause;
    EXPECT_TRUE(first.find("connecting did not finish before the deadline") != std::string::npos ||
                first.find("acquiring a connection") != std::string::npos)
        << first;
    const std::string& second = e.failures()[1].cause;
    EXPECT_TRUE(second.find("waiting for a free worker thread") != std::string::npos ||
                second.find("every worker thread was busy") != std::string::npos)
        << second;
  }
}

TEST(Scatter, OptionsAreChecked) {
  auto resolver = ResolverOver({kRefused, kRefused});
  EXPECT_THROW(ScatterGather(*resolver, 0), Error);
  ScatterGather scatter{*resolver};
  ScatterOptions options;
  options.shards = std::vector<ShardId>{ShardId{0}, ShardId{5}};
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, options), UnknownShard);
  options.shards = std::vector<ShardId>{ShardId{-1}};
  EXPECT_THROW((void)scatter.Run("SELECT 1", {}, options), UnknownShard);
  options.shards = std::vector<ShardId>{ShardId{1}, ShardId{0}, ShardId{1}};
  try {
    (void)scatter.Run("SELECT 1", {}, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard 1 is listed twice"), std::string::npos) << e.what();
  }
  std::vector<std::pair<ShardId, ScatterGather::Statement>> twice{{ShardId{0}, {"SELECT 1", {}}},
                                                                  {ShardId{0}, {"SELECT 2", {}}}};
  EXPECT_THROW((void)scatter.RunPerShard(twice), Error);
  // Nothing to do is not an error, and touches no server.
  options.shards = std::vector<ShardId>{};
  auto empty = scatter.Run("SELECT 1", {}, options);
  EXPECT_TRUE(empty.shards.empty());
  EXPECT_EQ(empty.TotalRows(), 0u);
  EXPECT_EQ(empty.TotalBytes(), 0u);
  EXPECT_FALSE(empty.slowest_shard);
  EXPECT_EQ(scatter.Stats().shard_requests, 0u);
}

}  // namespace
}  // namespace shardkit
