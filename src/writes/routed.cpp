#include "shardkit/writes/routed.hpp"

#include "writes/routed_call.hpp"

// The attempts and their retries: writes/routed_call.hpp.

namespace shardkit {

RoutedTransactions::RoutedTransactions(BucketShardResolver& resolver, DirectoryWatcher* watcher)
    : resolver_(resolver), watcher_(watcher) {}

RoutedStats RoutedTransactions::Stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

namespace {

std::vector<const char*> TextValues(const SqlParams& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  return values;
}

}  // namespace

pg::Rows RoutedTransactions::Read(const ShardKey& key, const std::string& sql, const SqlParams& params,
                                  const RoutedOptions& options, RoutedOutcome* outcome) {
  detail::RoutedWork work;
  work.kind = detail::RoutedWork::Kind::kRead;
  work.sql = &sql;
  work.values = TextValues(params);
  RoutedOptions read_only = options;
  read_only.read_only = true;
  RunWork(key, work, read_only, outcome);
  return std::move(work.rows);
}

pg::Rows RoutedTransactions::Write(const ShardKey& key, const std::string& sql, const SqlParams& params,
                                   const RoutedOptions& options, RoutedOutcome* outcome) {
  detail::RoutedWork work;
  work.kind = detail::RoutedWork::Kind::kWrite;
  work.sql = &sql;
  work.values = TextValues(params);
  RoutedOptions writing = options;
  writing.read_only = false;
  RunWork(key, work, writing, outcome);
  return std::move(work.rows);
}

void RoutedTransactions::RunErased(const ShardKey& key,
                                   const std::function<void(pqxx::transaction_base&, const RoutedContext&)>& fn,
                                   const RoutedOptions& options, RoutedOutcome* outcome) {
  detail::RoutedWork work;
  work.fn = &fn;
  RunWork(key, work, options, outcome);
}

void RoutedTransactions::RunWork(const ShardKey& key, detail::RoutedWork& work, const RoutedOptions& options,
                                 RoutedOutcome* outcome_out) {
  detail::RoutedCall call{{resolver_, watcher_, replicas_}, key, options, work};
  bool committed = false;
  try {
    call.Run();
    committed = true;
  } catch (...) {
    Count(call.Outcome(), false, call.Unknown());
    if (outcome_out != nullptr) *outcome_out = call.Outcome();
    throw;
  }
  Count(call.Outcome(), committed, false);
  if (outcome_out != nullptr) *outcome_out = call.Outcome();
}

void RoutedTransactions::Count(const RoutedOutcome& outcome, bool committed, bool unknown) {
  std::lock_guard lock(stats_mutex_);
  ++stats_.calls;
  stats_.attempts += static_cast<std::uint64_t>(outcome.attempts);
  stats_.refused_not_owned += static_cast<std::uint64_t>(outcome.refused_not_owned);
  stats_.refused_frozen += static_cast<std::uint64_t>(outcome.refused_frozen);
  stats_.refused_not_readable += static_cast<std::uint64_t>(outcome.refused_not_readable);
  stats_.retried_other += static_cast<std::uint64_t>(outcome.retried_other);
  stats_.replica_fallbacks += static_cast<std::uint64_t>(outcome.replica_fallbacks);
  if (committed && outcome.on_replica) ++stats_.replica_reads;
  if (committed) ++stats_.committed;
  if (unknown) ++stats_.outcome_unknown;
  if (!committed) ++stats_.failed;
}

}  // namespace shardkit
