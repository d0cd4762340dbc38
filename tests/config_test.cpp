#include "shardkit/config.hpp"

#include <gtest/gtest.h>

#include "shardkit/errors.hpp"

namespace {

using shardkit::ConfigError;

constexpr const char* kTwoShards = R"(
[pool]
max_size = 4
max_waiters = 10
connect_timeout_ms = 3000
acquire_timeout_ms = 250

[directory]
version = 7
buckets = { "0-31" = 0, "32-63" = 1 }

[[shard]]
name = "east"
dsn = "host=127.0.0.1 port=55432 dbname=bookstore user=bookstore password=s3cret"

[[shard]]
name = "west"
dsn = "postgresql://bookstore:s3cret@127.0.0.1:55433/bookstore"

[reference]
dsn = "host=127.0.0.1 port=55434 dbname=bookstore"
)";

std::string ErrorKey(const std::string& text) {
  try {
    (void)shardkit::ParseConfig(text, "test.toml");
  } catch (const ConfigError& e) {
    return e.key();
  }
  return "<no error>";
}

TEST(Config, ParsesAFullFile) {
  const auto c = shardkit::ParseConfig(kTwoShards, "test.toml");
  ASSERT_EQ(c.shards.size(), 2U);
  EXPECT_EQ(c.shards[0].name, "east");
  EXPECT_EQ(c.shards[1].name, "west");
  EXPECT_EQ(c.pool.max_size, 4);
  EXPECT_EQ(c.pool.max_waiters, 10);
  EXPECT_EQ(c.pool.connect_timeout.count(), 3000);
  EXPECT_EQ(c.pool.acquire_timeout.count(), 250);
  EXPECT_EQ(c.directory.Version(), 7);
  EXPECT_EQ(c.directory.ShardFor(shardkit::CustomerId{4242}), shardkit::ShardId{1});
  EXPECT_EQ(c.directory.ShardFor(shardkit::CustomerId{4243}), shardkit::ShardId{0});
  ASSERT_TRUE(c.reference_dsn);
}

TEST(Config, PoolTimeZoneDefaultsToUtc) {
  EXPECT_EQ(shardkit::ParseConfig("[[shard]]\ndsn='a'\n").pool.time_zone, "UTC");
  EXPECT_EQ(shardkit::ParseConfig("[pool]\ntime_zone = 'Europe/Berlin'\n[[shard]]\ndsn='a'\n").pool.time_zone,
            "Europe/Berlin");
  EXPECT_EQ(ErrorKey("[pool]\ntime_zone = ''\n[[shard]]\ndsn='a'\n"), "pool.time_zone");
  EXPECT_EQ(ErrorKey("[pool]\ntime_zone = 1\n[[shard]]\ndsn='a'\n"), "pool.time_zone");
}

TEST(Config, DefaultsToAnEvenSplit) {
  const auto c = shardkit::ParseConfig("[[shard]]\ndsn='a'\n[[shard]]\ndsn='b'\n[[shard]]\ndsn='c'\n");
  EXPECT_EQ(c.directory.ShardCount(), 3);
  EXPECT_EQ(c.shards[2].name, "shard2");
  EXPECT_EQ(c.pool.max_size, shardkit::PoolOptions{}.max_size);
}

TEST(Config, ErrorsNameTheCulprit) {
  EXPECT_EQ(ErrorKey(""), "shard");
  EXPECT_EQ(ErrorKey("[[shard]]\nname='x'\n"), "shard[0].dsn");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn=5\n"), "shard[0].dsn");
  EXPECT_EQ(ErrorKey("[pool]\nmax_size=0\n[[shard]]\ndsn='a'\n"), "pool.max_size");
  EXPECT_EQ(ErrorKey("[pool]\nmax_size='big'\n[[shard]]\ndsn='a'\n"), "pool.max_size");
  EXPECT_EQ(ErrorKey("[directory]\nsource='zookeeper'\n[[shard]]\ndsn='a'\n"), "directory.source");
  // bucket 63 unmapped
  EXPECT_EQ(ErrorKey("[directory]\nbuckets={'0-62'=0}\n[[shard]]\ndsn='a'\n"), "directory.buckets");
  // shard 2 does not exist
  EXPECT_EQ(ErrorKey("[directory]\nbuckets={'0-63'=2}\n[[shard]]\ndsn='a'\n"), "directory.buckets.\"0-63\"");
  EXPECT_EQ(ErrorKey("[directory]\nbuckets={'x'=0}\n[[shard]]\ndsn='a'\n"), "directory.buckets.\"x\"");
  EXPECT_EQ(ErrorKey("this is = = not toml"), "test.toml");
}

std::string ErrorText(const std::string& text) {
  try {
    (void)shardkit::ParseConfig(text, "test.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Config, GatherBoundsInRowsAndBytes) {
  const auto defaults = shardkit::ParseConfig("[[shard]]\ndsn='a'\n");
  EXPECT_EQ(defaults.max_gather_rows, shardkit::kDefaultMaxGatherRows);
  EXPECT_EQ(defaults.max_gather_bytes, std::int64_t{256} << 20);
  const auto set =
      shardkit::ParseConfig("[sql]\nmax_gather_rows = 500\nmax_gather_bytes = 65536\n[[shard]]\ndsn='a'\n");
  EXPECT_EQ(set.max_gather_rows, 500);
  EXPECT_EQ(set.max_gather_bytes, 65536);
  EXPECT_EQ(shardkit::ParseConfig("[sql]\nmax_gather_bytes = 0\n[[shard]]\ndsn='a'\n").max_gather_bytes, 0);
  EXPECT_EQ(ErrorKey("[sql]\nmax_gather_bytes = -1\n[[shard]]\ndsn='a'\n"), "sql.max_gather_bytes");
  EXPECT_EQ(ErrorKey("[sql]\nmax_gather_bytes = '1 MB'\n[[shard]]\ndsn='a'\n"), "sql.max_gather_bytes");
  EXPECT_EQ(ErrorKey("[sql]\nmax_gather_bytes = 99999999999999\n[[shard]]\ndsn='a'\n"), "sql.max_gather_bytes");
  EXPECT_EQ(ErrorKey("[sql]\nmax_gather_byte = 1\n[[shard]]\ndsn='a'\n"), "sql.max_gather_byte");
}

TEST(Config, UnknownKeysAreRefusedWithTheirLineAndTheClosestKnownKey) {
  const std::string typo = "[pool]\nmax_size = 4\nmax_sise = 4\n[[shard]]\ndsn='a'\n";
  EXPECT_EQ(ErrorKey(typo), "pool.max_sise");
  const std::string m = ErrorText(typo);
  EXPECT_NE(m.find("unknown key (line 3): did you mean \"max_size\"?"), std::string::npos) << m;
  EXPECT_NE(m.find("the keys in [pool] are: max_size, max_waiters"), std::string::npos) << m;
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nadmin_dns='b'\n"), "shard[0].admin_dns");
  EXPECT_NE(ErrorText("[[shard]]\ndsn='a'\nadmin_dns='b'\n").find("did you mean \"admin_dsn\""), std::string::npos);
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\n[refernce]\ndsn='b'\n"), "refernce");
  EXPECT_EQ(ErrorKey("[directory]\nversoin = 2\n[[shard]]\ndsn='a'\n"), "directory.versoin");
  EXPECT_EQ(ErrorKey("[catalog]\ndsn='c'\nuser='x'\n[[shard]]\ndsn='a'\n"), "catalog.user");
  // Far from every known key: no guess, the list.
  const std::string far = ErrorText("[pool]\ncolour = 'blue'\n[[shard]]\ndsn='a'\n");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("unknown key (line 2)"), std::string::npos) << far;
  EXPECT_EQ(ErrorKey("pool = 3\n[[shard]]\ndsn='a'\n"), "pool");
  EXPECT_EQ(shardkit::ParseConfig("[pool]\nsearch_path = 'shop, public'\n[[shard]]\ndsn='a'\n").pool.search_path,
            "shop, public");
}

TEST(Config, TwoShardsWithOneNameOrOneDatabaseAreRefused) {
  EXPECT_EQ(ErrorKey("[[shard]]\nname='east'\ndsn='a'\n[[shard]]\nname='east'\ndsn='b'\n"), "shard[1].name");
  EXPECT_NE(ErrorText("[[shard]]\nname='east'\ndsn='a'\n[[shard]]\nname='east'\ndsn='b'\n")
                .find("\"east\" (line 4) is already the name of shard[0]"),
            std::string::npos);
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='host=h password=s3cret'\n[[shard]]\ndsn='host=h password=s3cret'\n"),
            "shard[1].dsn");
  const std::string m = ErrorText("[[shard]]\ndsn='host=h password=s3cret'\n[[shard]]\ndsn='host=h password=s3cret'\n");
  EXPECT_NE(m.find("same connection string as shard[0]"), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
}

TEST(Config, ReplicasAreConnectionStringsOrTables) {
  const auto c = shardkit::ParseConfig(
      "[[shard]]\nname='east'\ndsn='a'\nreplicas = ['a1', 'a2']\n"
      "[[shard]]\nname='west'\ndsn='b'\n"
      "replicas = [{ name = 'west-standby', dsn = 'b1 user=reader', admin_dsn = 'b1 user=admin' }]\n"
      "[[shard]]\nname='north'\ndsn='c'\n");
  ASSERT_EQ(c.shards[0].replicas.size(), 2U);
  EXPECT_EQ(c.shards[0].replicas[0].name, "east-replica1");
  EXPECT_EQ(c.shards[0].replicas[1].name, "east-replica2");
  EXPECT_EQ(c.shards[0].replicas[1].dsn.Reveal(), "a2");
  EXPECT_EQ(c.shards[0].replicas[0].dsn.Reveal(), "a1");
  ASSERT_EQ(c.shards[1].replicas.size(), 1U);
  EXPECT_EQ(c.shards[1].replicas[0].name, "west-standby");
  EXPECT_EQ(c.shards[1].replicas[0].dsn.Reveal(), "b1 user=reader");
  EXPECT_EQ(c.shards[1].replicas[0].AdminDsn().Reveal(), "b1 user=admin");  // for failovers
  EXPECT_EQ(c.shards[0].replicas[0].AdminDsn().Reveal(), "a1");             // none: the dsn
  EXPECT_TRUE(c.shards[2].replicas.empty());
}

// docker-compose.yml's servers, as docker/shardkit.toml lists them.
TEST(Config, TheDockerConfigListsEachShardsReplica) {
  const auto c = shardkit::LoadConfig(SHARDKIT_SOURCE_DIR "/docker/shardkit.toml");
  ASSERT_EQ(c.shards.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(c.shards[i].replicas.size(), 1U);
    EXPECT_EQ(c.shards[i].replicas[0].name, c.shards[i].name + "-replica1");
    EXPECT_NE(c.shards[i].replicas[0].dsn.Reveal().find("port=" + std::to_string(55435 + i)), std::string::npos);
  }
}

TEST(Config, ReplicaErrorsNameTheKey) {
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = 'a1'\n"), "shard[0].replicas");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = [5]\n"), "shard[0].replicas[0]");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = ['']\n"), "shard[0].replicas[0]");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = [{ dsn = '' }]\n"), "shard[0].replicas[0].dsn");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = [{ name = 'x' }]\n"), "shard[0].replicas[0].dsn");
  // Strict like the rest: a typo is refused with the closest key.
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = [{ dsn = 'a1', nmae = 'x' }]\n"), "shard[0].replicas[0].nmae");
  EXPECT_NE(ErrorText("[[shard]]\ndsn='a'\nreplicas = [{ dsn = 'a1', nmae = 'x' }]\n").find("did you mean \"name\""),
            std::string::npos);
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplica = ['a1']\n"), "shard[0].replica");
  // One server, one role: a replica that is a shard, or twice a replica.
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\n[[shard]]\ndsn='b'\nreplicas = ['a']\n"), "shard[1].replicas[0].dsn");
  EXPECT_EQ(ErrorKey("[[shard]]\ndsn='a'\nreplicas = ['a1']\n[[shard]]\ndsn='b'\nreplicas = ['a1']\n"),
            "shard[1].replicas[0].dsn");
  EXPECT_EQ(ErrorKey("[[shard]]\nname='x'\ndsn='a'\nreplicas = [{ name = 'x', dsn = 'a1' }]\n"),
            "shard[0].replicas[0].name");
  const std::string m = ErrorText("[[shard]]\ndsn='host=h password=s3cret'\nreplicas = ['host=h password=s3cret']\n");
  EXPECT_NE(m.find("same connection string as shard[0]"), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
}

TEST(Config, CatalogAndItsDirectorySource) {
  const auto c = shardkit::ParseConfig(
      "[directory]\nsource = 'catalog'\n[[shard]]\ndsn='a'\n[[shard]]\ndsn='b'\n"
      "[catalog]\ndsn = 'host=127.0.0.1 port=55434 dbname=shardkit_catalog user=bookstore password=s3cret'\n");
  EXPECT_EQ(c.directory_source, shardkit::DirectorySource::kCatalog);
  ASSERT_TRUE(c.catalog_dsn);
  EXPECT_NE(c.catalog_dsn->Reveal().find("dbname=shardkit_catalog"), std::string::npos);
  EXPECT_FALSE(shardkit::ParseConfig("[[shard]]\ndsn='a'\n").catalog_dsn);
}

TEST(Config, CatalogErrorsNameTheKey) {
  // The catalog source needs a catalog.
  EXPECT_EQ(ErrorKey("[directory]\nsource='catalog'\n[[shard]]\ndsn='a'\n"), "catalog.dsn");
  EXPECT_EQ(ErrorKey("[catalog]\ndsn=''\n[[shard]]\ndsn='a'\n"), "catalog.dsn");
  EXPECT_EQ(ErrorKey("[catalog]\ndsn=5\n[[shard]]\ndsn='a'\n"), "catalog.dsn");
  EXPECT_EQ(ErrorKey("[catalog]\nhost='x'\n[[shard]]\ndsn='a'\n"), "catalog.host");  // unknown: dsn is the key
  EXPECT_EQ(ErrorKey("catalog = 'x'\n[[shard]]\ndsn='a'\n"), "catalog");
  // Two placements would be two truths.
  EXPECT_EQ(ErrorKey("[directory]\nsource='catalog'\nbuckets={'0-63'=0}\n[[shard]]\ndsn='a'\n[catalog]\ndsn='c'\n"),
            "directory.buckets");
}

TEST(Config, TheOldDatabaseSourceSaysWhereTheDirectoryWent) {
  try {
    (void)shardkit::ParseConfig("[directory]\nsource='database'\n[[shard]]\ndsn='a'\n");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "directory.source");
    EXPECT_NE(std::string(e.what()).find("catalog"), std::string::npos) << e.what();
  }
}

TEST(Config, CatalogPasswordStaysOutOfParseErrors) {
  // A broken line that holds the password: the parser quotes it, the message must not.
  for (const char* text : {"[catalog]\ndsn = 'host=h password=s3cret' x\n[[shard]]\ndsn='a'\n",
                           "[catalog]\ndsn = 'postgresql://bob:s3cret@h/db\n[[shard]]\ndsn='a'\n"}) {
    try {
      (void)shardkit::ParseConfig(text, "test.toml");
      FAIL() << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
    }
  }
}

TEST(Config, MissingBucketIsNamedInTheMessage) {
  try {
    (void)shardkit::ParseConfig("[directory]\nbuckets={'0-62'=0}\n[[shard]]\ndsn='a'\n");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bucket 63"), std::string::npos) << e.what();
  }
}

TEST(Config, MissingFileSaysWhatToDo) {
  try {
    (void)shardkit::LoadConfig("/nonexistent/shardkit.toml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SHARDKIT_CONFIG"), std::string::npos) << e.what();
  }
}

TEST(Config, ConnectionStringsAreReadAsWrittenAndShownRedacted) {
  const auto c = shardkit::ParseConfig(kTwoShards);
  EXPECT_EQ(c.shards[0].dsn.Reveal(), "host=127.0.0.1 port=55432 dbname=bookstore user=bookstore password=s3cret");
  EXPECT_EQ(c.shards[1].dsn.Reveal(), "postgresql://bookstore:s3cret@127.0.0.1:55433/bookstore");
  EXPECT_EQ(c.shards[0].AdminDsn(), c.shards[0].dsn);  // no admin_dsn: the dsn
  for (const auto& s : c.shards) EXPECT_EQ(s.dsn.Redacted().find("s3cret"), std::string::npos);
}

}  // namespace
