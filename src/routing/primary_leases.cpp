#include "shardkit/routing/primary_leases.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "pg/server_message.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primaries.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using detail::FirstLine;

constexpr const char* kUndefinedFunction = "42883";
constexpr const char* kUndefinedTable = "42P01";

// One renewal's answer from the catalog (sql/043's shardkit_lease_grant).
struct Grant {
  milliseconds ttl{0};
  std::int64_t until_us = 0;
  std::map<std::string, std::string> primaries;  // shard -> server, for shards a failover changed
  std::set<std::string> failing_over;
};

// A text[] field's elements.
std::vector<std::string> Strings(const pqxx::field& field) {
  std::vector<std::string> out;
  auto parser = field.as_array();
  for (auto item = parser.get_next(); item.first != pqxx::array_parser::done; item = parser.get_next()) {
    if (item.first == pqxx::array_parser::string_value) out.push_back(item.second);
  }
  return out;
}

// nullopt: leases are off.
std::optional<Grant> ReadGrant(pqxx::connection_base& catalog) {
  pqxx::nontransaction tx{catalog};
  const pqxx::result rows =
      tx.exec("SELECT ttl_ms, grant_until_us, shards, servers, failing_over FROM shardkit_lease_grant()");
  if (rows.empty()) return std::nullopt;
  Grant grant;
  grant.ttl = milliseconds(rows[0][0].as<int>());
  grant.until_us = rows[0][1].as<std::int64_t>();
  const std::vector<std::string> shards = Strings(rows[0][2]);
  const std::vector<std::string> servers = Strings(rows[0][3]);
  for (std::size_t i = 0; i < shards.size() && i < servers.size(); ++i) grant.primaries[shards[i]] = servers[i];
  for (std::string& shard : Strings(rows[0][4])) grant.failing_over.insert(std::move(shard));
  return grant;
}

}  // namespace

struct PrimaryLeases::Impl {
  Impl(BucketShardResolver& r, const Dsn& dsn, PrimaryLeasesOptions o)
      : resolver(r), catalog_dsn(WithConnectTimeout(dsn, o.connect_timeout)), options(std::move(o)) {}

  int Renew() {
    const std::lock_guard renewing(renew_mutex);
    std::optional<Grant> grant;
    try {
      if (!catalog) catalog = std::make_unique<pqxx::connection>(catalog_dsn.Reveal());
      grant = ReadGrant(*catalog);
    } catch (const pqxx::sql_error& e) {
      // A catalog migrated before sql/043: leases are off there.
      if (e.sqlstate() == kUndefinedFunction || e.sqlstate() == kUndefinedTable) {
        Record(std::nullopt, 0, 0);
        return 0;
      }
      catalog.reset();
      throw CatalogError(Failed(fmt::format("primary leases: reading the catalog ({}) failed: {}", catalog_dsn,
                                            RedactDsn(FirstLine(e.what())))));
    } catch (const std::exception& e) {
      catalog.reset();
      throw CatalogError(Failed(fmt::format("primary leases: the catalog ({}) is unreachable: {}", catalog_dsn,
                                            RedactDsn(FirstLine(e.what())))));
    }
    if (!grant) {
      if (WasOn()) ReleaseAll();
      Record(std::nullopt, 0, 0);
      return 0;
    }
    int extended = 0;
    int skipped = 0;
    for (int s = 0; s < resolver.ShardCount(); ++s) {
      const ShardId shard{s};
      const std::string& name = resolver.ShardName(shard);
      const auto named = grant->primaries.find(name);
      const std::string& server = named == grant->primaries.end() ? name : named->second;
      const ShardServer& primary = resolver.Servers(shard).primary;
      // A failover under way stops the old primary's renewals (it waits
      // them out); a router that has not switched to the catalog's
      // primary yet renews nothing there.
      if (grant->failing_over.count(name) != 0 || primary.name != server) {
        ++skipped;
        continue;
      }
      try {
        auto lease = primary.pool->Acquire(Clock::now() + options.connect_timeout);
        pqxx::nontransaction tx{*lease};
        tx.exec_params("SELECT shardkit_lease_extend($1)", grant->until_us);
        ++extended;
      } catch (const std::exception& e) {
        Failed(fmt::format("primary leases: extending the lease of shard {}'s primary {} failed: {}", name, server,
                           RedactDsn(FirstLine(e.what()))));
      }
    }
    Record(grant->ttl, extended, skipped);
    return extended;
  }

  bool WasOn() const {
    const std::lock_guard lock(mutex);
    return stats.on;
  }

  // Leases were just turned off. shardctl leases --off released them, but a
  // renewal of ours that read the catalog before may have extended one
  // since: left alone it would refuse writes once it ran out.
  void ReleaseAll() {
    for (int s = 0; s < resolver.ShardCount(); ++s) {
      const ShardServer& primary = resolver.Servers(ShardId{s}).primary;
      try {
        auto lease = primary.pool->Acquire(Clock::now() + options.connect_timeout);
        pqxx::nontransaction tx{*lease};
        tx.exec("SELECT shardkit_lease_release() WHERE NOT pg_is_in_recovery()");
      } catch (const std::exception& e) {
        Failed(fmt::format("primary leases: releasing the lease of shard {}'s primary {} failed: {}",
                           resolver.ShardName(ShardId{s}), primary.name, RedactDsn(FirstLine(e.what()))));
      }
    }
  }

  void Record(std::optional<milliseconds> ttl, int extended, int skipped) {
    const std::lock_guard lock(mutex);
    stats.on = ttl.has_value();
    stats.ttl = ttl.value_or(milliseconds(0));
    if (ttl) ++stats.renewals;
    stats.extended += static_cast<std::uint64_t>(extended);
    stats.skipped += static_cast<std::uint64_t>(skipped);
  }

  std::string Failed(std::string message) {
    {
      const std::lock_guard lock(mutex);
      ++stats.errors;
      stats.last_error = message;
    }
    if (options.on_error) options.on_error(message);
    return message;
  }

  // A quarter of the time to live: a lease survives three failed renewals.
  milliseconds Interval() {
    const std::lock_guard lock(mutex);
    return stats.on ? std::max(stats.ttl / 4, milliseconds(25)) : options.off_check_interval;
  }

  // Renews at once (the first write finds its lease), then every interval.
  void Loop() {
    for (;;) {
      try {
        (void)Renew();
      } catch (const Error&) {
        // Recorded; the next round tries again.
      }
      const milliseconds interval = Interval();
      std::unique_lock lock(mutex);
      if (wake.wait_for(lock, interval, [&] { return stop; })) return;
    }
  }

  BucketShardResolver& resolver;
  const Dsn catalog_dsn;
  const PrimaryLeasesOptions options;
  std::mutex renew_mutex;  // one renewal at a time, on its one catalog connection
  std::unique_ptr<pqxx::connection> catalog;

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  PrimaryLeasesStats stats;
  std::thread thread;
};

PrimaryLeases::PrimaryLeases(BucketShardResolver& resolver, const Dsn& catalog_dsn, PrimaryLeasesOptions options)
    : impl_(std::make_unique<Impl>(resolver, catalog_dsn, std::move(options))) {
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

PrimaryLeases::~PrimaryLeases() {
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

int PrimaryLeases::RenewNow() {
  return impl_->Renew();
}

PrimaryLeasesStats PrimaryLeases::Stats() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

namespace {

const Dsn& CatalogOf(const ClusterConfig& config) {
  if (!config.catalog_dsn) {
    throw ConfigError("catalog.dsn", "primary leases are kept in the catalog: add a [catalog] section with its dsn");
  }
  return *config.catalog_dsn;
}

std::unique_ptr<pqxx::connection> ConnectCatalog(const ClusterConfig& config) {
  const Dsn& dsn = CatalogOf(config);
  try {
    return std::make_unique<pqxx::connection>(WithConnectTimeout(dsn, milliseconds(5000)).Reveal());
  } catch (const std::exception& e) {
    throw CatalogError(fmt::format("the catalog ({}) is unreachable: {}", dsn, RedactDsn(FirstLine(e.what()))));
  }
}

}  // namespace

std::optional<milliseconds> LeaseTtl(const ClusterConfig& config) {
  const auto catalog = ConnectCatalog(config);
  try {
    pqxx::nontransaction tx{*catalog};
    const auto rows = tx.exec("SELECT ttl_ms FROM shardkit_lease_settings");
    if (rows.empty()) return std::nullopt;
    return milliseconds(rows[0][0].as<int>());
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == kUndefinedTable) return std::nullopt;
    throw CatalogError(fmt::format("reading the catalog's lease settings failed: {}", FirstLine(e.what())));
  }
}

namespace {

// sql/042's check at COMMIT on every sharded table of every shard's primary
// (on), or none and no lease in force (off). A CREATE TRIGGER waits for the
// table's writes in flight: at most lock_timeout, then the shard is named.
void EnforceOnEveryPrimary(const ClusterConfig& config, bool on) {
  const ClusterConfig now = AtCurrentPrimaries(config);
  for (std::size_t s = 0; s < now.shards.size(); ++s) {
    const ShardConfig& shard = now.shards[s];
    try {
      pqxx::connection c{WithConnectTimeout(shard.AdminDsn(), milliseconds(5000)).Reveal()};
      pqxx::work tx{c};
      tx.exec("SET LOCAL lock_timeout = '5s'");
      tx.exec_params("SELECT shardkit_lease_enforce($1)", on);
      tx.commit();
    } catch (const std::exception& e) {
      const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
      const std::string why = sql != nullptr && sql->sqlstate() == kUndefinedFunction
                                  ? "not migrated to sql/042: shardctl migrate"
                                  : RedactDsn(FirstLine(e.what()));
      throw ShardError(
          ShardId{static_cast<int>(s)},
          on ? fmt::format("leases stay off: shard {}'s primary could not take the lease check ({}); nothing was "
                           "written to the catalog",
                           shard.name, why)
             : fmt::format("leases are off in the catalog, but shard {}'s primary still has the lease check ({}): "
                           "run shardctl leases --off again once it is reachable",
                           shard.name, why));
    }
  }
}

}  // namespace

void SetLeaseTtl(const ClusterConfig& config, std::optional<milliseconds> ttl) {
  if (ttl && (*ttl < milliseconds(100) || *ttl > milliseconds(600000))) {
    throw ConfigError("leases.ttl", fmt::format("a lease's time to live is 100 ms to 10 min, not {} ms", ttl->count()));
  }
  // On: every primary checks before any router grants a lease (a lease on a
  // server without the check would protect nothing).
  if (ttl) EnforceOnEveryPrimary(config, true);
  const auto catalog = ConnectCatalog(config);
  try {
    pqxx::work tx{*catalog};
    if (ttl) {
      tx.exec_params(
          "INSERT INTO shardkit_lease_settings (ttl_ms) VALUES ($1) "
          "ON CONFLICT (singleton) DO UPDATE SET ttl_ms = excluded.ttl_ms "
          "WHERE shardkit_lease_settings.ttl_ms <> excluded.ttl_ms",
          static_cast<int>(ttl->count()));
    } else {
      tx.exec("DELETE FROM shardkit_lease_settings");
    }
    tx.commit();
  } catch (const pqxx::sql_error& e) {
    throw CatalogError(fmt::format("writing the catalog's lease settings failed: {}{}", FirstLine(e.what()),
                                   e.sqlstate() == kUndefinedTable ? " (migrate the catalog: shardctl migrate)" : ""));
  }
  // Off: no check, and no lease left in force (it would refuse writes once
  // it ran out).
  if (!ttl) EnforceOnEveryPrimary(config, false);
}

std::vector<PrimaryLeaseState> ListPrimaryLeases(const ClusterConfig& config) {
  std::map<std::string, std::string> named;
  {
    const auto catalog = ConnectCatalog(config);
    for (const PrimaryRecord& row : LoadPrimaries(*catalog)) named[row.shard] = row.server;
  }
  const ClusterConfig now = AtCurrentPrimaries(config);
  std::vector<PrimaryLeaseState> out;
  for (const ShardConfig& shard : now.shards) {
    PrimaryLeaseState state;
    state.shard = shard.name;
    state.server = named.count(shard.name) != 0 ? named[shard.name] : shard.name;
    try {
      pqxx::connection c{WithConnectTimeout(shard.dsn, milliseconds(5000)).Reveal()};
      pqxx::nontransaction tx{c};
      state.reachable = true;
      const auto row = tx.exec1(
          "SELECT shardkit_lease_until(), (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, "
          "e.enforced AND e.checked = e.tables FROM shardkit_lease_enforcement() e");
      const auto until = row[0].as<std::int64_t>();
      state.enforced = row[2].as<bool>();
      state.in_force = until > 0;
      if (state.in_force) state.remaining = milliseconds((until - row[1].as<std::int64_t>()) / 1000);
    } catch (const pqxx::sql_error& e) {
      state.error = e.sqlstate() == kUndefinedFunction ? "not migrated to sql/042 (shardctl migrate)"
                                                       : RedactDsn(FirstLine(e.what()));
    } catch (const std::exception& e) {
      state.error = RedactDsn(FirstLine(e.what()));
    }
    out.push_back(std::move(state));
  }
  return out;
}

}  // namespace shardkit
