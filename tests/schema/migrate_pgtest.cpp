// The migrator against real servers, three shards on the local cluster's two
// shard servers (plus the reference and the catalog): everything applied
// once; a server lost mid-run is left behind and caught up by the next run;
// an edited applied file is refused; two migrators never interleave; a
// failing concurrent index is reported as INVALID and resumed after repair;
// a failing statement stops the run after its version.
#include "shardkit/schema/migrate.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/errors.hpp"
#include "sql/sql_catalog.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;
using test::ScratchCluster;
using test::ScratchOptions;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Migration files of a test, in a directory of their own.
class MigrationFiles {
 public:
  MigrationFiles() {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() / fmt::format("migrate_pgtest_{}_{}", ::getpid(), counter++);
    std::filesystem::create_directories(dir_);
  }
  ~MigrationFiles() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  MigrationFiles(const MigrationFiles&) = delete;
  MigrationFiles& operator=(const MigrationFiles&) = delete;

  void Write(const std::string& name, const std::string& text) const { std::ofstream(dir_ / name) << text; }
  [[nodiscard]] MigrationSet Load() const { return MigrationSet::Load(dir_); }

 private:
  std::filesystem::path dir_;
};

// Each file logs itself, so a second application would show.
void WriteHistory(const MigrationFiles& files) {
  files.Write("001_log.sql",
              "-- shardkit-migration: targets = shard, reference, catalog\n"
              "CREATE TABLE mig_log (version int NOT NULL, pid int NOT NULL DEFAULT pg_backend_pid());\n"
              "INSERT INTO mig_log (version) VALUES (1);\n");
  files.Write("002_items.sql",
              "-- shardkit-migration: targets = shard, reference\n"
              "CREATE TABLE items (id int PRIMARY KEY, x int);\n"
              "INSERT INTO mig_log (version) VALUES (2);\n");
  files.Write("003_leases.sql",
              "-- shardkit-migration: targets = catalog\n"
              "CREATE TABLE leases (id int PRIMARY KEY);\n"
              "INSERT INTO mig_log (version) VALUES (3);\n");
  files.Write("004_more.sql",
              "-- shardkit-migration: targets = shard\n"
              "ALTER TABLE items ADD COLUMN y int;\n"
              "INSERT INTO mig_log (version) VALUES (4);\n");
}

// version -> how often it was logged on that server.
std::map<int, int> Logged(const Dsn& dsn) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  std::map<int, int> out;
  if (!tx.exec1("SELECT to_regclass('mig_log') IS NOT NULL")[0].as<bool>()) return out;
  for (const auto& row : tx.exec("SELECT version, count(*) FROM mig_log GROUP BY 1")) {
    out[row[0].as<int>()] = row[1].as<int>();
  }
  return out;
}

// What every file applies to: shards 1,2,4; reference 1,2; catalog 1,3.
std::map<int, int> Expected(const MigrationServer& server, int up_to = 4) {
  std::map<int, int> out;
  for (const int v : {1, 2, 3, 4}) {
    if (v > up_to) continue;
    const bool shard = server.roles.front() == ServerRole::kShard;
    const bool reference = server.roles.front() == ServerRole::kReference;
    const bool applies =
        v == 1 || (v == 2 && (shard || reference)) || (v == 3 && !shard && !reference) || (v == 4 && shard);
    if (applies) out[v] = 1;
  }
  return out;
}

int PlannedCount(const MigrationReport& report) {
  int n = 0;
  for (const auto& [server, versions] : report.plan) n += static_cast<int>(versions.size());
  return n;
}

TEST(MigratePg, AppliesEveryMissingFileOnceOnThreeShards) {
  ScratchCluster cluster{"migrate_all_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  ASSERT_EQ(cluster.ShardCount(), 3);
  MigrationFiles files;
  WriteHistory(files);
  Migrator migrator(files.Load(), cluster.MigrationServers());
  const auto servers = cluster.MigrationServers();
  ASSERT_EQ(servers.size(), 5U);

  auto before = migrator.Status();
  EXPECT_EQ(before.State(0, 1), MigrationState::kPending);
  EXPECT_EQ(before.State(0, 3), MigrationState::kNotTargeted);
  EXPECT_EQ(before.VersionOf(0), 0);
  EXPECT_TRUE(before.AtOneVersion());  // all at version 0
  EXPECT_FALSE(before.UpToDate());

  // A dry run plans and changes nothing.
  const auto dry = migrator.Apply(std::nullopt, true);
  EXPECT_TRUE(dry.dry_run);
  EXPECT_EQ(PlannedCount(dry), 3 * 3 + 2 + 2);
  EXPECT_EQ(dry.AppliedCount(), 0);
  EXPECT_EQ(migrator.Status().State(0, 1), MigrationState::kPending);

  // --to 2, then the rest.
  const auto first = migrator.Apply(2);
  ASSERT_TRUE(first.Ok());
  EXPECT_EQ(first.AppliedCount(), 3 * 2 + 2 + 1);
  const auto middle = migrator.Status();
  EXPECT_EQ(middle.VersionOf(0), 3);  // 003 is not for shards: a shard at 2 is at 3
  EXPECT_EQ(middle.VersionOf(3), 4);  // the reference has all it takes
  EXPECT_EQ(middle.VersionOf(4), 2);  // the catalog lacks 003
  EXPECT_FALSE(middle.AtOneVersion());

  const auto second = migrator.Apply();
  ASSERT_TRUE(second.Ok()) << (second.applied.empty() ? "" : second.applied.front().error);
  EXPECT_EQ(second.AppliedCount(), 3 + 1);
  const auto after = migrator.Status();
  EXPECT_TRUE(after.UpToDate());
  EXPECT_TRUE(after.Problems().empty());
  for (std::size_t s = 0; s < servers.size(); ++s) {
    EXPECT_EQ(Logged(servers[s].dsn), Expected(servers[s])) << servers[s].name;
    const auto& history = after.Servers()[s].history;
    ASSERT_FALSE(history.empty());
    for (const auto& a : history) {
      EXPECT_TRUE(a.success);
      EXPECT_EQ(a.checksum, migrator.Set().Find(a.version)->checksum);
      EXPECT_TRUE(Contains(a.applied_by, "pid")) << a.applied_by;
      EXPECT_GE(a.duration_ms, 0.0);
      EXPECT_FALSE(a.applied_at.empty());
    }
  }
  EXPECT_NO_THROW(migrator.RequireUpToDate("shard2"));

  // Nothing left: a run applies nothing, twice.
  EXPECT_EQ(migrator.Apply().AppliedCount(), 0);
  for (const auto& s : servers) EXPECT_EQ(Logged(s.dsn), Expected(s)) << s.name;
}

TEST(MigratePg, AServerLostMidRunIsLeftBehindAndTheNextRunCompletesIt) {
  ScratchCluster cluster{"migrate_down_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  test::TemporaryServer spare;  // shard2 lives here: a server the test can stop
  auto servers = cluster.MigrationServers();
  servers[2].dsn = spare.Dsn();
  MigrationFiles files;
  WriteHistory(files);

  MigratorOptions options;
  options.connect_timeout = 2s;
  options.on_event = [&spare](const MigrationEvent& e) {
    if (e.kind == MigrationEvent::Kind::kApplied && e.server == "shard2" && e.version == 2) spare.Stop();
  };
  Migrator migrator(files.Load(), servers, options);
  const auto report = migrator.Apply();
  EXPECT_FALSE(report.Ok());
  EXPECT_FALSE(report.stopped) << "a lost server does not stop the others";
  ASSERT_EQ(report.left_behind.size(), 1U);
  EXPECT_TRUE(Contains(report.left_behind[0], "shard2")) << report.left_behind[0];

  // While it is down, status says so.
  MigratorOptions quick;
  quick.connect_timeout = 2s;
  Migrator observer(files.Load(), servers, quick);
  const auto down = observer.Status();
  EXPECT_FALSE(down.Servers()[2].reachable);
  EXPECT_EQ(down.State(2, 1), MigrationState::kUnreachable);
  EXPECT_FALSE(down.AtOneVersion());
  EXPECT_TRUE(down.Servers()[0].reachable);
  EXPECT_EQ(down.VersionOf(0), 4);

  // Back up: it has 001 and 002, 004 is pending, and 004 is partial.
  spare.Start();
  const auto behind = observer.Status();
  EXPECT_EQ(behind.State(2, 2), MigrationState::kApplied);
  EXPECT_EQ(behind.State(2, 4), MigrationState::kPending);
  EXPECT_EQ(behind.VersionOf(2), 3);
  EXPECT_TRUE(behind.Partial(4));
  bool partial_named = false;
  for (const auto& p : behind.Problems())
    partial_named = partial_named || (Contains(p, "004_more.sql") && Contains(p, "not on shard2"));
  EXPECT_TRUE(partial_named);
  EXPECT_THROW(observer.RequireUpToDate("shard2"), MigrationError);

  // The next run applies only what is missing.
  const auto rerun = observer.Apply();
  ASSERT_TRUE(rerun.Ok());
  ASSERT_EQ(rerun.AppliedCount(), 1);
  EXPECT_EQ(rerun.applied[0].server, "shard2");
  EXPECT_EQ(rerun.applied[0].version, 4);
  EXPECT_TRUE(observer.Status().UpToDate());
  for (const auto& s : servers) EXPECT_EQ(Logged(s.dsn), Expected(s)) << s.name << ": a migration applied twice?";
}

TEST(MigratePg, AnEditedAppliedFileIsRefusedAndNothingIsApplied) {
  ScratchCluster cluster{"migrate_edit_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  MigrationFiles files;
  WriteHistory(files);
  ASSERT_TRUE(Migrator(files.Load(), cluster.MigrationServers()).Apply(2).Ok());

  // 002 edited after it was applied, and a new 005 waiting.
  files.Write("002_items.sql",
              "-- shardkit-migration: targets = shard, reference\n"
              "CREATE TABLE items (id int PRIMARY KEY, x bigint);\n"
              "INSERT INTO mig_log (version) VALUES (2);\n");
  files.Write("005_new.sql",
              "-- shardkit-migration: targets = shard, reference, catalog\nCREATE TABLE newer (id int);\n");
  Migrator migrator(files.Load(), cluster.MigrationServers());
  try {
    (void)migrator.Apply();
    FAIL() << "an edited applied file was not refused";
  } catch (const MigrationRefused& e) {
    EXPECT_EQ(e.problems().size(), 4U) << e.what();  // three shards and the reference have 002
    EXPECT_TRUE(Contains(e.what(), "002_items.sql changed after it was applied")) << e.what();
    EXPECT_TRUE(Contains(e.what(), "new migration file")) << e.what();
  }
  EXPECT_THROW((void)migrator.Apply(std::nullopt, true), MigrationRefused);  // a dry run says so too
  const auto status = migrator.Status();
  EXPECT_EQ(status.State(1, 2), MigrationState::kChecksumMismatch);
  EXPECT_EQ(status.State(1, 5), MigrationState::kPending);
  EXPECT_EQ(status.State(4, 3), MigrationState::kPending) << "nothing may be applied, not even elsewhere";
  for (const auto& s : cluster.MigrationServers()) EXPECT_EQ(Logged(s.dsn), Expected(s, 2)) << s.name;

  // Restored: the run goes on with what is missing.
  WriteHistory(files);
  Migrator restored(files.Load(), cluster.MigrationServers());
  const auto report = restored.Apply();
  ASSERT_TRUE(report.Ok());
  EXPECT_EQ(report.AppliedCount(), 3 + 1 + 5);  // 004 on the shards, 003 on the catalog, 005 everywhere
  EXPECT_TRUE(restored.Status().UpToDate());
}

// Advisory locks waiting on this database (the migrator's key or any).
int WaitingAdvisoryLocks(const Dsn& dsn) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  return tx
      .exec1(
          "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
          "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")[0]
      .as<int>();
}

TEST(MigratePg, TwoMigratorsNeverInterleave) {
  ScratchCluster cluster{"migrate_lock_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  MigrationFiles files;
  WriteHistory(files);
  const auto servers = cluster.MigrationServers();
  constexpr std::int64_t kKey = 0x53484B4D49475254;  // the migrator's lock key ("SHKMIGRT")

  // Someone holds shard1's lock: a migrator that cannot wait says who.
  pqxx::connection holder{servers[1].dsn.Reveal()};
  {
    pqxx::nontransaction tx{holder};
    tx.exec("SET application_name = 'lock-holder-test'");
    tx.exec_params("SELECT pg_advisory_lock($1)", kKey);
  }
  try {
    MigratorOptions impatient;
    impatient.lock_timeout = 200ms;
    (void)Migrator(files.Load(), servers, impatient).Apply();
    FAIL() << "the lock was not noticed";
  } catch (const MigrationError& e) {
    EXPECT_EQ(e.server(), "shard1");
    EXPECT_TRUE(Contains(e.what(), "lock-holder-test")) << e.what();
  }
  for (const auto& s : servers) EXPECT_TRUE(Logged(s.dsn).empty()) << s.name << ": applied without its lock";

  // Two migrators at once, both queued behind the holder.
  MigrationReport a, b;
  std::string a_error, b_error;
  auto run = [&](MigrationReport& report, std::string& error) {
    try {
      MigratorOptions patient;
      patient.lock_timeout = 120s;
      report = Migrator(files.Load(), servers, patient).Apply();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  std::thread ta(run, std::ref(a), std::ref(a_error));
  std::thread tb(run, std::ref(b), std::ref(b_error));
  // One waits on shard0 (behind the other), the other on shard1 (behind the holder).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while ((WaitingAdvisoryLocks(servers[0].dsn) < 1 || WaitingAdvisoryLocks(servers[1].dsn) < 1) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(WaitingAdvisoryLocks(servers[0].dsn), 1);
  EXPECT_EQ(WaitingAdvisoryLocks(servers[1].dsn), 1);
  for (const auto& s : servers) EXPECT_TRUE(Logged(s.dsn).empty()) << s.name << ": applied while queued";
  {
    pqxx::nontransaction tx{holder};
    tx.exec_params("SELECT pg_advisory_unlock($1)", kKey);
  }
  ta.join();
  tb.join();
  ASSERT_EQ(a_error, "");
  ASSERT_EQ(b_error, "");
  EXPECT_TRUE(a.Ok());
  EXPECT_TRUE(b.Ok());
  // One did everything, the other found nothing left.
  EXPECT_EQ(a.AppliedCount() + b.AppliedCount(), 3 * 3 + 2 + 2);
  EXPECT_EQ(std::min(a.AppliedCount(), b.AppliedCount()), 0);
  for (const auto& s : servers) {
    EXPECT_EQ(Logged(s.dsn), Expected(s)) << s.name;
    pqxx::connection c{s.dsn.Reveal()};
    pqxx::nontransaction tx{c};
    EXPECT_EQ(tx.exec1("SELECT count(DISTINCT pid) FROM mig_log")[0].as<int>(), 1)
        << s.name << ": two sessions migrated it";
  }
}

TEST(MigratePg, OneDatabaseUnderTwoConnectionStringsIsNamedNotWaitedFor) {
  ScratchCluster cluster{"migrate_twice_pgtest", ScratchOptions().Shards(1).Unmigrated()};
  MigrationFiles files;
  WriteHistory(files);
  // The catalog spelled differently, but the reference's database.
  const Dsn respelt{cluster.ReferenceDsn().Reveal() + " connect_timeout=3"};
  std::vector<MigrationServer> servers{{"reference", cluster.ReferenceDsn(), {ServerRole::kReference}},
                                       {"catalog", respelt, {ServerRole::kCatalog}}};
  MigratorOptions patient;
  patient.lock_timeout = 120s;
  try {
    (void)Migrator(files.Load(), servers, patient).Apply();
    FAIL() << "one database under two names was migrated";
  } catch (const MigrationError& e) {
    EXPECT_EQ(e.server(), "catalog");
    EXPECT_TRUE(Contains(e.what(), "catalog and reference are the same database")) << e.what();
  }
  EXPECT_TRUE(Logged(cluster.ReferenceDsn()).empty());
}

TEST(MigratePg, AFailedConcurrentIndexIsReportedInvalidAndResumedAfterRepair) {
  ScratchCluster cluster{"migrate_cic_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  MigrationFiles files;
  files.Write("001_t.sql",
              "-- shardkit-migration: targets = shard\n"
              "CREATE TABLE mig_log (version int NOT NULL, pid int NOT NULL DEFAULT pg_backend_pid());\n"
              "CREATE TABLE t (x int);\n");
  files.Write("002_unique.sql",
              "-- shardkit-migration: targets = shard\n"
              "-- shardkit-migration: transaction = none\n"
              "INSERT INTO mig_log (version) VALUES (2);\n"
              "CREATE UNIQUE INDEX CONCURRENTLY t_x_key ON t (x);\n");
  files.Write("003_after.sql", "-- shardkit-migration: targets = shard\nINSERT INTO mig_log (version) VALUES (3);\n");
  const auto servers = cluster.MigrationServers();
  Migrator migrator(files.Load(), servers);
  ASSERT_TRUE(migrator.Apply(1).Ok());
  cluster.ExecOnShard(1, "INSERT INTO t VALUES (7), (7)");  // the unique index cannot be built there

  const auto report = migrator.Apply();
  EXPECT_FALSE(report.Ok());
  EXPECT_TRUE(report.stopped);
  bool reported = false;
  for (const auto& step : report.applied) {
    if (step.server == "shard1" && step.version == 2) {
      EXPECT_FALSE(step.ok);
      EXPECT_TRUE(Contains(step.error, "step 2 of 2")) << step.error;
      EXPECT_TRUE(Contains(step.error, "INVALID index public.t_x_key")) << step.error;
      reported = true;
    }
    EXPECT_NE(step.version, 3) << "a later version started after a failure";
  }
  EXPECT_TRUE(reported);

  const auto status = migrator.Status();
  EXPECT_EQ(status.State(1, 2), MigrationState::kFailed);
  EXPECT_EQ(status.State(0, 2), MigrationState::kApplied);
  EXPECT_EQ(status.Servers()[1].Find(2)->steps_done, 1);
  ASSERT_EQ(status.Servers()[1].invalid_indexes.size(), 1U);
  EXPECT_EQ(status.Servers()[1].invalid_indexes[0].index, "t_x_key");
  EXPECT_FALSE(status.Servers()[1].invalid_indexes[0].being_built);
  EXPECT_FALSE(status.AtOneVersion());
  try {
    (void)migrator.Apply();
    FAIL() << "ran on with an INVALID index";
  } catch (const MigrationRefused& e) {
    EXPECT_TRUE(Contains(e.what(), "DROP INDEX CONCURRENTLY public.t_x_key")) << e.what();
  }

  // Repaired: the next run resumes at the failed step, not at step 1.
  cluster.ExecOnShard(1, "DROP INDEX CONCURRENTLY t_x_key");
  cluster.ExecOnShard(1, "DELETE FROM t");
  const auto resumed = migrator.Apply();
  ASSERT_TRUE(resumed.Ok()) << (resumed.applied.empty() ? "" : resumed.applied.front().error);
  EXPECT_TRUE(migrator.Status().UpToDate());
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(Logged(cluster.ShardDsn(s)), (std::map<int, int>{{2, 1}, {3, 1}})) << "shard" << s;
  }
}

TEST(MigratePg, AFailedStatementRollsBackAndStopsTheRunAfterItsVersion) {
  ScratchCluster cluster{"migrate_fail_pgtest", ScratchOptions().Shards(3).Unmigrated()};
  MigrationFiles files;
  WriteHistory(files);
  Migrator migrator(files.Load(), cluster.MigrationServers());
  ASSERT_TRUE(migrator.Apply(3).Ok());
  cluster.ExecOnShard(2, "ALTER TABLE items ADD COLUMN y int");  // 004 fails there
  files.Write("005_later.sql",
              "-- shardkit-migration: targets = shard, reference\nINSERT INTO mig_log (version) VALUES (5);\n");
  Migrator next(files.Load(), cluster.MigrationServers());

  const auto report = next.Apply();
  EXPECT_TRUE(report.stopped);
  EXPECT_FALSE(report.Ok());
  for (const auto& step : report.applied) EXPECT_NE(step.version, 5) << step.server << " started 005 after a failure";
  const auto status = next.Status();
  EXPECT_EQ(status.State(2, 4), MigrationState::kFailed);
  EXPECT_EQ(status.State(0, 4), MigrationState::kApplied);
  EXPECT_TRUE(Contains(status.Servers()[2].Find(4)->error, "already exists")) << status.Servers()[2].Find(4)->error;
  EXPECT_EQ(Logged(cluster.ShardDsn(2)).count(4), 0U) << "the failed file was not rolled back";

  cluster.ExecOnShard(2, "ALTER TABLE items DROP COLUMN y");
  const auto fixed = next.Apply();
  ASSERT_TRUE(fixed.Ok());
  EXPECT_EQ(fixed.AppliedCount(), 1 + 4);  // 004 on shard2, then 005 on three shards and the reference
  EXPECT_TRUE(next.Status().UpToDate());
}

TEST(MigratePg, ScratchClustersAreMigratedAndCanHaveMoreShardsThanServers) {
  const auto base = test::LoadTestConfig();
  ScratchCluster cluster{"migrate_scratch_pgtest", ScratchOptions().Shards(4).Directory(test::UnevenSplit(4))};
  ASSERT_EQ(cluster.ShardCount(), 4);
  for (const MigrationSet& set : test::ClusterMigrations()) {
    EXPECT_TRUE(Migrator(set, cluster.MigrationServers()).Status().UpToDate()) << set.Name();
  }
  // Shard i on shard server i % servers, each in its own database.
  const auto servers = static_cast<int>(base.shards.size());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cluster.ShardDsn(i),
              test::WithDatabase(base.shards[static_cast<std::size_t>(i % servers)].dsn, cluster.ShardDatabaseName(i)));
  }
  // The resolver reads the uneven directory from the scratch catalog.
  auto resolver = cluster.MakeResolver();
  EXPECT_EQ(*resolver->Directory(), test::UnevenSplit(4));
  EXPECT_LT(resolver->Directory()->BucketsOf(ShardId{0}).size(), resolver->Directory()->BucketsOf(ShardId{3}).size());

  // A new, empty shard database is not at the current schema until migrated.
  ScratchCluster bare{"migrate_bare_pgtest", ScratchOptions().Shards(1).Unmigrated()};
  std::vector<MigrationServer> with_new = cluster.MigrationServers();
  with_new.push_back({"shard4", bare.ShardDsn(0), {ServerRole::kShard}});
  for (const MigrationSet& set : test::ClusterMigrations()) {
    Migrator grown(set, with_new);
    try {
      grown.RequireUpToDate("shard4");
      FAIL() << "an empty shard passed " << set.Name();
    } catch (const MigrationError& e) {
      EXPECT_EQ(e.server(), "shard4");
      EXPECT_TRUE(Contains(e.what(), "shardctl migrate")) << e.what();
    }
    const auto report = grown.Apply();
    ASSERT_TRUE(report.Ok());
    // Every migration of the set that targets shards, on the new shard only.
    const auto& all = set.All();
    const auto shard_files = std::count_if(all.begin(), all.end(), [](const Migration& m) {
      return std::find(m.targets.begin(), m.targets.end(), ServerRole::kShard) != m.targets.end();
    });
    EXPECT_EQ(report.AppliedCount(), static_cast<int>(shard_files)) << set.Name();
    EXPECT_NO_THROW(grown.RequireUpToDate("shard4"));
  }
}

// An application's folder holds only its own files: shardkit's set goes
// first (bucket_of, shardkit_shard_table), each set with its own history.
TEST(MigratePg, AnApplicationsOwnFilesMigrateAfterTheLibrarys) {
  ScratchCluster cluster{"migrate_app_pgtest", ScratchOptions().Shards(2).Unmigrated()};
  MigrationFiles files;
  files.Write("001_invoices.sql",
              "-- shardkit-migration: targets = shard, reference\n"
              "CREATE TABLE invoices (customer_id integer NOT NULL, invoice_id bigint NOT NULL,\n"
              "  bucket smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),\n"
              "  PRIMARY KEY (customer_id, invoice_id));\n"
              "SELECT shardkit_shard_table('invoices');\n");
  const MigrationSet app = files.Load();
  // Alone, the application's files fail on the library's functions.
  {
    Migrator alone(app, cluster.MigrationServers());
    const auto report = alone.Apply();
    EXPECT_FALSE(report.Ok());
    ASSERT_FALSE(report.applied.empty());
    EXPECT_TRUE(Contains(report.applied.front().error, "bucket_of")) << report.applied.front().error;
  }
  const auto sets = ClusterMigrations(app.Directory());
  ASSERT_EQ(sets.size(), 2U);
  pqxx::connection shard{cluster.ShardDsn(0).Reveal()};
  const auto schema_version = [&shard] {
    pqxx::read_transaction tx{shard};
    return sql::ReadSchemaVersion(tx);
  };
  for (const MigrationSet& set : sets) {
    Migrator migrator(set, cluster.MigrationServers());
    const auto report = migrator.Apply();
    ASSERT_TRUE(report.Ok()) << set.Name();
    EXPECT_TRUE(migrator.Status().UpToDate()) << set.Name();
  }
  const std::string after_first_file = schema_version();
  // A later file of the application's (numbered below shardkit's highest
  // version, adding no table and no function) still changes the schema
  // version the SQL layer's cached plans are checked by.
  files.Write("002_invoice_notes.sql",
              "-- shardkit-migration: targets = shard, reference\nALTER TABLE invoices ADD COLUMN note text;\n");
  ASSERT_TRUE(Migrator(files.Load(), cluster.MigrationServers()).Apply().Ok());
  EXPECT_NE(schema_version(), after_first_file);
  pqxx::read_transaction tx{shard};
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_migrations WHERE migration_set = 'app'")[0].as<int>(), 2);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_migrations WHERE migration_set = 'shardkit'")[0].as<int>(),
            std::count_if(MigrationSet::Library().All().begin(), MigrationSet::Library().All().end(),
                          [](const Migration& m) { return m.Targets(ServerRole::kShard); }));
  EXPECT_EQ(
      tx.exec1("SELECT count(*) FROM shardkit_sharded_tables WHERE table_name = 'invoices'::regclass")[0].as<int>(), 1);
}

// A history written before the sets (one sequence, no set column) is read
// as the two sets and upgraded by the next run without applying anything.
TEST(MigratePg, AHistoryFromBeforeTheSetsIsUpgradedInPlace) {
  ScratchCluster cluster{"migrate_old_history_pgtest", ScratchOptions().Shards(1)};
  const std::string old_layout =
      "ALTER TABLE shardkit_migrations DROP COLUMN migration_set; "
      "ALTER TABLE shardkit_migrations ADD PRIMARY KEY (version)";
  cluster.ExecEverywhere(old_layout);
  cluster.ExecOnCatalog(old_layout);
  for (const MigrationSet& set : test::ClusterMigrations()) {
    Migrator migrator(set, cluster.MigrationServers());
    EXPECT_TRUE(migrator.Status().UpToDate()) << set.Name();
    const auto report = migrator.Apply();
    ASSERT_TRUE(report.Ok()) << set.Name();
    EXPECT_EQ(report.AppliedCount(), 0) << set.Name();
    EXPECT_TRUE(migrator.Status().UpToDate()) << set.Name();
  }
  pqxx::connection shard{cluster.ShardDsn(0).Reveal()};
  pqxx::read_transaction tx{shard};
  EXPECT_EQ(
      tx.exec1("SELECT migration_set FROM shardkit_migrations WHERE name = 'bookstore_schema'")[0].as<std::string>(),
      "app");
  EXPECT_EQ(tx.exec1("SELECT migration_set FROM shardkit_migrations WHERE name = 'bucket_of'")[0].as<std::string>(),
            "shardkit");
}

}  // namespace
}  // namespace shardkit
