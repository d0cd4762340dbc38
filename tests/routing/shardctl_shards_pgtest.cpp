// shardctl shards on a shard of the test's own servers (a primary and its
// streaming replica, TemporaryServer; the scratch catalog on the local
// cluster): each replica's lag in time is a figure, never "unknown", in the
// text and in --json. A replica keeping up while the primary writes has an
// upper bound no longer than the command ran; one whose replay is paused has
// none, and a lower bound of at least the command's wait that is not more
// than it can really be behind.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/routing/replica_monitor.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"
#include "support/wait.hpp"

extern char** environ;

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::ScratchCluster;
using test::ScratchOptions;
using test::TemporaryServer;

// How long shardctl shards probes for a replica's lag (kLagWait in
// tools/shardctl/cmd_shards.cpp, stated in docs/replicas.md).
constexpr milliseconds kLagWait{2000};

struct Ran {
  std::string out;  // stdout
  std::string err;  // stderr
  int code = -1;
  Clock::time_point started;  // before the process was started
  Clock::time_point ended;    // after it exited
};

// shardctl with `args`, stdout and stderr apart.
Ran RunShardctl(const std::vector<std::string>& args) {
  const auto err_path = std::filesystem::temp_directory_path() / fmt::format("shardctl_shards_{}.err", ::getpid());
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> text{SHARDCTL_PATH};
  text.insert(text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  Ran run;
  run.started = Clock::now();
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, SHARDCTL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " SHARDCTL_PATH);
  }
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = ::read(fds[0], buffer.data(), buffer.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    run.out.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.ended = Clock::now();
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ostringstream err;
  err << std::ifstream(err_path).rdbuf();
  run.err = err.str();
  std::filesystem::remove(err_path);
  return run;
}

long long Ms(Clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

class ShardctlShardsLag : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    primary_ = new TemporaryServer();
    replica_ = primary_->MakeReplica("tmp-replica").release();
    ShardConfig server{"tmp", primary_->AppDsn(), primary_->Dsn()};
    server.replicas.push_back(ReplicaConfig{"tmp-replica", replica_->AppDsn()});
    cluster_ = new ScratchCluster("shardctl_shards_pgtest", ScratchOptions().Shards(1).On({server}));
    cluster_->ExecOnShard(0, "CREATE TABLE lag_ticks (tick bigserial PRIMARY KEY, at timestamptz DEFAULT now())");
    config_path_ = std::filesystem::temp_directory_path() / fmt::format("shardctl_shards_pgtest_{}.toml", ::getpid());
    const ShardConfig& shard = cluster_->Config().shards.at(0);
    std::ofstream out(config_path_);
    out << "[directory]\nsource = \"catalog\"\n[catalog]\ndsn = \"" << cluster_->CatalogDsn().Reveal() << "\"\n"
        << "[[shard]]\nname = \"" << shard.name << "\"\ndsn = \"" << shard.dsn.Reveal() << "\"\n"
        << "replicas = [{ name = \"" << shard.replicas.at(0).name << "\", dsn = \"" << shard.replicas.at(0).dsn.Reveal()
        << "\" }]\n";
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(config_path_);
    delete cluster_;
    delete replica_;
    delete primary_;
  }
  void TearDown() override { replica_->Exec("SELECT pg_wal_replay_resume()"); }

  // shardctl --config <the test's> [--json] shards.
  static Ran Shards(bool json) {
    std::vector<std::string> args{"--config", config_path_.string()};
    if (json) args.emplace_back("--json");
    args.emplace_back("shards");
    return RunShardctl(args);
  }
  // The one replica's entry of shardctl --json shards.
  static nlohmann::json ReplicaOf(const Ran& run) {
    const auto out = nlohmann::json::parse(run.out);
    return out.at("shards").at(0).at("replicas").at(0);
  }
  // The replica's line of the text output.
  static std::string LagLine(const Ran& run) {
    const auto at = run.out.find("reachable yes | lag ");
    return at == std::string::npos ? run.out : run.out.substr(at, run.out.find('\n', at) - at);
  }
  // Writes a tick every millisecond on the primary until it is destroyed.
  struct Writer {
    Writer()
        : thread([this] {
            pqxx::connection c{cluster_->AdminDsn(0).Reveal()};
            while (!stop.load()) {
              pqxx::work tx{c};
              tx.exec("INSERT INTO lag_ticks DEFAULT VALUES");
              tx.commit();
              ++ticks;
              std::this_thread::sleep_for(milliseconds(1));
            }
          }) {}
    ~Writer() {
      stop = true;
      thread.join();
    }
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;
    std::atomic<bool> stop{false};
    std::atomic<int> ticks{0};
    std::thread thread;
  };

  static TemporaryServer* primary_;
  static TemporaryServer* replica_;
  static ScratchCluster* cluster_;
  static std::filesystem::path config_path_;
};
TemporaryServer* ShardctlShardsLag::primary_ = nullptr;
TemporaryServer* ShardctlShardsLag::replica_ = nullptr;
ScratchCluster* ShardctlShardsLag::cluster_ = nullptr;
std::filesystem::path ShardctlShardsLag::config_path_;

// The primary writes all along, so the replica is behind every position
// measured in the same round as its own: only probing again shows it past
// one, and the bound is from a position measured while the command ran.
TEST_F(ShardctlShardsLag, AReplicaKeepingUpHasAnUpperBoundInTime) {
  cluster_->CatchUpReplicas();
  const Writer writer;
  ASSERT_TRUE(test::WaitFor([&] { return writer.ticks.load() > 0; }));
  const Ran json = Shards(true);
  ASSERT_EQ(json.code, 0) << json.out << json.err;
  const auto replica = ReplicaOf(json);
  EXPECT_TRUE(replica.at("reachable").get<bool>()) << replica.dump();
  EXPECT_FALSE(replica.at("replay_paused").get<bool>()) << replica.dump();
  ASSERT_TRUE(replica.at("lag_ms").is_number_integer()) << replica.dump();
  const auto lag = replica.at("lag_ms").get<long long>();
  EXPECT_GE(lag, 0);
  // Rounded up to whole milliseconds, hence the one.
  EXPECT_LE(lag, Ms(json.ended - json.started) + 1) << replica.dump();
  EXPECT_TRUE(replica.at("lag_at_least_ms").is_null()) << replica.dump();

  const Ran text = Shards(false);
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  const std::string line = LagLine(text);
  EXPECT_NE(line.find(" ms behind"), std::string::npos) << line;
  EXPECT_NE(line.find(", at most "), std::string::npos) << line;
  EXPECT_EQ(line.find("unknown"), std::string::npos) << line;
  std::cout << line << "\n";
  EXPECT_GT(writer.ticks.load(), 0);
}

// Paused, the replica replays nothing the primary writes after the pause: the
// command cannot give an upper bound, and shows how far behind it is at
// least, which is no more than the time since the primary was where the
// replica had caught up to.
TEST_F(ShardctlShardsLag, APausedReplicaIsAtLeastTheWaitBehind) {
  const auto caught_up_since = Clock::now();
  const std::uint64_t position = InsertPositionFloor(test::WalPosition(cluster_->ShardDsn(0)));
  const Dsn replica_dsn = cluster_->Config().shards.at(0).replicas.at(0).dsn;
  ASSERT_TRUE(test::WaitFor([&] { return test::WalPosition(replica_dsn) >= position; }));
  replica_->Exec("SELECT pg_wal_replay_pause()");
  ASSERT_TRUE(test::WaitFor([&] {
    pqxx::connection c{replica_->Dsn().Reveal()};
    pqxx::nontransaction tx{c};
    return std::string(tx.exec("SELECT pg_get_wal_replay_pause_state()")[0][0].c_str()) == "paused";
  }));
  Ran json;
  {
    const Writer writer;
    ASSERT_TRUE(test::WaitFor([&] { return writer.ticks.load() > 0; }));
    std::this_thread::sleep_for(milliseconds(500));  // the replica falls behind
    json = Shards(true);
  }
  ASSERT_EQ(json.code, 0) << json.out << json.err;
  const auto replica = ReplicaOf(json);
  EXPECT_TRUE(replica.at("reachable").get<bool>()) << replica.dump();
  EXPECT_TRUE(replica.at("replay_paused").get<bool>()) << replica.dump();
  ASSERT_TRUE(replica.at("lag_bytes").is_number_integer()) << replica.dump();
  EXPECT_GT(replica.at("lag_bytes").get<long long>(), 0) << replica.dump();
  // An upper bound would be a position measured during the command that the
  // replica replayed: there is none.
  EXPECT_TRUE(replica.at("lag_ms").is_null()) << replica.dump();
  ASSERT_TRUE(replica.at("lag_at_least_ms").is_number_integer()) << replica.dump();
  const auto at_least = replica.at("lag_at_least_ms").get<long long>();
  // The command probed for kLagWait after measuring the primary past it.
  EXPECT_GE(at_least, kLagWait.count()) << replica.dump();
  // Never more than it can be: the primary was where the replica is at
  // caught_up_since.
  EXPECT_LE(at_least, Ms(json.ended - caught_up_since)) << replica.dump();

  const Ran text = Shards(false);
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  const std::string line = LagLine(text);
  EXPECT_NE(line.find(", at least "), std::string::npos) << line;
  EXPECT_NE(line.find("REPLAY PAUSED"), std::string::npos) << line;
  EXPECT_EQ(line.find("unknown"), std::string::npos) << line;
  std::cout << line << "\n";
}

}  // namespace
}  // namespace shardkit
