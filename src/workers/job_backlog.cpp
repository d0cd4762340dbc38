// The backlog of a job queue, from every shard (job_queue.hpp: ReadBacklog).
#include "shardkit/workers/job_queue.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {

std::vector<PartitionBacklog> ReadBacklog(BucketShardResolver& resolver, const std::string& queue, int partition_count,
                                          std::chrono::seconds window) {
  std::map<int, PartitionBacklog> merged;
  for (const ShardId s : FirstShards(resolver.ShardCount())) {
    try {
      auto lease = resolver.Pool(s).Acquire();
      pqxx::read_transaction tx{*lease};
      for (const auto& row : tx.exec_params(
               "SELECT partition, count(*) FILTER (WHERE state = 'pending'), "
               "count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'dead'), "
               "count(*) FILTER (WHERE state = 'done'), "
               "coalesce(extract(epoch FROM clock_timestamp() - min(created) FILTER (WHERE state = 'pending')), 0)"
               "::float8 "
               "FROM shardkit_jobs WHERE queue = $1 AND (state <> 'done' OR done_at > clock_timestamp() - "
               "make_interval(secs => $2::double precision)) GROUP BY partition",
               queue, static_cast<double>(window.count()))) {
        auto& b = merged[row[0].as<int>()];
        b.partition = row[0].as<int>();
        b.pending += row[1].as<std::int64_t>();
        b.running += row[2].as<std::int64_t>();
        b.dead += row[3].as<std::int64_t>();
        b.done_recently += row[4].as<std::int64_t>();
        b.oldest_pending_s = std::max(b.oldest_pending_s, row[5].as<double>());
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw JobError(fmt::format("{}: reading the backlog of queue '{}' failed: {}", resolver.ShardName(s), queue,
                                 RedactDsn(e.what())),
                     s);
    }
  }
  std::vector<PartitionBacklog> out;
  for (int p = 0; p < partition_count; ++p) {
    auto it = merged.find(p);
    PartitionBacklog b;
    b.partition = p;
    out.push_back(it == merged.end() ? b : it->second);
  }
  return out;
}

}  // namespace shardkit
