// The lab's replicas demo (lab/src/demo_replicas.cpp) on servers of the
// test's own: two shards, each a TemporaryServer with a synchronous
// streaming replica (the demo pauses the first's replay and kills the
// second's primary), the catalog and reference scratch databases on the
// local cluster. Its checker must pass: no stale read, no lost write.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "demos.hpp"
#include "report.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::lab {
namespace {

using test::TemporaryServer;

struct Pair {
  std::unique_ptr<TemporaryServer> primary = std::make_unique<TemporaryServer>();
  std::unique_ptr<TemporaryServer> replica;
  ShardConfig Shard(const std::string& name) {
    replica = primary->MakeReplica(name + "-replica");
    primary->Exec("ALTER SYSTEM SET synchronous_standby_names = '*'");  // its one standby
    primary->Exec("SELECT pg_reload_conf()");
    ShardConfig shard{name, primary->AppDsn(), primary->Dsn()};
    ReplicaConfig r{name + "-replica", replica->AppDsn()};
    r.admin_dsn = replica->Dsn();
    shard.replicas.push_back(r);
    return shard;
  }
  void ReleaseStandby() const {
    try {
      primary->Exec("ALTER SYSTEM RESET synchronous_standby_names");
      primary->Exec("SELECT pg_reload_conf()");
    } catch (const std::exception&) {
      // Killed: nothing waits there.
    }
  }
};

TEST(LabReplicas, NoStaleReadNorLostWriteThroughPausedReplayAndAFailover) {
  Pair first;
  Pair second;
  std::vector<ShardConfig> servers{first.Shard("a"), second.Shard("b")};
  {
    test::ScratchCluster cluster{"lab_replicas_pgtest", test::ScratchOptions().Shards(2).On(servers)};
    cluster.CatchUpReplicas();
    Lab lab{cluster.Config()};
    ReplicasDemoOptions options;
    options.writers = 3;
    options.phase = std::chrono::milliseconds(800);
    options.progress = [](const std::string& line) { std::cout << line << std::endl; };
    const DemoResult r = RunReplicas(lab, options);
    std::cout << r.text << std::endl;
    for (const auto& check : r.checks) EXPECT_TRUE(check.ok) << check.name << ": " << check.detail;
    EXPECT_EQ(r.figures["stale_reads"], 0);
    EXPECT_EQ(r.figures["lost_writes"], 0);
    EXPECT_GT(r.figures["acknowledged_writes"].get<int>(), 0);
    EXPECT_TRUE(r.figures["synchronous_replication"].get<bool>());
    EXPECT_EQ(r.figures["failover"]["to"], "shard1-replica1");
    // The old primary was dead (killed), not fenced: the failover was forced.
    EXPECT_EQ(r.figures["failover"]["loss"].get<std::string>().rfind("unknown", 0), 0U) << r.figures.dump();
    // The report's charts: writes and reads over time, the faults marked.
    const Json& ticks = r.figures["per_half_second"];
    ASSERT_GT(ticks.size(), 4U);
    std::int64_t acknowledged = 0;
    std::int64_t on_replicas = 0;
    for (const Json& t : ticks) {
      acknowledged += t[1].get<std::int64_t>();
      on_replicas += t[3].get<std::int64_t>();
    }
    EXPECT_EQ(acknowledged, r.figures["acknowledged_writes"].get<std::int64_t>());
    EXPECT_EQ(on_replicas, r.figures["reads_on_replicas"].get<std::int64_t>());
    std::vector<std::string> events;
    for (const Json& e : r.figures["timeline_events"]) events.push_back(e["event"].get<std::string>());
    EXPECT_EQ(events, (std::vector<std::string>{"shard0-replica1 replay paused", "replay resumed", "shard1 killed",
                                                "shard1-replica1 promoted"}));
    const std::vector<Chart> charts = ReplicasCharts(r.figures);
    ASSERT_EQ(charts.size(), 2U);
    const std::vector<std::string> svgs = RenderCharts(charts);
    ASSERT_EQ(svgs.size(), 2U);
    for (const std::string& svg : svgs) EXPECT_NE(svg.find("<svg"), std::string::npos);
    // A primary still waiting for a synchronous standby would hold the
    // scratch databases' DROP forever.
    for (Pair* pair : {&first, &second}) pair->ReleaseStandby();
  }
}

}  // namespace
}  // namespace shardkit::lab
