// Migration files without a server: names, headers, checksums, statements,
// and the status matrix computed from histories.
#include "shardkit/schema/migrate.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

std::string ErrorOf(const std::string& name, const std::string& text) {
  try {
    (void)ParseMigration(name, text);
  } catch (const MigrationError& e) {
    return e.what();
  }
  return "<no error>";
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ParseMigration, NameVersionTargetsAndChecksum) {
  const auto m =
      ParseMigration("002_bookstore_schema.sql",
                     "-- shardkit-migration: targets = reference, shard\n-- the schema\nCREATE TABLE t (x int);\n");
  EXPECT_EQ(m.version, 2);
  EXPECT_EQ(m.name, "bookstore_schema");
  EXPECT_EQ(m.file_name, "002_bookstore_schema.sql");
  EXPECT_EQ(m.TargetList(), "shard, reference");  // always in this order
  EXPECT_TRUE(m.Targets(ServerRole::kShard));
  EXPECT_FALSE(m.Targets(ServerRole::kCatalog));
  EXPECT_TRUE(m.transactional);
  ASSERT_EQ(m.steps.size(), 1U);
  EXPECT_EQ(m.checksum, Sha256Hex(m.sql));
  // CRLF line ends (a Windows checkout) do not change the checksum.
  const auto crlf = ParseMigration(
      "002_bookstore_schema.sql",
      "-- shardkit-migration: targets = reference, shard\r\n-- the schema\r\nCREATE TABLE t (x int);\r\n");
  EXPECT_EQ(crlf.checksum, m.checksum);
  // Any other change does.
  const auto edited =
      ParseMigration("002_bookstore_schema.sql",
                     "-- shardkit-migration: targets = reference, shard\n-- the schema\nCREATE TABLE t (x bigint);\n");
  EXPECT_NE(edited.checksum, m.checksum);
}

TEST(ParseMigration, StepByStepFilesSplitIntoStatements) {
  const auto m = ParseMigration("007_orders_index.sql",
                                "-- shardkit-migration: targets = shard\n"
                                "-- shardkit-migration: transaction = none\n"
                                "CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON orders (total);\n"
                                "-- why\n"
                                "CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON orders (status);\n");
  EXPECT_FALSE(m.transactional);
  ASSERT_EQ(m.steps.size(), 2U);
  EXPECT_TRUE(Contains(m.steps[1], "ON orders (status)"));
}

TEST(ParseMigration, ErrorsNameTheFileAndWhatToDo) {
  EXPECT_TRUE(Contains(ErrorOf("2_x.sql", "-- shardkit-migration: targets = shard\nSELECT 1;"), "NNN_name.sql"));
  EXPECT_TRUE(Contains(ErrorOf("003_x-y.sql", "-- shardkit-migration: targets = shard\nSELECT 1;"), "NNN_name.sql"));
  EXPECT_TRUE(Contains(ErrorOf("003_x.sql", "SELECT 1;"), "no targets header"));
  EXPECT_TRUE(Contains(ErrorOf("003_x.sql", "-- shardkit-migration: targets = shards\nSELECT 1;"), "\"shards\""));
  EXPECT_TRUE(Contains(ErrorOf("003_x.sql", "-- shardkit-migration: targets =\nSELECT 1;"), "003_x.sql line 1"));
  EXPECT_TRUE(Contains(
      ErrorOf("003_x.sql",
              "-- shardkit-migration: targets = shard\n-- shardkit-migration: transaction = per-file\nSELECT 1;"),
      "\"none\""));
  EXPECT_TRUE(Contains(
      ErrorOf("003_x.sql", "-- shardkit-migration: targets = shard\n-- shardkit-migration: owner = me\nSELECT 1;"),
      "unknown header key"));
  EXPECT_TRUE(
      Contains(ErrorOf("003_x.sql", "\n\n\n\n\n-- shardkit-migration: targets = shard\nSELECT 1;"), "lines 1-5"));
  EXPECT_TRUE(Contains(ErrorOf("003_x.sql", "-- shardkit-migration: targets = shard\n-- nothing\n"), "no statements"));
  // What cannot run in the migrator's transaction says how to fix it.
  EXPECT_TRUE(
      Contains(ErrorOf("003_x.sql", "-- shardkit-migration: targets = shard\nCREATE INDEX CONCURRENTLY i ON t (x);"),
               "transaction = none"));
  EXPECT_TRUE(Contains(ErrorOf("003_x.sql", "-- shardkit-migration: targets = shard\nBEGIN;\nSELECT 1;\nCOMMIT;"),
                       "controls the transaction"));
}

TEST(SplitStatements, RespectsQuotesCommentsAndBodies) {
  const auto s = SplitStatements(
      "SELECT 'a;b', \"c;d\", E'e\\';f';\n"
      "-- a comment; with a semicolon\n"
      "/* a /* nested; */ comment; */ SELECT 2;\n"
      "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$;\n"
      "CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END;\n"
      "SELECT $1::int;  -- trailing\n"
      "   ;\n"
      "-- only a comment at the end\n");
  ASSERT_EQ(s.size(), 5U);
  EXPECT_EQ(s[0], "SELECT 'a;b', \"c;d\", E'e\\';f'");
  EXPECT_TRUE(Contains(s[1], "SELECT 2"));
  EXPECT_TRUE(Contains(s[2], "RETURN 1; END $body$"));
  EXPECT_TRUE(Contains(s[3], "SELECT 2; END"));
  EXPECT_EQ(s[4], "SELECT $1::int");
}

TEST(SplitStatements, RefusesASyntaxErrorWithItsLineAndColumn) {
  // "FORM" reads as the alias of 1, so the error is at "t"; columns count
  // characters, not bytes (é is two).
  try {
    (void)SplitStatements("CREATE TABLE t (a int);\n-- ünïcode before it\nSELECT 'é', 1 FORM t;\n", "030_x.sql");
    FAIL() << "split a statement PostgreSQL cannot parse";
  } catch (const MigrationError& e) {
    EXPECT_TRUE(Contains(e.what(), "030_x.sql line 3, column 20: syntax error at or near \"t\"")) << e.what();
    EXPECT_TRUE(Contains(e.what(), "nothing was applied")) << e.what();
  }
  // A file with one is refused as it is read, naming the file.
  try {
    (void)ParseMigration("031_bad.sql", "-- shardkit-migration: targets = shard\nCREATE TABLE u (a int);\nSELEC 1;\n");
    FAIL() << "parsed a migration with a syntax error";
  } catch (const MigrationError& e) {
    EXPECT_TRUE(Contains(e.what(), "031_bad.sql line 3, column 1")) << e.what();
  }
}

TEST(MigrationSet, LoadsInVersionOrderAndRefusesDuplicates) {
  const auto dir = std::filesystem::temp_directory_path() / ("migrate_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("010_b.sql", "-- shardkit-migration: targets = catalog\nSELECT 1;\n");
  write("002_a.sql", "-- shardkit-migration: targets = shard\nSELECT 1;\n");
  write("README.md", "not a migration");
  const auto set = MigrationSet::Load(dir);
  ASSERT_EQ(set.All().size(), 2U);
  EXPECT_EQ(set.All()[0].version, 2);
  EXPECT_EQ(set.LatestVersion(), 10);
  EXPECT_NE(set.Find(10), nullptr);
  EXPECT_EQ(set.Find(3), nullptr);
  write("010_c.sql", "-- shardkit-migration: targets = catalog\nSELECT 1;\n");
  try {
    (void)MigrationSet::Load(dir);
    FAIL();
  } catch (const MigrationError& e) {
    EXPECT_TRUE(Contains(e.what(), "010_b.sql") && Contains(e.what(), "010_c.sql")) << e.what();
  }
  std::filesystem::remove_all(dir);
  EXPECT_THROW((void)MigrationSet::Load(dir), MigrationError);
}

TEST(MigrationSet, TheLibrarysOwnSetIsCompiledIn) {
  const MigrationSet& library = MigrationSet::Library();
  EXPECT_EQ(library.Name(), kLibraryMigrations);
  ASSERT_GE(library.All().size(), 4U);
  EXPECT_EQ(library.Find(1)->TargetList(), "shard, reference");  // bucket_of
  EXPECT_EQ(library.Find(3)->TargetList(), "catalog");           // shard_directory
  EXPECT_EQ(library.Find(4)->TargetList(), "catalog");           // worker-id leases
  // Byte for byte the repository's sql/ files, and nothing of the Bookstore.
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(SHARDKIT_SOURCE_DIR "/sql")) {
    if (entry.path().extension() != ".sql") continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const Migration* m = library.Find(ParseMigration(entry.path().filename().string(), text).version);
    ASSERT_NE(m, nullptr) << entry.path();
    EXPECT_EQ(m->checksum, Sha256Hex(text)) << entry.path();
  }
  EXPECT_EQ(library.All().size(), files);
  for (const Migration& m : library.All())
    EXPECT_FALSE(Contains(m.sql, "CREATE TABLE IF NOT EXISTS books")) << m.file_name;
}

TEST(MigrationSet, AnApplicationSetIsItsFolderAfterTheLibrarys) {
  const auto bookstore = MigrationSet::Load(SHARDKIT_SOURCE_DIR "/examples/bookstore-service/sql");
  EXPECT_EQ(bookstore.Name(), kApplicationMigrations);
  EXPECT_EQ(bookstore.Find(2)->TargetList(), "shard, reference");  // the Bookstore's tables
  const auto sets = ClusterMigrations(std::filesystem::path(SHARDKIT_SOURCE_DIR "/examples/bookstore-service/sql"));
  ASSERT_EQ(sets.size(), 2U);
  EXPECT_EQ(sets[0].Name(), kLibraryMigrations);
  EXPECT_EQ(sets[1].LatestVersion(), bookstore.LatestVersion());
  EXPECT_EQ(ClusterMigrations(std::nullopt).size(), 1U);
}

TEST(MigrationSet, ACopyOfTheLibrarysFilesIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardkit_copied_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(SHARDKIT_SOURCE_DIR "/sql/001_bucket_of.sql", dir / "001_bucket_of.sql",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "100_invoices.sql") << "-- shardkit-migration: targets = shard\nSELECT 1;\n";
  try {
    (void)MigrationSet::Load(dir);
    ADD_FAILURE() << "a copy of 001_bucket_of.sql was taken as the application's";
  } catch (const MigrationError& e) {
    EXPECT_TRUE(Contains(e.what(), "001_bucket_of.sql") && Contains(e.what(), "shardkit's own")) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(MigrationServers, OneServerPerDatabaseWithItsRoles) {
  ClusterConfig config;
  config.shards = {{"east", Dsn("host=a")}, {"west", Dsn("host=b")}};
  config.reference_dsn = Dsn("host=r");
  config.catalog_dsn = Dsn("host=r");  // the same database as the reference: one history, one lock
  const auto servers = MigrationServers(config);
  ASSERT_EQ(servers.size(), 3U);
  EXPECT_EQ(servers[0].name, "east");
  EXPECT_EQ(servers[2].name, "reference");
  EXPECT_EQ(servers[2].RoleList(), "reference, catalog");
}

// The matrix from histories, without servers.
class StatusMatrix : public ::testing::Test {
 protected:
  StatusMatrix()
      : set_(MigrationSet::FromMigrations({
            ParseMigration("001_a.sql", "-- shardkit-migration: targets = shard, reference\nSELECT 1;"),
            ParseMigration("002_b.sql", "-- shardkit-migration: targets = catalog\nSELECT 2;"),
            ParseMigration("003_c.sql",
                           "-- shardkit-migration: targets = shard\n-- shardkit-migration: transaction = none\nSELECT "
                           "3; SELECT 4;"),
        })) {}

  ServerMigrationStatus Server(const std::string& name, ServerRole role, const std::vector<int>& applied) {
    ServerMigrationStatus s;
    s.server = {name, Dsn("host=" + name), {role}};
    s.reachable = true;
    s.has_history = true;
    for (int v : applied) {
      const Migration* m = set_.Find(v);
      AppliedMigration a;
      a.version = v;
      a.name = m != nullptr ? m->name : "gone";
      a.checksum = m != nullptr ? m->checksum : "x";
      a.success = true;
      a.transactional = m == nullptr || m->transactional;
      s.history.push_back(a);
    }
    return s;
  }

  MigrationSet set_;
};

TEST_F(StatusMatrix, AllAppliedIsOneVersionAndUpToDate) {
  const MigrationStatus status(
      set_, {Server("shard0", ServerRole::kShard, {1, 3}), Server("reference", ServerRole::kReference, {1}),
             Server("catalog", ServerRole::kCatalog, {2})});
  EXPECT_EQ(status.State(0, 2), MigrationState::kNotTargeted);
  EXPECT_EQ(status.State(0, 3), MigrationState::kApplied);
  EXPECT_EQ(status.VersionOf(1), 3);  // 003 does not target the reference
  EXPECT_TRUE(status.AtOneVersion());
  EXPECT_TRUE(status.UpToDate());
  EXPECT_TRUE(status.Problems().empty());
}

TEST_F(StatusMatrix, PendingFailedChangedUnknownAndPartial) {
  auto shard0 = Server("shard0", ServerRole::kShard, {1, 3});
  auto shard1 = Server("shard1", ServerRole::kShard, {1});
  auto reference = Server("reference", ServerRole::kReference, {1, 9});  // 009: no such file
  auto catalog = Server("catalog", ServerRole::kCatalog, {2});
  catalog.history[0].checksum = "edited";
  shard1.history.push_back(AppliedMigration{3, "c", set_.Find(3)->checksum, false, false, 1, 2, "t", 0, "me", "boom"});
  const MigrationStatus status(set_, {shard0, shard1, reference, catalog});
  EXPECT_EQ(status.State(1, 3), MigrationState::kFailed);
  EXPECT_EQ(status.State(3, 2), MigrationState::kChecksumMismatch);
  EXPECT_EQ(status.VersionOf(1), 2);
  EXPECT_TRUE(status.Partial(3));
  EXPECT_EQ(status.UnknownVersions(2), std::vector<int>{9});
  EXPECT_FALSE(status.AtOneVersion());
  const auto blockers = status.Blockers();
  ASSERT_EQ(blockers.size(), 2U);
  EXPECT_TRUE(Contains(blockers[0], "reference") && Contains(blockers[0], "009")) << blockers[0];
  EXPECT_TRUE(Contains(blockers[1], "catalog") && Contains(blockers[1], "002_b.sql changed")) << blockers[1];
  bool failed_named = false;
  for (const auto& p : status.Problems())
    failed_named = failed_named || (Contains(p, "shard1") && Contains(p, "step 2 of 2"));
  EXPECT_TRUE(failed_named);

  // A failed step-by-step file whose finished steps came from another text:
  // the edit matters, it is a mismatch, not a retry.
  shard1.history.back().checksum = "older";
  const MigrationStatus edited(set_, {shard0, shard1, reference, catalog});
  EXPECT_EQ(edited.State(1, 3), MigrationState::kChecksumMismatch);
  // A failed transactional attempt left nothing: an edit is just the fix.
  shard1.history.back() = AppliedMigration{3, "c", "older", false, true, 0, 1, "t", 0, "me", "boom"};
  const MigrationStatus fixed(set_, {shard0, shard1, reference, catalog});
  EXPECT_EQ(fixed.State(1, 3), MigrationState::kFailed);
}

TEST_F(StatusMatrix, AGapIsNoVersionAndAnUnreachableServerIsNotAtOne) {
  auto shard0 = Server("shard0", ServerRole::kShard, {3});  // 001 missing, 003 applied
  const MigrationStatus gap(set_, {shard0});
  EXPECT_EQ(gap.VersionOf(0), std::nullopt);
  auto down = Server("shard0", ServerRole::kShard, {});
  down.reachable = false;
  const MigrationStatus unreachable(set_, {down});
  EXPECT_EQ(unreachable.State(0, 1), MigrationState::kUnreachable);
  EXPECT_FALSE(unreachable.AtOneVersion());
}

}  // namespace
}  // namespace shardkit
