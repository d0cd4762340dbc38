// The recovery pass of cross-shard transactions (in_doubt.hpp).
#include "shardkit/writes/in_doubt.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "pg/pg_array.hpp"
#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/routing/resolver.hpp"
#include "writes/cross_shard_log.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using detail::FirstLine;
using std::chrono::milliseconds;

// Every shard's prepared parts; `asked` the shards that answered.
std::vector<InDoubtPart> ListParts(BucketShardResolver& resolver, milliseconds timeout,
                                   std::vector<std::string>& failures, std::set<ShardId>& asked) {
  std::vector<InDoubtPart> parts;
  for (const ShardId shard : FirstShards(resolver.ShardCount())) {
    const ShardServers& servers = resolver.Servers(shard);
    try {
      auto lease = servers.primary.pool->Acquire(Clock::now() + timeout);
      pqxx::nontransaction tx{*lease};
      const pqxx::result r = tx.exec_params(
          "SELECT gid, (extract(epoch FROM now() - prepared) * 1000)::bigint FROM pg_prepared_xacts "
          "WHERE database = current_database() AND starts_with(gid, $1) AND gid LIKE '%:' || $2 ORDER BY prepared",
          std::string(detail::kPreparedGidPrefix), resolver.ShardName(shard));
      for (const auto& row : r) {
        const std::string gid = row[0].as<std::string>();
        const auto transaction = detail::TransactionOfGid(gid);
        if (!transaction) continue;
        parts.push_back(InDoubtPart{shard, gid, *transaction, milliseconds(row[1].as<std::int64_t>()), ""});
      }
      asked.insert(shard);
    } catch (const std::exception& e) {
      failures.push_back(fmt::format("shard {} ({}): cannot list its prepared transactions: {}", shard,
                                     servers.primary.name, FirstLine(e.what())));
    }
  }
  return parts;
}

// COMMIT PREPARED / ROLLBACK PREPARED on the part's shard; true if this call
// ended it (false: someone else did first).
bool Finish(BucketShardResolver& resolver, const InDoubtPart& part, bool commit, milliseconds timeout) {
  auto lease = resolver.Servers(part.shard).primary.pool->Acquire(Clock::now() + timeout);
  pqxx::nontransaction tx{*lease};
  try {
    tx.exec(fmt::format("{} {}", commit ? "COMMIT PREPARED" : "ROLLBACK PREPARED", tx.quote(part.gid)));
    return true;
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "42704") return false;  // already finished (by its coordinator or another pass)
    throw;
  }
}

}  // namespace

std::vector<InDoubtPart> ListInDoubt(BucketShardResolver& resolver, const std::optional<Dsn>& catalog,
                                     std::vector<std::string>& failures, milliseconds timeout) {
  std::set<ShardId> asked;
  std::vector<InDoubtPart> parts = ListParts(resolver, timeout, failures, asked);
  if (parts.empty() || !catalog) return parts;
  try {
    pqxx::connection c{WithConnectTimeout(*catalog, timeout).Reveal()};
    for (InDoubtPart& part : parts) part.decision = detail::StateOf(c, part.transaction_id).value_or("none");
  } catch (const std::exception& e) {
    failures.push_back(
        fmt::format("the catalog ({}): cannot read the decisions: {}", *catalog, RedactDsn(FirstLine(e.what()))));
  }
  return parts;
}

namespace {

// One pass on the catalog connection `c` (opened when null or closed; reset
// when the catalog fails, so the next pass opens a new one).
InDoubtReport Pass(BucketShardResolver& resolver, std::unique_ptr<pqxx::connection>& c, const Dsn& catalog,
                   const InDoubtOptions& options) {
  InDoubtReport report;
  std::string pass_began;  // by the catalog's clock, before the shards are listed
  try {
    if (!c || !c->is_open()) {
      c = std::make_unique<pqxx::connection>(WithConnectTimeout(catalog, options.timeout).Reveal());
      pqxx::nontransaction(*c).exec(fmt::format("SET statement_timeout = {}", options.timeout.count()));
    }
    pqxx::nontransaction tx{*c};
    pass_began = tx.exec("SELECT clock_timestamp()::text")[0][0].as<std::string>();
  } catch (const std::exception& e) {
    c.reset();
    report.failures.push_back(
        fmt::format("the catalog ({}): unreachable, nothing settled: {}", catalog, RedactDsn(FirstLine(e.what()))));
    return report;
  }
  std::set<ShardId> asked;
  std::vector<InDoubtPart> parts = ListParts(resolver, options.timeout, report.failures, asked);
  std::set<std::string> seen;
  for (InDoubtPart& part : parts) {
    seen.insert(part.transaction_id);
    try {
      std::optional<std::string> state = detail::StateOf(*c, part.transaction_id);
      const bool old = part.age >= options.settle_after;
      if ((!state || state == "preparing") && !old) {
        part.decision = state.value_or("none");
        report.waiting.push_back(part);
        continue;
      }
      if (state == "preparing") {
        // Abort first: once the row says so, its coordinator cannot commit.
        state = detail::DecideAbort(*c, part.transaction_id);
        ++report.rows_aborted;
      }
      part.decision = state.value_or("none");
      const bool commit = state == "commit";
      if (Finish(resolver, part, commit, options.timeout)) {
        (commit ? report.committed : report.rolled_back).push_back(part);
      }
    } catch (const std::exception& e) {
      report.failures.push_back(
          fmt::format("shard {}: cannot settle {}: {}", part.shard, part.gid, FirstLine(e.what())));
    }
  }
  // Rows past the bound: a coordinator gone before any part was prepared
  // (still 'preparing': decided 'abort'), and decided rows of which no part
  // is left (deleted). A row decided before the shards were listed had all
  // its parts prepared by then: none listed means none is left. Set-based:
  // finished transactions leave their rows to this pass.
  std::vector<std::optional<std::string>> listed(seen.begin(), seen.end());
  const std::string listed_ids = detail::PgTextArray(listed);
  const auto bound = static_cast<std::int64_t>(options.settle_after.count());
  try {
    pqxx::nontransaction tx{*c};
    report.rows_aborted += static_cast<int>(
        tx.exec_params("UPDATE shardkit_transactions SET state = 'abort', decided_at = clock_timestamp() "
                       "WHERE state = 'preparing' AND created_at < clock_timestamp() - $1 * interval '1 millisecond' "
                       "AND transaction_id <> ALL ($2::text[])",
                       bound, listed_ids)
            .affected_rows());
    if (static_cast<int>(asked.size()) == resolver.ShardCount()) {
      report.rows_forgotten += static_cast<int>(
          tx.exec_params("DELETE FROM shardkit_transactions WHERE state <> 'preparing' AND decided_at < "
                         "$2::timestamptz AND created_at < clock_timestamp() - $1 * interval '1 millisecond' "
                         "AND transaction_id <> ALL ($3::text[])",
                         bound, pass_began, listed_ids)
              .affected_rows());
    }
  } catch (const std::exception& e) {
    c.reset();
    report.failures.push_back(fmt::format("the catalog ({}): cannot clean up the coordinator log: {}", catalog,
                                          RedactDsn(FirstLine(e.what()))));
  }
  return report;
}

}  // namespace

InDoubtReport RecoverInDoubt(BucketShardResolver& resolver, const Dsn& catalog, const InDoubtOptions& options) {
  std::unique_ptr<pqxx::connection> c;
  return Pass(resolver, c, catalog, options);
}

struct InDoubtRecovery::Impl {
  Impl(BucketShardResolver& r, Dsn c, milliseconds i, InDoubtOptions o)
      : resolver(r), catalog(std::move(c)), interval(i), options(o) {}

  InDoubtReport Pass() {
    const std::lock_guard pass(pass_mutex);
    InDoubtReport report = shardkit::Pass(resolver, connection, catalog, options);
    const std::lock_guard lock(mutex);
    ++stats.passes;
    stats.committed += report.committed.size();
    stats.rolled_back += report.rolled_back.size();
    if (!report.failures.empty()) {
      ++stats.failed_passes;
      stats.last_failure = report.failures.front();
    }
    return report;
  }

  void Loop() {
    std::unique_lock lock(mutex);
    while (!stop) {
      if (wake.wait_for(lock, interval, [&] { return stop; })) break;
      lock.unlock();
      try {
        (void)Pass();
      } catch (const std::exception& e) {
        const std::lock_guard again(mutex);
        ++stats.failed_passes;
        stats.last_failure = FirstLine(e.what());
      }
      lock.lock();
    }
  }

  BucketShardResolver& resolver;
  const Dsn catalog;
  const milliseconds interval;
  const InDoubtOptions options;
  std::mutex pass_mutex;                                                         // one pass at a time in this process
  std::unique_ptr<pqxx::connection> connection SHARDKIT_GUARDED_BY(pass_mutex);  // the catalog's, kept
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stop SHARDKIT_GUARDED_BY(mutex) = false;
  InDoubtRecoveryStats stats SHARDKIT_GUARDED_BY(mutex);
  std::thread thread;
};

InDoubtRecovery::InDoubtRecovery(BucketShardResolver& resolver, Dsn catalog, milliseconds interval,
                                 InDoubtOptions options)
    : impl_(std::make_unique<Impl>(resolver, std::move(catalog), interval, options)) {
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

InDoubtRecovery::~InDoubtRecovery() {
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

InDoubtReport InDoubtRecovery::RunNow() {
  return impl_->Pass();
}

InDoubtRecoveryStats InDoubtRecovery::Stats() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace shardkit
