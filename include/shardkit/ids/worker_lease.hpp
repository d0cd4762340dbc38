// shardkit/ids/worker_lease.hpp — worker ids that two processes cannot hold at once.
//
// Two processes with the same Snowflake worker id make duplicate IDs: the
// classic production bug (a copied config, a scaled-out deployment). A
// WorkerLease claims a free or expired worker id from one PostgreSQL table
// (sql/004_worker_ids.sql) shared by the whole fleet — one table for all
// shards, in the catalog database ([catalog] dsn), never one per shard:
//
//   auto lease = shardkit::WorkerLease::Claim(*config.catalog_dsn, {.id_space = "orders"});
//   shardkit::SnowflakeGenerator ids{lease};    // worker id = lease->WorkerId()
//   std::int64_t order_id = ids.Next();          // throws once the lease is not valid
//   ...
//   lease->Release();                            // on shutdown (the destructor does it too)
//
// How it stays safe:
//  - Claiming takes the lowest id whose lease expired or was released, with
//    SELECT ... FOR UPDATE SKIP LOCKED (or inserts a never-used id with
//    ON CONFLICT DO NOTHING), and bumps claim_version, the fencing token.
//  - lease_until is set by the server (clock_timestamp() + lease_duration).
//    Locally the lease is valid until the time the claim was *sent* plus
//    lease_duration minus safety_margin, on the steady clock: always before
//    the server's lease_until, so the server never hands the id to someone
//    else while this process may still issue with it.
//  - A background thread renews every renew_interval. If renewals fail (the
//    database is unreachable) the local deadline passes and generators stop
//    issuing — they throw IdGeneratorError — rather than risk a duplicate.
//    A renewal that finds claim_version changed marks the lease lost at once.
//  - A new holder must not issue in a millisecond the previous holder may
//    have used (its clock may be behind the other host's). On release the
//    row's lease_until records the last millisecond issued; on expiry
//    lease_until itself bounds it. IssueFloorUnixMs() hands it to the
//    generator, which only issues in later milliseconds.
//  Assumption: host clocks agree with the database server's within
//  safety_margin (NTP keeps them within milliseconds).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "shardkit/core/dsn.hpp"
#include "shardkit/core/thread_annotations.hpp"

namespace shardkit {

namespace detail {
struct LeaseConnection;
class TickSequencer;
}  // namespace detail

struct WorkerLeaseOptions {
  // Independent ranges of worker ids, one per ID family: IDs of different
  // layouts or epochs must never share a column, so they need not share ids.
  std::string id_space = "default";
  // Ids 0..worker_count-1: 1024 for Snowflake (10 bits), 256 for bucketed IDs.
  int worker_count = 1024;
  std::string table = "shardkit_worker_ids";
  std::chrono::milliseconds lease_duration{30'000};
  std::chrono::milliseconds safety_margin{5'000};
  std::chrono::milliseconds renew_interval{10'000};
  bool renew_in_background = true;
  // Written to the table for people looking at it; default "<hostname>:<pid>".
  std::string owner;
};

// Thread-safe: generators on any thread check it while its renewer runs.
class WorkerLease {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to `dsn` (the lease keeps this connection for renewals) and
  // claims a worker id. Throws ConfigError for bad options, IdGeneratorError
  // when every id of the space is held (naming the space and the count) or
  // the table cannot be reached (naming the redacted dsn).
  [[nodiscard]] static std::shared_ptr<WorkerLease> Claim(const Dsn& dsn, WorkerLeaseOptions options = {});

  // Construction goes through Claim(): only WorkerLease can make the tag.
  class PrivateTag {
    explicit PrivateTag() = default;
    friend class WorkerLease;
  };
  WorkerLease(PrivateTag, Dsn dsn, WorkerLeaseOptions options);
  ~WorkerLease();  // stops renewing and releases the id (best effort)
  WorkerLease(const WorkerLease&) = delete;
  WorkerLease& operator=(const WorkerLease&) = delete;

  [[nodiscard]] int WorkerId() const noexcept { return worker_id_; }
  // The fencing token: increases with every claim of this id.
  [[nodiscard]] std::int64_t ClaimVersion() const noexcept { return claim_version_; }
  [[nodiscard]] const WorkerLeaseOptions& Options() const noexcept { return options_; }

  // Until when IDs may be issued (local steady clock); the past once lost or released.
  [[nodiscard]] Clock::time_point IssueDeadline() const noexcept {
    // seq_cst: a generator's check and Release()'s store are totally ordered.
    return Clock::time_point(Clock::duration(deadline_ticks_.load(std::memory_order_seq_cst)));
  }
  [[nodiscard]] bool Valid() const noexcept { return Clock::now() < IssueDeadline(); }
  [[nodiscard]] bool Lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // Why the last background renewal failed, if it did.
  [[nodiscard]] std::optional<std::string> LastRenewError() const;

  // Extends the lease now. Throws IdGeneratorError: with Lost() true if
  // another process claimed the id meanwhile (final), with Lost() false if
  // the database could not be reached (the lease stays valid until its
  // deadline; retry).
  void Renew();
  // Stops issuing and frees the id for another process. Idempotent. Throws
  // IdGeneratorError if the release cannot be written (the id then frees
  // itself when its lease runs out).
  void Release();

  // IDs with this worker id must be in later milliseconds than this.
  [[nodiscard]] std::int64_t IssueFloorUnixMs() const noexcept { return floor_unix_ms_; }
  // The highest millisecond a generator on this lease issued (Unix ms).
  [[nodiscard]] std::int64_t IssuedUntilUnixMs() const noexcept {
    return issued_until_ms_.load(std::memory_order_acquire);
  }

 private:
  // Only the generators' shared core attaches: one generator per lease (two
  // would duplicate IDs), and it records what it issued.
  friend class detail::TickSequencer;
  [[nodiscard]] bool Attach() noexcept;  // false if a generator is already attached
  void Detach() noexcept;
  void NoteIssued(std::int64_t unix_ms) noexcept;

  void Connect();
  void ClaimNow();
  void RenewLoop(std::stop_token stop);
  void SetDeadline(Clock::time_point deadline) noexcept;
  void MarkLost() noexcept;
  std::string Describe() const;

  const Dsn dsn_;
  WorkerLeaseOptions options_;
  int worker_id_ = -1;
  std::int64_t claim_version_ = 0;
  std::int64_t floor_unix_ms_ = 0;

  std::atomic<Clock::rep> deadline_ticks_{0};
  std::atomic<bool> lost_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> attached_{false};
  std::atomic<std::int64_t> issued_until_ms_{0};

  mutable std::mutex mutex_;
  std::unique_ptr<detail::LeaseConnection> connection_ SHARDKIT_GUARDED_BY(mutex_);
  std::optional<std::string> last_error_ SHARDKIT_GUARDED_BY(mutex_);
  std::mutex wakeup_mutex_;
  std::condition_variable_any renew_wakeup_;
  std::jthread renewer_;  // last member: stopped and joined first
};

}  // namespace shardkit
