#include "writes/bounded_call.hpp"

#include <poll.h>

#include <pqxx/except>

#include "pg/server_message.hpp"

namespace shardkit::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A COMMIT gets at least this long, whatever is left of the deadline.
constexpr auto kCommitGrace = std::chrono::seconds(1);

}  // namespace

BoundedAnswer RunBounded(ConnectionPool::Lease& lease, const PipelineRequest& request, Clock::time_point deadline,
                         bool& commit_queued) {
  BoundedAnswer answer;
  bool reusable = true;
  try {
    PipelinedStatement call{lease.Connection(), request, /*nonblocking=*/true};
    try {
      call.Send();
    } catch (...) {
      commit_queued = call.CommitQueued();
      reusable = false;
      throw;
    }
    commit_queued = call.CommitQueued();
    auto limit = std::max(deadline, Clock::now() + kCommitGrace);
    while (!call.Advance()) {
      const auto now = Clock::now();
      if (now >= limit) {
        if (answer.cancelled) throw pqxx::broken_connection("no answer after the cancel request");
        if (const auto canceller = lease.Canceller(); canceller) (void)canceller->Send();
        answer.cancelled = true;
        limit = now + kCommitGrace;
      }
      pollfd fd{call.Socket(), static_cast<short>(POLLIN | (call.WantsWrite() ? POLLOUT : 0)), 0};
      const auto slice = std::min<long long>(50, std::chrono::ceil<std::chrono::milliseconds>(limit - now).count());
      (void)::poll(&fd, 1, static_cast<int>(std::max<long long>(slice, 1)));
    }
    answer.rows = call.Finish(reusable);
    answer.setup = call.SetupRows();
    if (!reusable) lease.Discard();
  } catch (const pqxx::sql_error&) {
    // The server answered with an error, cancelled or not: that step and
    // the rest did not run, the COMMIT among them.
    if (!reusable) lease.Discard();
    throw;
  } catch (const std::exception& e) {
    if (!reusable) lease.Discard();
    if (!answer.cancelled) throw;
    lease.Discard();
    answer.failure = FirstLine(e.what());
  }
  return answer;
}

}  // namespace shardkit::detail
