// A primary that reports itself read-only (default_transaction_read_only =
// on) was fenced by a failover, or set read-only by its operator. Its rows
// are the shard's answer only while the catalog, asked after the scatter
// began, still names it the shard's primary: a successor may hold writes
// acknowledged before the scatter began, which its rows would miss.
#include <fmt/format.h>

#include <algorithm>

#include "queries/scatter_internal.hpp"
#include "shardkit/routing/directory_watcher.hpp"

namespace shardkit {

namespace {
constexpr const char* kSqlStateReadOnlyTransaction = "25006";
}  // namespace

void ScatterGather::Impl::ConfirmReadOnlyPrimaries(const std::vector<ReadOnlyPrimary>& read_only,
                                                   ScatterResult& result) {
  if (read_only.empty()) return;
  std::string unconfirmed;  // why the catalog could not confirm any of them
  if (watcher == nullptr) {
    unconfirmed =
        "this scatter has no directory watcher to ask the catalog which server is the shard's primary now; "
        "scatter through a Cluster (it follows the catalog) or call ScatterGather::FollowDirectory";
  } else {
    try {
      (void)watcher->RefreshNow();
    } catch (const Error& e) {
      unconfirmed = fmt::format("the catalog could not say which server is the shard's primary now ({})", e.what());
    }
  }
  for (const ReadOnlyPrimary& fenced : read_only) {
    const ShardServers& now = resolver.Servers(fenced.shard);
    if (unconfirmed.empty() && now.primary.pool == fenced.pool) continue;  // still the primary: its rows stand
    const auto answered = std::find_if(result.shards.begin(), result.shards.end(),
                                       [&](const ShardResult& r) { return r.shard == fenced.shard; });
    const std::string server = answered != result.shards.end() ? answered->server : std::string("?");
    if (answered != result.shards.end()) result.shards.erase(answered);
    ScatterError::Failure failure{fenced.shard, "", kSqlStateReadOnlyTransaction, unconfirmed.empty()};
    failure.cause =
        unconfirmed.empty()
            ? fmt::format("its primary {} is read-only: a failover fenced it and the catalog names {} now; run again",
                          server, now.primary.name)
            : fmt::format("its primary {} is read-only (a failover fenced it?) and {}", server, unconfirmed);
    result.failures.push_back(std::move(failure));
  }
}

}  // namespace shardkit
