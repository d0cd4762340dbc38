// shardctl init end to end, as a user runs it: empty databases and a
// configuration file; init migrates every server, stores the even split in
// the catalog and enrolls every shard; run again, it changes nothing; a
// configuration it cannot serve is refused with what to do.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "shardkit/cluster.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/ownership.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

struct Ran {
  int status = -1;
  std::string out;  // stdout and stderr
};

Ran Shardctl(const std::filesystem::path& config, const std::string& args) {
  const std::string command = fmt::format("'{}' --config '{}' --sql-dir '{}/examples/bookstore-service/sql' {} 2>&1",
                                          SHARDCTL_PATH, config.string(), SHARDKIT_SOURCE_DIR, args);
  Ran r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) r.out += buffer.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

nlohmann::json Json(const Ran& r) {
  const auto start = r.out.find('{');
  EXPECT_NE(start, std::string::npos) << r.out;
  return nlohmann::json::parse(r.out.substr(start == std::string::npos ? 0 : start), nullptr, false);
}

class ShardctlInit : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ =
        std::make_unique<test::ScratchCluster>("shardctl_init_pgtest", test::ScratchOptions().Shards(3).Unmigrated());
    config_ = WriteConfig("", 3, true);
  }
  void TearDown() override {
    for (const auto& path : written_) std::filesystem::remove(path);
  }

  // A configuration file of the scratch databases: the first `shards`
  // shards, with or without the catalog.
  std::filesystem::path WriteConfig(const std::string& suffix, int shards, bool catalog) {
    const auto path =
        std::filesystem::temp_directory_path() / fmt::format("shardctl_init_pgtest_{}{}.toml", ::getpid(), suffix);
    std::ofstream f{path};
    const ClusterConfig& c = cluster_->Config();
    f << (catalog ? "[directory]\nsource = \"catalog\"\n\n" : "");
    for (int i = 0; i < shards; ++i) {
      const auto& s = c.shards[static_cast<std::size_t>(i)];
      f << fmt::format("[[shard]]\nname = \"{}\"\ndsn = \"{}\"\n", s.name, s.dsn.Reveal());
      if (!s.admin_dsn.empty()) f << fmt::format("admin_dsn = \"{}\"\n", s.admin_dsn.Reveal());
      f << "\n";
    }
    f << fmt::format("[reference]\ndsn = \"{}\"\n", c.reference_dsn->Reveal());
    if (catalog) f << fmt::format("\n[catalog]\ndsn = \"{}\"\n", c.catalog_dsn->Reveal());
    written_.push_back(path);
    return path;
  }

  std::unique_ptr<test::ScratchCluster> cluster_;
  std::filesystem::path config_;
  std::vector<std::filesystem::path> written_;
};

TEST_F(ShardctlInit, SetsAClusterUpFromEmptyDatabasesAndTheSecondRunChangesNothing) {
  const Ran first = Shardctl(config_, "--json init");
  ASSERT_EQ(first.status, 0) << first.out;
  const nlohmann::json one = Json(first);
  EXPECT_GT(one.value("applied", 0), 0) << first.out;
  EXPECT_TRUE(one.value("directory_stored", false)) << first.out;
  EXPECT_EQ(one.value("directory_version", 0), 1);

  // The catalog holds the even split; each shard owns and fences its part.
  pqxx::connection catalog{cluster_->CatalogDsn().Reveal()};
  const BucketDirectory directory = LoadDirectory(catalog, 3);
  for (const BucketId b : AllBuckets()) EXPECT_EQ(directory.ShardOf(b), ShardId{ToInt(b) * 3 / kBucketCount}) << b;
  for (const ShardId s : FirstShards(3)) {
    pqxx::connection shard{cluster_->ShardDsn(ToInt(s)).Reveal()};
    const ShardOwnership own = ReadOwnership(shard);
    EXPECT_EQ(own.enrolled_as, s);
    EXPECT_EQ(own.InState(OwnershipState::kOwned), BucketSet::Of(directory, s)) << s;
  }
  const Ran status = Shardctl(config_, "migrate status");
  EXPECT_EQ(status.status, 0) << status.out;

  // A service on it: a routed write lands on its customer's shard.
  ClusterConfig config = LoadConfig(config_);
  const auto cluster = Cluster::Open(config);
  const CustomerId customer{4242};
  cluster->Run(customer, [&](pqxx::transaction_base& tx, const RoutedContext& at) {
    tx.exec_params0("INSERT INTO customers (customer_id, bucket, name, email) VALUES ($1, $2, 'x', 'x@example.com')",
                    ToInt(customer), ToInt(at.bucket));
  });
  const SqlResult read = cluster->Execute("SELECT count(*) FROM customers WHERE customer_id = $1", {"4242"});
  ASSERT_EQ(read.rows.size(), 1U);
  EXPECT_EQ(read.rows[0][0], "1");
  EXPECT_EQ(read.plan.shard, directory.ShardFor(customer));

  const Ran second = Shardctl(config_, "--json init");
  ASSERT_EQ(second.status, 0) << second.out;
  const nlohmann::json two = Json(second);
  EXPECT_EQ(two.value("applied", -1), 0) << second.out;
  EXPECT_FALSE(two.value("directory_stored", true)) << second.out;
  EXPECT_EQ(two.value("directory_version", 0), 1);
}

TEST_F(ShardctlInit, RefusesWhatItCannotServeAndSaysWhatToDo) {
  // No catalog: nowhere to keep the directory; bad usage, exit 2.
  const Ran without = Shardctl(WriteConfig("_nocatalog", 3, false), "init");
  EXPECT_EQ(without.status, 2) << without.out;
  EXPECT_NE(without.out.find("[catalog]"), std::string::npos) << without.out;

  // A catalog whose directory names a shard the configuration lacks.
  ASSERT_EQ(Shardctl(config_, "init").status, 0);
  const Ran fewer = Shardctl(WriteConfig("_two", 2, true), "init");
  EXPECT_EQ(fewer.status, 1) << fewer.out;
  EXPECT_NE(fewer.out.find("does not fit the 2 shard(s)"), std::string::npos) << fewer.out;
  EXPECT_NE(fewer.out.find("bucket 43 is mapped to shard 2"), std::string::npos) << fewer.out;
}

}  // namespace
}  // namespace shardkit
