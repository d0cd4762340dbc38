// Shard failures carry their SQLSTATE as a field, so callers branch on a
// code instead of grepping message text: the server's code for a failed
// statement, "08006" for a shard that cannot be reached.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

// A loopback port nothing listens on.
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

const ScatterError::Failure* FailureOf(const std::vector<ScatterError::Failure>& failures, ShardId shard) {
  for (const auto& f : failures) {
    if (f.shard == shard) return &f;
  }
  return nullptr;
}

TEST(ShardErrors, AFailedStatementCarriesTheServersSqlState) {
  test::ScratchCluster cluster{"shard_errors_pgtest"};
  auto resolver = cluster.MakeResolver();
  ScatterGather scatter{*resolver};
  try {
    (void)scatter.Run("SELECT 1 / (random() * 0)::int");
    FAIL() << "division by zero did not fail";
  } catch (const ScatterError& e) {
    ASSERT_EQ(e.failures().size(), static_cast<std::size_t>(cluster.ShardCount()));
    for (const auto& f : e.failures()) EXPECT_EQ(f.sqlstate, "22012") << f.cause;  // division_by_zero
  }
  // Per shard, and with a partial result: only the failing shard carries one.
  ScatterOptions partial;
  partial.allow_partial = true;
  partial.read_only = false;
  cluster.ExecEverywhere("CREATE TABLE unique_things (id int PRIMARY KEY)");
  cluster.ExecOnShard(1, "INSERT INTO unique_things VALUES (7)");
  const auto result = scatter.RunPerShard({{ShardId{0}, {"INSERT INTO unique_things VALUES ($1::int)", {"7"}}},
                                           {ShardId{1}, {"INSERT INTO unique_things VALUES ($1::int)", {"7"}}}},
                                          partial);
  ASSERT_EQ(result.failures.size(), 1U);
  EXPECT_EQ(result.failures[0].shard, ShardId{1});
  EXPECT_EQ(result.failures[0].sqlstate, "23505");  // unique_violation
  // Writes refused by a read-only scatter.
  try {
    (void)scatter.Run("INSERT INTO unique_things VALUES (8)");
    FAIL() << "a read-only scatter wrote";
  } catch (const ScatterError& e) {
    for (const auto& f : e.failures()) EXPECT_EQ(f.sqlstate, "25006") << f.cause;  // read_only_sql_transaction
  }
}

TEST(ShardErrors, AnUnreachableShardSays08006) {
  test::ScratchCluster cluster{"shard_errors_down_pgtest"};
  ClusterConfig config = cluster.Config();
  config.shards[1].dsn = Dsn("host=127.0.0.1 port=" + std::to_string(ClosedPort()) + " dbname=x user=x");
  auto resolver = BucketShardResolver::FromConfig(config);

  try {
    (void)resolver->Pool(ShardId{1}).Acquire();
    FAIL() << "connected to a closed port";
  } catch (const ShardUnavailable& e) {
    EXPECT_EQ(e.shard(), ShardId{1});
    EXPECT_EQ(e.sqlstate(), kSqlStateConnectionFailure);
  }

  ScatterGather scatter{*resolver};
  ScatterOptions partial;
  partial.allow_partial = true;
  const auto result = scatter.Run("SELECT 1", {}, partial);
  ASSERT_EQ(result.shards.size(), 1U);
  const auto* failure = FailureOf(result.failures, ShardId{1});
  ASSERT_NE(failure, nullptr);
  EXPECT_EQ(failure->sqlstate, "08006") << failure->cause;
  try {
    (void)scatter.Run("SELECT 1");
    FAIL() << "a scatter over an unreachable shard succeeded";
  } catch (const ScatterError& e) {
    ASSERT_NE(FailureOf(e.failures(), ShardId{1}), nullptr);
    EXPECT_EQ(FailureOf(e.failures(), ShardId{1})->sqlstate, "08006");
    EXPECT_EQ(FailureOf(e.failures(), ShardId{0}), nullptr);
  }
  try {
    ScatterSession session{scatter};
    FAIL() << "a scatter session opened over an unreachable shard";
  } catch (const ScatterError& e) {
    ASSERT_NE(FailureOf(e.failures(), ShardId{1}), nullptr);
    EXPECT_EQ(FailureOf(e.failures(), ShardId{1})->sqlstate, "08006");
    EXPECT_NE(std::string(e.what()).find("shard 1"), std::string::npos) << e.what();
  }
}

TEST(ShardErrors, ErrorsWithoutACodeSayNothing) {
  EXPECT_EQ(PoolTimeout(ShardId{0}, "busy").sqlstate(), "");
  EXPECT_EQ(ShardQueryError(ShardId{0}, "failed", "40001").sqlstate(), "40001");
  EXPECT_EQ(ShardUnavailable(ShardId{0}, "starting up", "57P03").sqlstate(), "57P03");
  const ScatterError::Failure no_code{ShardId{1}, "no free worker before the deadline"};
  EXPECT_TRUE(no_code.sqlstate.empty());
}

}  // namespace
}  // namespace shardkit
