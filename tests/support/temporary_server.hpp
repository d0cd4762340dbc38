// A throwaway PostgreSQL 15 server of the test's own (initdb + pg_ctl on a
// free loopback port), for tests that stop and restart a shard without
// disturbing the shared local cluster; and a streaming replica of one
// (pg_basebackup), for tests that pause its replay or stop it.
//
//   shardkit::test::TemporaryServer primary;
//   auto replica = primary.MakeReplica("shard0-replica1");   // a hot standby, streaming
//   replica->Exec("SELECT pg_wal_replay_pause()");
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "shardkit/core/dsn.hpp"

namespace shardkit::test {

class TemporaryServer {
 public:
  TemporaryServer();   // initdb and start; throws std::runtime_error on failure
  ~TemporaryServer();  // stop and delete the data directory
  TemporaryServer(const TemporaryServer&) = delete;
  TemporaryServer& operator=(const TemporaryServer&) = delete;

  // A hot standby of this server (pg_basebackup -R), started and streaming,
  // whose application_name (and physical slot, with - as _) is `name`.
  [[nodiscard]] std::unique_ptr<TemporaryServer> MakeReplica(const std::string& name) const;

  void Stop();   // pg_ctl stop -m fast
  void Kill();   // SIGKILL, as a crash: Start() recovers it
  void Start();  // pg_ctl start (if it is not running), waits until it accepts connections
  [[nodiscard]] int Port() const noexcept { return port_; }
  // Its data directory (owned by the postgres user when the test runs as root).
  [[nodiscard]] std::filesystem::path DataDirectory() const { return directory_ / "data"; }
  [[nodiscard]] shardkit::Dsn Dsn() const;  // database postgres, user postgres (trust on 127.0.0.1)
  // Role `bookstore` (LOGIN CREATEDB, not a superuser: row-level security
  // applies to it as to an application), database postgres.
  [[nodiscard]] shardkit::Dsn AppDsn() const;
  // One statement (or several, as psql's -c runs them) as the superuser,
  // in `database`.
  void Exec(const std::string& sql, const std::string& database = "postgres") const;

 private:
  struct ReplicaOf {
    const TemporaryServer* primary;
    std::string name;
  };
  explicit TemporaryServer(const ReplicaOf& of);
  void Run(const std::string& command) const;
  void ClearDeadLock() const;  // the lock file of a postmaster that died
  std::filesystem::path directory_;
  int port_ = 0;
};

}  // namespace shardkit::test
