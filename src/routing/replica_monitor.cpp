#include "shardkit/routing/replica_monitor.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "pg/pipelined_statement.hpp"
#include "pg/server_message.hpp"
#include "routing/replica_reads.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/dsn.hpp"
#include "shardkit/core/thread_annotations.hpp"
#include "shardkit/pool/pool.hpp"

// How it works: a thread per server of a shard with replicas, each with a
// pool of one connection, probes every interval (or at once for
// ProbeNow). A probe is one statement sent and read non-blocking, its
// socket polled in short slices, so that neither a server that stopped
// answering nor the destructor waits longer than the probe timeout. The
// results go into the shard's state under its mutex, which Choose()
// reads; the primary's positions are kept as a history of (time, position)
// for the lag's time bound.

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr std::uint64_t kWalPageSize = 8192;    // XLOG_BLCKSZ, PostgreSQL's default
constexpr std::uint64_t kShortPageHeader = 24;  // SizeOfXLogShortPHD

// The primary: its insert position, its timeline (the first 8 hex digits
// of the WAL file name: its insertion timeline), and its physical slots,
// each with + when a WAL sender streams through it (pg_replication_slots
// is readable by any role).
constexpr const char* kPrimaryProbe =
    "SELECT pg_current_wal_insert_lsn()::text, substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8), "
    "(SELECT string_agg(slot_name || CASE WHEN active THEN '+' ELSE '-' END, ',') FROM pg_replication_slots "
    "WHERE slot_type = 'physical')";
// A replica: positions, pause state, and its WAL receiver: its pid (any
// role sees it), its status, timeline and slot (NULL unless the role is a
// superuser or has pg_read_all_stats), the slot it is configured with, and
// the oldest transaction it counts as running (those below have finished).
constexpr const char* kReplicaProbe =
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text, "
    "CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() ELSE 'not paused' END, "
    "(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint, "
    "(SELECT pid FROM pg_stat_wal_receiver), (SELECT status FROM pg_stat_wal_receiver), "
    "(SELECT received_tli FROM pg_stat_wal_receiver), (SELECT slot_name FROM pg_stat_wal_receiver), "
    "current_setting('primary_slot_name'), pg_snapshot_xmin(pg_current_snapshot())::text";

// The primary was no further than `lsn` at `at` (its probe's start) and at
// least there by `by` (its answer).
struct Sample {
  Clock::time_point at;
  Clock::time_point by;
  std::uint64_t lsn = 0;
};

struct MemberState {
  std::string name;
  std::string dsn;  // redacted
  bool probed_ok = false;
  bool failed_by_read = false;
  bool in_recovery = false;
  bool replay_paused = false;
  std::optional<std::uint64_t> replay;
  std::optional<std::uint64_t> receive;
  std::optional<std::uint64_t> finished_below;  // every transaction older had finished (its snapshot's xmin)
  std::optional<milliseconds> replay_age;
  // Its WAL receiver, as its last probe saw it: whether one runs, its
  // status and timeline (nullopt: not shown to the probe's role), and the
  // slot it streams through (the receiver's, else primary_slot_name).
  bool has_receiver = false;
  std::optional<std::string> receiver_status;
  std::optional<std::uint32_t> received_tli;
  std::string slot;
  Clock::time_point asked{};     // last successful probe's start (its replay was at most `replay` then)
  Clock::time_point measured{};  // last successful probe's answer
  std::optional<std::chrono::system_clock::time_point> measured_wall;
  std::string error = "not probed yet";
  std::uint64_t probes = 0;
  std::uint64_t failures = 0;
  std::chrono::microseconds probe_time{0};
};

std::string Millis(milliseconds d) {
  return d.count() >= 10'000  ? fmt::format("{:.0f} s", static_cast<double>(d.count()) / 1000.0)
         : d.count() >= 1'000 ? fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000.0)
                              : fmt::format("{} ms", d.count());
}

}  // namespace

std::uint64_t InsertPositionFloor(std::uint64_t lsn) noexcept {
  // A record continued onto a page ends at least 8 bytes past its header,
  // so a position exactly after a short header is an empty page.
  return lsn % kWalPageSize == kShortPageHeader ? lsn - kShortPageHeader : lsn;
}

struct ReplicaMonitor::Impl {
  struct ShardState {
    mutable std::mutex mutex;
    std::deque<Sample> history SHARDKIT_GUARDED_BY(mutex);  // the primary's insert positions, oldest first
    int history_of SHARDKIT_GUARDED_BY(mutex) = 0;          // the member whose positions `history` holds
    // The primary's (history_of's) timeline and physical slots (name ->
    // a WAL sender streams through it) at its last probe.
    std::optional<std::uint32_t> timeline SHARDKIT_GUARDED_BY(mutex);
    std::map<std::string, bool> slots SHARDKIT_GUARDED_BY(mutex);
    std::vector<MemberState> members SHARDKIT_GUARDED_BY(mutex);  // the configured primary, then the replicas
    mutable std::atomic<unsigned> next{0};                        // round-robin over the replicas
  };
  struct Probe {
    ShardId shard{};
    int member = 0;
    std::unique_ptr<ConnectionPool> pool;  // one connection, the probe's own
    std::thread thread;
    std::uint64_t done_round = 0;  // guarded by wake_mutex
  };

  Impl(BucketShardResolver& r, const ClusterConfig& config, ReplicaMonitorOptions o) : resolver(r), options(o) {
    PoolOptions pool_options = config.pool;
    pool_options.max_size = 1;
    pool_options.max_waiters = 1;
    pool_options.connect_timeout = options.probe_timeout;
    pool_options.acquire_timeout = options.probe_timeout;
    for (int s = 0; s < resolver.ShardCount(); ++s) {
      const ShardId shard{s};
      auto state = std::make_unique<ShardState>();
      const std::vector<ShardServer>& members = resolver.Members(shard);
      const ShardConfig* shard_config =
          static_cast<std::size_t>(s) < config.shards.size() ? &config.shards[static_cast<std::size_t>(s)] : nullptr;
      {
        std::lock_guard lock(state->mutex);
        for (const ShardServer& m : members) {
          MemberState ms;
          ms.name = m.name;
          ms.dsn = m.pool->RedactedDsn();
          state->members.push_back(std::move(ms));
        }
      }
      if (members.size() > 1 && shard_config != nullptr && shard_config->replicas.size() + 1 == members.size()) {
        for (const ShardServer& m : members) {
          const Dsn& dsn =
              m.member == 0 ? shard_config->dsn : shard_config->replicas[static_cast<std::size_t>(m.member - 1)].dsn;
          auto probe = std::make_unique<Probe>();
          probe->shard = shard;
          probe->member = m.member;
          probe->pool = std::make_unique<ConnectionPool>(shard, dsn, pool_options);
          probes.push_back(std::move(probe));
        }
      }
      shards.push_back(std::move(state));
    }
    for (auto& probe : probes) {
      Probe* p = probe.get();
      p->thread = std::thread([this, p] { Loop(*p); });
    }
  }

  ~Impl() {
    {
      std::lock_guard lock(wake_mutex);
      stop = true;
    }
    wake.notify_all();
    for (auto& probe : probes) probe->thread.join();
  }

  void Loop(Probe& p);
  void ProbeOnce(Probe& p);
  // One statement on the probe's connection, within the probe timeout.
  pg::Rows Query(Probe& p, const std::string& sql);
  [[nodiscard]] std::optional<milliseconds> LagBound(const ShardState& s, std::uint64_t replay,
                                                     Clock::time_point now) const SHARDKIT_REQUIRES(s.mutex);
  // Why replica `m` does not stream from the shard's current primary, or
  // empty (it does, or nothing the probes see says otherwise).
  [[nodiscard]] std::string NotFollowing(ShardId shard, const ShardState& s, const MemberState& m) const
      SHARDKIT_REQUIRES(s.mutex);
  [[nodiscard]] ShardState& State(ShardId shard) const { return *shards.at(static_cast<std::size_t>(ToInt(shard))); }

  BucketShardResolver& resolver;
  const ReplicaMonitorOptions options;
  std::vector<std::unique_ptr<ShardState>> shards;
  std::vector<std::unique_ptr<Probe>> probes;

  std::mutex wake_mutex;
  std::condition_variable wake;
  std::condition_variable round_done;
  bool stop SHARDKIT_GUARDED_BY(wake_mutex) = false;
  std::uint64_t round SHARDKIT_GUARDED_BY(wake_mutex) = 0;
};

pg::Rows ReplicaMonitor::Impl::Query(Probe& p, const std::string& sql) {
  const auto deadline = Clock::now() + options.probe_timeout;
  auto lease = p.pool->Acquire(deadline);
  const std::vector<const char*> none;
  detail::PipelineRequest request;
  request.sql = &sql;
  request.values = &none;
  request.wrap = detail::PipelineRequest::Wrap::kStatementOnly;
  bool reusable = true;
  try {
    detail::PipelinedStatement call{lease.Connection(), request, /*nonblocking=*/true};
    call.Send();
    while (!call.Advance()) {
      const auto now = Clock::now();
      if (now >= deadline) {
        lease.Discard();
        throw Error(fmt::format("no answer within {}", Millis(options.probe_timeout)));
      }
      {
        std::lock_guard lock(wake_mutex);
        if (stop) {
          lease.Discard();
          throw Error("stopping");
        }
      }
      pollfd fd{call.Socket(), static_cast<short>(POLLIN | (call.WantsWrite() ? POLLOUT : 0)), 0};
      const auto slice = std::min<long long>(50, std::chrono::ceil<milliseconds>(deadline - now).count());
      (void)::poll(&fd, 1, static_cast<int>(slice));
    }
    pg::Rows rows = call.Finish(reusable);
    if (!reusable) lease.Discard();
    return rows;
  } catch (...) {
    if (!reusable) lease.Discard();
    throw;
  }
}

void ReplicaMonitor::Impl::ProbeOnce(Probe& p) {
  // The shard's primary now: after a failover, a former replica.
  const bool primary = resolver.Servers(p.shard).primary.member == p.member;
  ShardState& s = State(p.shard);
  const auto started = Clock::now();
  try {
    const pg::Rows rows = Query(p, primary ? kPrimaryProbe : kReplicaProbe);
    const auto now = Clock::now();
    std::lock_guard lock(s.mutex);
    MemberState& m = s.members[static_cast<std::size_t>(p.member)];
    m.probed_ok = true;
    m.failed_by_read = false;
    m.error.clear();
    ++m.probes;
    m.asked = started;
    m.measured = now;
    m.measured_wall = std::chrono::system_clock::now();
    m.probe_time = duration_cast<std::chrono::microseconds>(now - started);
    if (primary) {
      m.in_recovery = false;
      if (s.history_of != p.member) {
        s.history.clear();  // positions of another primary
        s.history_of = p.member;
      }
      s.history.push_back(Sample{started, now, ParseLsn(rows[0][0].c_str())});
      s.timeline = static_cast<std::uint32_t>(std::stoul(rows[0][1].c_str(), nullptr, 16));
      s.slots.clear();
      if (!rows[0][2].is_null()) {
        const std::string_view all = rows[0][2].c_str();
        for (std::size_t at = 0; at < all.size();) {
          const std::size_t end = std::min(all.find(',', at), all.size());
          if (end - at >= 2) s.slots[std::string(all.substr(at, end - at - 1))] = all[end - 1] == '+';
          at = end + 1;
        }
      }
      while (!s.history.empty() && s.history.front().at < now - options.history) s.history.pop_front();
    } else {
      m.in_recovery = rows[0][0].as<bool>();
      const auto lsn_or_none = [](const pg::Field& f) -> std::optional<std::uint64_t> {
        if (f.is_null()) return std::nullopt;
        return ParseLsn(f.c_str());
      };
      if (auto replay = lsn_or_none(rows[0][1])) m.replay = std::max(*replay, m.replay.value_or(0));
      m.receive = lsn_or_none(rows[0][2]);
      m.replay_paused = std::string_view(rows[0][3].c_str()) != "not paused";
      m.replay_age =
          rows[0][4].is_null() ? std::nullopt : std::optional<milliseconds>(milliseconds(rows[0][4].as<long long>()));
      m.has_receiver = !rows[0][5].is_null();
      m.receiver_status = rows[0][6].is_null() ? std::nullopt : std::optional<std::string>(rows[0][6].c_str());
      m.received_tli =
          rows[0][7].is_null() ? std::nullopt : std::optional<std::uint32_t>(rows[0][7].as<std::uint32_t>());
      m.slot = rows[0][8].is_null() ? rows[0][9].c_str() : rows[0][8].c_str();
      m.finished_below = std::stoull(rows[0][10].c_str());
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(s.mutex);
    MemberState& m = s.members[static_cast<std::size_t>(p.member)];
    m.probed_ok = false;
    m.error = RedactDsn(detail::FirstLine(e.what()));
    ++m.failures;
  }
}

void ReplicaMonitor::Impl::Loop(Probe& p) {
  std::uint64_t target = 0;
  for (;;) {
    ProbeOnce(p);
    std::unique_lock lock(wake_mutex);
    p.done_round = target;
    round_done.notify_all();
    wake.wait_for(lock, options.probe_interval, [&] { return stop || round > target; });
    if (stop) return;
    target = round;
  }
}

std::optional<milliseconds> ReplicaMonitor::Impl::LagBound(const ShardState& s, std::uint64_t replay,
                                                           Clock::time_point now) const {
  for (auto it = s.history.rbegin(); it != s.history.rend(); ++it) {
    if (InsertPositionFloor(it->lsn) <= replay) return std::chrono::ceil<milliseconds>(now - it->at);
  }
  return std::nullopt;
}

std::string ReplicaMonitor::Impl::NotFollowing(ShardId shard, const ShardState& s, const MemberState& m) const {
  // Host names and addresses do not identify the server a replica streams
  // from (its receiver may reach the primary through a Unix socket, or by
  // another name, than the configuration does); its slot and its timeline
  // do: the primary lists a slot as active while a WAL sender streams
  // through it, and a replica of the old primary stays on the timeline the
  // promotion left.
  if (!m.has_receiver) return "follows nobody: it has no WAL receiver (not streaming from any server)";
  if (m.receiver_status && *m.receiver_status != "streaming") {
    return fmt::format("follows nobody: its WAL receiver is {}, not streaming", *m.receiver_status);
  }
  const ShardServers& servers = resolver.Servers(shard);
  // The primary's facts are those of the current primary only.
  if (s.history_of != servers.primary.member || s.history.empty()) return {};
  if (m.received_tli && s.timeline && *m.received_tli != *s.timeline) {
    return fmt::format(
        "does not follow the primary {}: it streams on timeline {}, the primary is on timeline {} (it follows "
        "another server, or has not switched to the primary's timeline)",
        servers.primary.name, *m.received_tli, *s.timeline);
  }
  if (!m.slot.empty()) {
    const auto slot = s.slots.find(m.slot);
    if (slot == s.slots.end()) {
      return fmt::format(
          "does not follow the primary {}: the primary has no slot {}, which the replica streams through",
          servers.primary.name, m.slot);
    }
    if (!slot->second) {
      return fmt::format("does not follow the primary {}: nothing streams through its slot {} there",
                         servers.primary.name, m.slot);
    }
  }
  return {};
}

ReplicaMonitor::ReplicaMonitor(BucketShardResolver& resolver, const ClusterConfig& config,
                               ReplicaMonitorOptions options)
    : impl_(std::make_unique<Impl>(resolver, config, options)) {}

ReplicaMonitor::~ReplicaMonitor() = default;

const ReplicaMonitorOptions& ReplicaMonitor::Options() const noexcept {
  return impl_->options;
}

ReplicaChoice ReplicaMonitor::Choose(ShardId shard, const ReadPolicy& policy,
                                     const std::vector<ReplicaUnavailable::Skipped>& exclude) const {
  const ShardServers& servers = impl_->resolver.Servers(shard);
  ReplicaChoice choice;
  if (!policy.UsesReplicas()) return choice;
  const ReadToken::Entry* token = policy.after.Find(shard);
  if (servers.replicas.empty()) {
    choice.skipped.push_back({"(none)", "the shard has no replicas in the configuration"});
  } else {
    const Impl::ShardState& s = impl_->State(shard);
    const auto now = Clock::now();
    std::lock_guard lock(s.mutex);
    const std::size_t n = servers.replicas.size();
    const std::size_t start = s.next.fetch_add(1, std::memory_order_relaxed) % n;
    // Fit replicas known to have replayed the token first, then those the
    // read must check (a round trip that may fail).
    std::optional<ShardServer> checked;
    std::optional<ShardServer> known;
    // (A plain value and a flag: GCC 12 sees an optional here as maybe
    // uninitialized.)
    const bool primary_known = !s.history.empty();
    const std::uint64_t primary_lsn = primary_known ? InsertPositionFloor(s.history.back().lsn) : 0;
    for (std::size_t k = 0; k < n && !known; ++k) {
      const ShardServer& r = servers.replicas[(start + k) % n];
      const MemberState& m = s.members[static_cast<std::size_t>(r.member)];
      std::string reason;
      const auto silent = now - m.measured;
      const auto left = std::find_if(exclude.begin(), exclude.end(),
                                     [&](const ReplicaUnavailable::Skipped& x) { return x.replica == r.name; });
      if (left != exclude.end()) {
        reason = left->reason;
      } else if (!m.probed_ok || m.failed_by_read) {
        reason = "unreachable: " + (m.error.empty() ? std::string("not probed yet") : m.error);
      } else if (silent > impl_->options.silence_limit) {
        reason = fmt::format("no probe answered for {}", Millis(duration_cast<milliseconds>(silent)));
      } else if (!m.in_recovery) {
        reason = "it is not in recovery (promoted, or not a standby): not a replica of this primary";
      } else if (std::string why = impl_->NotFollowing(shard, s, m); !why.empty()) {
        reason = std::move(why);
      } else if (!m.replay) {
        reason = "its replay position is unknown";
      } else if (const auto lag = impl_->LagBound(s, *m.replay, now); !lag) {
        reason = primary_known ? fmt::format("lag unknown: behind every position of the primary seen in the last {}",
                                             Millis(duration_cast<milliseconds>(impl_->options.history)))
                               : "lag unknown: the primary's position has not been measured";
      } else if (*lag > policy.max_lag) {
        reason = fmt::format("lag {} over max_lag {}{}", Millis(*lag), Millis(policy.max_lag),
                             m.replay_paused ? " (its replay is paused)" : "");
      } else if (policy.max_lag_bytes && primary_known && primary_lsn > *m.replay &&
                 primary_lsn - *m.replay > *policy.max_lag_bytes) {
        reason = fmt::format("lag {} bytes over max_lag_bytes {}", primary_lsn - *m.replay, *policy.max_lag_bytes);
      }
      if (!reason.empty()) {
        choice.skipped.push_back({r.name, std::move(reason)});
        continue;
      }
      if (token == nullptr || (InsertPositionFloor(token->lsn) <= *m.replay &&
                               (token->xid == 0 || token->xid < m.finished_below.value_or(0)))) {
        known = r;
      } else if (!checked) {
        checked = r;
      }
    }
    if (known) {
      choice.replica = known;
    } else if (checked) {
      choice.replica = checked;
      choice.verify = *token;
      choice.verify->lsn = InsertPositionFloor(token->lsn);
    }
  }
  if (!choice.replica && policy.preference == ReadPreference::kReplicaOnly) {
    std::string reasons;
    for (const auto& skipped : choice.skipped) {
      reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", skipped.replica, skipped.reason);
    }
    throw ReplicaUnavailable(shard,
                             fmt::format("no replica of shard {} ({}) may serve this read (replicas only): {}. "
                                         "Read with ReadPreference::kReplicaPreferred to fall back to the primary, "
                                         "raise max_lag, or check the replicas (shardctl shards)",
                                         shard, servers.primary.name, reasons),
                             std::move(choice.skipped));
  }
  return choice;
}

void ReplicaMonitor::ReportFailure(ShardId shard, const std::string& replica, const std::string& why) {
  Impl::ShardState& s = impl_->State(shard);
  std::lock_guard lock(s.mutex);
  for (MemberState& m : s.members) {
    if (m.name == replica) {
      m.failed_by_read = true;
      m.error = why;
    }
  }
}

void ReplicaMonitor::ReportReplayed(ShardId shard, const std::string& replica, std::uint64_t lsn) {
  Impl::ShardState& s = impl_->State(shard);
  std::lock_guard lock(s.mutex);
  for (MemberState& m : s.members) {
    if (m.name == replica) m.replay = std::max(lsn, m.replay.value_or(0));
  }
}

bool ReplicaMonitor::WaitForReplay(ShardId shard, const ShardServer& replica, const ReadToken::Entry& wanted,
                                   Clock::time_point deadline) {
  // As shardkit_require_replayed (sql/046) decides: the position replayed,
  // and the transaction finished with every older one, or committed when
  // the token's earlier writes are older than its horizon.
  const std::string sql = wanted.xid == 0 ? std::string("SELECT pg_last_wal_replay_lsn()::text")
                                          : fmt::format(
                                                "SELECT pg_last_wal_replay_lsn()::text, '{}'::xid8 < "
                                                "pg_snapshot_xmin(pg_current_snapshot()), {} = 'committed'",
                                                wanted.xid, detail::TransactionStatus(wanted.xid));
  auto pause = std::chrono::microseconds(200);
  try {
    auto lease = replica.pool->Acquire(deadline);
    for (;;) {
      pqxx::nontransaction tx{*lease};
      const auto row = tx.exec(sql);
      if (!row[0][0].is_null()) {
        const std::uint64_t replayed = ParseLsn(row[0][0].c_str());
        ReportReplayed(shard, replica.name, replayed);
        const bool finished = wanted.xid == 0 || row[0][1].as<bool>() ||
                              (wanted.horizon != 0 && !row[0][2].is_null() && row[0][2].as<bool>());
        if (replayed >= wanted.lsn && finished) return true;
      }
      if (Clock::now() + pause >= deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5'000));
    }
  } catch (const std::exception& e) {
    ReportFailure(shard, replica.name, RedactDsn(detail::FirstLine(e.what())));
    return false;
  }
}

std::vector<ReplicaStatus> ReplicaMonitor::Status() const {
  std::vector<ReplicaStatus> all;
  const auto now = Clock::now();
  for (int index = 0; index < impl_->resolver.ShardCount(); ++index) {
    const ShardId shard{index};
    const Impl::ShardState& s = impl_->State(shard);
    const ShardServers& servers = impl_->resolver.Servers(shard);
    std::lock_guard lock(s.mutex);
    for (const ShardServer& replica : servers.replicas) {
      const MemberState& m = s.members[static_cast<std::size_t>(replica.member)];
      ReplicaStatus r;
      r.shard = shard;
      r.name = m.name;
      r.dsn = m.dsn;
      r.reachable = m.probed_ok && !m.failed_by_read && now - m.measured <= impl_->options.silence_limit;
      r.in_recovery = m.in_recovery;
      r.replay_paused = m.replay_paused;
      r.replay_lsn = m.replay;
      r.receive_lsn = m.receive;
      if (!s.history.empty()) r.primary_lsn = s.history.back().lsn;
      if (r.primary_lsn && m.replay) {
        const std::uint64_t primary = InsertPositionFloor(*r.primary_lsn);
        r.lag_bytes = primary > *m.replay ? primary - *m.replay : 0;
      }
      if (m.replay) r.lag = impl_->LagBound(s, *m.replay, now);
      // Behind every position kept: the oldest was reached first.
      if (m.replay && !r.lag && !s.history.empty()) {
        r.lag_at_least = std::max(milliseconds(0), std::chrono::floor<milliseconds>(m.asked - s.history.front().by));
      }
      r.replay_age = m.replay_age;
      if (m.probed_ok && m.in_recovery) {
        r.not_following = impl_->NotFollowing(shard, s, m);
        r.follows_primary = r.not_following.empty();
      } else {
        r.not_following =
            m.in_recovery || !m.probed_ok ? "not known: no probe answered" : "not a standby (not in recovery)";
      }
      r.receiver_status =
          m.has_receiver ? m.receiver_status.value_or("running (its status hidden from this role)") : "none";
      r.timeline = m.received_tli;
      if (s.history_of == servers.primary.member) r.primary_timeline = s.timeline;
      r.slot = m.slot;
      r.measured_at = m.measured_wall;
      r.error = r.reachable ? std::string() : m.error.empty() ? "no probe answered lately" : m.error;
      r.probes = m.probes;
      r.probe_failures = m.failures;
      r.probe_time = m.probe_time;
      all.push_back(std::move(r));
    }
  }
  return all;
}

void ReplicaMonitor::ProbeNow() {
  std::unique_lock lock(impl_->wake_mutex);
  const std::uint64_t target = ++impl_->round;
  impl_->wake.notify_all();
  const auto limit = Clock::now() + 2 * impl_->options.probe_timeout + std::chrono::seconds(1);
  impl_->round_done.wait_until(lock, limit, [&] {
    return std::all_of(impl_->probes.begin(), impl_->probes.end(),
                       [&](const auto& p) { return p->done_round >= target; });
  });
}

void ReplicaMonitor::ProbeUntilLagKnown(milliseconds bound) {
  const auto waiting = [this] {
    const auto all = Status();
    return std::any_of(all.begin(), all.end(),
                       [](const ReplicaStatus& r) { return r.reachable && r.in_recovery && r.primary_lsn && !r.lag; });
  };
  ProbeNow();
  // Every position of the primary in the history was reached by now.
  const auto deadline = Clock::now() + bound;
  // The last round starts at the deadline: a replica behind then is behind
  // by at least `bound`.
  for (auto round = Clock::now(); round < deadline && waiting();) {
    std::this_thread::sleep_until(std::min(round + milliseconds(10), deadline));
    round = Clock::now();
    ProbeNow();
  }
}

}  // namespace shardkit
