// Worker-id leases from a PostgreSQL table (worker_lease.hpp, sql/004_worker_ids.sql).
#include "shardkit/ids/worker_lease.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "ids/cycle_clock.hpp"
#include "ids/lease_support.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

namespace {

void Validate(const WorkerLeaseOptions& o) {
  if (o.id_space.empty()) throw ConfigError("worker_lease.id_space", "must not be empty");
  if (o.table.empty()) throw ConfigError("worker_lease.table", "must not be empty");
  if (o.worker_count < 1 || o.worker_count > 1024) {
    throw ConfigError(
        "worker_lease.worker_count",
        fmt::format("{} is outside 1..1024 (1024 for Snowflake IDs, 256 for bucketed IDs)", o.worker_count));
  }
  detail::ValidateLeaseTimings({o.lease_duration, o.safety_margin, o.renew_interval}, "worker_lease");
}

}  // namespace

WorkerLease::WorkerLease(PrivateTag, Dsn dsn, WorkerLeaseOptions options)
    : dsn_(std::move(dsn)), options_(std::move(options)) {
  if (options_.owner.empty()) options_.owner = detail::DefaultLeaseOwner();
}

std::shared_ptr<WorkerLease> WorkerLease::Claim(const Dsn& dsn, WorkerLeaseOptions options) {
  Validate(options);
  auto lease = std::make_shared<WorkerLease>(PrivateTag{}, dsn, std::move(options));
  {
    std::lock_guard lock(lease->mutex_);
    lease->ClaimNow();
  }
  if (lease->options_.renew_in_background) {
    WorkerLease* self = lease.get();  // the thread is joined in the destructor
    lease->renewer_ = std::jthread([self](std::stop_token stop) { self->RenewLoop(std::move(stop)); });
  }
  return lease;
}

WorkerLease::~WorkerLease() {
  if (renewer_.joinable()) {
    renewer_.request_stop();
    renewer_.join();
  }
  try {
    Release();
  } catch (...) {
    // Best effort: an unreleased lease expires by itself after lease_duration.
  }
}

std::string WorkerLease::Describe() const {
  return fmt::format("worker id {} (id space '{}', claim_version {}, table {} at {})", worker_id_, options_.id_space,
                     claim_version_, options_.table, dsn_);
}

void WorkerLease::Connect() {
  if (connection_ && connection_->connection.is_open()) return;
  connection_.reset();
  try {
    connection_ = std::make_unique<detail::LeaseConnection>(detail::ConnectForLeases(dsn_, options_.safety_margin));
  } catch (const std::exception& e) {
    connection_.reset();
    throw IdGeneratorError(
        fmt::format("worker-id lease: cannot connect to {} ({}); no worker id can be claimed or "
                    "renewed until it is reachable",
                    dsn_, RedactDsn(e.what())));
  }
}

void WorkerLease::ClaimNow() {
  const std::string& space = options_.id_space;
  const auto count = options_.worker_count;
  const auto duration_ms = static_cast<long long>(options_.lease_duration.count());
  for (int attempt = 0; attempt < 16; ++attempt) {
    Connect();
    const auto sent = Clock::now();  // before the server sets lease_until
    try {
      pqxx::work tx{connection_->connection, "claim_worker_id"};
      const std::string table = tx.quote_name(options_.table);
      // A released or expired id, lowest first. SKIP LOCKED: concurrent
      // claimants take different rows instead of queueing on one.
      pqxx::result row = tx.exec_params(fmt::format(R"(
WITH candidate AS (
  SELECT worker_id, lease_until AS previous_until
    FROM {0}
   WHERE id_space = $1 AND worker_id < $2::integer
     AND (owner IS NULL OR lease_until < clock_timestamp())
   ORDER BY worker_id
   LIMIT 1
   FOR UPDATE SKIP LOCKED)
UPDATE {0} AS w
   SET owner = $3,
       lease_until = clock_timestamp() + make_interval(secs => $4::double precision / 1000),
       claim_version = w.claim_version + 1,
       claimed_at = clock_timestamp()
  FROM candidate
 WHERE w.id_space = $1 AND w.worker_id = candidate.worker_id
RETURNING w.worker_id, w.claim_version, ceil(extract(epoch FROM candidate.previous_until) * 1000)::bigint)",
                                                    table),
                                        space, count, options_.owner, duration_ms);
      if (row.empty()) {
        // An id never used in this space. A concurrent claimant inserting the
        // same id makes ON CONFLICT skip it: try again.
        row = tx.exec_params(fmt::format(R"(
INSERT INTO {0} (id_space, worker_id, owner, lease_until, claim_version, claimed_at)
SELECT $1, g, $3, clock_timestamp() + make_interval(secs => $4::double precision / 1000), 1, clock_timestamp()
  FROM generate_series(0, $2::integer - 1) AS g
 WHERE NOT EXISTS (SELECT 1 FROM {0} AS w WHERE w.id_space = $1 AND w.worker_id = g)
 ORDER BY g
 LIMIT 1
ON CONFLICT DO NOTHING
RETURNING worker_id, claim_version, 0::bigint)",
                                         table),
                             space, count, options_.owner, duration_ms);
      }
      if (row.empty()) {
        const pqxx::result held =
            tx.exec_params(fmt::format("SELECT count(*) FROM {} WHERE id_space = $1 AND worker_id < $2::integer "
                                       "AND owner IS NOT NULL AND lease_until >= clock_timestamp()",
                                       table),
                           space, count);
        tx.commit();
        if (held[0][0].as<long long>() >= count) {
          throw IdGeneratorError(fmt::format(
              "worker-id lease: all {} worker ids of id space '{}' in table {} at {} are leased; wait for one to "
              "expire or be released, or use another id space",
              count, space, options_.table, dsn_));
        }
        continue;  // lost a race for a row: try again
      }
      tx.commit();
      worker_id_ = row[0][0].as<int>();
      claim_version_ = row[0][1].as<std::int64_t>();
      floor_unix_ms_ = row[0][2].as<std::int64_t>();
      lost_.store(false, std::memory_order_release);
      released_.store(false, std::memory_order_release);
      SetDeadline(
          detail::LocalLeaseDeadline(sent, {options_.lease_duration, options_.safety_margin, options_.renew_interval}));
      return;
    } catch (const IdGeneratorError&) {
      throw;
    } catch (const pqxx::broken_connection& e) {
      connection_.reset();
      throw IdGeneratorError(
          fmt::format("worker-id lease: lost the connection to {} while claiming ({})", dsn_, RedactDsn(e.what())));
    } catch (const pqxx::undefined_table& e) {
      throw IdGeneratorError(
          fmt::format("worker-id lease: table {} does not exist at {}; it belongs "
                      "in the catalog: shardctl migrate creates it (sql/004_worker_ids.sql) ({})",
                      options_.table, dsn_, e.what()));
    } catch (const pqxx::failure& e) {
      throw IdGeneratorError(
          fmt::format("worker-id lease: claiming from table {} at {} failed: {}", options_.table, dsn_, e.what()));
    }
  }
  throw IdGeneratorError(
      fmt::format("worker-id lease: gave up claiming a worker id of id space '{}' after 16 races "
                  "with concurrent claimants; try again",
                  space));
}

void WorkerLease::Renew() {
  std::lock_guard lock(mutex_);
  if (released_.load(std::memory_order_acquire)) {
    throw IdGeneratorError(fmt::format("worker-id lease: {} was released; claim a new one", Describe()));
  }
  if (lost_.load(std::memory_order_acquire)) {
    throw IdGeneratorError(fmt::format("worker-id lease: {} is lost; claim a new one", Describe()));
  }
  try {
    Connect();
    const auto sent = Clock::now();
    pqxx::work tx{connection_->connection, "renew_worker_id"};
    // claim_version is the fencing token: if anyone claimed the id since, it
    // changed, and this process must stop using the id for good.
    const pqxx::result row = tx.exec_params(
        fmt::format("UPDATE {} SET lease_until = clock_timestamp() + make_interval(secs => $5::double precision / "
                    "1000) WHERE id_space = $1 AND worker_id = $2 AND claim_version = $3 AND owner = $4 "
                    "RETURNING 1",
                    tx.quote_name(options_.table)),
        options_.id_space, worker_id_, claim_version_, options_.owner,
        static_cast<long long>(options_.lease_duration.count()));
    tx.commit();
    if (row.empty()) {
      MarkLost();
      last_error_ = "lost: another process claimed the id";
      throw IdGeneratorError(
          fmt::format("worker-id lease: {} was taken over by another process after it expired; "
                      "IDs are no longer issued with it. Claim a new lease",
                      Describe()));
    }
    SetDeadline(
        detail::LocalLeaseDeadline(sent, {options_.lease_duration, options_.safety_margin, options_.renew_interval}));
    last_error_.reset();
  } catch (const IdGeneratorError& e) {
    last_error_ = e.what();
    throw;
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    last_error_ = RedactDsn(e.what());
    throw IdGeneratorError(
        fmt::format("worker-id lease: renewing {} failed ({}); it stays valid until its deadline, "
                    "then generators stop issuing IDs",
                    Describe(), *last_error_));
  }
}

void WorkerLease::Release() {
  std::lock_guard lock(mutex_);
  if (worker_id_ < 0 || released_.exchange(true, std::memory_order_acq_rel)) return;
  // Stop issuing first, then record the last millisecond that may have been
  // used: the next holder starts after it.
  SetDeadline(Clock::time_point::min());
  if (lost_.load(std::memory_order_acquire)) return;  // not ours any more
  const std::int64_t now_ms = detail::RealtimeNanos() / 1'000'000;
  const std::int64_t issued_until = std::max(now_ms, IssuedUntilUnixMs());
  Connect();
  try {
    pqxx::work tx{connection_->connection, "release_worker_id"};
    tx.exec_params(fmt::format("UPDATE {} SET owner = NULL, lease_until = greatest(clock_timestamp(), "
                               "to_timestamp($4::double precision / 1000)) "
                               "WHERE id_space = $1 AND worker_id = $2 AND claim_version = $3",
                               tx.quote_name(options_.table)),
                   options_.id_space, worker_id_, claim_version_, static_cast<long long>(issued_until));
    tx.commit();
  } catch (const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) connection_.reset();
    throw IdGeneratorError(
        fmt::format("worker-id lease: releasing {} failed ({}); no ID is issued with it any more "
                    "and the id expires by itself at the end of its lease",
                    Describe(), RedactDsn(e.what())));
  }
}

std::optional<std::string> WorkerLease::LastRenewError() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

bool WorkerLease::Attach() noexcept {
  bool expected = false;
  return attached_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
}

void WorkerLease::Detach() noexcept {
  attached_.store(false, std::memory_order_release);
}

void WorkerLease::NoteIssued(std::int64_t unix_ms) noexcept {
  std::int64_t seen = issued_until_ms_.load(std::memory_order_relaxed);
  while (seen < unix_ms &&
         !issued_until_ms_.compare_exchange_weak(seen, unix_ms, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

void WorkerLease::SetDeadline(Clock::time_point deadline) noexcept {
  deadline_ticks_.store(deadline.time_since_epoch().count(), std::memory_order_seq_cst);
}

void WorkerLease::MarkLost() noexcept {
  lost_.store(true, std::memory_order_release);
  SetDeadline(Clock::time_point::min());
}

void WorkerLease::RenewLoop(std::stop_token stop) {
  constexpr std::chrono::milliseconds kRetry{1000};
  auto next = Clock::now() + options_.renew_interval;
  for (;;) {
    {
      std::unique_lock lock(wakeup_mutex_);
      renew_wakeup_.wait_until(lock, stop, next, [] { return false; });
    }
    if (stop.stop_requested()) return;
    try {
      Renew();
      next = Clock::now() + options_.renew_interval;
    } catch (const std::exception&) {
      if (Lost() || released_.load(std::memory_order_acquire)) return;  // final
      next = Clock::now() + std::min<std::chrono::milliseconds>(kRetry, options_.renew_interval);
    }
  }
}

}  // namespace shardkit
