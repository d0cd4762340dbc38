// Worker partition leases in the catalog (partition_lease.hpp, sql/021_partition_leases.sql).
#include "shardkit/workers/partition_lease.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <set>

#include "ids/lease_support.hpp"
#include "pg/pg_array.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/workers/hot_keys.hpp"

namespace shardkit {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::microseconds;

void Validate(const PartitionLeaseOptions& o) {
  if (o.group.empty()) throw ConfigError("partition_lease.group", "must not be empty");
  if (!ValidPartitionCount(o.partition_count)) {
    throw ConfigError(
        "partition_lease.partition_count",
        fmt::format("{} is not a power of two in 1..{} (64 = the buckets)", o.partition_count, kMaxPartitions));
  }
  detail::ValidateLeaseTimings({o.lease_duration, o.safety_margin, o.renew_interval}, "partition_lease");
  if (o.claim_interval.count() <= 0) {
    throw ConfigError("partition_lease.claim_interval",
                      fmt::format("{} ms must be positive", o.claim_interval.count()));
  }
  if (o.join_grace.count() < 0) {
    throw ConfigError("partition_lease.join_grace", fmt::format("{} ms must not be negative", o.join_grace.count()));
  }
  if (o.handoff_pause.count() < 0) {
    throw ConfigError("partition_lease.handoff_pause",
                      fmt::format("{} ms must not be negative", o.handoff_pause.count()));
  }
}

long long Ms(std::chrono::milliseconds d) {
  return static_cast<long long>(d.count());
}

}  // namespace

PartitionLeases::PartitionLeases(PrivateTag, Dsn dsn, PartitionLeaseOptions options)
    : dsn_(std::move(dsn)), options_(std::move(options)) {
  if (options_.owner.empty()) options_.owner = detail::DefaultLeaseOwner();
}

std::shared_ptr<PartitionLeases> PartitionLeases::Join(const Dsn& catalog_dsn, PartitionLeaseOptions options) {
  Validate(options);
  auto leases = std::make_shared<PartitionLeases>(PrivateTag{}, catalog_dsn, std::move(options));
  {
    std::lock_guard lock(leases->catalog_mutex_);
    leases->Register();
  }
  if (leases->options_.join_grace.count() > 0) {
    (void)leases->TickImpl(false);  // announce: a live member that claims nothing yet
    std::this_thread::sleep_for(leases->options_.join_grace);
  }
  (void)leases->Tick();
  if (leases->options_.run_in_background) {
    PartitionLeases* self = leases.get();  // joined in the destructor
    leases->ticker_ = std::jthread([self](std::stop_token stop) { self->Loop(std::move(stop)); });
  }
  return leases;
}

PartitionLeases::~PartitionLeases() {
  try {
    Leave(Clock::now() + std::chrono::seconds(2));
  } catch (...) {
    // Best effort: unreleased partitions expire after lease_duration.
  }
  if (ticker_.joinable()) {
    ticker_.request_stop();
    changed_.notify_all();
    ticker_.join();
  }
}

std::string PartitionLeases::Describe() const {
  return fmt::format("worker '{}' of group '{}' (catalog {})", options_.owner, options_.group, dsn_);
}

void PartitionLeases::Connect() {
  if (connection_ && connection_->connection.is_open()) return;
  connection_.reset();
  try {
    connection_ = std::make_unique<detail::LeaseConnection>(detail::ConnectForLeases(dsn_, options_.safety_margin));
  } catch (const std::exception& e) {
    connection_.reset();
    throw LeaseError(
        fmt::format("partition leases: cannot connect to the catalog {} ({}); {} cannot claim or renew "
                    "partitions and stops working when its leases run out",
                    dsn_, RedactDsn(e.what()), Describe()));
  }
}

void PartitionLeases::Register() {
  Connect();
  try {
    pqxx::work tx{connection_->connection, "partition_lease_register"};
    tx.exec_params(
        "INSERT INTO shardkit_partition_groups (worker_group, partition_count) VALUES ($1, $2) "
        "ON CONFLICT (worker_group) DO NOTHING",
        options_.group, options_.partition_count);
    const int stored = tx.exec_params1("SELECT partition_count FROM shardkit_partition_groups WHERE worker_group = $1",
                                       options_.group)[0]
                           .as<int>();
    if (stored != options_.partition_count) {
      throw ConfigError("partition_lease.partition_count",
                        fmt::format("worker group '{}' has {} partitions in the catalog, this worker was configured "
                                    "with {}; every worker of a group must use the same count",
                                    options_.group, stored, options_.partition_count));
    }
    tx.exec_params(
        "INSERT INTO shardkit_partition_leases (worker_group, partition) "
        "SELECT $1, g FROM generate_series(0, $2::integer - 1) AS g ON CONFLICT DO NOTHING",
        options_.group, options_.partition_count);
    tx.commit();
  } catch (const ConfigError&) {
    throw;
  } catch (const pqxx::undefined_table& e) {
    throw LeaseError(
        fmt::format("partition leases: the catalog {} has no lease tables; apply "
                    "sql/021_partition_leases.sql there ({})",
                    dsn_, e.what()));
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    throw LeaseError(fmt::format("partition leases: registering {} failed: {}", Describe(), RedactDsn(e.what())));
  }
}

PartitionTick PartitionLeases::Tick() {
  return TickImpl(true);
}

PartitionTick PartitionLeases::TickImpl(bool may_claim) {
  std::lock_guard catalog(catalog_mutex_);
  std::vector<PartitionGrant> pairs;
  std::vector<PartitionGrant> drained;  // draining with nothing in flight: release now
  int draining_count = 0;
  bool leaving = false;
  {
    std::lock_guard lock(state_mutex_);
    if (left_) return {};
    leaving = leaving_;
    for (const auto& [p, h] : held_) {
      pairs.push_back({p, h.version});
      if (h.draining) {
        ++draining_count;
        if (h.in_flight == 0) drained.push_back({p, h.version});
      }
    }
  }
  const detail::LeaseTimings timings{options_.lease_duration, options_.safety_margin, options_.renew_interval};
  PartitionTick result;
  std::set<int> renewed;
  std::vector<std::string> live;
  std::vector<std::pair<PartitionGrant, std::optional<microseconds>>> claimed;
  const auto sent = Clock::now();  // before the server sets any lease_until
  Clock::time_point claim_started{};
  Clock::time_point claim_done{};
  try {
    Connect();
    pqxx::work tx{connection_->connection, "partition_lease_tick"};
    const auto duration_ms = Ms(options_.lease_duration);
    // 1. Heartbeat. A membership that had expired counts as a new join.
    tx.exec_params(
        "INSERT INTO shardkit_partition_workers AS w (worker_group, owner, joined_at, lease_until) "
        "VALUES ($1, $2, clock_timestamp(), clock_timestamp() + make_interval(secs => $3::double precision / 1000)) "
        "ON CONFLICT (worker_group, owner) DO UPDATE SET lease_until = EXCLUDED.lease_until, "
        "joined_at = CASE WHEN w.lease_until < clock_timestamp() THEN EXCLUDED.joined_at ELSE w.joined_at END",
        options_.group, options_.owner, duration_ms);
    // 2. Renew exactly the (partition, version) pairs held. A pair not
    // returned was claimed by someone else after it expired: lost.
    if (!pairs.empty()) {
      std::vector<int> parts;
      std::vector<std::int64_t> versions;
      for (const auto& g : pairs) {
        parts.push_back(g.partition);
        versions.push_back(g.version);
      }
      for (const auto& row : tx.exec_params(
               "UPDATE shardkit_partition_leases AS l "
               "SET lease_until = clock_timestamp() + make_interval(secs => $5::double precision / 1000) "
               "FROM unnest($3::integer[], $4::bigint[]) AS h(partition, version) "
               "WHERE l.worker_group = $1 AND l.owner = $2 AND l.partition = h.partition "
               "AND l.claim_version = h.version RETURNING l.partition",
               options_.group, options_.owner, detail::PgArrayOf(parts), detail::PgArrayOf(versions), duration_ms)) {
        renewed.insert(row[0].as<int>());
      }
    }
    // 3. Hand over drained partitions: the old owner confirms it is done.
    std::vector<int> release_parts;
    std::vector<std::int64_t> release_versions;
    for (const auto& g : drained) {
      if (renewed.count(g.partition) == 0) continue;
      release_parts.push_back(g.partition);
      release_versions.push_back(g.version);
    }
    if (!release_parts.empty()) {
      for (const auto& row : tx.exec_params(
               "UPDATE shardkit_partition_leases AS l "
               "SET owner = NULL, lease_until = clock_timestamp(), released_at = clock_timestamp() "
               "FROM unnest($3::integer[], $4::bigint[]) AS h(partition, version) "
               "WHERE l.worker_group = $1 AND l.owner = $2 AND l.partition = h.partition "
               "AND l.claim_version = h.version RETURNING l.partition",
               options_.group, options_.owner, detail::PgArrayOf(release_parts), detail::PgArrayOf(release_versions))) {
        result.released.push_back(row[0].as<int>());
      }
    }
    // 4. Live workers by join order (clock_timestamp(): this transaction's
    // start time would be stale by the time it commits) and my share.
    for (const auto& row : tx.exec_params("SELECT owner FROM shardkit_partition_workers WHERE worker_group = $1 "
                                          "AND lease_until > clock_timestamp() ORDER BY joined_at, owner",
                                          options_.group)) {
      live.push_back(row[0].as<std::string>());
    }
    const auto n = static_cast<int>(std::max<std::size_t>(live.size(), 1));
    const auto me = std::find(live.begin(), live.end(), options_.owner);
    const int rank = me == live.end() ? n - 1 : static_cast<int>(me - live.begin());
    const int P = options_.partition_count;
    result.share = P / n + (rank < P % n ? 1 : 0);
    result.live_workers = static_cast<int>(live.size());
    {
      std::lock_guard lock(state_mutex_);
      stats_.rank = rank;
    }
    // 5. Claim free or expired partitions up to the share.
    const int still_held = static_cast<int>(renewed.size() - result.released.size());
    const int want = result.share - still_held;
    if (may_claim && !leaving && want > 0 && draining_count == 0) {
      claim_started = Clock::now();
      for (const auto& row : tx.exec_params(R"(
WITH free AS (
  SELECT partition, owner IS NULL AND released_at IS NOT NULL AS was_released, released_at
    FROM shardkit_partition_leases
   WHERE worker_group = $1 AND (owner IS NULL OR lease_until < clock_timestamp())
   ORDER BY partition
   LIMIT $3
   FOR UPDATE SKIP LOCKED)
UPDATE shardkit_partition_leases AS l
   SET owner = $2,
       lease_until = clock_timestamp() + make_interval(secs => $4::double precision / 1000),
       claim_version = l.claim_version + 1,
       claimed_at = clock_timestamp()
  FROM free
 WHERE l.worker_group = $1 AND l.partition = free.partition
RETURNING l.partition, l.claim_version,
          CASE WHEN free.was_released
               THEN (extract(epoch FROM clock_timestamp() - free.released_at) * 1000000)::bigint END)",
                                            options_.group, options_.owner, want, duration_ms)) {
        std::optional<microseconds> gap;
        if (!row[2].is_null()) gap = microseconds(row[2].as<std::int64_t>());
        claimed.push_back({{row[0].as<int>(), row[1].as<std::int64_t>()}, gap});
      }
      claim_done = Clock::now();
    }
    // Housekeeping: memberships dead for a long time.
    tx.exec_params(
        "DELETE FROM shardkit_partition_workers WHERE worker_group = $1 "
        "AND lease_until < clock_timestamp() - make_interval(secs => 100 * $2::double precision / 1000)",
        options_.group, duration_ms);
    tx.commit();
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    const std::string message =
        dynamic_cast<const LeaseError*>(&e) != nullptr
            ? std::string(e.what())
            : fmt::format(
                  "partition leases: tick of {} failed ({}); held partitions stay usable until their local "
                  "deadline, then work stops",
                  Describe(), RedactDsn(e.what()));
    std::lock_guard lock(state_mutex_);
    ++stats_.tick_failures;
    stats_.last_error = message;
    last_tick_failed_ = true;
    throw LeaseError(message);
  }

  const auto now = Clock::now();
  const auto deadline = detail::LocalLeaseDeadline(sent, timings);
  std::lock_guard lock(state_mutex_);
  for (const auto& g : pairs) {
    auto it = held_.find(g.partition);
    if (it == held_.end() || it->second.version != g.version) continue;
    if (renewed.count(g.partition) == 0) {
      held_.erase(it);  // taken over: stop at once
      result.lost.push_back(g.partition);
      ++stats_.lost;
    } else {
      it->second.deadline = deadline;
    }
  }
  for (const int p : result.released) {
    held_.erase(p);
    last_release_ = now;
    ++stats_.released;
  }
  for (const auto& [grant, gap] : claimed) {
    HeldPartition h;
    h.partition = grant.partition;
    h.version = grant.version;
    h.deadline = deadline;
    h.claimed = now;
    held_[grant.partition] = h;
    result.claimed.push_back(grant);
    ++stats_.claimed;
    if (gap) {
      stats_.last_handoff_gap = *gap;
      stats_.max_handoff_gap = std::max(stats_.max_handoff_gap, *gap);
    }
  }
  // Gradual handoff: one surplus partition at a time, after a pause.
  const bool any_draining = std::any_of(held_.begin(), held_.end(), [](const auto& e) { return e.second.draining; });
  if (may_claim && !leaving && !any_draining && static_cast<int>(held_.size()) > result.share &&
      now - last_release_ >= options_.handoff_pause) {
    auto it = std::prev(held_.end());  // the highest-numbered: owners keep ranges
    it->second.draining = true;
    result.started_draining = it->first;
  }
  ++stats_.ticks;
  stats_.live_workers = result.live_workers;
  stats_.share = result.share;
  stats_.held = static_cast<int>(held_.size());
  stats_.draining =
      static_cast<int>(std::count_if(held_.begin(), held_.end(), [](const auto& e) { return e.second.draining; }));
  stats_.last_tick = duration_cast<microseconds>(now - sent);
  if (!claimed.empty()) stats_.last_claim = duration_cast<microseconds>(claim_done - claim_started);
  stats_.last_error.reset();
  last_tick_failed_ = false;
  return result;
}

std::vector<PartitionGrant> PartitionLeases::StartTake() {
  std::vector<PartitionGrant> grants;
  const auto now = Clock::now();
  std::lock_guard lock(state_mutex_);
  if (leaving_ || left_) return grants;
  for (auto& [p, h] : held_) {
    if (h.draining || now >= h.deadline) continue;
    ++h.in_flight;
    grants.push_back({p, h.version});
  }
  return grants;
}

void PartitionLeases::EndTake(std::span<const PartitionGrant> grants, std::span<const int> jobs_taken) {
  bool wake = false;
  {
    std::lock_guard lock(state_mutex_);
    for (std::size_t i = 0; i < grants.size(); ++i) {
      auto it = held_.find(grants[i].partition);
      if (it == held_.end() || it->second.version != grants[i].version) continue;
      const int taken = i < jobs_taken.size() ? jobs_taken[i] : 0;
      it->second.in_flight = std::max(0, it->second.in_flight + taken - 1);
      if (it->second.draining && it->second.in_flight == 0) wake = true;
    }
    if (wake) wake_ = true;
  }
  if (wake) changed_.notify_all();
}

void PartitionLeases::Finished(const PartitionGrant& grant, int jobs) {
  bool wake = false;
  {
    std::lock_guard lock(state_mutex_);
    auto it = held_.find(grant.partition);
    if (it == held_.end() || it->second.version != grant.version) return;
    it->second.in_flight = std::max(0, it->second.in_flight - jobs);
    wake = it->second.in_flight == 0 && (it->second.draining || leaving_);
    if (wake) wake_ = true;
  }
  if (wake) changed_.notify_all();
}

bool PartitionLeases::Holds(int partition, std::int64_t version) const {
  const auto now = Clock::now();
  std::lock_guard lock(state_mutex_);
  if (left_) return false;
  const auto it = held_.find(partition);
  return it != held_.end() && it->second.version == version && now < it->second.deadline;
}

std::vector<HeldPartition> PartitionLeases::Held() const {
  std::lock_guard lock(state_mutex_);
  std::vector<HeldPartition> out;
  out.reserve(held_.size());
  for (const auto& [p, h] : held_) out.push_back(h);
  return out;
}

PartitionLeaseStats PartitionLeases::Stats() const {
  std::lock_guard lock(state_mutex_);
  return stats_;
}

Clock::duration PartitionLeases::NextInterval() const {
  const bool busy = last_tick_failed_ || static_cast<int>(held_.size()) != stats_.share ||
                    std::any_of(held_.begin(), held_.end(), [](const auto& e) { return e.second.draining; });
  return busy ? std::min(options_.claim_interval, options_.renew_interval) : options_.renew_interval;
}

void PartitionLeases::Loop(std::stop_token stop) {
  Clock::time_point next;
  {
    std::lock_guard lock(state_mutex_);
    next = Clock::now() + NextInterval();
  }
  for (;;) {
    {
      std::unique_lock lock(state_mutex_);
      changed_.wait_until(lock, stop, next, [this] { return wake_; });
      wake_ = false;
      if (stop.stop_requested() || left_) return;
    }
    try {
      (void)Tick();
    } catch (const std::exception&) {
      // Recorded in Stats(); held partitions run out at their local deadline.
    }
    std::lock_guard lock(state_mutex_);
    next = Clock::now() + NextInterval();
  }
}

void PartitionLeases::Leave(Clock::time_point deadline) {
  {
    std::unique_lock lock(state_mutex_);
    if (left_) return;
    leaving_ = true;
    for (auto& [p, h] : held_) h.draining = true;
    // In-flight jobs finish (or the deadline passes) before anything is released.
    changed_.wait_until(lock, deadline, [this] {
      return std::all_of(held_.begin(), held_.end(), [](const auto& e) { return e.second.in_flight == 0; });
    });
  }
  if (ticker_.joinable() && std::this_thread::get_id() != ticker_.get_id()) {
    ticker_.request_stop();
    changed_.notify_all();
    ticker_.join();
  }
  std::vector<int> parts;
  std::vector<std::int64_t> versions;
  {
    std::lock_guard lock(state_mutex_);
    for (const auto& [p, h] : held_) {
      parts.push_back(p);
      versions.push_back(h.version);
    }
    held_.clear();
    left_ = true;
    stats_.released += parts.size();
    stats_.held = 0;
    stats_.draining = 0;
  }
  std::lock_guard catalog(catalog_mutex_);
  try {
    Connect();
    pqxx::work tx{connection_->connection, "partition_lease_leave"};
    if (!parts.empty()) {
      tx.exec_params(
          "UPDATE shardkit_partition_leases AS l "
          "SET owner = NULL, lease_until = clock_timestamp(), released_at = clock_timestamp() "
          "FROM unnest($3::integer[], $4::bigint[]) AS h(partition, version) "
          "WHERE l.worker_group = $1 AND l.owner = $2 AND l.partition = h.partition AND l.claim_version = h.version",
          options_.group, options_.owner, detail::PgArrayOf(parts), detail::PgArrayOf(versions));
    }
    tx.exec_params("DELETE FROM shardkit_partition_workers WHERE worker_group = $1 AND owner = $2", options_.group,
                   options_.owner);
    tx.commit();
  } catch (const LeaseError&) {
    throw;
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    throw LeaseError(
        fmt::format("partition leases: {} could not release its partitions ({}); they expire by "
                    "themselves after lease_duration",
                    Describe(), RedactDsn(e.what())));
  }
}

std::vector<PartitionGroupView> ReadPartitionGroups(pqxx::connection_base& catalog,
                                                    const std::optional<std::string>& group) {
  std::vector<PartitionGroupView> out;
  try {
    pqxx::read_transaction tx{catalog};
    const pqxx::result groups =
        group ? tx.exec_params(
                    "SELECT worker_group, partition_count FROM shardkit_partition_groups "
                    "WHERE worker_group = $1",
                    *group)
              : tx.exec("SELECT worker_group, partition_count FROM shardkit_partition_groups ORDER BY worker_group");
    for (const auto& g : groups) {
      PartitionGroupView view;
      view.group = g[0].as<std::string>();
      view.partition_count = g[1].as<int>();
      for (const auto& row : tx.exec_params(
               "SELECT owner, extract(epoch FROM clock_timestamp() - joined_at)::float8, "
               "extract(epoch FROM lease_until - clock_timestamp())::float8, lease_until > clock_timestamp() "
               "FROM shardkit_partition_workers WHERE worker_group = $1 ORDER BY joined_at, owner",
               view.group)) {
        view.workers.push_back({row[0].as<std::string>(), row[1].as<double>(), row[2].as<double>(), row[3].as<bool>()});
      }
      for (const auto& row : tx.exec_params("SELECT partition, owner, claim_version, "
                                            "lease_until < clock_timestamp(), "
                                            "CASE WHEN lease_until = '-infinity' THEN NULL "
                                            "ELSE extract(epoch FROM lease_until - clock_timestamp())::float8 END, "
                                            "extract(epoch FROM clock_timestamp() - claimed_at)::float8, "
                                            "extract(epoch FROM clock_timestamp() - released_at)::float8 "
                                            "FROM shardkit_partition_leases WHERE worker_group = $1 ORDER BY partition",
                                            view.group)) {
        PartitionLeaseRow r;
        r.partition = row[0].as<int>();
        r.owner = detail::OptionalField<std::string>(row[1]);
        r.version = row[2].as<std::int64_t>();
        r.expired = row[3].as<bool>();
        r.lease_remaining_s = detail::OptionalField<double>(row[4]).value_or(0.0);
        r.lease_age_s = detail::OptionalField<double>(row[5]);
        r.released_ago_s = detail::OptionalField<double>(row[6]);
        view.partitions.push_back(std::move(r));
      }
      out.push_back(std::move(view));
    }
  } catch (const pqxx::undefined_table& e) {
    throw LeaseError(
        fmt::format("partition leases: the catalog has no lease tables; apply "
                    "sql/021_partition_leases.sql there ({})",
                    e.what()));
  }
  return out;
}

}  // namespace shardkit
