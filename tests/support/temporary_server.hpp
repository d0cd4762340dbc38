// A throwaway PostgreSQL 15 server of the test's own (initdb + pg_ctl on a
// free loopback port), for tests that stop and restart a shard without
// disturbing the shared local cluster.
#pragma once

#include <filesystem>
#include <string>

#include "shardkit/core/dsn.hpp"

namespace shardkit::test {

class TemporaryServer {
 public:
  TemporaryServer();   // initdb and start; throws std::runtime_error on failure
  ~TemporaryServer();  // stop and delete the data directory
  TemporaryServer(const TemporaryServer&) = delete;
  TemporaryServer& operator=(const TemporaryServer&) = delete;

  void Stop();   // pg_ctl stop -m fast
  void Start();  // pg_ctl start, waits until it accepts connections
  [[nodiscard]] int Port() const noexcept { return port_; }
  [[nodiscard]] shardkit::Dsn Dsn() const;  // database postgres, user postgres (trust on 127.0.0.1)

 private:
  void Run(const std::string& command) const;
  std::filesystem::path directory_;
  int port_ = 0;
};

}  // namespace shardkit::test
