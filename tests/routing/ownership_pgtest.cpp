// The fence and the visibility rule on real shards (sql/010, ownership.hpp).
#include "shardkit/routing/ownership.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::ScratchCluster;
using test::ScratchOptions;

// A customer of `bucket` (the first id >= 1 that hashes there).
int CustomerIn(int bucket, int after = 0) {
  for (int id = after + 1;; ++id) {
    if (ToInt(BucketOf(CustomerId{id})) == bucket) return id;
  }
}

std::string InsertCustomer(int id) {
  return fmt::format("INSERT INTO customers (customer_id, bucket, name, email) VALUES ({0}, bucket_of({0}), 'c', 'e')",
                     id);
}

// Runs `sql` on `dsn` and returns the fence refusal it raised (or nullopt if
// it succeeded or failed otherwise).
std::optional<FenceRefusal> Refusal(const Dsn& dsn, const std::string& sql) {
  pqxx::connection c{dsn.Reveal()};
  try {
    pqxx::work tx{c};
    tx.exec(sql);
    tx.commit();
    return std::nullopt;
  } catch (const std::exception& e) {
    auto refusal = ParseFenceRefusal(e);
    if (!refusal) ADD_FAILURE() << "not a fence refusal: " << e.what();
    return refusal;
  }
}

std::int64_t Count(const Dsn& dsn, const std::string& sql) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::work tx{c};
  return tx.exec1(sql)[0].as<std::int64_t>();
}

class Fence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new ScratchCluster("ownership_pgtest"); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static ScratchCluster* cluster_;
  const Dsn& Shard0() const { return cluster_->ShardDsn(0); }
};
ScratchCluster* Fence::cluster_ = nullptr;

TEST_F(Fence, EnrolledShardsKnowThemselvesAndTheirBuckets) {
  for (int s = 0; s < 2; ++s) {
    pqxx::connection c{cluster_->ShardDsn(s).Reveal()};
    const ShardOwnership own = ReadOwnership(c);
    ASSERT_TRUE(own.enrolled_as);
    EXPECT_EQ(*own.enrolled_as, ShardId{s});
    EXPECT_EQ(own.InState(OwnershipState::kOwned), BucketSet::Of(cluster_->Directory(), ShardId{s}));
    // The Bookstore's tables (registered by the Bookstore's 011) and the outbox tables
    // of sql/020-022 (found by their customer_id and bucket when enrolled).
    EXPECT_EQ(ShardedTables(c),
              (std::vector<std::string>{"customers", "notification_log", "order_items", "order_tracking", "orders",
                                        "shardkit_jobs", "store_credit", "store_credit_transfers"}));
  }
  // Enrolling again with the same buckets changes nothing; with other
  // buckets it is refused unless replacing.
  pqxx::connection c{Shard0().Reveal()};
  EXPECT_NO_THROW(EnrollShard(c, ShardId{0}, BucketSet::Of(cluster_->Directory(), ShardId{0}), 1));
  EXPECT_THROW(EnrollShard(c, ShardId{0}, BucketSet::One(BucketId{40}), 1), ShardError);
  EXPECT_THROW(EnrollShard(c, ShardId{1}, BucketSet::Of(cluster_->Directory(), ShardId{0}), 1), ShardError);
}

BucketSet FastPath(const Dsn& dsn) {
  pqxx::connection c{dsn.Reveal()};
  return ReadOwnership(c).fast_path;
}

// sql/014: the word the fast path reads is cleared by any ownership change at
// once (before it commits, and for good if it rolls back) and set only by
// shardkit_fence_sync(), from committed rows.
TEST_F(Fence, TheFastPathWordFollowsTheOwnershipAndOnlySyncSetsIt) {
  pqxx::connection c{Shard0().Reveal()};
  const BucketSet owned = ReadOwnership(c).InState(OwnershipState::kOwned);
  EXPECT_EQ(SyncFence(c), owned);
  EXPECT_EQ(FastPath(Shard0()), owned);
  const int bucket = 9;
  ASSERT_TRUE(owned.Contains(BucketId{bucket}));
  {
    pqxx::work change{c};
    change.exec(
        fmt::format("UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 WHERE bucket = {}", bucket));
    EXPECT_FALSE(FastPath(Shard0()).Contains(BucketId{bucket})) << "cleared before the change commits";
    try {
      change.exec("SELECT shardkit_fence_sync()");
      ADD_FAILURE() << "a sync inside the changing transaction would publish an uncommitted change";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), kSqlStateMisuse);
    }
  }  // rolled back: still owned, the bit stays clear
  EXPECT_FALSE(FastPath(Shard0()).Contains(BucketId{bucket}));
  // The slow path admits it, from the table.
  EXPECT_FALSE(Refusal(Shard0(), InsertCustomer(CustomerIn(bucket, 40000))));
  EXPECT_EQ(SyncFence(c), owned);
  // A committed retirement: cleared, refused, and a sync does not set it.
  cluster_->ExecOnShard(0, fmt::format("UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 "
                                       "WHERE bucket = {}",
                                       bucket));
  EXPECT_FALSE(FastPath(Shard0()).Contains(BucketId{bucket}));
  const auto refused = Refusal(Shard0(), InsertCustomer(CustomerIn(bucket, 41000)));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->bucket, BucketId{bucket});
  EXPECT_FALSE(SyncFence(c).Contains(BucketId{bucket}));
  // Owned again: a sync restores the fast path.
  cluster_->ExecOnShard(0, fmt::format("UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL "
                                       "WHERE bucket = {}",
                                       bucket));
  EXPECT_EQ(SyncFence(c), owned);
}

// A move's copy inserts the target's 'incoming' row and then copies for
// seconds in the same transaction: that must not hold up a retirement (the
// cutover of another move) on the same shard.
TEST_F(Fence, AnIncomingRowBeingCopiedDoesNotHoldUpARetirement) {
  pqxx::connection c{Shard0().Reveal()};
  const BucketSet owned = ReadOwnership(c).InState(OwnershipState::kOwned);
  int absent = 0;
  while (owned.Contains(BucketId{absent})) ++absent;
  int retiring = 0;
  while (!owned.Contains(BucketId{retiring}) || retiring == 9) ++retiring;
  pqxx::connection copier{Shard0().Reveal()};
  pqxx::work copying{copier};
  copying.exec(
      fmt::format("INSERT INTO shardkit_bucket_ownership (bucket, state, directory_version, move_id) "
                  "VALUES ({}, 'incoming', 1, 4242)",
                  absent));
  {
    pqxx::nontransaction tx{c};
    tx.exec("SET lock_timeout = '2s'");
    EXPECT_NO_THROW(
        tx.exec(fmt::format("UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 "
                            "WHERE bucket = {}",
                            retiring)));
    EXPECT_FALSE(FastPath(Shard0()).Contains(BucketId{retiring}));
    tx.exec(fmt::format("UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = {}",
                        retiring));
    tx.exec("SET lock_timeout = 0");
  }
  copying.abort();
  EXPECT_EQ(SyncFence(c), owned);
}

TEST_F(Fence, WritesToBucketsNotOwnedAreRefusedWithTheBucketNamed) {
  const int mine = CustomerIn(3);     // shard 0 owns 0-31
  const int theirs = CustomerIn(40);  // shard 1 owns 32-63
  EXPECT_FALSE(Refusal(Shard0(), InsertCustomer(mine)));
  const auto refusal = Refusal(Shard0(), InsertCustomer(theirs));
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotOwned);
  EXPECT_EQ(refusal->bucket, BucketId{40});
  EXPECT_EQ(refusal->shard, ShardId{0});
  EXPECT_EQ(refusal->state, "absent");
  EXPECT_NE(refusal->message.find("bucket 40 is not owned by shard 0"), std::string::npos) << refusal->message;
  // UPDATE moving a row into a foreign bucket, DELETE through 'all'.
  const auto moved = Refusal(Shard0(), fmt::format("UPDATE customers SET customer_id = {}, bucket = 40 WHERE "
                                                   "customer_id = {}",
                                                   theirs, mine));
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->bucket, BucketId{40});
}

TEST_F(Fence, CopyIsFencedToo) {
  pqxx::connection c{Shard0().Reveal()};
  const int theirs = CustomerIn(41);
  try {
    pqxx::work tx{c};
    pqxx::stream_to out{tx, "customers"};
    out << std::make_tuple(theirs, 41, std::string("c"), std::string("e"), std::string("2026-01-01 00:00:00+00"));
    out.complete();
    tx.commit();
    FAIL() << "COPY into a foreign bucket was accepted";
  } catch (const std::exception& e) {
    // Row-level security forbids COPY FROM outright; the bulk-load bracket
    // lets it through and then checks the buckets (next test).
    EXPECT_NE(std::string(e.what()).find("row-level security"), std::string::npos) << e.what();
  }
}

TEST_F(Fence, BulkLoadBracketChecksTheBuckets) {
  pqxx::connection c{Shard0().Reveal()};
  const int mine = CustomerIn(5, 1000);
  {
    pqxx::work tx{c};
    tx.exec("SELECT shardkit_bulk_load_begin()");
    pqxx::stream_to out{tx, "customers"};
    out << std::make_tuple(mine, 5, std::string("c"), std::string("e"), std::string("2026-01-01 00:00:00+00"));
    out.complete();
    tx.exec("SELECT shardkit_bulk_load_end()");
    tx.commit();
  }
  EXPECT_EQ(Count(Shard0(), fmt::format("SELECT count(*) FROM customers WHERE customer_id = {}", mine)), 1);
  const int theirs = CustomerIn(45, 1000);
  try {
    pqxx::work tx{c};
    tx.exec("SELECT shardkit_bulk_load_begin()");
    pqxx::stream_to out{tx, "customers"};
    out << std::make_tuple(theirs, 45, std::string("c"), std::string("e"), std::string("2026-01-01 00:00:00+00"));
    out.complete();
    tx.exec("SELECT shardkit_bulk_load_end()");
    tx.commit();
    FAIL() << "a bulk load with a foreign bucket was accepted";
  } catch (const std::exception& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->bucket, BucketId{45});
  }
  // The fence is back on after a bulk load.
  EXPECT_TRUE(Refusal(Shard0(), InsertCustomer(CustomerIn(46))));
}

TEST_F(Fence, ARetiredBucketNamesItsNewOwnerAndIsHiddenFromRawReads) {
  const int bucket = 7;
  const int id = CustomerIn(bucket);
  cluster_->ExecOnShard(0, InsertCustomer(id));
  const std::int64_t before = Count(Shard0(), "SELECT count(*) FROM customers");
  cluster_->ExecOnShard(0,
                        "UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1, "
                        "directory_version = 9 WHERE bucket = 7");
  const auto refusal = Refusal(Shard0(), InsertCustomer(CustomerIn(bucket, id)));
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotOwned);
  EXPECT_EQ(refusal->state, "retired");
  ASSERT_TRUE(refusal->new_owner);
  EXPECT_EQ(*refusal->new_owner, ShardId{1});
  EXPECT_NE(refusal->message.find("it moved to shard 1"), std::string::npos) << refusal->message;
  // Raw SQL sees only owned buckets: the retired copy is out of sight...
  EXPECT_LT(Count(Shard0(), "SELECT count(*) FROM customers"), before);
  // ...and a reader whose directory still places bucket 7 here is refused,
  // naming the new owner (the new owner may have taken writes this shard
  // never saw), by the check and by the setting itself.
  for (const std::string& ask :
       {"SELECT set_config('shardkit.buckets', '" + BucketSet::One(BucketId{bucket}).Setting() +
            "', true), shardkit_check_buckets(false); SELECT count(*) FROM customers",
        "SET LOCAL shardkit.buckets = '" + BucketSet::One(BucketId{bucket}).Setting() + "'; " +
            fmt::format("SELECT count(*) FROM customers WHERE customer_id = {}", id)}) {
    SCOPED_TRACE(ask);
    const auto read = Refusal(Shard0(), ask);
    ASSERT_TRUE(read);
    EXPECT_EQ(read->kind, BucketRefused::Kind::kNotReadable);
    EXPECT_EQ(read->state, "retired");
    EXPECT_EQ(read->new_owner, ShardId{1});
    EXPECT_NE(read->message.find("it moved to shard 1"), std::string::npos) << read->message;
  }
  // Raw deletes of the retired rows find nothing; with every row in sight the
  // fence refuses them.
  EXPECT_EQ(Count(Shard0(), fmt::format("WITH d AS (DELETE FROM customers WHERE customer_id = {} RETURNING 1) "
                                        "SELECT count(*) FROM d",
                                        id)),
            0);
  EXPECT_TRUE(Refusal(Shard0(), fmt::format("SET LOCAL shardkit.buckets = 'all'; DELETE FROM customers WHERE "
                                            "customer_id = {}",
                                            id)));
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = 7");
}

TEST_F(Fence, AFrozenBucketRefusesNewWritersAtOnceAndTheFreezeDrainsOldOnes) {
  const int bucket = 9;
  // A writer already in the bucket holds it until its transaction ends.
  pqxx::connection writer{Shard0().Reveal()};
  pqxx::work writing{writer};
  writing.exec(InsertCustomer(CustomerIn(bucket)));

  // The freeze waits for it (bounded by lock_timeout)...
  pqxx::connection mover{Shard0().Reveal()};
  auto freeze = std::async(std::launch::async, [&] {
    pqxx::nontransaction tx{mover};
    tx.exec("SET lock_timeout = '20s'");
    tx.exec("SELECT pg_advisory_lock(21323, 9)");
  });
  // ...and while it waits, a new writer of the bucket is refused at once.
  std::optional<FenceRefusal> refusal;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    refusal = Refusal(Shard0(), InsertCustomer(CustomerIn(bucket, 5000)));
    if (refusal) break;
  }
  ASSERT_TRUE(refusal) << "the waiting freeze never made new writers fail";
  EXPECT_EQ(refusal->kind, BucketRefused::Kind::kFrozen);
  EXPECT_EQ(refusal->bucket, BucketId{bucket});
  EXPECT_NE(freeze.wait_for(std::chrono::milliseconds(0)), std::future_status::ready) << "the freeze did not wait";
  // Other buckets are not affected.
  EXPECT_FALSE(Refusal(Shard0(), InsertCustomer(CustomerIn(10, 5000))));
  writing.commit();
  freeze.get();  // granted once the old writer is gone
  {
    pqxx::nontransaction tx{mover};
    tx.exec("SELECT pg_advisory_unlock(21323, 9)");
  }
  EXPECT_FALSE(Refusal(Shard0(), InsertCustomer(CustomerIn(bucket, 9000))));
}

// The fence checks a bucket once per transaction (sql/013): the admission
// must end with the transaction on the same session...
TEST_F(Fence, AnAdmissionEndsWithItsTransaction) {
  const int bucket = 17;
  pqxx::connection writer{Shard0().Reveal()};
  {
    pqxx::work tx{writer};
    tx.exec(InsertCustomer(CustomerIn(bucket)));
    tx.commit();
  }
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 WHERE bucket = 17");
  try {
    pqxx::work tx{writer};
    tx.exec(InsertCustomer(CustomerIn(bucket, 50000)));
    tx.commit();
    ADD_FAILURE() << "the next transaction of the session wrote a retired bucket";
  } catch (const std::exception& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotOwned);
    EXPECT_EQ(refusal->state, "retired");
  }
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = 17");
}

// ...and with a rolled-back savepoint, which releases the bucket's lock:
// a freeze is then granted, and the transaction's next write of the bucket
// is refused.
TEST_F(Fence, ARolledBackSavepointForgetsTheBucketWithItsLock) {
  const int bucket = 19;
  pqxx::connection writer{Shard0().Reveal()};
  pqxx::nontransaction tx{writer};
  tx.exec("BEGIN");
  tx.exec("SAVEPOINT s");
  tx.exec(InsertCustomer(CustomerIn(bucket)));
  tx.exec("ROLLBACK TO SAVEPOINT s");
  pqxx::connection mover{Shard0().Reveal()};
  {
    pqxx::nontransaction freeze{mover};
    freeze.exec("SET lock_timeout = '20s'");
    freeze.exec("SELECT pg_advisory_lock(21323, 19)");  // nobody holds the bucket any more
  }
  try {
    tx.exec(InsertCustomer(CustomerIn(bucket, 60000)));
    ADD_FAILURE() << "a write after the rolled-back savepoint passed a freeze";
  } catch (const std::exception& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->kind, BucketRefused::Kind::kFrozen);
    EXPECT_EQ(refusal->bucket, BucketId{bucket});
  }
  tx.exec("ROLLBACK");
  pqxx::nontransaction unfreeze{mover};
  unfreeze.exec("SELECT pg_advisory_unlock(21323, 19)");
}

TEST_F(Fence, AFreezeThatCannotDrainTimesOut) {
  pqxx::connection writer{Shard0().Reveal()};
  pqxx::work writing{writer};
  writing.exec(InsertCustomer(CustomerIn(11)));
  pqxx::connection mover{Shard0().Reveal()};
  pqxx::nontransaction tx{mover};
  tx.exec("SET lock_timeout = '200ms'");
  try {
    tx.exec("SELECT pg_advisory_lock(21323, 11)");
    FAIL() << "the freeze was granted while a writer held the bucket";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "55P03");
  }
  writing.abort();
}

// REPEATABLE READ and SERIALIZABLE read the ownership with the transaction's
// snapshot: a retirement committed after it must still refuse the write.
class FenceIsolation : public Fence, public ::testing::WithParamInterface<const char*> {};

TEST_P(FenceIsolation, AnOldSnapshotCannotWriteARetiredBucket) {
  const int bucket = 13;
  pqxx::connection writer{Shard0().Reveal()};
  {
    pqxx::nontransaction tx{writer};
    tx.exec(fmt::format("BEGIN ISOLATION LEVEL {}", GetParam()));
    tx.exec("SELECT count(*) FROM customers");  // the snapshot
    cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 WHERE bucket = 13");
    try {
      tx.exec(InsertCustomer(CustomerIn(bucket, 20000)));
      ADD_FAILURE() << "an old snapshot wrote a retired bucket";
    } catch (const std::exception& e) {
      const auto refusal = ParseFenceRefusal(e);
      ASSERT_TRUE(refusal) << e.what();
      EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotOwned);
      EXPECT_EQ(refusal->bucket, BucketId{bucket});
      EXPECT_EQ(refusal->state, "changed");
    }
    tx.exec("ROLLBACK");
  }
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = 13");
  // With a snapshot taken after the change, it writes.
  pqxx::nontransaction again{writer};
  again.exec(fmt::format("BEGIN ISOLATION LEVEL {}", GetParam()));
  again.exec(InsertCustomer(CustomerIn(bucket, 30000 + 1000 * static_cast<int>(std::strlen(GetParam())))));
  again.exec("COMMIT");
}

INSTANTIATE_TEST_SUITE_P(Levels, FenceIsolation, ::testing::Values("REPEATABLE READ", "SERIALIZABLE"));

TEST_F(Fence, TheBucketSettingShowsExactlyTheAskedBucketsOrRefuses) {
  const int a = CustomerIn(20, 40000);
  const int b = CustomerIn(21, 40000);
  cluster_->ExecOnShard(0, InsertCustomer(a) + "; " + InsertCustomer(b));
  pqxx::connection c{Shard0().Reveal()};
  auto count = [&](const std::string& setting) {
    pqxx::work tx{c};
    tx.exec("SET LOCAL shardkit.buckets = " + tx.quote(setting));
    tx.exec("SELECT shardkit_check_buckets(false)");  // as the library does, in the BEGIN round trip
    return tx.exec1(fmt::format("SELECT count(*) FROM customers WHERE customer_id IN ({}, {})", a, b))[0].as<int>();
  };
  BucketSet just20 = BucketSet::One(BucketId{20});
  EXPECT_EQ(count(just20.Setting()), 1);
  BucketSet both = just20;
  both.Add(BucketId{21});
  EXPECT_EQ(count(both.Setting()), 2);
  EXPECT_EQ(count("all"), 2);
  EXPECT_EQ(count(""), 2);  // unset: what the shard owns
  // A bucket this shard cannot serve: refused (the caller's directory is
  // stale), never answered short.
  BucketSet foreign = both;
  foreign.Add(BucketId{50});
  try {
    (void)count(foreign.Setting());
    FAIL() << "a foreign bucket was answered";
  } catch (const std::exception& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotReadable);
    EXPECT_EQ(refusal->bucket, BucketId{50});
  }
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'cleaning', new_owner = 1 WHERE bucket = 21");
  try {
    (void)count(both.Setting());
    FAIL() << "a bucket being cleaned was answered";
  } catch (const std::exception& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->state, "cleaning");
    ASSERT_TRUE(refusal->new_owner);
    EXPECT_EQ(*refusal->new_owner, ShardId{1});
  }
  EXPECT_THROW((void)count("not a mask"), pqxx::sql_error);
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = 21");
}

// A reader that checked a bucket a move is taking away holds it: the
// handover's exclusive lock waits for it, and readers arriving meanwhile are
// refused at once (frozen: retry), as writers are by the freeze.
TEST_F(Fence, AReaderOfAMovingBucketHoldsItAgainstTheHandover) {
  const int bucket = 9;
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET move_id = 88, new_owner = 1 WHERE bucket = 9");
  const std::string check = "SELECT set_config('shardkit.buckets', '" + BucketSet::One(BucketId{bucket}).Setting() +
                            "', true), shardkit_check_buckets(false)";
  pqxx::connection reader{Shard0().Reveal()};
  auto reading = std::make_unique<pqxx::work>(reader);
  reading->exec(check);
  pqxx::connection mover{Shard0().Reveal()};
  {
    pqxx::nontransaction tx{mover};
    tx.exec("SET lock_timeout = 200");
    try {
      tx.exec(fmt::format("SELECT pg_advisory_lock({}, {})", kReadHoldLockKey, bucket));
      ADD_FAILURE() << "the handover did not wait for the reader";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), "55P03") << e.what();
    }
    tx.exec("SET lock_timeout = 5000");
  }
  auto handover = std::async(std::launch::async, [&] {
    pqxx::nontransaction tx{mover};
    tx.exec(fmt::format("SELECT pg_advisory_lock({}, {})", kReadHoldLockKey, bucket));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto refused = Refusal(Shard0(), check);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->kind, BucketRefused::Kind::kNotReadable);
  EXPECT_EQ(refused->state, "frozen");
  EXPECT_EQ(refused->move_id, 88);
  EXPECT_EQ(handover.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  reading->commit();
  reading.reset();
  handover.get();
  {
    pqxx::nontransaction tx{mover};
    tx.exec(fmt::format("SELECT pg_advisory_unlock({}, {})", kReadHoldLockKey, bucket));
  }
  EXPECT_FALSE(Refusal(Shard0(), check + "; SELECT count(*) FROM customers"));
  // A REPEATABLE READ reader reads as of its snapshot and holds nothing:
  // the handover does not wait for it.
  {
    pqxx::connection snapshot_reader{Shard0().Reveal()};
    pqxx::nontransaction rr{snapshot_reader};
    rr.exec("BEGIN ISOLATION LEVEL REPEATABLE READ");
    rr.exec(check);
    pqxx::nontransaction tx{mover};
    tx.exec("SET lock_timeout = 200");
    EXPECT_NO_THROW(tx.exec(fmt::format("SELECT pg_advisory_lock({}, {})", kReadHoldLockKey, bucket)));
    tx.exec(fmt::format("SELECT pg_advisory_unlock({}, {})", kReadHoldLockKey, bucket));
    rr.exec("COMMIT");
  }
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET move_id = NULL, new_owner = NULL WHERE bucket = 9");
}

// The check of one bucket in READ COMMITTED (what every routed read and
// write sends, sql/044) holds the bucket and trusts the fence's word: no
// read of the ownership table. Anything the word cannot vouch for goes to
// the table, as before.
TEST_F(Fence, AOneBucketCheckHoldsTheBucketAndReadsNoTableWhileTheWordVouchesForIt) {
  pqxx::connection c{Shard0().Reveal()};
  struct Check {
    std::int64_t table_reads;
    std::int64_t holds;
  };
  auto check = [&](const std::string& begin, const BucketSet& buckets) {
    // The backend's table counters (they may still hold earlier
    // transactions' counts: PostgreSQL flushes them at most once a second).
    const std::string reads =
        "SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_xact_user_tables "
        "WHERE relname = 'shardkit_bucket_ownership'";
    pqxx::nontransaction tx{c};
    tx.exec(begin);
    const auto before = tx.exec1(reads)[0].as<std::int64_t>();
    tx.exec("SELECT set_config('shardkit.buckets', '" + buckets.Setting() + "', true), shardkit_check_buckets(false)");
    const auto after = tx.exec1(reads)[0].as<std::int64_t>();
    const auto holds = tx.exec1(
                             "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 21326 "
                             "AND pid = pg_backend_pid()")[0]
                           .as<std::int64_t>();
    tx.exec("COMMIT");
    return Check{after - before, holds};
  };
  const BucketSet one = BucketSet::One(BucketId{11});
  Check fast = check("BEGIN", one);
  EXPECT_EQ(fast.table_reads, 0);
  EXPECT_EQ(fast.holds, 1);
  // REPEATABLE READ reads as of its snapshot: the table, no hold.
  Check snapshot = check("BEGIN ISOLATION LEVEL REPEATABLE READ", one);
  EXPECT_GT(snapshot.table_reads, 0);
  EXPECT_EQ(snapshot.holds, 0);
  // Two buckets: the table.
  BucketSet two = one;
  two.Add(BucketId{12});
  EXPECT_GT(check("BEGIN", two).table_reads, 0);
  // A change of the bucket's ownership row clears its bit: the table again
  // (and the answer stays right) until the word is synchronised.
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned' WHERE bucket = 11");
  EXPECT_GT(check("BEGIN", one).table_reads, 0);
  cluster_->ExecOnShard(0, "SELECT shardkit_fence_sync()");
  EXPECT_EQ(check("BEGIN", one).table_reads, 0);
  // A bucket handed over: its bit is clear, the table refuses it.
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'retired', new_owner = 1 WHERE bucket = 11");
  const auto refused = Refusal(
      Shard0(), "SELECT set_config('shardkit.buckets', '" + one.Setting() + "', true), shardkit_check_buckets(false)");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->state, "retired");
  cluster_->ExecOnShard(0, "UPDATE shardkit_bucket_ownership SET state = 'owned', new_owner = NULL WHERE bucket = 11");
  cluster_->ExecOnShard(0, "SELECT shardkit_fence_sync()");
}

TEST_F(Fence, TruncateIsRefusedWhileAMoveRuns) {
  cluster_->ExecOnShard(1, "UPDATE shardkit_bucket_ownership SET move_id = 77, new_owner = 0 WHERE bucket = 60");
  try {
    cluster_->ExecOnShard(1, "TRUNCATE order_items");
    FAIL() << "TRUNCATE during a move was accepted";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "SK004");
    EXPECT_NE(std::string(e.what()).find("bucket 60"), std::string::npos) << e.what();
  }
  cluster_->ExecOnShard(1, "UPDATE shardkit_bucket_ownership SET move_id = NULL, new_owner = NULL WHERE bucket = 60");
  EXPECT_NO_THROW(cluster_->ExecOnShard(1, "TRUNCATE order_items"));
}

TEST_F(Fence, RegisteringATableIsOneCallAndFencesItOnEnrolledShards) {
  cluster_->ExecEverywhere(
      "CREATE TABLE wishlist (customer_id integer NOT NULL, bucket smallint NOT NULL "
      "CHECK (bucket = bucket_of(customer_id)), book_id bigint NOT NULL, PRIMARY KEY (customer_id, book_id)); "
      "SELECT shardkit_shard_table('wishlist')");
  const int theirs = CustomerIn(44);
  const auto refusal = Refusal(Shard0(), fmt::format("INSERT INTO wishlist VALUES ({0}, bucket_of({0}), 1)", theirs));
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->bucket, BucketId{44});
  // Its replica identity includes bucket, as row-filtered replication needs.
  EXPECT_EQ(Count(Shard0(), "SELECT shardkit_identity_has_bucket('wishlist')::int"), 1);
  // The reference server is not enrolled: no fence there.
  EXPECT_NO_THROW(
      cluster_->ExecOnReference(fmt::format("INSERT INTO wishlist VALUES ({0}, bucket_of({0}), 1)", theirs)));
  try {
    cluster_->ExecOnShard(0, "CREATE TABLE no_bucket (id int PRIMARY KEY); SELECT shardkit_shard_table('no_bucket')");
    FAIL() << "a table without a bucket column was registered";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "SK004");
  }
}

TEST(FenceRefusalParsing, OtherErrorsAreNotRefusals) {
  EXPECT_FALSE(ParseFenceRefusal(std::runtime_error("x")));
  EXPECT_FALSE(ParseFenceRefusal(pqxx::sql_error("ERROR:  boom\n", "SELECT 1", "23505")));
  const auto r = ParseFenceRefusal(pqxx::sql_error(
      "ERROR:  shardkit: write to orders refused: bucket 7 is frozen on shard 0 while it moves to shard 2\n"
      "DETAIL:  bucket=7 shard=0 state=owned new_owner=2 directory_version=4 move_id=12 table=orders\n",
      "INSERT", "SK002"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, BucketRefused::Kind::kFrozen);
  EXPECT_EQ(r->bucket, BucketId{7});
  EXPECT_EQ(r->new_owner, ShardId{2});
  EXPECT_EQ(r->move_id, 12);
  EXPECT_EQ(r->message, "shardkit: write to orders refused: bucket 7 is frozen on shard 0 while it moves to shard 2");
}

}  // namespace
}  // namespace shardkit
