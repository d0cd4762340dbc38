// CopyWriter and ShardedCopy against the local cluster: every supported
// value lands as the server's own text input would store it (binary and
// text format compared with INSERTs of the same literals), escapes and NULLs
// survive, type and range mistakes are refused naming the column, a failed
// COPY leaves the transaction failed, and ShardedCopy puts each row on the
// shard its bucket maps to (compared with the reference server's copy).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/resharding/copy.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTable =
    "CREATE TABLE t (i2 smallint, i4 integer, i8 bigint, n numeric(20,4), nn numeric, b boolean, s text, "
    "v varchar(20), ts timestamptz, tl timestamp)";

std::vector<std::string> Dump(pqxx::connection& c, const std::string& table) {
  pqxx::work tx{c};
  std::vector<std::string> rows;
  for (const auto& r : tx.exec("SELECT t::text FROM " + table + " t ORDER BY i8")) rows.push_back(r[0].c_str());
  return rows;
}

class CopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.ExecOnReference("DROP TABLE IF EXISTS t, expected");
    cluster_.ExecOnReference(kTable);
    cluster_.ExecOnReference(std::string(kTable).replace(13, 1, "expected"));
    conn_.emplace(cluster_.ReferenceDsn().Reveal());
  }

  // The rows through the writer, in `format`, into t.
  void WriteRows(CopyFormat format) {
    pqxx::work tx{*conn_};
    CopyOptions options;
    options.format = format;
    options.buffer_bytes = 1024;  // several flushes
    CopyWriter out{tx, "t", {}, options};
    const auto ts = std::chrono::sys_days(std::chrono::year{2026} / 10 / 15) + 12h + 34min + 56s;
    out.Row(std::int16_t{-32768}, -2147483647 - 1, std::int64_t{1}, CopyFixed{1999, 2}, CopyFixed{-5, 3}, true, "plain",
            "v", CopyTimestamp{ts}, CopyTimestamp{ts + 123456us});
    out.Row(32767, 2147483647, std::int64_t{2}, CopyFixed{0, 2}, CopyFixed{123456789012345678, 9}, false,
            "tab\there\nnew line\\back\rslash", std::string("ünïcödé"), CopyTimestamp(std::int64_t{0}),
            CopyTimestamp(std::int64_t{-86400 * 365}));
    out.Row(std::nullopt, std::optional<int>{}, std::int64_t{3}, CopyFixed{-100000000, 4}, CopyFixed{10000, 0},
            std::optional<bool>{}, std::optional<std::string>{}, "", std::nullopt, std::nullopt);
    out.Row(0, 0, std::int64_t{4}, CopyFixed{5, 4}, std::string_view("-0012.3400"), true, "\\N", "x",
            CopyTimestamp(std::int64_t{4102444800}), CopyTimestamp(std::int64_t{946684800}));
    for (int i = 5; i < 500; ++i) {
      out.Row(i % 100, i * 1000, std::int64_t{i}, CopyFixed{i * 12345LL, 4}, CopyFixed{-i, 1}, i % 2 == 0,
              "row " + std::to_string(i), "v", CopyTimestamp(std::int64_t{1'700'000'000} + i),
              CopyTimestamp(std::int64_t{1'700'000'000} - i));
    }
    EXPECT_EQ(out.Complete(), 499);
    tx.commit();
  }

  // The same rows as INSERTs of text literals, into expected.
  void InsertExpected() {
    pqxx::work tx{*conn_};
    tx.exec0(
        "INSERT INTO expected VALUES "
        "(-32768, -2147483648, 1, 19.99, -0.005, true, 'plain', 'v', '2026-10-15 12:34:56+00', "
        "'2026-10-15 12:34:56.123456'), "
        "(32767, 2147483647, 2, 0.00, 123456789.012345678, false, E'tab\\there\\nnew line\\\\back\\rslash', "
        "'ünïcödé', '1970-01-01 00:00:00+00', '1969-01-01 00:00:00'), "
        "(NULL, NULL, 3, -10000.0000, 10000, NULL, NULL, '', NULL, NULL), "
        "(0, 0, 4, 0.0005, -12.3400, true, E'\\\\N', 'x', '2100-01-01 00:00:00+00', '2000-01-01 00:00:00')");
    tx.exec0(
        "INSERT INTO expected SELECT i % 100, i * 1000, i, (i * 12345)::numeric / 10000, round(-i::numeric / 10, 1), "
        "i % 2 = 0, 'row ' || i, 'v', to_timestamp(1700000000 + i), "
        "to_timestamp(1700000000 - i) AT TIME ZONE 'UTC' FROM generate_series(5, 499) i");
    tx.commit();
  }

  test::ScratchCluster cluster_{"copy_pgtest"};
  std::optional<pqxx::connection> conn_;
};

TEST_F(CopyTest, BinaryStoresWhatTheTextLiteralsStore) {
  WriteRows(CopyFormat::kBinary);
  InsertExpected();
  const auto got = Dump(*conn_, "t");
  const auto want = Dump(*conn_, "expected");
  ASSERT_EQ(got.size(), 499u);
  EXPECT_EQ(got, want);
}

TEST_F(CopyTest, TextStoresWhatTheTextLiteralsStore) {
  WriteRows(CopyFormat::kText);
  InsertExpected();
  EXPECT_EQ(Dump(*conn_, "t"), Dump(*conn_, "expected"));
}

TEST_F(CopyTest, BinaryRefusesValuesTheColumnCannotHoldNamingIt) {
  pqxx::work tx{*conn_};
  CopyWriter out{tx, "t", {"i2", "i8"}};
  try {
    out.Row(40000, std::int64_t{1});
    FAIL() << "40000 went into a smallint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"i2\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("smallint"), std::string::npos) << e.what();
  }
  out.Abort("test");
}

TEST_F(CopyTest, BinaryRefusesTheWrongKindOfValue) {
  pqxx::work tx{*conn_};
  CopyWriter out{tx, "t", {"ts"}};
  EXPECT_THROW(out.Row(42), Error);
  out.Abort("test");
}

TEST_F(CopyTest, RowsWithTooFewOrTooManyFieldsAreRefused) {
  pqxx::work tx{*conn_};
  CopyWriter out{tx, "t", {"i4", "i8"}};
  EXPECT_THROW(out.Row(1), Error);
  out.Abort("test");
}

TEST_F(CopyTest, AnUnknownColumnOrTableIsRefusedBeforeAnyRow) {
  pqxx::work tx{*conn_};
  EXPECT_THROW((CopyWriter{tx, "t", {"nope"}}), Error);
  EXPECT_THROW((CopyWriter{tx, "no_such_table"}), Error);
}

TEST_F(CopyTest, ANontransactionIsRefusedNamingTheTable) {
  pqxx::nontransaction tx{*conn_};
  try {
    CopyWriter out{tx, "t"};
    FAIL() << "COPY outside a transaction was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("COPY into t: needs a transaction"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tx.exec1("SELECT 1")[0].as<int>(), 1) << "the connection is still usable";
}

TEST_F(CopyTest, AServerSideRejectionFailsCompleteAndTheTransaction) {
  cluster_.ExecOnReference("ALTER TABLE t ADD CHECK (i4 > 0)");
  {
    pqxx::work tx{*conn_};
    CopyWriter out{tx, "t", {"i4"}, CopyOptions{.format = CopyFormat::kText, .label = "t on the reference"}};
    out.Row(1).Row(-1);
    try {
      (void)out.Complete();
      FAIL() << "a row violating the CHECK was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t on the reference"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("check constraint"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tx.exec("SELECT 1"), pqxx::sql_error);  // the transaction is failed
  }
  EXPECT_TRUE(Dump(*conn_, "t").empty());
  // The connection is usable again.
  pqxx::work tx{*conn_};
  EXPECT_EQ(tx.exec1("SELECT 1")[0].as<int>(), 1);
}

TEST_F(CopyTest, AWriterDestroyedWithoutCompleteWritesNothing) {
  {
    pqxx::work tx{*conn_};
    {
      CopyWriter out{tx, "t", {"i8"}};
      out.Row(std::int64_t{7});
    }
    EXPECT_THROW(tx.exec("SELECT 1"), pqxx::sql_error);
  }
  EXPECT_TRUE(Dump(*conn_, "t").empty());
}

TEST(ShardedCopyTest, EachRowLandsOnTheShardItsBucketMapsTo) {
  test::ScratchCluster cluster{"copy_pgtest_sharded"};
  auto resolver = cluster.MakeResolver();
  const int shards = resolver->ShardCount();
  std::vector<ConnectionPool::Lease> leases;
  std::vector<std::unique_ptr<pqxx::work>> txs;
  std::vector<pqxx::transaction_base*> ptrs;
  for (int s = 0; s < shards; ++s) {
    leases.push_back(resolver->Pool(ShardId{s}).Acquire());
    txs.push_back(std::make_unique<pqxx::work>(leases.back().Connection()));
    txs.back()->exec("SELECT shardkit_bulk_load_begin()");  // the shards are enrolled (fenced)
    ptrs.push_back(txs.back().get());
  }
  pqxx::connection reference{cluster.ReferenceDsn().Reveal()};
  constexpr int kCustomers = 3000;
  {
    ShardedCopy copy{resolver->Directory(), ptrs, "customers", {"customer_id", "bucket", "name", "email"}};
    pqxx::work ref_tx{reference};
    CopyWriter ref{ref_tx, "customers", {"customer_id", "bucket", "name", "email"}};
    for (int i = 1; i <= kCustomers; ++i) {
      const CustomerId c{i * 7919};
      const std::string name = "Customer " + std::to_string(i);
      const std::string email = "c" + std::to_string(i) + "@example.com";
      copy.For(c).Row(c, BucketOf(c), name, email);
      ref.Row(c, BucketOf(c), name, email);
    }
    EXPECT_EQ(copy.Rows(), kCustomers);
    const auto per_shard = copy.Complete();
    std::int64_t total = 0;
    for (auto n : per_shard) {
      EXPECT_GT(n, 0);
      total += n;
    }
    EXPECT_EQ(total, kCustomers);
    ref.Complete();
    ref_tx.commit();
    for (auto& tx : txs) {
      tx->exec("SELECT shardkit_bulk_load_end()");
      tx->commit();
    }
    txs.clear();
  }
  // Every shard holds exactly the reference's rows of its buckets.
  pqxx::work ref_read{reference};
  for (int s = 0; s < shards; ++s) {
    std::string buckets = "{";
    for (BucketId b : resolver->Directory()->BucketsOf(ShardId{s})) {
      if (buckets.size() > 1) buckets += ',';
      buckets += std::to_string(ToInt(b));
    }
    buckets += '}';
    const std::string q =
        "SELECT coalesce(string_agg(concat_ws(',', customer_id, bucket, name, email), ';' ORDER BY customer_id), '') "
        "FROM customers c "
        "WHERE bucket = ANY($1::int[])";
    const auto want = ref_read.exec_params1(q, buckets)[0].as<std::string>();
    pqxx::nontransaction shard_read{leases[static_cast<std::size_t>(s)].Connection()};
    const auto got = shard_read.exec_params1(q, buckets)[0].as<std::string>();
    EXPECT_EQ(got, want) << "shard " << s;
    EXPECT_EQ(shard_read.exec1("SELECT count(*) FROM customers WHERE bucket <> bucket_of(customer_id)")[0].as<int>(),
              0);
  }
}

TEST(ShardedCopyTest, ARowForAShardWithoutATransactionIsRefused) {
  test::ScratchCluster cluster{"copy_pgtest_missing"};
  auto resolver = cluster.MakeResolver();
  auto lease = resolver->Pool(ShardId{0}).Acquire();
  pqxx::work tx{lease.Connection()};
  tx.exec("SELECT shardkit_bulk_load_begin()");  // the shards are enrolled (fenced)
  std::vector<pqxx::transaction_base*> ptrs(static_cast<std::size_t>(resolver->ShardCount()), nullptr);
  ptrs[0] = &tx;
  ShardedCopy copy{resolver->Directory(), ptrs, "customers", {"customer_id", "bucket", "name", "email"}};
  CustomerId elsewhere{0};
  for (int i = 1; i < 100000; ++i) {
    if (resolver->Directory()->ShardFor(CustomerId{i}) != ShardId{0}) {
      elsewhere = CustomerId{i};
      break;
    }
  }
  EXPECT_THROW((void)copy.For(elsewhere), ShardQueryError);
  copy.Complete();
}

}  // namespace
}  // namespace shardkit
