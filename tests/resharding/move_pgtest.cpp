// Bucket moves on real servers: three shards (shard i = database <name>_s<i>
// on shard server i % 2), a scratch catalog, and the reference server as the
// ground truth. Tests share one cluster and use different buckets; each reads
// the catalog's current directory rather than assuming one.
#include "shardkit/resharding/move.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/writes/routed.hpp"
#include "support/bookstore_rows.hpp"
#include "support/settled_cluster.hpp"
#include "support/temporary_server.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::TwoOfThree;

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::ScratchCluster;
using test::ScratchOptions;
using Clock = std::chrono::steady_clock;

MoveOptions Quick() {
  MoveOptions o;
  o.cleanup_grace = milliseconds(0);
  return o;
}

// What a killed mover leaves: the hook throws this once the state is reached.
struct SimulatedDeath {
  MoveState at;
};

class Move : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new ScratchCluster("move_pgtest", ScratchOptions().Shards(3).Directory(TwoOfThree()));
    test::FillBookstore(*cluster_, 1500);
    start_ = new std::vector<test::BucketDigests>(test::DigestsPerShard(*cluster_));
  }
  static void TearDownTestSuite() {
    delete start_;
    delete cluster_;
    cluster_ = nullptr;
  }

  static BucketDirectory Directory() {
    pqxx::connection c{cluster_->CatalogDsn().Reveal()};
    return LoadDirectory(c, cluster_->ShardCount());
  }
  static ShardOwnership OwnershipOf(int shard) {
    pqxx::connection c{cluster_->ShardDsn(shard).Reveal()};
    return ReadOwnership(c);
  }
  static void ExpectSettled(const std::string& where) { test::ExpectSettled(*cluster_, where); }

  static ScratchCluster* cluster_;
  static std::vector<test::BucketDigests>* start_;
};
ScratchCluster* Move::cluster_ = nullptr;
std::vector<test::BucketDigests>* Move::start_ = nullptr;

TEST_F(Move, MovesABucketWithItsRowsAndLeavesNothingBehind) {
  const auto before = Directory();
  BucketMover mover{cluster_->Config(), Quick()};
  const MoveRecord done = mover.Move(BucketId{31}, ShardId{2});
  EXPECT_EQ(done.state, MoveState::kDone);
  EXPECT_GT(done.rows_copied, 0);
  EXPECT_EQ(done.rows_deleted, done.rows_copied);
  ASSERT_TRUE(done.stall_ms);
  const auto after = Directory();
  EXPECT_EQ(after.Version(), before.Version() + 1);
  EXPECT_EQ(after.ShardOf(BucketId{31}), ShardId{2});
  EXPECT_EQ(done.directory_version, after.Version());
  ExpectSettled("after moving bucket 31");
  EXPECT_TRUE(OwnershipOf(2).fast_path.Contains(BucketId{31})) << "the new owner's writes should take the fast path";
  const auto events = mover.Events(done.move_id);
  std::vector<MoveState> states;
  for (const auto& e : events) states.push_back(e.state);
  EXPECT_EQ(states,
            (std::vector<MoveState>{MoveState::kPlanned, MoveState::kPrepared, MoveState::kCopying, MoveState::kCopied,
                                    MoveState::kStreaming, MoveState::kRetired, MoveState::kOwned, MoveState::kFlipped,
                                    MoveState::kReplicationDropped, MoveState::kCleaning, MoveState::kDone}));
}

TEST_F(Move, RefusesToStartWhenTheTargetDiffersIsUnreachableOrTheBucketIsBusy) {
  BucketMover mover{cluster_->Config(), Quick()};
  // Another schema on the target.
  cluster_->ExecOnShard(2, "ALTER TABLE customers ADD COLUMN loyalty integer");
  try {
    (void)mover.Move(BucketId{30}, ShardId{2});
    FAIL() << "moved to a target with another schema";
  } catch (const MoveError& e) {
    EXPECT_NE(std::string(e.what()).find("schema differs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loyalty"), std::string::npos) << e.what();
    ASSERT_TRUE(e.move_id());
    EXPECT_EQ(mover.Get(*e.move_id())->state, MoveState::kAborted);
  }
  cluster_->ExecOnShard(2, "ALTER TABLE customers DROP COLUMN loyalty");
  // An unreachable target.
  ClusterConfig broken = cluster_->Config();
  broken.shards[2].admin_dsn =
      Dsn("host=127.0.0.1 port=1 dbname=nothing user=nobody password=secret connect_timeout=2");
  try {
    BucketMover unreachable{broken, Quick()};
    (void)unreachable.Move(BucketId{30}, ShardId{2});
    FAIL() << "moved to an unreachable target";
  } catch (const MoveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unreachable"), std::string::npos) << what;
    EXPECT_EQ(what.find("secret"), std::string::npos) << "a password in a message: " << what;
  }
  // A bucket with a live move.
  const MoveRecord planned = mover.Plan(BucketId{30}, ShardId{2});
  try {
    (void)mover.Move(BucketId{30}, ShardId{2});
    FAIL() << "two live moves of one bucket";
  } catch (const MoveError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("move {}", planned.move_id)), std::string::npos) << e.what();
  }
  EXPECT_EQ(mover.Abort(planned.move_id).state, MoveState::kAborted);
  // Nonsense.
  EXPECT_THROW((void)mover.Move(BucketId{30}, ShardId{0}), MoveError);  // already there
  EXPECT_THROW((void)mover.Move(BucketId{30}, ShardId{7}), MoveError);  // no such shard
  ExpectSettled("after the refusals");
}

TEST_F(Move, AStaleRoutersWriteIsRefusedByTheFenceAndLandsOnTheNewOwner) {
  const int customer = [] {
    for (int id = 100000;; ++id) {
      if (BucketOf(CustomerId{id}) == BucketId{29}) return id;
    }
  }();
  auto stale = cluster_->MakeResolver();  // directory as of now: bucket 29 on shard 0
  ASSERT_EQ(stale->ShardFor(CustomerId{customer}), ShardId{0});
  MoveOptions keep_source = Quick();
  keep_source.defer_cleanup = true;  // the source keeps the bucket retired, naming the new owner
  BucketMover mover{cluster_->Config(), keep_source};
  const MoveRecord moved = mover.Move(BucketId{29}, ShardId{2});
  ASSERT_EQ(moved.state, MoveState::kReplicationDropped);

  // Raw SQL to the retired bucket fails, naming the new owner.
  try {
    cluster_->ExecOnShard(0, fmt::format("INSERT INTO customers (customer_id, bucket, name, email) VALUES ({0}, "
                                         "bucket_of({0}), 'x', 'y')",
                                         customer));
    FAIL() << "a raw write to a retired bucket was accepted";
  } catch (const pqxx::sql_error& e) {
    const auto refusal = ParseFenceRefusal(e);
    ASSERT_TRUE(refusal) << e.what();
    EXPECT_EQ(refusal->state, "retired");
    EXPECT_EQ(refusal->new_owner, ShardId{2});
  }
  // The library, routing with the stale directory and no watcher, follows
  // the refusal to the new owner.
  RoutedTransactions routed{*stale};
  RoutedOutcome outcome;
  routed.Run(
      CustomerId{customer},
      [&](pqxx::transaction_base& tx, const RoutedContext& at) {
        tx.exec_params("INSERT INTO customers (customer_id, bucket, name, email) VALUES ($1, $2, 'stale', 'w')", at.key,
                       at.bucket);
      },
      {}, &outcome);
  EXPECT_EQ(outcome.shard, ShardId{2});
  // Refused at BEGIN already, by the bucket check the transaction opens
  // with (the retired source serves the bucket no more), naming the owner.
  EXPECT_EQ(outcome.refused_not_readable, 1);
  EXPECT_EQ(outcome.refused_not_owned, 0);
  EXPECT_EQ(outcome.attempts, 2);
  cluster_->ExecOnReference(fmt::format(
      "INSERT INTO customers (customer_id, bucket, name, email) VALUES ({0}, bucket_of({0}), 'stale', 'w')", customer));

  // Once the source has forgotten the bucket, a stale router needs the
  // catalog: with a watcher it refreshes and lands there too.
  BucketMover finisher{cluster_->Config(), Quick()};
  EXPECT_EQ(finisher.Resume(moved.move_id).state, MoveState::kDone);
  ClusterConfig old_directory = cluster_->Config();
  old_directory.directory_source = DirectorySource::kConfig;
  old_directory.directory = TwoOfThree();  // version 1: bucket 29 on shard 0
  auto stale_again = BucketShardResolver::FromConfig(old_directory);
  {
    RoutedTransactions blind{*stale_again};
    // Refused until the deadline (a busy machine's first attempt alone can
    // take a few hundred ms: the deadline leaves room for several).
    RoutedOptions short_deadline;
    short_deadline.deadline = Clock::now() + milliseconds(1500);
    EXPECT_THROW(blind.Run(
                     CustomerId{customer},
                     [&](pqxx::transaction_base& tx, const RoutedContext&) {
                       tx.exec_params("UPDATE customers SET name = 'blind' WHERE customer_id = $1", customer);
                     },
                     short_deadline),
                 BucketRefused);
  }
  auto watched_resolver = BucketShardResolver::FromConfig(old_directory);
  DirectoryWatcherOptions slow;
  slow.check_interval = std::chrono::hours(1);
  DirectoryWatcher watcher{*watched_resolver, cluster_->CatalogDsn(), slow};
  RoutedTransactions watched{*watched_resolver, &watcher};
  const int updated = watched.Run(CustomerId{customer}, [&](pqxx::transaction_base& tx, const RoutedContext&) {
    return static_cast<int>(
        tx.exec_params("UPDATE customers SET name = 'stale' WHERE customer_id = $1", customer).affected_rows());
  });
  EXPECT_EQ(updated, 1);
  ExpectSettled("after the stale writes");
}

// A scatter during every phase of a move: one with the current directory,
// one with the directory from before the move (stale), one stale that
// follows the catalog. Each equals the reference or refuses (stale
// directory); none answers wrong. From the retirement on the source refuses
// the bucket, so a directory that still names it is refused: until the
// flip that is the catalog's too (the mover is stopped in 'retired' and
// 'owned' here), after it only the stale one's.
TEST_F(Move, ScattersDuringEveryPhaseEqualTheReference) {
  const std::string sql = "SELECT bucket, count(*), sum(total) FROM orders GROUP BY bucket ORDER BY bucket";
  std::map<int, std::pair<std::int64_t, std::string>> expected;
  {
    pqxx::connection ref{cluster_->ReferenceDsn().Reveal()};
    pqxx::read_transaction tx{ref};
    for (const auto& row : tx.exec(sql)) expected[row[0].as<int>()] = {row[1].as<std::int64_t>(), row[2].c_str()};
  }
  auto merged = [](const ScatterResult& r) {
    std::map<int, std::pair<std::int64_t, std::string>> out;
    for (const auto& shard : r.shards) {
      for (const auto& row : shard.rows) {
        auto [it, fresh] = out.emplace(row[0].as<int>(),
                                       std::pair<std::int64_t, std::string>{row[1].as<std::int64_t>(), row[2].c_str()});
        if (!fresh) it->second.first += 1'000'000;  // a bucket answered twice: make it wrong
      }
    }
    return out;
  };
  auto stale = cluster_->MakeResolver();
  ScatterGather stale_scatter{*stale};
  auto followed = cluster_->MakeResolver();
  ScatterGather followed_scatter{*followed};
  DirectoryWatcherOptions slow;
  slow.check_interval = std::chrono::hours(1);
  // Not listening yet: created after the first phase so it starts stale.
  std::unique_ptr<DirectoryWatcher> watcher;
  int phases = 0;
  int stale_refusals = 0;
  MoveOptions options = Quick();
  int current_refusals = 0;
  options.after_step = [&](std::int64_t, MoveState state) {
    SCOPED_TRACE(std::string(MoveStateName(state)));
    ++phases;
    const bool unflipped_refused = state == MoveState::kRetired || state == MoveState::kOwned;
    const bool stale_refused = state >= MoveState::kRetired && state <= MoveState::kDone;
    // Exact, or refused for a stale directory where `refused` allows it.
    auto check = [&](const std::function<ScatterResult()>& run, bool refused, const char* what) {
      SCOPED_TRACE(what);
      try {
        EXPECT_EQ(merged(run()), expected);
        EXPECT_FALSE(refused) << "answered by a directory whose shard refuses the bucket";
      } catch (const ScatterError& e) {
        ASSERT_FALSE(e.failures().empty());
        EXPECT_TRUE(e.failures()[0].stale_directory) << e.what();
        EXPECT_TRUE(refused) << e.what();
        if (std::string_view(what) == "stale") ++stale_refusals;
        if (std::string_view(what) == "current") ++current_refusals;
      }
    };
    auto fresh = cluster_->MakeResolver();  // the catalog's directory now
    ScatterGather fresh_scatter{*fresh};
    check([&] { return fresh_scatter.Run(sql); }, unflipped_refused, "current");
    // A session (top-k runs its phases in one) counts each bucket once too.
    check(
        [&] {
          ScatterSession session{fresh_scatter};
          return session.Run(sql);
        },
        unflipped_refused, "session");
    check([&] { return stale_scatter.Run(sql); }, stale_refused, "stale");
    if (!watcher) {
      watcher = std::make_unique<DirectoryWatcher>(*followed, cluster_->CatalogDsn(), slow);
      followed_scatter.FollowDirectory(watcher.get());
    }
    check([&] { return followed_scatter.Run(sql); }, unflipped_refused, "followed");
  };
  BucketMover mover{cluster_->Config(), options};
  EXPECT_EQ(mover.Move(BucketId{28}, ShardId{2}).state, MoveState::kDone);
  EXPECT_EQ(phases, 11);           // planned .. done
  EXPECT_EQ(current_refusals, 2);  // retired, owned: the source refuses, the catalog still names it
  EXPECT_EQ(stale_refusals, 6);    // retired .. done: the old owner refuses, never answers short
  ExpectSettled("after the scatters");
}

TEST_F(Move, AnythingWrittenDuringTheMoveArrivesExactlyOnce) {
  // Writers keep placing orders (with items) through routed transactions,
  // half of them in the moving buckets; the checker then finds every
  // acknowledged order exactly once, with its items, on its bucket's owner.
  auto resolver = cluster_->MakeResolver();
  DirectoryWatcher watcher{*resolver, cluster_->CatalogDsn()};
  RoutedTransactions routed{*resolver, &watcher};
  const std::vector<BucketId> moving{BucketId{27}, BucketId{63}};
  std::vector<int> customers_moving;
  std::vector<int> customers_other;
  for (int id = 200000; customers_moving.size() < 20 || customers_other.size() < 20; ++id) {
    const BucketId b = BucketOf(CustomerId{id});
    if (std::find(moving.begin(), moving.end(), b) != moving.end()) {
      if (customers_moving.size() < 20) customers_moving.push_back(id);
    } else if (customers_other.size() < 20) {
      customers_other.push_back(id);
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> next_order{9'000'000'000};
  struct Written {
    int customer;
    std::int64_t order_id;
    int items;
  };
  std::mutex mutex;
  std::vector<Written> acknowledged;
  std::vector<Written> unknown;
  std::atomic<int> refused{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      std::minstd_rand random(static_cast<unsigned>(w + 1));
      while (!stop) {
        const auto& pool = (random() % 2 == 0) ? customers_moving : customers_other;
        const int customer = pool[random() % pool.size()];
        const std::int64_t order_id = next_order++;
        const int items = 1 + static_cast<int>(random() % 3);
        RoutedOutcome outcome;
        try {
          routed.Run(
              CustomerId{customer},
              [&](pqxx::transaction_base& tx, const RoutedContext& at) {
                tx.exec_params(
                    "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, "
                    "$3, now(), $4)",
                    at.key, at.bucket, order_id, 10 * items);
                for (int line = 1; line <= items; ++line) {
                  tx.exec_params(
                      "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, "
                      "unit_price) VALUES ($1, $2, $3, $4, 1, 1, 10)",
                      at.key, at.bucket, order_id, line);
                }
              },
              {}, &outcome);
          std::lock_guard lock(mutex);
          acknowledged.push_back({customer, order_id, items});
          refused += outcome.refused_frozen + outcome.refused_not_owned + outcome.refused_not_readable;
        } catch (const OutcomeUnknown&) {
          std::lock_guard lock(mutex);
          unknown.push_back({customer, order_id, items});
        } catch (const std::exception& e) {
          ADD_FAILURE() << "a write failed: " << e.what();
        }
      }
    });
  }
  // Let the writers run a little before and after the moves.
  while (next_order.load() < 9'000'000'050) std::this_thread::yield();
  BucketMover mover{cluster_->Config(), Quick()};
  for (const BucketId b : moving) EXPECT_EQ(mover.Move(b, ShardId{2}).state, MoveState::kDone);
  const auto after_moves = next_order.load();
  while (next_order.load() < after_moves + 50) std::this_thread::yield();
  stop = true;
  for (auto& t : writers) t.join();

  ASSERT_GT(acknowledged.size(), 100U);
  EXPECT_GT(refused.load(), 0) << "no write was ever refused: the moves did not overlap the writers";
  EXPECT_TRUE(unknown.empty());
  // The checker.
  const BucketDirectory directory = Directory();
  std::map<std::int64_t, std::vector<std::pair<int, std::int64_t>>> found;  // order -> (shard, items)
  for (int s = 0; s < cluster_->ShardCount(); ++s) {
    pqxx::connection c{cluster_->AdminDsn(s).Reveal()};
    pqxx::read_transaction tx{c};
    for (const auto& row : tx.exec("SELECT o.order_id, (SELECT count(*) FROM order_items i WHERE i.customer_id = "
                                   "o.customer_id AND i.order_id = o.order_id) FROM orders o WHERE o.order_id >= "
                                   "9000000000")) {
      found[row[0].as<std::int64_t>()].emplace_back(s, row[1].as<std::int64_t>());
    }
  }
  int lost = 0;
  int duplicated = 0;
  int misplaced = 0;
  int incomplete = 0;
  std::string examples;
  for (const auto& w : acknowledged) {
    const auto it = found.find(w.order_id);
    if (it == found.end()) {
      ++lost;
      examples += fmt::format(" lost order {} of customer {};", w.order_id, w.customer);
      continue;
    }
    if (it->second.size() > 1) ++duplicated;
    const int owner = ToInt(directory.ShardFor(CustomerId{w.customer}));
    if (it->second[0].first != owner) ++misplaced;
    if (it->second[0].second != w.items) ++incomplete;
  }
  EXPECT_EQ(lost, 0) << examples;
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(misplaced, 0);
  EXPECT_EQ(incomplete, 0);
  EXPECT_EQ(found.size(), acknowledged.size()) << "orders nobody acknowledged";
  // Give the reference the acknowledged orders, so the rest of the suite
  // compares whole tables again.
  for (int s = 0; s < cluster_->ShardCount(); ++s) {
    pqxx::connection c{cluster_->AdminDsn(s).Reveal()};
    pqxx::read_transaction tx{c};
    std::string insert_orders;
    std::string insert_items;
    for (const auto& row : tx.exec("SELECT customer_id, bucket, order_id, ordered_at::text, status, total::text FROM "
                                   "orders WHERE order_id >= 9000000000")) {
      insert_orders += fmt::format("{}({}, {}, {}, '{}', '{}', {})", insert_orders.empty() ? "" : ",", row[0].c_str(),
                                   row[1].c_str(), row[2].c_str(), row[3].c_str(), row[4].c_str(), row[5].c_str());
    }
    for (const auto& row : tx.exec("SELECT customer_id, bucket, order_id, line_no, book_id, quantity, unit_price::text "
                                   "FROM order_items WHERE order_id >= 9000000000")) {
      insert_items +=
          fmt::format("{}({}, {}, {}, {}, {}, {}, {})", insert_items.empty() ? "" : ",", row[0].c_str(), row[1].c_str(),
                      row[2].c_str(), row[3].c_str(), row[4].c_str(), row[5].c_str(), row[6].c_str());
    }
    if (!insert_orders.empty()) cluster_->ExecOnReference("INSERT INTO orders VALUES " + insert_orders);
    if (!insert_items.empty()) cluster_->ExecOnReference("INSERT INTO order_items VALUES " + insert_items);
  }
  ExpectSettled("after the concurrent writes");
}

// The mover dies after each step of the journal; `shardctl move resume`
// finishes the move, and (where still allowed) `shardctl move abort` rolls
// it back; either way nothing is left behind and the data is whole.
class MoveKilled : public Move, public ::testing::WithParamInterface<MoveState> {};

TEST_P(MoveKilled, ThenResumedOrAbortedEndsConsistent) {
  const MoveState die_at = GetParam();
  // Buckets 1..10 (on shard 0): one per state, resumed; 11..20: aborted.
  const int index = static_cast<int>(die_at) - static_cast<int>(MoveState::kPrepared);
  for (const bool abort : {false, true}) {
    SCOPED_TRACE(abort ? "abort" : "resume");
    const BucketId bucket{1 + index + (abort ? 10 : 0)};
    ASSERT_EQ(Directory().ShardOf(bucket), ShardId{0});
    MoveOptions dying = Quick();
    dying.after_step = [die_at](std::int64_t, MoveState reached) {
      if (reached == die_at) throw SimulatedDeath{reached};
    };
    BucketMover mover{cluster_->Config(), dying};
    const MoveRecord planned = mover.Plan(bucket, ShardId{2});
    EXPECT_THROW((void)mover.Resume(planned.move_id), SimulatedDeath);
    BucketMover survivor{cluster_->Config(), Quick()};
    EXPECT_EQ(survivor.Get(planned.move_id)->state, die_at);
    if (!abort) {
      EXPECT_EQ(survivor.Resume(planned.move_id).state, MoveState::kDone);
      EXPECT_EQ(Directory().ShardOf(bucket), ShardId{2});
    } else if (CanAbort(die_at)) {
      EXPECT_EQ(survivor.Abort(planned.move_id).state, MoveState::kAborted);
      EXPECT_EQ(Directory().ShardOf(bucket), ShardId{0});
    } else {
      // Past the cutover: abort is refused, resume finishes.
      EXPECT_THROW((void)survivor.Abort(planned.move_id), MoveError);
      EXPECT_EQ(survivor.Resume(planned.move_id).state, MoveState::kDone);
      EXPECT_EQ(Directory().ShardOf(bucket), ShardId{2});
    }
    ExpectSettled(fmt::format("after dying at {} and {}", MoveStateName(die_at), abort ? "abort" : "resume"));
  }
}

INSTANTIATE_TEST_SUITE_P(AfterEachStep, MoveKilled,
                         ::testing::Values(MoveState::kPrepared, MoveState::kCopying, MoveState::kCopied,
                                           MoveState::kStreaming, MoveState::kRetired, MoveState::kOwned,
                                           MoveState::kFlipped, MoveState::kReplicationDropped, MoveState::kCleaning),
                         [](const auto& param_info) { return std::string(MoveStateName(param_info.param)); });

TEST_F(Move, ALongTransactionMakesTheFreezeTimeOutAndTheMoveAbort) {
  const BucketId bucket{26};
  ASSERT_EQ(Directory().ShardOf(bucket), ShardId{0});
  const int customer = [&] {
    for (int id = 300000;; ++id) {
      if (BucketOf(CustomerId{id}) == bucket) return id;
    }
  }();
  // A writer of the bucket that starts while the move streams, and does not
  // end. (Earlier, it would hold up the creation of the replication slot,
  // which waits for running transactions: slot_timeout bounds that.)
  pqxx::connection holder{cluster_->ShardDsn(0).Reveal()};
  std::unique_ptr<pqxx::work> long_tx;
  MoveOptions options = Quick();
  options.drain_timeout = milliseconds(300);
  options.after_step = [&](std::int64_t, MoveState reached) {
    if (reached != MoveState::kStreaming) return;
    long_tx = std::make_unique<pqxx::work>(holder);
    long_tx->exec(fmt::format(
        "INSERT INTO customers (customer_id, bucket, name, email) VALUES ({0}, bucket_of({0}), 'long', 'tx')",
        customer));
  };
  BucketMover mover{cluster_->Config(), options};
  try {
    (void)mover.Move(bucket, ShardId{2});
    FAIL() << "the freeze did not time out";
  } catch (const MoveError& e) {
    EXPECT_NE(std::string(e.what()).find("freeze timed out"), std::string::npos) << e.what();
    ASSERT_TRUE(e.move_id());
    EXPECT_EQ(mover.Get(*e.move_id())->state, MoveState::kAborted);
  }
  ASSERT_TRUE(long_tx);
  long_tx->abort();
  EXPECT_EQ(Directory().ShardOf(bucket), ShardId{0});
  ExpectSettled("after the timed-out freeze");
  // The bucket is writable again on its owner.
  EXPECT_NO_THROW(
      cluster_->ExecOnShard(0, fmt::format("UPDATE customers SET name = name WHERE bucket = {}", ToInt(bucket))));
}

TEST_F(Move, TheTargetGoingDownMidCopyAbortsCleanly) {
  // Shard 3 of its own server, stopped in the middle of the copy.
  test::TemporaryServer server;
  {
    for (const MigrationSet& set : test::ClusterMigrations()) {
      Migrator migrator{set, {MigrationServer{"shard3", server.Dsn(), {ServerRole::kShard}}}};
      ASSERT_TRUE(migrator.Apply().Ok());
    }
    pqxx::connection c{server.Dsn().Reveal()};
    EnrollShard(c, ShardId{3}, BucketSet{}, Directory().Version());
  }
  ClusterConfig four = cluster_->Config();
  four.shards.push_back({"shard3", server.Dsn(), server.Dsn()});
  const BucketId bucket{25};
  bool stopped = false;
  MoveOptions options = Quick();
  options.on_progress = [&](const MoveProgress& p) {
    if (!stopped && p.step == "copying" && p.rows_copied > 0) {
      stopped = true;
      server.Stop();
    }
  };
  BucketMover mover{four, options};
  try {
    (void)mover.Move(bucket, ShardId{3});
    FAIL() << "the copy survived its target";
  } catch (const MoveError& e) {
    EXPECT_TRUE(stopped);
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
    ASSERT_TRUE(e.move_id());
    EXPECT_EQ(mover.Get(*e.move_id())->state, MoveState::kAborted);
  }
  server.Start();
  {
    pqxx::connection c{server.Dsn().Reveal()};
    pqxx::read_transaction tx{c};
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM orders")[0].as<int>(), 0);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM shardkit_bucket_ownership")[0].as<int>(), 0);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM pg_subscription")[0].as<int>(), 0);
  }
  EXPECT_EQ(LeftoverReplicationObjects(four), std::vector<std::string>{});
  EXPECT_EQ(Directory().ShardOf(bucket), ShardId{0});
  ExpectSettled("after the target went down");
}

// Last: a rebalance onto the three shards, then every bucket moved back
// where it was (two moves at a time): each shard then holds exactly what it
// held before, row for row.
TEST_F(Move, ARebalanceThereAndEveryBucketBackLeavesEveryShardAsItWas) {
  const BucketDirectory before = Directory();
  const auto held_before = test::DigestsPerShard(*cluster_);
  RebalanceOptions options;
  options.parallel = 2;
  options.move = Quick();
  const RebalancePlan out = PlanRebalance(before, {ShardId{0}, ShardId{1}, ShardId{2}});
  ASSERT_FALSE(out.moves.empty());
  const RebalanceReport there = ApplyRebalance(cluster_->Config(), out, options);
  EXPECT_TRUE(there.Ok()) << (there.failures.empty() ? "" : there.failures.front());
  for (const ShardId s : FirstShards(3)) EXPECT_GE(Directory().BucketsOf(s).size(), 21U) << "shard " << s;
  ExpectSettled("spread over three shards");

  RebalancePlan back;
  back.before = Directory();
  back.after = before;
  for (const BucketId b : AllBuckets()) {
    if (back.before.ShardOf(b) != before.ShardOf(b))
      back.moves.push_back({b, back.before.ShardOf(b), before.ShardOf(b)});
  }
  ASSERT_FALSE(back.moves.empty());
  const RebalanceReport returned = ApplyRebalance(cluster_->Config(), back, options);
  EXPECT_TRUE(returned.Ok()) << (returned.failures.empty() ? "" : returned.failures.front());
  EXPECT_EQ(Directory().AssignmentTable(), before.AssignmentTable());
  ExpectSettled("every bucket back");
  const auto held_after = test::DigestsPerShard(*cluster_);
  for (std::size_t s = 0; s < held_after.size(); ++s) {
    EXPECT_EQ(test::Differences(held_after[s], held_before[s]), std::vector<std::string>{}) << "shard " << s;
  }
}

}  // namespace
}  // namespace shardkit
