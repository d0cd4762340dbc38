// Shared by worker_lease.cpp and partition_lease.cpp (lease_support.hpp).
#include "ids/lease_support.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "shardkit/core/dsn.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::detail {

std::string DefaultLeaseOwner() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}", host[0] != '\0' ? host : "unknown-host", static_cast<long>(getpid()));
}

void ValidateLeaseTimings(const LeaseTimings& t, std::string_view key_prefix) {
  if (t.safety_margin.count() <= 0 || t.duration <= t.safety_margin) {
    throw ConfigError(fmt::format("{}.lease_duration", key_prefix),
                      fmt::format("lease_duration ({} ms) must exceed safety_margin ({} ms), which must be positive",
                                  t.duration.count(), t.safety_margin.count()));
  }
  if (t.renew_interval.count() <= 0 || t.renew_interval >= t.duration - t.safety_margin) {
    throw ConfigError(fmt::format("{}.renew_interval", key_prefix),
                      fmt::format("renew_interval ({} ms) must be positive and shorter than lease_duration minus "
                                  "safety_margin ({} ms), or the lease lapses between renewals",
                                  t.renew_interval.count(), (t.duration - t.safety_margin).count()));
  }
}

std::unique_ptr<pqxx::connection> ConnectForLeases(const Dsn& dsn, std::chrono::milliseconds safety_margin) {
  auto connection =
      std::make_unique<pqxx::connection>(WithConnectTimeout(dsn, std::chrono::milliseconds{2000}).Reveal());
  // A claim or renewal that hangs is no better than one that fails: bound
  // it well inside the lease, so renewals can be retried in time.
  pqxx::nontransaction tx{*connection};
  tx.exec(fmt::format("SET statement_timeout = {}", std::max<long long>(1000, safety_margin.count() / 2)));
  return connection;
}

}  // namespace shardkit::detail
