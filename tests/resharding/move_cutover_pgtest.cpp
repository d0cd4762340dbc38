// Bucket moves stopped in every state, with writers and readers running:
// no read is ever answered by a shard that misses an acknowledged write of
// the bucket, through the current directory or a stale one; the stopped
// move is then resumed or aborted and the same holds. Three shards (shard 2
// empty at the start), a scratch catalog, the reference server as the
// ground truth; each case moves its own bucket of shard 1.
#include "shardkit/resharding/move.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <pwd.h>
#include <unistd.h>
#include <atomic>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>

#include "shardkit/errors.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/resharding/rebalance.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/directory_watcher.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/schema/verify.hpp"
#include "shardkit/writes/routed.hpp"
#include "support/bookstore_rows.hpp"
#include "support/settled_cluster.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using test::TwoOfThree;

using std::chrono::milliseconds;
using test::ScratchCluster;
using test::ScratchOptions;
using Clock = std::chrono::steady_clock;

struct SimulatedDeath {
  MoveState at;
};

MoveOptions Quick() {
  MoveOptions o;
  o.cleanup_grace = milliseconds(0);
  return o;
}

std::vector<int> CustomersIn(BucketId bucket, int count, int from) {
  std::vector<int> out;
  for (int id = from; static_cast<int>(out.size()) < count; ++id) {
    if (BucketOf(CustomerId{id}) == bucket) out.push_back(id);
  }
  return out;
}

// What the readers saw: answers checked, refusals, and each wrong answer.
struct ReadTally {
  std::atomic<int> routed_ok{0};
  std::atomic<int> routed_refused{0};
  std::atomic<int> scatter_ok{0};
  std::atomic<int> scatter_refused{0};
  std::atomic<int> stale_ok{0};
  std::atomic<int> stale_refused{0};
  std::atomic<int> timed_out{0};  // no connection or no answer in time: a busy machine, not an answer
  std::mutex mutex;
  std::vector<std::string> wrong;
  std::vector<std::string> unexpected;
  void Wrong(std::string what) {
    std::lock_guard lock(mutex);
    if (wrong.size() < 5) wrong.push_back(std::move(what));
  }
  void Unexpected(std::string what) {
    std::lock_guard lock(mutex);
    if (unexpected.size() < 5) unexpected.push_back(std::move(what));
  }
  void Reset() { routed_ok = routed_refused = scatter_ok = scatter_refused = stale_ok = stale_refused = timed_out = 0; }
};

// One case: writers place orders for the moving bucket's customers through
// routed transactions (following the catalog); readers read each customer's
// orders (routed) and every order (scatter) through the current directory,
// and the same through a stale directory that never refreshes. A read that
// answers must contain every order acknowledged before it began, once.
class Load {
 public:
  Load(const ScratchCluster& cluster, BucketId bucket, std::int64_t first_order)
      : cluster_(cluster),
        customers_(CustomersIn(bucket, 4, 700000 + 1000 * ToInt(bucket))),
        first_order_(first_order),
        next_order_(first_order),
        resolver_(cluster.MakeResolver()),
        stale_resolver_(cluster.MakeResolver()),
        watcher_(*resolver_, cluster.CatalogDsn()),
        routed_(*resolver_, &watcher_),
        stale_routed_(*stale_resolver_),
        scatter_(*resolver_),
        stale_scatter_(*stale_resolver_) {
    scatter_.FollowDirectory(&watcher_);
  }
  ~Load() { Stop(); }

  void Start() {
    for (int w = 0; w < 2; ++w) threads_.emplace_back([this, w] { Write(w); });
    threads_.emplace_back([this] { ReadRouted(routed_, false); });
    threads_.emplace_back([this] { ReadScatter(scatter_, false); });
    threads_.emplace_back([this] { ReadRouted(stale_routed_, true); });
    threads_.emplace_back([this] { ReadScatter(stale_scatter_, true); });
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  void AwaitWrites(std::size_t more) {
    const std::size_t want = Acknowledged().size() + more;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    while (Acknowledged().size() < want && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(5));
  }

  [[nodiscard]] std::map<std::int64_t, int> Acknowledged() {
    std::lock_guard lock(mutex_);
    return acknowledged_;
  }
  [[nodiscard]] std::set<std::int64_t> Unknown() {
    std::lock_guard lock(mutex_);
    return unknown_;
  }

  // Reads once through the current directory, routed and scattered; both
  // must answer, with every acknowledged order exactly once.
  void ExpectEverythingReadable(const std::string& where) {
    SCOPED_TRACE(where);
    const auto acked = Acknowledged();
    std::multiset<std::int64_t> got;
    for (const int c : customers_) {
      RoutedOptions ro;
      ro.read_only = true;
      ro.deadline = Clock::now() + std::chrono::seconds(5);
      const auto orders = routed_.Run(
          CustomerId{c}, [&](pqxx::transaction_base& tx, const RoutedContext&) { return OrdersOf(tx, c); }, ro);
      got.insert(orders.begin(), orders.end());
      // Later, so it may see more orders (the writers go on), never fewer.
      const auto read = PipelinedOrdersOf(routed_, c, ro);
      const std::set<std::int64_t> later(read.begin(), read.end());
      for (const auto order : orders)
        EXPECT_TRUE(later.contains(order)) << "Read of customer " << c << " misses " << order;
    }
    CheckComplete(acked, got, "routed reads");
    CheckComplete(acked, ScatterOrders(scatter_), "a scatter");
  }

  [[nodiscard]] const std::vector<int>& Customers() const noexcept { return customers_; }
  [[nodiscard]] std::int64_t FirstOrder() const noexcept { return first_order_; }
  [[nodiscard]] std::int64_t LastOrder() const noexcept { return next_order_.load(); }
  ReadTally tally;

 private:
  std::vector<std::int64_t> OrdersOf(pqxx::transaction_base& tx, int customer) const {
    std::vector<std::int64_t> out;
    for (const auto& row : tx.exec_params("SELECT order_id FROM orders WHERE customer_id = $1 AND order_id >= $2",
                                          customer, first_order_)) {
      out.push_back(row[0].as<std::int64_t>());
    }
    return out;
  }
  // The same through RoutedTransactions::Read (one pipelined round trip).
  std::vector<std::int64_t> PipelinedOrdersOf(RoutedTransactions& routed, int customer, const RoutedOptions& ro) const {
    std::vector<std::int64_t> out;
    for (const auto& row :
         routed.Read(CustomerId{customer}, "SELECT order_id FROM orders WHERE customer_id = $1 AND order_id >= $2",
                     {std::to_string(customer), std::to_string(first_order_)}, ro)) {
      out.push_back(row[0].as<std::int64_t>());
    }
    return out;
  }
  std::multiset<std::int64_t> ScatterOrders(ScatterGather& scatter) const {
    ScatterOptions so;
    so.deadline = Clock::now() + std::chrono::seconds(5);
    const auto result = scatter.Run(fmt::format("SELECT order_id FROM orders WHERE order_id >= {} AND order_id < {}",
                                                first_order_, first_order_ + 1'000'000),
                                    {}, so);
    std::multiset<std::int64_t> out;
    for (const auto& shard : result.shards) {
      for (const auto& row : shard.rows) out.insert(row[0].as<std::int64_t>());
    }
    return out;
  }
  // Every order acknowledged before the read began is in it, once; nothing
  // in it was never written.
  void CheckComplete(const std::map<std::int64_t, int>& acked, const std::multiset<std::int64_t>& got,
                     const std::string& what) {
    int missing = 0;
    std::string example;
    for (const auto& [order, customer] : acked) {
      const auto n = got.count(order);
      if (n == 1) continue;
      ++missing;
      if (example.empty()) example = fmt::format("order {} of customer {} seen {} times", order, customer, n);
    }
    for (const auto order : got) {
      if (order >= next_order_.load()) {
        ++missing;
        if (example.empty()) example = fmt::format("order {} was never written", order);
      }
    }
    if (missing > 0) tally.Wrong(fmt::format("{}: {} wrong, e.g. {}", what, missing, example));
  }

  void Write(int w) {
    std::minstd_rand random(static_cast<unsigned>(w + 11));
    while (!stop_) {
      const int customer = customers_[random() % customers_.size()];
      const std::int64_t order = next_order_++;
      RoutedOptions ro;
      ro.deadline = Clock::now() + milliseconds(400);
      try {
        routed_.Run(
            CustomerId{customer},
            [&](pqxx::transaction_base& tx, const RoutedContext& at) {
              tx.exec_params(
                  "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ($1, $2, "
                  "$3, now(), 10)",
                  at.key, at.bucket, order);
            },
            ro);
        std::lock_guard lock(mutex_);
        acknowledged_[order] = customer;
      } catch (const OutcomeUnknown&) {
        std::lock_guard lock(mutex_);
        unknown_.insert(order);
      } catch (const BucketRefused&) {
        // Refused to the deadline (a stopped mover's bucket): not written.
      } catch (const PoolTimeout&) {
        // No connection in time: not written either.
      } catch (const ShardQueryError& e) {
        // The deadline's statement_timeout (a loaded machine): rolled back, not written.
        if (e.sqlstate() != "57014") tally.Unexpected(fmt::format("a write failed: {}", e.what()));
      } catch (const pqxx::sql_error& e) {
        if (e.sqlstate() != "57014") tally.Unexpected(fmt::format("a write failed: {}", e.what()));
      } catch (const std::exception& e) {
        tally.Unexpected(fmt::format("a write failed: {}", e.what()));
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  }

  // Alternately through Run (three round trips) and Read (one, pipelined).
  void ReadRouted(RoutedTransactions& routed, bool stale) {
    std::minstd_rand random(stale ? 5U : 3U);
    for (int read = 0; !stop_; ++read) {
      const int customer = customers_[random() % customers_.size()];
      std::map<std::int64_t, int> acked;
      for (const auto& [order, c] : Acknowledged()) {
        if (c == customer) acked.emplace(order, c);
      }
      RoutedOptions ro;
      ro.read_only = true;
      ro.deadline = Clock::now() + milliseconds(800);
      try {
        const bool pipelined = read % 2 == 1;
        const auto orders =
            pipelined
                ? PipelinedOrdersOf(routed, customer, ro)
                : routed.Run(
                      CustomerId{customer},
                      [&](pqxx::transaction_base& tx, const RoutedContext&) { return OrdersOf(tx, customer); }, ro);
        CheckComplete(
            acked, std::multiset<std::int64_t>(orders.begin(), orders.end()),
            fmt::format("{}routed {} of customer {}", stale ? "a stale " : "a ", pipelined ? "Read" : "Run", customer));
        ++(stale ? tally.stale_ok : tally.routed_ok);
      } catch (const BucketRefused&) {
        ++(stale ? tally.stale_refused : tally.routed_refused);
      } catch (const PoolTimeout&) {
        ++tally.timed_out;
      } catch (const ShardQueryError& e) {
        // The deadline's statement_timeout (a loaded machine), as for writes.
        if (e.sqlstate() == "57014") {
          ++tally.timed_out;
        } else {
          tally.Unexpected(fmt::format("a routed read failed: {}", e.what()));
        }
      } catch (const pqxx::sql_error& e) {
        if (e.sqlstate() == "57014") {
          ++tally.timed_out;
        } else {
          tally.Unexpected(fmt::format("a routed read failed: {}", e.what()));
        }
      } catch (const std::exception& e) {
        tally.Unexpected(fmt::format("a routed read failed: {}", e.what()));
      }
    }
  }

  void ReadScatter(ScatterGather& scatter, bool stale) {
    while (!stop_) {
      const auto acked = Acknowledged();
      try {
        CheckComplete(acked, ScatterOrders(scatter), stale ? "a stale scatter" : "a scatter");
        ++(stale ? tally.stale_ok : tally.scatter_ok);
      } catch (const ScatterError& e) {
        const bool refused = !e.failures().empty() && std::all_of(e.failures().begin(), e.failures().end(),
                                                                  [](const auto& f) { return f.stale_directory; });
        const bool late =
            !e.failures().empty() && std::all_of(e.failures().begin(), e.failures().end(), [](const auto& f) {
              return !f.stale_directory && (f.sqlstate.empty() || f.sqlstate == "57014");
            });
        if (refused) {
          ++(stale ? tally.stale_refused : tally.scatter_refused);
        } else if (late) {
          ++tally.timed_out;
        } else {
          tally.Unexpected(fmt::format("a scatter failed: {}", e.what()));
        }
      } catch (const std::exception& e) {
        tally.Unexpected(fmt::format("a scatter failed: {}", e.what()));
      }
      std::this_thread::sleep_for(milliseconds(3));
    }
  }

  const ScratchCluster& cluster_;
  std::vector<int> customers_;
  std::int64_t first_order_;
  std::atomic<std::int64_t> next_order_;
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<BucketShardResolver> stale_resolver_;
  DirectoryWatcher watcher_;
  RoutedTransactions routed_;
  RoutedTransactions stale_routed_;
  ScatterGather scatter_;
  ScatterGather stale_scatter_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::map<std::int64_t, int> acknowledged_;  // order -> customer
  std::set<std::int64_t> unknown_;
};

class MoveCutover : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new ScratchCluster("move_cutover_pgtest", ScratchOptions().Shards(3).Directory(TwoOfThree()));
    test::FillBookstore(*cluster_, 800);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static BucketDirectory Directory() {
    pqxx::connection c{cluster_->CatalogDsn().Reveal()};
    return LoadDirectory(c, cluster_->ShardCount());
  }

  // The orders the load wrote, on their owner, once each; then copied to the
  // reference server so that whole tables compare again.
  static void CheckAndMirror(Load& load) {
    const auto acked = load.Acknowledged();
    const auto unknown = load.Unknown();
    const BucketDirectory directory = Directory();
    std::map<std::int64_t, std::vector<int>> found;
    for (int s = 0; s < cluster_->ShardCount(); ++s) {
      pqxx::connection c{cluster_->AdminDsn(s).Reveal()};
      pqxx::read_transaction tx{c};
      for (const auto& row : tx.exec_params("SELECT order_id, customer_id FROM orders WHERE order_id >= $1 AND "
                                            "order_id < $2",
                                            load.FirstOrder(), load.FirstOrder() + 1'000'000)) {
        found[row[0].as<std::int64_t>()].push_back(s);
        EXPECT_EQ(directory.ShardFor(CustomerId{row[1].as<int>()}), ShardId{s})
            << "order " << row[0].c_str() << " on shard " << s;
      }
    }
    for (const auto& [order, customer] : acked) {
      const auto it = found.find(order);
      ASSERT_NE(it, found.end()) << "acknowledged order " << order << " of customer " << customer << " was lost";
      EXPECT_EQ(it->second.size(), 1U) << "order " << order << " is on " << it->second.size() << " shards";
    }
    for (const auto& [order, shards] : found) {
      EXPECT_TRUE(acked.contains(order) || unknown.contains(order)) << "order " << order << " was never acknowledged";
    }
    for (int s = 0; s < cluster_->ShardCount(); ++s) {
      pqxx::connection c{cluster_->AdminDsn(s).Reveal()};
      pqxx::read_transaction tx{c};
      std::string values;
      for (const auto& row : tx.exec_params("SELECT customer_id, bucket, order_id, ordered_at::text, status, "
                                            "total::text FROM orders WHERE order_id >= $1 AND order_id < $2",
                                            load.FirstOrder(), load.FirstOrder() + 1'000'000)) {
        values += fmt::format("{}({}, {}, {}, '{}', '{}', {})", values.empty() ? "" : ",", row[0].c_str(),
                              row[1].c_str(), row[2].c_str(), row[3].c_str(), row[4].c_str(), row[5].c_str());
      }
      if (!values.empty()) cluster_->ExecOnReference("INSERT INTO orders VALUES " + values);
    }
  }

  static void ExpectSettled(const std::string& where) { test::ExpectSettled(*cluster_, where); }

  static ScratchCluster* cluster_;
};
ScratchCluster* MoveCutover::cluster_ = nullptr;

struct Case {
  MoveState stop_at;
  bool abort;
};

class MoveStopped : public MoveCutover, public ::testing::WithParamInterface<Case> {};

TEST_P(MoveStopped, NoReadMissesAnAcknowledgedWriteThenResumeOrAbortSettles) {
  const auto [stop_at, abort] = GetParam();
  const int index = static_cast<int>(stop_at) - static_cast<int>(MoveState::kPrepared);
  const BucketId bucket{40 + index + (abort ? 10 : 0)};
  ASSERT_EQ(Directory().ShardOf(bucket), ShardId{1});
  Load load(*cluster_, bucket, 9'100'000'000 + 1'000'000LL * ToInt(bucket));
  load.Start();
  load.AwaitWrites(20);

  // The mover stops in `stop_at`: alive but not moving on for a while
  // (holding what it holds there), then it dies.
  MoveOptions dying;
  dying.cleanup_grace = milliseconds(0);
  dying.after_step = [&](std::int64_t, MoveState reached) {
    if (reached != stop_at) return;
    load.tally.Reset();
    std::this_thread::sleep_for(milliseconds(250));
    throw SimulatedDeath{reached};
  };
  std::int64_t move_id = 0;
  {
    BucketMover mover{cluster_->Config(), dying};
    const MoveRecord planned = mover.Plan(bucket, ShardId{2});
    move_id = planned.move_id;
    EXPECT_THROW((void)mover.Resume(move_id), SimulatedDeath);
  }
  // Dead: the bucket is served by one shard, or refused; never answered
  // short. Which, by state: the source until the retirement; nobody in
  // 'retired' (its reads and writes are refused, retryably); the target
  // from 'owned' on, reached through the source's refusal until the
  // directory flips (a scatter by the old directory is refused meanwhile).
  load.tally.Reset();
  load.AwaitWrites(stop_at == MoveState::kRetired ? 0 : 15);
  std::this_thread::sleep_for(milliseconds(250));
  for (const auto give_up = Clock::now() + std::chrono::seconds(10);
       Clock::now() < give_up && (load.tally.routed_ok + load.tally.routed_refused == 0 ||
                                  load.tally.scatter_ok + load.tally.scatter_refused == 0);) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  {
    SCOPED_TRACE(fmt::format("mover dead in {}", MoveStateName(stop_at)));
    EXPECT_EQ(load.tally.wrong, std::vector<std::string>{});
    EXPECT_EQ(load.tally.unexpected, std::vector<std::string>{});
    EXPECT_GT(load.tally.routed_ok + load.tally.routed_refused, 0);
    EXPECT_GT(load.tally.scatter_ok + load.tally.scatter_refused, 0);
    if (stop_at == MoveState::kRetired) {
      EXPECT_EQ(load.tally.routed_ok, 0) << "a retired source, or an incoming target, answered a read";
      EXPECT_EQ(load.tally.scatter_ok, 0);
    } else {
      EXPECT_GT(load.tally.routed_ok, 0) << "routed reads were refused with the bucket served by one shard";
      EXPECT_EQ(load.tally.routed_refused, 0);
      if (stop_at == MoveState::kOwned) {
        EXPECT_EQ(load.tally.scatter_ok, 0) << "a scatter by the unflipped directory was answered";
      } else {
        EXPECT_GT(load.tally.scatter_ok, 0);
        EXPECT_EQ(load.tally.scatter_refused, 0);
      }
    }
    // What a refusal says when the mover is gone: the move, and what to run.
    if (stop_at == MoveState::kRetired || stop_at == MoveState::kOwned) {
      pqxx::connection c{cluster_->ShardDsn(1).Reveal()};
      pqxx::work tx{c};
      try {
        tx.exec("SELECT set_config('shardkit.buckets', '" + BucketSet::One(bucket).Setting() +
                "', true), shardkit_check_buckets(false)");
        ADD_FAILURE() << "the retired source checked the bucket as readable";
      } catch (const pqxx::sql_error& e) {
        EXPECT_EQ(e.sqlstate(), "SK003");
        const std::string text = e.what();
        EXPECT_NE(text.find(fmt::format("move {}", move_id)), std::string::npos) << text;
        EXPECT_NE(text.find(fmt::format("shardctl move resume {}", move_id)), std::string::npos) << text;
        const auto refusal = ParseFenceRefusal(e);
        ASSERT_TRUE(refusal);
        EXPECT_EQ(refusal->new_owner, ShardId{2});
      }
      // A raw write is refused the same way, and names no directory
      // version the catalog does not have yet.
      try {
        cluster_->ExecOnShard(1, fmt::format("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) "
                                             "VALUES ({0}, bucket_of({0}), 9299999999, now(), 1)",
                                             load.Customers()[0]));
        ADD_FAILURE() << "the retired source took a write";
      } catch (const pqxx::sql_error& e) {
        EXPECT_EQ(e.sqlstate(), kSqlStateNotOwned);
        const std::string text = e.what();
        EXPECT_NE(text.find(fmt::format("shardctl move resume {}", move_id)), std::string::npos) << text;
        EXPECT_EQ(text.find("directory version"), std::string::npos) << text;
        const auto refusal = ParseFenceRefusal(e);
        ASSERT_TRUE(refusal);
        EXPECT_EQ(refusal->new_owner, ShardId{2});
      }
    }
    // verify names the stopped move and calls no row an orphan.
    const VerifyReport report = VerifyCluster(cluster_->Config());
    int in_progress = 0;
    for (const auto& f : report.findings) {
      if (f.bucket != bucket) continue;
      EXPECT_NE(f.kind, FindingKind::kOrphanBucket) << f.detail;
      EXPECT_NE(f.kind, FindingKind::kMisplacedRows) << f.detail;
      EXPECT_EQ(f.detail.find("to delete"), std::string::npos) << f.detail;
      if (f.kind == FindingKind::kMoveInProgress) {
        ++in_progress;
        EXPECT_NE(f.detail.find(fmt::format("move {}", move_id)), std::string::npos) << f.detail;
        EXPECT_NE(f.detail.find(fmt::format("shardctl move resume {}", move_id)), std::string::npos) << f.detail;
        EXPECT_NE(f.detail.find("no mover is running it"), std::string::npos) << f.detail;
      }
    }
    EXPECT_EQ(in_progress, 1);
  }

  // Resumed or rolled back, under the same load.
  load.tally.Reset();
  BucketMover survivor{cluster_->Config(), Quick()};
  if (abort) {
    ASSERT_TRUE(CanAbort(stop_at));
    EXPECT_EQ(survivor.Abort(move_id).state, MoveState::kAborted);
    EXPECT_EQ(Directory().ShardOf(bucket), ShardId{1});
  } else {
    const MoveRecord done = survivor.Resume(move_id);
    EXPECT_EQ(done.state, MoveState::kDone);
    EXPECT_EQ(Directory().ShardOf(bucket), ShardId{2});
    ASSERT_TRUE(done.stall_ms) << "the resumed move reports no stall";
    if (stop_at == MoveState::kRetired || stop_at == MoveState::kOwned) {
      EXPECT_GE(*done.stall_ms, 400.0) << "the stall covers the time the mover was stopped or dead";
    }
  }
  load.AwaitWrites(20);
  load.ExpectEverythingReadable("after the resume or abort");
  load.Stop();
  EXPECT_EQ(load.tally.wrong, std::vector<std::string>{});
  EXPECT_EQ(load.tally.unexpected, std::vector<std::string>{});
  load.ExpectEverythingReadable("with the load stopped");
  CheckAndMirror(load);
  ExpectSettled(fmt::format("after stopping in {} and {}", MoveStateName(stop_at), abort ? "aborting" : "resuming"));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const MoveState s :
       {MoveState::kPrepared, MoveState::kCopying, MoveState::kCopied, MoveState::kStreaming, MoveState::kRetired,
        MoveState::kOwned, MoveState::kFlipped, MoveState::kReplicationDropped, MoveState::kCleaning}) {
    cases.push_back({s, false});
    if (CanAbort(s)) cases.push_back({s, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryState, MoveStopped, ::testing::ValuesIn(Cases()), [](const auto& param_info) {
  return std::string(MoveStateName(param_info.param.stop_at)) + (param_info.param.abort ? "_aborted" : "_resumed");
});

// The raw-SQL form ownership.hpp documents, against a moved bucket: refused,
// during the move (the source retired it, names the new owner) and after it
// (the source forgot it), never an empty answer.
TEST_F(MoveCutover, TheDocumentedRawSqlFormIsRefusedForAMovedBucket) {
  const BucketId bucket{60};
  ASSERT_EQ(Directory().ShardOf(bucket), ShardId{1});
  const int customer = CustomersIn(bucket, 1, 1)[0];       // loaded: has rows
  const int newcomer = CustomersIn(bucket, 1, 900000)[0];  // no rows anywhere
  const BucketDirectory before = Directory();
  auto documented = [&](const std::string& sql) {
    pqxx::connection c{cluster_->ShardDsn(1).Reveal()};
    pqxx::work tx{c};
    shardkit::BucketSet mine = shardkit::BucketSet::Of(before, shardkit::ShardId{1});
    tx.exec("SELECT set_config('shardkit.buckets', '" + mine.Setting() + "', true), shardkit_check_buckets(false)");
    return tx.exec1(sql)[0].as<std::int64_t>();
  };
  auto setting_alone = [&](const std::string& sql) {
    pqxx::connection c{cluster_->ShardDsn(1).Reveal()};
    pqxx::work tx{c};
    tx.exec("SET LOCAL shardkit.buckets = '" + BucketSet::Of(before, ShardId{1}).Setting() + "'");
    return tx.exec1(sql)[0].as<std::int64_t>();
  };
  const std::string orders_of_customer = fmt::format("SELECT count(*) FROM orders WHERE customer_id = {}", customer);
  const std::string orders_of_newcomer = fmt::format("SELECT count(*) FROM orders WHERE customer_id = {}", newcomer);
  const std::int64_t has = documented(orders_of_customer);
  ASSERT_GT(has, 0);
  EXPECT_EQ(documented(orders_of_newcomer), 0);

  MoveOptions keep;
  keep.cleanup_grace = milliseconds(0);
  keep.defer_cleanup = true;
  BucketMover mover{cluster_->Config(), keep};
  const MoveRecord moved = mover.Move(bucket, ShardId{2});
  ASSERT_EQ(moved.state, MoveState::kReplicationDropped);
  // The new owner takes a write the old one never sees.
  cluster_->ExecOnShard(2, fmt::format("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES "
                                       "({0}, bucket_of({0}), 9200000001, now(), 1)",
                                       newcomer));
  auto expect_refused = [&](auto&& run, const std::string& sql, bool names_owner, const std::string& where) {
    SCOPED_TRACE(where);
    try {
      const auto n = run(sql);
      ADD_FAILURE() << "answered " << n << " instead of refusing";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), kSqlStateNotReadable) << e.what();
      const auto refusal = ParseFenceRefusal(e);
      ASSERT_TRUE(refusal) << e.what();
      EXPECT_EQ(refusal->kind, BucketRefused::Kind::kNotReadable);
      EXPECT_EQ(refusal->bucket, bucket);
      if (names_owner) {
        EXPECT_EQ(refusal->new_owner, ShardId{2}) << e.what();
      }
    }
  };
  expect_refused(documented, orders_of_customer, true, "retired, a customer with rows");
  expect_refused(documented, orders_of_newcomer, true, "retired, a customer without rows here");
  // The setting alone refuses whenever the statement meets a row of it.
  expect_refused(setting_alone, orders_of_customer, true, "retired, the setting alone");

  BucketMover finisher{cluster_->Config(), Quick()};
  EXPECT_EQ(finisher.Resume(moved.move_id).state, MoveState::kDone);
  expect_refused(documented, orders_of_customer, false, "moved away and forgotten");
  expect_refused(documented, orders_of_newcomer, false, "moved away and forgotten, no rows");
  // Through the current directory, the new owner answers.
  {
    pqxx::connection c{cluster_->ShardDsn(2).Reveal()};
    pqxx::work tx{c};
    shardkit::BucketSet mine = shardkit::BucketSet::Of(Directory(), shardkit::ShardId{2});
    tx.exec("SELECT set_config('shardkit.buckets', '" + mine.Setting() + "', true), shardkit_check_buckets(false)");
    EXPECT_EQ(tx.exec1(orders_of_customer)[0].as<std::int64_t>(), has);
    EXPECT_EQ(tx.exec1(orders_of_newcomer)[0].as<std::int64_t>(), 1);
  }
  cluster_->ExecOnShard(2, "DELETE FROM orders WHERE order_id = 9200000001");
  ExpectSettled("after the raw reads");
}

// A mover killed once the target owns the bucket (before the flip) leaves a
// live move; a rebalance applied next resumes it instead of failing on it.
TEST_F(MoveCutover, ARebalanceAfterAKilledMoverResumesItsLiveMoves) {
  const BucketId bucket{61};
  ASSERT_EQ(Directory().ShardOf(bucket), ShardId{1});
  MoveOptions dying;
  dying.cleanup_grace = milliseconds(0);
  dying.after_step = [](std::int64_t, MoveState reached) {
    if (reached == MoveState::kOwned) throw SimulatedDeath{reached};
  };
  std::int64_t move_id = 0;
  ::unsetenv("USER");  // services often run without it
  {
    BucketMover mover{cluster_->Config(), dying};
    const MoveRecord planned = mover.Plan(bucket, ShardId{2});
    move_id = planned.move_id;
    const passwd* me = ::getpwuid(::geteuid());
    ASSERT_NE(me, nullptr);
    EXPECT_EQ(planned.requested_by.substr(0, planned.requested_by.find('@')), me->pw_name) << planned.requested_by;
    EXPECT_THROW((void)mover.Resume(move_id), SimulatedDeath);
  }
  RebalancePlan plan;
  plan.before = Directory();
  plan.after = plan.before.WithBucketMoved(bucket, ShardId{2});
  plan.moves.push_back({bucket, ShardId{1}, ShardId{2}});
  RebalanceOptions options;
  options.move.cleanup_grace = milliseconds(0);
  const RebalanceReport report = ApplyRebalance(cluster_->Config(), plan, options);
  EXPECT_TRUE(report.Ok()) << (report.failures.empty() ? "" : report.failures.front());
  EXPECT_EQ(report.resumed, std::vector<std::int64_t>{move_id});
  ASSERT_EQ(report.moves.size(), 1U);
  EXPECT_EQ(report.moves[0].move_id, move_id);
  EXPECT_EQ(report.moves[0].state, MoveState::kDone);
  EXPECT_EQ(Directory().ShardOf(bucket), ShardId{2});
  ExpectSettled("after the rebalance resumed the move");
}

}  // namespace
}  // namespace shardkit
