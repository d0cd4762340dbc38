// What the service's tests need around it, through public interfaces only:
// scratch databases on the local cluster's servers (schema from the installed
// package's sql/, a deterministic Bookstore data set, a configuration file
// pointing at them), the service run as a process, and a free port.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pqxx/pqxx>
#include <shardkit/config.hpp>

namespace bookstore::test {

using namespace std::chrono_literals;

// The cluster of $SHARDKIT_CONFIG (lab/cluster start writes it).
[[nodiscard]] shardkit::ClusterConfig LoadClusterConfig();

// `dsn` with its database replaced (any libpq form in, key=value out).
[[nodiscard]] shardkit::Dsn WithDatabase(const shardkit::Dsn& dsn, const std::string& database);

// A port on 127.0.0.1 nobody listens on (bound, read and closed again).
[[nodiscard]] unsigned short ClosedPort();

// The seeded data set: customers 1..300, books 1..60 in six categories,
// 1200 orders spread over the last 60 days (12:00 past a day boundary before
// `anchor`), one to three items each.
inline constexpr int kCustomers = 300;
inline constexpr int kBooks = 60;

// A database of its own on every shard, on the reference server and for the
// catalog, migrated by shardkit's migrator from the installed sql/, the
// directory (even split) in the catalog, and the data set (each shard holds
// the rows of its buckets, the reference all of them); dropped by the
// destructor.
class ScratchBookstore {
 public:
  explicit ScratchBookstore(const std::string& prefix);
  ~ScratchBookstore();
  ScratchBookstore(const ScratchBookstore&) = delete;
  ScratchBookstore& operator=(const ScratchBookstore&) = delete;

  [[nodiscard]] const shardkit::ClusterConfig& Config() const noexcept { return config_; }
  [[nodiscard]] int ShardCount() const noexcept { return static_cast<int>(config_.shards.size()); }
  [[nodiscard]] const shardkit::Dsn& ShardDsn(int shard) const;
  [[nodiscard]] const shardkit::Dsn& ReferenceDsn() const { return *config_.reference_dsn; }
  [[nodiscard]] const shardkit::Dsn& CatalogDsn() const { return *config_.catalog_dsn; }
  // Writes a shardkit.toml for these databases; `replace_dsn` swaps one
  // shard's connection string (to make it unreachable).
  [[nodiscard]] std::filesystem::path WriteConfig(const std::string& file_name,
                                                  std::optional<std::pair<int, std::string>> replace_dsn = {}) const;
  // A customer of the data set whose bucket lives on `shard`.
  [[nodiscard]] int CustomerOn(int shard, int nth = 0) const;
  // Copies one order (and its items) from the shard that stored it to the
  // reference server, which must hold every row.
  void MirrorToReference(int customer_id, std::int64_t order_id) const;

 private:
  std::string database_;
  shardkit::ClusterConfig base_;
  shardkit::ClusterConfig config_;
  std::filesystem::path dir_;
};

// The service (or the load generator) as a child process; stdout and
// stderr are collected together.
class Process {
 public:
  explicit Process(std::vector<std::string> argv);
  ~Process();  // kills the process if it still runs
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Waits until the output contains `text`; false at the deadline or exit.
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds timeout);
  [[nodiscard]] std::string Output() const;
  void Signal(int signal_number) const;
  // The exit status (128 + signal if killed); nullopt at the deadline.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::thread reader_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string output_;
  bool eof_ = false;
};

// bookstore-service on a free port: started, and its port read from the
// "listening on" line.
class Service {
 public:
  explicit Service(const std::filesystem::path& config, std::vector<std::string> extra_args = {});
  [[nodiscard]] unsigned short Port() const noexcept { return port_; }
  [[nodiscard]] Process& Proc() noexcept { return process_; }

 private:
  Process process_;
  unsigned short port_ = 0;
};

}  // namespace bookstore::test
