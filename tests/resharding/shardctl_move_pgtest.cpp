// shardctl's move commands end to end, as a user runs them: a config file
// for three scratch shards (two loaded, one empty), then rebalance --plan,
// move, moves, rebalance --apply back to two shards, and the errors with
// their exit codes. (The whole plan there and back runs in lab_pgtest's
// rebalance demo and move_pgtest.)
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/cluster.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/routing/directory.hpp"
#include "support/bookstore_rows.hpp"
#include "support/replica_reads.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::TwoOfThree;

struct Ran {
  int status = -1;
  std::string out;  // stdout and stderr
};

class ShardctlMove : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ =
        new test::ScratchCluster("shardctl_move_pgtest", test::ScratchOptions().Shards(3).Directory(TwoOfThree()));
    test::FillBookstore(*cluster_, 300);
    config_path_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                             fmt::format("shardctl_move_pgtest_{}.toml", ::getpid()));
    std::ofstream f{*config_path_};
    const ClusterConfig& c = cluster_->Config();
    f << "[directory]\nsource = \"catalog\"\n\n";
    for (const auto& s : c.shards) {
      f << fmt::format("[[shard]]\nname = \"{}\"\ndsn = \"{}\"\n", s.name, s.dsn.Reveal());
      if (!s.admin_dsn.empty()) f << fmt::format("admin_dsn = \"{}\"\n", s.admin_dsn.Reveal());
      f << "\n";
    }
    f << fmt::format("[reference]\ndsn = \"{}\"\n\n[catalog]\ndsn = \"{}\"\n", c.reference_dsn->Reveal(),
                     c.catalog_dsn->Reveal());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*config_path_);
    delete config_path_;
    delete cluster_;
  }

  static Ran Shardctl(const std::string& args) {
    const std::string command = fmt::format("'{}' --config '{}' {} 2>&1", SHARDCTL_PATH, config_path_->string(), args);
    Ran r;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return r;
    std::array<char, 4096> buffer{};
    while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) r.out += buffer.data();
    const int status = ::pclose(pipe);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }
  static nlohmann::json Json(const Ran& r) {
    const auto start = r.out.find('{');
    EXPECT_NE(start, std::string::npos) << r.out;
    return nlohmann::json::parse(r.out.substr(start == std::string::npos ? 0 : start), nullptr, false);
  }
  static BucketDirectory Directory() {
    pqxx::connection c{cluster_->CatalogDsn().Reveal()};
    return LoadDirectory(c, cluster_->ShardCount());
  }

  static test::ScratchCluster* cluster_;
  static std::filesystem::path* config_path_;
};
test::ScratchCluster* ShardctlMove::cluster_ = nullptr;
std::filesystem::path* ShardctlMove::config_path_ = nullptr;

TEST_F(ShardctlMove, PlanMoveListRebalanceBackWithErrorsAndExitCodes) {
  const std::vector<test::BucketDigests> start = test::DigestsPerShard(*cluster_);
  // The plan: the fewest moves onto the empty shard, with rows per bucket.
  const Ran plan = Shardctl("--json rebalance --plan");
  ASSERT_EQ(plan.status, 0) << plan.out;
  const auto plan_json = Json(plan);
  const auto expected = PlanRebalance(TwoOfThree(), {ShardId{0}, ShardId{1}, ShardId{2}});
  ASSERT_EQ(plan_json["moves"].size(), expected.moves.size()) << plan.out;
  std::int64_t rows = 0;
  for (const auto& m : plan_json["moves"]) {
    EXPECT_EQ(m["to"].get<int>(), 2) << m.dump();
    rows += m["rows"].get<std::int64_t>();
  }
  EXPECT_GT(rows, 0) << plan.out;
  EXPECT_EQ(Directory().BucketsOf(ShardId{2}).size(), 0U) << "--plan moved something";

  // One bucket by hand, then the list shows it done.
  const int bucket = ToInt(expected.moves.front().bucket);
  const Ran moved = Shardctl(fmt::format("--json move {} --to 2 --grace-ms 0", bucket));
  ASSERT_EQ(moved.status, 0) << moved.out;
  EXPECT_EQ(Json(moved)["state"], "done") << moved.out;
  EXPECT_EQ(Directory().ShardOf(BucketId{bucket}), ShardId{2});
  const Ran list = Shardctl("--json moves");
  ASSERT_EQ(list.status, 0) << list.out;
  ASSERT_FALSE(Json(list)["moves"].empty()) << list.out;
  EXPECT_EQ(Json(list)["moves"][0]["bucket"].get<int>(), bucket) << list.out;
  EXPECT_EQ(Shardctl("--json moves --live").out.find("\"bucket\""), std::string::npos);

  // Errors: named, non-zero.
  const Ran again = Shardctl(fmt::format("move {} --to 2", bucket));
  EXPECT_EQ(again.status, 1) << again.out;
  EXPECT_NE(again.out.find(fmt::format("bucket {}", bucket)), std::string::npos) << again.out;
  const Ran no_such = Shardctl("move resume 987654");
  EXPECT_EQ(no_such.status, 1) << no_such.out;
  EXPECT_NE(no_such.out.find("987654"), std::string::npos) << no_such.out;
  EXPECT_EQ(Shardctl("move abort 987654").status, 1);
  EXPECT_EQ(Shardctl("move 64 --to 1").status, 2) << "bucket 64 does not exist";
  const Ran no_shard = Shardctl("move 3 --to 7");
  EXPECT_NE(no_shard.status, 0) << no_shard.out;
  EXPECT_NE(no_shard.out.find('7'), std::string::npos) << no_shard.out;
  EXPECT_EQ(Shardctl("rebalance").status, 2) << "neither --plan nor --apply";

  // Back to shards 0 and 1: the one bucket returns where it was.
  const Ran back = Shardctl("--json rebalance --apply --shards 0,1 --parallel 2 --grace-ms 0");
  ASSERT_EQ(back.status, 0) << back.out;
  ASSERT_EQ(Json(back)["done"].size(), 1U) << back.out;
  EXPECT_EQ(Json(back)["done"][0]["bucket"].get<int>(), bucket) << back.out;
  EXPECT_EQ(Json(back)["done"][0]["target"].get<int>(), ToInt(TwoOfThree().ShardOf(BucketId{bucket}))) << back.out;
  const Ran nothing = Shardctl("rebalance --plan --shards 0,1");
  ASSERT_EQ(nothing.status, 0) << nothing.out;
  EXPECT_NE(nothing.out.find("nothing to move"), std::string::npos) << nothing.out;
  for (const BucketId b : AllBuckets()) EXPECT_EQ(Directory().ShardOf(b), TwoOfThree().ShardOf(b)) << b;
  EXPECT_EQ(test::DigestsPerShard(*cluster_), start);
  EXPECT_EQ(LeftoverReplicationObjects(cluster_->Config()), std::vector<std::string>{});
}

// `rebalance --apply` killed (SIGKILL) in the middle, then applied again:
// the second run resumes the first one's live moves instead of failing on
// them; meanwhile `verify` names each stopped move and what to run.
TEST_F(ShardctlMove, ARebalanceAppliedAfterAKilledOneResumesItsMoves) {
  const std::string config = config_path_->string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(SHARDCTL_PATH, SHARDCTL_PATH, "--config", config.c_str(), "rebalance", "--apply", "--shards", "0,1,2",
            "--parallel", "2", "--grace-ms", "0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Killed once a move is past its cutover and another one is under way.
  auto live_moves = [&] {
    BucketMover mover{cluster_->Config()};
    return mover.List(true);
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() < give_up) {
    int flipped = 0;
    const auto live = live_moves();
    for (const MoveRecord& m : live) flipped += m.state >= MoveState::kFlipped ? 1 : 0;
    ready = flipped >= 1 && live.size() >= 2;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(ready) << "the rebalance never got past a cutover";
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  const auto left = live_moves();
  ASSERT_FALSE(left.empty()) << "the killed rebalance left no live move";

  const std::string sql_dir = fmt::format("--sql-dir '{}/examples/bookstore-service/sql'", SHARDKIT_SOURCE_DIR);
  const Ran verify = Shardctl("verify " + sql_dir);
  EXPECT_EQ(verify.status, 1) << verify.out;
  for (const MoveRecord& m : left) {
    EXPECT_NE(verify.out.find(fmt::format("move {} (", m.move_id)), std::string::npos) << verify.out;
    EXPECT_NE(verify.out.find(fmt::format("shardctl move resume {}", m.move_id)), std::string::npos) << verify.out;
  }
  EXPECT_EQ(verify.out.find("orphan"), std::string::npos) << verify.out;

  // Applied again, back to shards 0 and 1: the killed run's moves are
  // finished first, then every bucket goes back.
  const Ran again = Shardctl("--json rebalance --apply --shards 0,1 --parallel 2 --grace-ms 0");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(Json(again)["resumed"].size(), left.size()) << again.out;
  EXPECT_TRUE(live_moves().empty());
  for (const BucketId b : AllBuckets()) EXPECT_EQ(Directory().ShardOf(b), TwoOfThree().ShardOf(b)) << b;
  EXPECT_EQ(LeftoverReplicationObjects(cluster_->Config()), std::vector<std::string>{});
  const Ran clean = Shardctl("verify " + sql_dir);
  EXPECT_EQ(clean.status, 0) << clean.out;
}

// `shardctl move` SIGKILLed at each of its steps (as its progress line
// appears), with a writer on the bucket, then `shardctl move resume` of that
// move: the bucket ends on the target with every write acknowledged to the
// writer there once, every other row once (verify: each bucket's count
// equals the reference server's, nothing misplaced or orphaned), no
// replication object left; the digests per shard are the start's once
// every bucket is back.
TEST_F(ShardctlMove, AMoveKilledAtAnyStepIsFinishedByResume) {
  const std::vector<test::BucketDigests> start = test::DigestsPerShard(*cluster_);
  const std::string sql_dir = fmt::format("--sql-dir '{}/examples/bookstore-service/sql'", SHARDKIT_SOURCE_DIR);
  const std::vector<BucketId> buckets = TwoOfThree().BucketsOf(ShardId{0});
  const std::vector<std::string> steps = {"checking source and target",
                                          "copying",
                                          "catching up",
                                          "waiting for transactions older than the move",
                                          "freezing (draining writers)",
                                          "frozen: waiting for the barrier",
                                          "dropping the subscription",
                                          "grace period",
                                          "deleting the old rows"};
  ASSERT_GE(buckets.size(), steps.size());
  const std::string config = config_path_->string();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string& step = steps[i];
    SCOPED_TRACE("killed at: " + step);
    const int bucket = ToInt(buckets[i]);
    std::array<int, 2> fds{};
    ASSERT_EQ(::pipe(fds.data()), 0);
    const std::string bucket_arg = std::to_string(bucket);
    // A writer on the bucket's customers until the move is resumed.
    std::vector<int> customers;
    for (int c = 1; customers.size() < 4; ++c) {
      if (BucketOf(CustomerId{c}) == BucketId{bucket}) customers.push_back(c);
    }
    auto writers_cluster = Cluster::Open(cluster_->Config());
    std::atomic<bool> stop{false};
    std::vector<std::int64_t> acknowledged;
    int unknown = 0;
    std::thread writer([&] {
      for (std::int64_t id = 900000000 + static_cast<std::int64_t>(i) * 100000; !stop; ++id) {
        RoutedOptions options;
        options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        try {
          (void)test::WriteOrder(*writers_cluster, customers[static_cast<std::size_t>(id) % customers.size()], id,
                                 options);
          acknowledged.push_back(id);
        } catch (const OutcomeUnknown&) {
          ++unknown;
        } catch (const std::exception& e) {
          ADD_FAILURE() << "a write failed: " << e.what();
          return;
        }
      }
    });
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Progress goes to stderr, unbuffered, a line per step.
      ::dup2(fds[1], 2);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execl(SHARDCTL_PATH, SHARDCTL_PATH, "--config", config.c_str(), "move", bucket_arg.c_str(), "--to", "2",
              "--grace-ms", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    FILE* progress = ::fdopen(fds[0], "r");
    std::string printed;
    std::array<char, 4096> line{};
    while (std::fgets(line.data(), static_cast<int>(line.size()), progress) != nullptr) {
      printed += line.data();
      if (std::string_view(line.data()).find(": " + step) != std::string_view::npos) {
        ::kill(child, SIGKILL);
        break;
      }
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    std::fclose(progress);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the move finished before the kill:\n" << printed;

    BucketMover mover{cluster_->Config()};
    const auto live = mover.List(true);
    ASSERT_EQ(live.size(), 1U) << printed;
    const Ran resumed = Shardctl(fmt::format("--json move resume {} --grace-ms 0", live[0].move_id));
    ASSERT_EQ(resumed.status, 0) << resumed.out;
    EXPECT_EQ(Json(resumed)["state"], "done") << resumed.out;
    EXPECT_EQ(Directory().ShardOf(BucketId{bucket}), ShardId{2});
    stop = true;
    writer.join();
    EXPECT_EQ(unknown, 0);
    EXPECT_GT(acknowledged.size(), 0U);
    {
      // Each acknowledged order once, on the new owner; then gone again, so
      // that the shards match the reference server for verify.
      pqxx::connection target{cluster_->Config().shards[2].dsn.Reveal()};
      pqxx::work tx{target};
      const auto rows =
          tx.exec_params("SELECT count(*), count(DISTINCT order_id) FROM orders WHERE order_id = ANY($1::bigint[])",
                         fmt::format("{{{}}}", fmt::join(acknowledged, ",")));
      EXPECT_EQ(rows[0][0].as<std::size_t>(), acknowledged.size());
      EXPECT_EQ(rows[0][1].as<std::size_t>(), acknowledged.size());
      tx.exec0("SET LOCAL shardkit.buckets = 'all'");
      tx.exec_params0("DELETE FROM orders WHERE order_id >= 900000000 AND bucket = $1", bucket);
      tx.commit();
    }
    EXPECT_TRUE(mover.List(true).empty());
    EXPECT_EQ(LeftoverReplicationObjects(cluster_->Config()), std::vector<std::string>{});
    const Ran verify = Shardctl("verify " + sql_dir);
    EXPECT_EQ(verify.status, 0) << verify.out;
  }
  const Ran back = Shardctl("--json rebalance --apply --shards 0,1 --parallel 2 --grace-ms 0");
  ASSERT_EQ(back.status, 0) << back.out;
  for (const BucketId b : AllBuckets()) EXPECT_EQ(Directory().ShardOf(b), TwoOfThree().ShardOf(b)) << b;
  EXPECT_EQ(test::DigestsPerShard(*cluster_), start);
}

}  // namespace
}  // namespace shardkit
