// shardkit/routing/primary_leases.hpp — a shard's primary commits
// shardkit's writes only while it holds a lease from the catalog.
//
// A forced failover promotes a replica while the old primary cannot be
// reached, so it cannot be fenced; if it comes back, a router that does not
// follow the catalog (or one that has not noticed yet) would write there,
// and the shard would have two histories. With leases on (shardctl leases
// --ttl-ms N: the catalog's shardkit_lease_settings, sql/043), every
// primary refuses the COMMIT of a shardkit transaction once its lease has
// run out (sql/042: SQLSTATE 25006, as a fenced primary); routers that
// read the catalog keep extending the leases of the primaries it names;
// and a forced failover waits until every lease the old primary was
// granted has run out before it promotes (topology/failover.hpp). So a
// deposed primary never commits a shardkit write after the promotion,
// reachable or not, whichever router sends it.
//
// What it costs: a catalog read and one statement per shard every quarter
// of the time to live (10 s: every 2.5 s) per router; a forced failover of
// an unreachable primary takes the time to live plus a second longer; and
// a catalog unreachable for longer than the time to live stops every
// shard's writes (reads go on). It assumes the clocks of the catalog and
// the shards' primaries differ by less than a second (NTP).
//
//   auto cluster = shardkit::Cluster::Open(config);   // keeps the leases itself
//   shardkit::PrimaryLeases leases{*resolver, *config.catalog_dsn};   // a router built by hand
//   shardkit::SetLeaseTtl(config, std::chrono::seconds(10));          // leases on (shardctl leases)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/dsn.hpp"

namespace shardkit {

class BucketShardResolver;
struct ClusterConfig;

struct PrimaryLeasesOptions {
  std::chrono::milliseconds connect_timeout{2000};
  // While leases are off: how often to look whether they were turned on.
  std::chrono::milliseconds off_check_interval{5000};
  // Called on the renewing thread with each failure's message.
  std::function<void(const std::string& message)> on_error;
};

struct PrimaryLeasesStats {
  bool on = false;                   // as of the last catalog read
  std::chrono::milliseconds ttl{0};  // the leases' time to live then
  std::uint64_t renewals = 0;        // catalog reads that granted leases
  std::uint64_t extended = 0;        // primaries' leases extended
  std::uint64_t skipped = 0;         // a shard under failover, or whose primary this router does not know yet
  std::uint64_t errors = 0;          // catalog or primary unreachable, a shard not migrated
  std::string last_error;
};

// Extends the leases of the primaries the catalog names, every quarter of
// the time to live, on a thread of its own (the first at once: a write
// refused meanwhile is retried). A shard is renewed only through the
// resolver's pool of the server the catalog names its primary, and never
// while a failover of the shard is under way. Thread-safe.
class PrimaryLeases {
 public:
  PrimaryLeases(BucketShardResolver& resolver, const Dsn& catalog_dsn, PrimaryLeasesOptions options = {});
  ~PrimaryLeases();  // stops the thread
  PrimaryLeases(const PrimaryLeases&) = delete;
  PrimaryLeases& operator=(const PrimaryLeases&) = delete;

  // One renewal now, on the calling thread; returns how many primaries'
  // leases it extended (0 with leases off). Throws CatalogError if the
  // catalog cannot be read.
  int RenewNow();
  [[nodiscard]] PrimaryLeasesStats Stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The catalog's lease settings: unset when leases are off. Throws CatalogError.
[[nodiscard]] std::optional<std::chrono::milliseconds> LeaseTtl(const ClusterConfig& config);

// Turns leases on with this time to live (100 ms to 10 min), or changes it:
// first every shard's current primary gets the check at COMMIT (sql/042),
// then the catalog says on. nullopt turns them off: the catalog first, then
// every primary drops the check and its lease (otherwise it would refuse
// writes once the lease ran out). With leases off no write pays for them.
// Throws CatalogError, ConfigError (no catalog, a time to live out of
// range), and ShardError for a primary that could not be changed (turning
// on: the catalog was not; turning off: run it again).
void SetLeaseTtl(const ClusterConfig& config, std::optional<std::chrono::milliseconds> ttl);

// One shard's primary and its lease, as shardctl leases shows them.
struct PrimaryLeaseState {
  std::string shard;
  std::string server;  // the shard's primary now (the catalog's)
  bool reachable = false;
  std::string error;                       // unreachable, or not migrated (sql/042)
  bool enforced = false;                   // every sharded table checks the lease at COMMIT
  bool in_force = false;                   // a lease was granted there
  std::chrono::milliseconds remaining{0};  // until it runs out, by the server's clock (negative: ran out)
};
[[nodiscard]] std::vector<PrimaryLeaseState> ListPrimaryLeases(const ClusterConfig& config);

}  // namespace shardkit
