// The (millisecond, sequence) state machine shared by SnowflakeGenerator and
// BucketedIdGenerator (private to shardkit).
//
// One 64-bit atomic holds (ms since epoch << sequence_bits) | sequence of the
// last ID handed out. Next() loads it, then reads the clock — in that order:
// the stored millisecond came from a clock reading that happened before the
// CAS we observed, so our reading is never older and concurrent callers
// never look like a clock step back — and swaps in the successor. Callers
// compose the ID around the returned value.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ids/cycle_clock.hpp"
#include "ids/fork_generation.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ids/id_clock.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"

namespace shardkit::detail {

class TickSequencer {
 public:
  static constexpr int kTimestampBits = 41;
  static constexpr std::int64_t kMaxMs = (std::int64_t{1} << kTimestampBits) - 1;

  // `kind` names the generator in messages ("Snowflake", "bucketed ID").
  TickSequencer(std::string kind, int worker_id, int worker_bits, int sequence_bits, SnowflakeOptions options,
                std::shared_ptr<WorkerLease> lease)
      : kind_(std::move(kind)),
        worker_id_(worker_id),
        sequence_bits_(sequence_bits),
        sequence_mask_((std::uint64_t{1} << sequence_bits) - 1),
        epoch_ms_(options.epoch_unix_ms),
        tolerance_ms_(options.max_clock_step_back.count()),
        clock_(std::move(options.clock)),
        lease_(std::move(lease)),
        fork_generation_(ForkGeneration()) {
    if (worker_id < 0 || worker_id >= (1 << worker_bits)) {
      throw IdGeneratorError(fmt::format("{} generator: worker id {} is out of range 0..{} ({} bits){}", kind_,
                                         worker_id, (1 << worker_bits) - 1, worker_bits,
                                         lease_ ? "; claim the lease with a smaller worker_count" : ""));
    }
    if (epoch_ms_ < 0) {
      throw IdGeneratorError(fmt::format("{} generator: epoch_unix_ms {} is before 1970", kind_, epoch_ms_));
    }
    if (tolerance_ms_ < 0) {
      throw IdGeneratorError(fmt::format("{} generator: max_clock_step_back must not be negative", kind_));
    }
    if (lease_) {
      if (!lease_->Attach()) {
        throw IdGeneratorError(
            fmt::format("{} generator: the lease of worker id {} already feeds another generator; two generators with "
                        "one worker id would issue duplicates: share that generator instead",
                        kind_, worker_id));
      }
      // Never issue in a millisecond an earlier holder (or an earlier
      // generator on this lease) may have used.
      const std::int64_t floor_ms = std::max(lease_->IssueFloorUnixMs(), lease_->IssuedUntilUnixMs()) - epoch_ms_;
      if (floor_ms >= 0) {
        floor_ms_ = static_cast<std::uint64_t>(std::min(floor_ms, kMaxMs));
        state_.store((floor_ms_ << sequence_bits_) | sequence_mask_, std::memory_order_release);
        floor_wait_ms_ = std::max(tolerance_ms_, lease_->Options().safety_margin.count());
      }
    }
  }

  ~TickSequencer() {
    if (lease_) lease_->Detach();
  }

  TickSequencer(const TickSequencer&) = delete;
  TickSequencer& operator=(const TickSequencer&) = delete;

  [[nodiscard]] std::int64_t EpochUnixMs() const noexcept { return epoch_ms_; }

  // (ms since epoch << sequence_bits) | sequence, now owned by the caller.
  [[nodiscard]] std::uint64_t Next() {
    if (CurrentForkGeneration() != fork_generation_) ThrowForked();
    std::uint64_t current = state_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint64_t now_ms = NowMsSinceEpoch();
      const std::uint64_t last_ms = current >> sequence_bits_;
      std::uint64_t next = 0;
      if (now_ms > last_ms) {
        next = now_ms << sequence_bits_;
      } else if (now_ms == last_ms) {
        if ((current & sequence_mask_) == sequence_mask_) {  // this millisecond is used up
          WaitForMs(last_ms + 1);
          current = state_.load(std::memory_order_acquire);
          continue;
        }
        next = current + 1;
      } else {
        const std::uint64_t back = last_ms - now_ms;
        const bool at_floor = last_ms == floor_ms_ && (current & sequence_mask_) == sequence_mask_;
        const std::int64_t limit = at_floor ? floor_wait_ms_ : tolerance_ms_;
        if (back > static_cast<std::uint64_t>(limit)) ThrowStepBack(last_ms, now_ms, at_floor);
        WaitForMs(last_ms);
        current = state_.load(std::memory_order_acquire);
        continue;
      }
      if (state_.compare_exchange_weak(current, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (lease_) {
          if (now_ms != last_ms) lease_->NoteIssued(static_cast<std::int64_t>(now_ms) + epoch_ms_);
          // Checked after the clock was read, not before: however long this
          // thread was preempted, the ID's millisecond was read while the
          // lease was still valid, so it lies before the server's
          // lease_until (expiry) or the floor written by Release().
          if (WorkerLease::Clock::now() >= lease_->IssueDeadline()) ThrowLeaseInvalid();
        }
        return next;
      }
    }
  }

 private:
  std::int64_t NowUnixNanos() noexcept { return clock_ ? clock_->NowUnixNanos() : RealtimeNanos(); }

  std::uint64_t NowMsSinceEpoch() {
    const std::int64_t ns = NowUnixNanos();
    const std::int64_t unix_ms = ns >= 0 ? ns / 1'000'000 : -((-ns + 999'999) / 1'000'000);
    const std::int64_t since = unix_ms - epoch_ms_;
    if (since < 0) {
      throw IdGeneratorError(fmt::format(
          "{} generator (worker id {}): the clock reads {}, before the ID epoch {}; fix the clock or use an "
          "earlier epoch_unix_ms",
          kind_, worker_id_, FormatUnixMsUtc(unix_ms), FormatUnixMsUtc(epoch_ms_)));
    }
    if (since > kMaxMs) {
      throw IdGeneratorError(fmt::format(
          "{} generator (worker id {}): the clock reads {}, past the end of the 41-bit timestamp range that "
          "started at the epoch {} (69.7 years); the IDs need a later epoch and a migration",
          kind_, worker_id_, FormatUnixMsUtc(unix_ms), FormatUnixMsUtc(epoch_ms_)));
    }
    return static_cast<std::uint64_t>(since);
  }

  void WaitForMs(std::uint64_t ms_since_epoch) {
    const std::int64_t target = (static_cast<std::int64_t>(ms_since_epoch) + epoch_ms_) * 1'000'000;
    if (clock_) {
      clock_->WaitUntil(target);
    } else {
      system_clock_.WaitUntil(target);
    }
  }

  [[noreturn]] void ThrowStepBack(std::uint64_t last_ms, std::uint64_t now_ms, bool at_floor) const {
    const auto last_unix = static_cast<std::int64_t>(last_ms) + epoch_ms_;
    const auto now_unix = static_cast<std::int64_t>(now_ms) + epoch_ms_;
    const auto back = static_cast<std::int64_t>(last_ms - now_ms);
    if (at_floor) {
      throw IdGeneratorError(fmt::format(
          "{} generator (worker id {}): this host's clock reads {}, {} ms behind {}, the last millisecond the "
          "worker id's previous holder may have used (more than the {} ms this generator may wait); issuing now "
          "could duplicate its IDs. Synchronise this host's clock with the database server's (NTP)",
          kind_, worker_id_, FormatUnixMsUtc(now_unix), back, FormatUnixMsUtc(last_unix), floor_wait_ms_));
    }
    throw IdGeneratorError(fmt::format(
        "{} generator (worker id {}): the clock stepped back {} ms (from {} to {}), more than the {} ms "
        "tolerated (max_clock_step_back); no ID issued, since IDs in milliseconds already used could repeat. "
        "Check the host's time synchronisation, or raise max_clock_step_back to wait such steps out",
        kind_, worker_id_, back, FormatUnixMsUtc(last_unix), FormatUnixMsUtc(now_unix), tolerance_ms_));
  }

  [[noreturn]] void ThrowLeaseInvalid() const {
    const char* why = lease_->Lost() ? "was lost (another process claimed it after it expired)"
                                     : "is past its local deadline (renewals failed, or it was released)";
    throw IdGeneratorError(fmt::format(
        "{} generator: the lease of worker id {} (id space '{}', claim_version {}) {}; no more IDs are issued "
        "with it, since another process may hold the id now. Claim a new lease and create a new generator",
        kind_, worker_id_, lease_->Options().id_space, lease_->ClaimVersion(), why));
  }

  [[noreturn]] void ThrowForked() const {
    throw IdGeneratorError(fmt::format(
        "{} generator (worker id {}): called in a child process after fork(); the child shares the parent's "
        "worker id and would issue duplicates. Create generators (and claim leases) after forking",
        kind_, worker_id_));
  }

  const std::string kind_;
  const int worker_id_;
  const int sequence_bits_;
  const std::uint64_t sequence_mask_;
  const std::int64_t epoch_ms_;
  const std::int64_t tolerance_ms_;
  const std::shared_ptr<IdClock> clock_;
  const std::shared_ptr<WorkerLease> lease_;
  const std::uint64_t fork_generation_;
  SystemIdClock system_clock_;
  std::uint64_t floor_ms_ = ~std::uint64_t{0};  // none
  std::int64_t floor_wait_ms_ = 0;
  alignas(64) std::atomic<std::uint64_t> state_{0};
};

}  // namespace shardkit::detail
