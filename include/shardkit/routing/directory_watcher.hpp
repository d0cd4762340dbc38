// shardkit/routing/directory_watcher.hpp — keeps a resolver's directory current
// with the catalog's.
//
// The catalog's shard_directory is the one authoritative placement; a move
// changes it with a compare-and-set of the version and a NOTIFY on the
// channel shardkit_directory. The watcher LISTENs on its own connection and
// also checks the version every check_interval (a notification can be lost
// with a connection), and publishes every newer version into the resolver.
// RefreshNow() reads the catalog at once: routed transactions call it when a
// shard refuses a bucket it no longer owns, or a write because a failover
// fenced it. Every read also applies the catalog's primaries (a failover's
// new primary, routing/primaries.hpp).
//
//   shardkit::DirectoryWatcher watcher{*resolver, *config.catalog_dsn};
//   ... resolver->Resolve(customer) now follows moves within milliseconds ...
//   watcher.RefreshNow();                      // after a refusal
//   watcher.WaitForVersion(12, deadline);      // e.g. in tests
//
// Thread-safe: RefreshNow, WaitForVersion and Stats may be called from any
// thread. The destructor stops the watching thread (promptly: it is woken).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shardkit/core/dsn.hpp"

namespace shardkit {

class BucketShardResolver;

struct DirectoryWatcherOptions {
  // How often the version is checked without a notification.
  std::chrono::milliseconds check_interval{1000};
  std::chrono::milliseconds connect_timeout{2000};
  // Called (on the watching thread or a RefreshNow caller's) after each
  // publish with the new version, and with a message after each failure.
  std::function<void(std::int64_t version)> on_publish;
  std::function<void(const std::string& message)> on_error;
};

struct DirectoryWatcherStats {
  std::uint64_t notifications = 0;    // NOTIFYs received
  std::uint64_t checks = 0;           // catalog reads (periodic, notified, RefreshNow)
  std::uint64_t refreshes = 0;        // RefreshNow calls
  std::uint64_t published = 0;        // newer versions published
  std::uint64_t primary_changes = 0;  // shards switched to another primary (a failover, routing/primaries.hpp)
  std::uint64_t errors = 0;           // failed reads, lost connections
  std::int64_t version = 0;           // the resolver's version now
  std::string last_error;
};

class DirectoryWatcher {
 public:
  // Starts the watching thread. Reads nothing synchronously: call
  // RefreshNow() first if the resolver must be current before use.
  DirectoryWatcher(BucketShardResolver& resolver, Dsn catalog_dsn, DirectoryWatcherOptions options = {});
  ~DirectoryWatcher();
  DirectoryWatcher(const DirectoryWatcher&) = delete;
  DirectoryWatcher& operator=(const DirectoryWatcher&) = delete;

  // Reads the catalog now and publishes a newer directory; returns the
  // resolver's version afterwards. Concurrent calls share one read. Throws
  // CatalogError if the catalog cannot be read, DirectoryError if its
  // directory does not fit the resolver (another shard count: restart with
  // the new configuration).
  std::int64_t RefreshNow();
  // Waits until the resolver's version is at least `version`; false at the
  // deadline.
  bool WaitForVersion(std::int64_t version, std::chrono::steady_clock::time_point deadline);

  [[nodiscard]] DirectoryWatcherStats Stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit
