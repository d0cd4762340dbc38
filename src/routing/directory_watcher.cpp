#include "shardkit/routing/directory_watcher.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <thread>

#include "pg/server_message.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"

// How the watcher waits (the shards' primaries, primaries.hpp, are read on
// every check too): one thread owns a catalog connection that LISTENs
// on shardkit_directory and poll()s its socket together with a self-pipe.
// The pipe wakes it for the destructor; the socket for notifications; the
// timeout for the periodic check. A lost connection is reopened with a
// growing pause (at most the check interval), and every (re)connect is
// followed by a check, so a notification missed while disconnected costs
// nothing. RefreshNow() reads on a second connection of its own, under a
// mutex; a caller that arrives while another read is under way waits for
// the next read to finish rather than queueing one of its own.

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kChannel = "shardkit_directory";

using detail::FirstLine;

class Receiver final : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& c, std::atomic<bool>& flag) : pqxx::notification_receiver(c, kChannel), flag_(flag) {}
  void operator()(const std::string&, int) override { flag_ = true; }

 private:
  std::atomic<bool>& flag_;
};

}  // namespace

struct DirectoryWatcher::Impl {
  Impl(BucketShardResolver& r, const Dsn& dsn, DirectoryWatcherOptions o)
      : resolver(r), catalog_dsn(WithConnectTimeout(dsn, o.connect_timeout)), options(std::move(o)) {
    if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw Error("DirectoryWatcher: cannot create its wake-up pipe");
    }
    stats.version = resolver.Directory()->Version();
    thread = std::thread([this] { Loop(); });
  }
  ~Impl() {
    stop = true;
    Wake();
    thread.join();
    ::close(wake_pipe[0]);
    ::close(wake_pipe[1]);
  }

  void Wake() noexcept {
    const char byte = 1;
    [[maybe_unused]] const auto n = ::write(wake_pipe[1], &byte, 1);
  }

  void Loop();
  // Reads the catalog's version through `c` and publishes a newer directory.
  std::int64_t CheckWith(pqxx::connection_base& c);
  void RecordError(const std::string& message);
  std::int64_t ResolverVersion() const { return resolver.Directory()->Version(); }

  BucketShardResolver& resolver;
  const Dsn catalog_dsn;
  const DirectoryWatcherOptions options;

  int wake_pipe[2] = {-1, -1};
  std::atomic<bool> stop{false};
  std::atomic<bool> notified{false};
  std::thread thread;

  // RefreshNow: its own connection; `started` and `completed` number the
  // reads so that a caller can tell whether a read began after it arrived.
  std::mutex refresh_mutex;
  std::unique_ptr<pqxx::connection> refresh_connection SHARDKIT_GUARDED_BY(refresh_mutex);
  std::atomic<std::uint64_t> started{0};
  std::uint64_t completed SHARDKIT_GUARDED_BY(refresh_mutex) = 0;

  mutable std::mutex stats_mutex;
  std::condition_variable published;
  DirectoryWatcherStats stats SHARDKIT_GUARDED_BY(stats_mutex);
};

std::int64_t DirectoryWatcher::Impl::CheckWith(pqxx::connection_base& c) {
  const int shard_count = resolver.ShardCount();
  // A failover's new primary first: a refusal from a fenced primary sends
  // its caller here, and so does the failover's NOTIFY.
  if (const int changed = ApplyPrimaries(resolver, LoadPrimaries(c)); changed > 0) {
    std::lock_guard lock(stats_mutex);
    stats.primary_changes += static_cast<std::uint64_t>(changed);
  }
  std::optional<BucketDirectory> next;
  {
    pqxx::read_transaction tx{c};
    const auto row = tx.exec1("SELECT coalesce(max(version), 0) FROM shard_directory");
    const auto version = row[0].as<std::int64_t>();
    {
      std::lock_guard lock(stats_mutex);
      ++stats.checks;
    }
    if (version <= ResolverVersion()) return ResolverVersion();
  }
  next = LoadDirectory(c, shard_count);
  const std::int64_t version = next->Version();
  if (version > ResolverVersion()) {
    try {
      resolver.PublishDirectory(std::move(*next));
    } catch (const DirectoryError&) {
      // Another thread published this version (or a newer one) meanwhile;
      // a different shard count is re-thrown by the check below.
      if (ResolverVersion() < version) throw;
    }
    {
      std::lock_guard lock(stats_mutex);
      ++stats.published;
      stats.version = ResolverVersion();
    }
    published.notify_all();
    if (options.on_publish) options.on_publish(version);
  }
  return ResolverVersion();
}

void DirectoryWatcher::Impl::RecordError(const std::string& message) {
  {
    std::lock_guard lock(stats_mutex);
    ++stats.errors;
    stats.last_error = message;
  }
  if (options.on_error) options.on_error(message);
}

void DirectoryWatcher::Impl::Loop() {
  std::unique_ptr<pqxx::connection> connection;
  std::unique_ptr<Receiver> receiver;
  auto pause = std::chrono::milliseconds(50);
  Clock::time_point next_check = Clock::now();
  while (!stop) {
    if (!connection) {
      try {
        connection = std::make_unique<pqxx::connection>(catalog_dsn.Reveal());
        receiver = std::make_unique<Receiver>(*connection, notified);  // LISTEN
        pause = std::chrono::milliseconds(50);
        next_check = Clock::now();  // a notification may have been missed
      } catch (const std::exception& e) {
        receiver.reset();
        connection.reset();
        RecordError(fmt::format("directory watcher: cannot reach the catalog ({}): {}", catalog_dsn,
                                RedactDsn(FirstLine(e.what()))));
        next_check = Clock::now() + pause;
        pause = std::min(pause * 2, std::max(options.check_interval, std::chrono::milliseconds(50)));
      }
    }
    if (connection && (notified.exchange(false) || Clock::now() >= next_check)) {
      try {
        CheckWith(*connection);
      } catch (const pqxx::broken_connection& e) {
        RecordError(fmt::format("directory watcher: lost the catalog connection: {}", FirstLine(e.what())));
        receiver.reset();
        connection.reset();
        continue;
      } catch (const std::exception& e) {
        RecordError(fmt::format("directory watcher: {}", FirstLine(e.what())));
      }
      next_check = Clock::now() + options.check_interval;
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now());
    pollfd fds[2] = {{wake_pipe[0], POLLIN, 0}, {connection ? connection->sock() : -1, POLLIN, 0}};
    const int timeout = static_cast<int>(std::clamp<long long>(wait.count(), 0, 60000));
    const int ready = ::poll(fds, 2, timeout);
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      char buffer[64];
      while (::read(wake_pipe[0], buffer, sizeof buffer) > 0) {
      }
    }
    if (ready > 0 && connection && (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      try {
        const int n = connection->get_notifs();
        if (n > 0) {
          std::lock_guard lock(stats_mutex);
          stats.notifications += static_cast<std::uint64_t>(n);
        }
      } catch (const std::exception& e) {
        RecordError(fmt::format("directory watcher: lost the catalog connection: {}", FirstLine(e.what())));
        receiver.reset();
        connection.reset();
      }
    }
  }
}

DirectoryWatcher::DirectoryWatcher(BucketShardResolver& resolver, Dsn catalog_dsn, DirectoryWatcherOptions options)
    : impl_(std::make_unique<Impl>(resolver, std::move(catalog_dsn), std::move(options))) {}

DirectoryWatcher::~DirectoryWatcher() = default;

std::int64_t DirectoryWatcher::RefreshNow() {
  const std::uint64_t arrived = impl_->started.load();
  std::unique_lock lock(impl_->refresh_mutex);
  {
    std::lock_guard stats_lock(impl_->stats_mutex);
    ++impl_->stats.refreshes;
  }
  // A read that started after this call arrived has finished: its answer is
  // as fresh as one of our own.
  if (impl_->completed > arrived) return impl_->ResolverVersion();
  const std::uint64_t number = ++impl_->started;
  for (int attempt = 0;; ++attempt) {
    try {
      if (!impl_->refresh_connection) {
        impl_->refresh_connection = std::make_unique<pqxx::connection>(impl_->catalog_dsn.Reveal());
      }
      const std::int64_t version = impl_->CheckWith(*impl_->refresh_connection);
      impl_->completed = number;
      return version;
    } catch (const pqxx::broken_connection& e) {
      impl_->refresh_connection.reset();
      if (attempt == 0) continue;  // a connection that went stale while idle: once more
      const std::string message =
          fmt::format("the catalog ({}) is unreachable: {}", impl_->catalog_dsn, RedactDsn(FirstLine(e.what())));
      impl_->RecordError(message);
      throw CatalogError(message + "; check [catalog] dsn and that server");
    } catch (const DirectoryError&) {
      throw;
    } catch (const pqxx::failure& e) {
      const std::string message = fmt::format("reading the directory from the catalog ({}) failed: {}",
                                              impl_->catalog_dsn, RedactDsn(FirstLine(e.what())));
      impl_->RecordError(message);
      throw CatalogError(message);
    }
  }
}

bool DirectoryWatcher::WaitForVersion(std::int64_t version, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->stats_mutex);
  while (impl_->ResolverVersion() < version) {
    if (Clock::now() >= deadline) return false;
    // Someone other than the watcher may publish: look again now and then.
    impl_->published.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
  }
  return true;
}

DirectoryWatcherStats DirectoryWatcher::Stats() const {
  std::lock_guard lock(impl_->stats_mutex);
  DirectoryWatcherStats copy = impl_->stats;
  copy.version = impl_->ResolverVersion();
  return copy;
}

}  // namespace shardkit
