// shardkit/ids/snowflake.hpp — 64-bit time-ordered IDs (Twitter's Snowflake layout).
//
//   bit 63    62 ............ 22   21 ...... 12   11 ...... 0
//   0       | 41 bits ms since   | 10 bits      | 12 bits
//           | the epoch          | worker id    | sequence
//
// 41 bits of milliseconds last 69.7 years from the epoch (default
// 2024-01-01T00:00:00Z, so until 2093); 1024 workers; 4096 IDs per
// millisecond per worker (4,096,000 per second). Fits a bigint column and
// sorts by time.
//
//   shardkit::SnowflakeGenerator ids{7};                   // configured worker id 7
//   shardkit::SnowflakeGenerator ids{lease};               // or a leased one (worker_lease.hpp)
//   std::int64_t order_id = ids.Next();
//   auto parts = shardkit::DecodeSnowflake(order_id);     // {unix_ms, worker_id 7, sequence}
//
// Next() is thread-safe and lock-free: one 64-bit atomic holds the last
// (millisecond, sequence) pair and is advanced by compare-and-swap. When 4096
// IDs of a millisecond are used up it waits for the next millisecond. If the
// clock steps back by up to max_clock_step_back it waits for the clock to
// return to the last millisecond used; beyond that it throws IdGeneratorError
// naming the size of the step (never a duplicate). A leased generator checks
// the lease's local deadline with every ID, after reading the clock, so no
// ID carries a time after the deadline. In a child process after
// fork() the generator refuses to issue (the child would share the parent's
// worker id): create generators after forking.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "shardkit/ids/id_clock.hpp"

namespace shardkit {

class WorkerLease;

// 2024-01-01T00:00:00Z.
inline constexpr std::int64_t kDefaultIdEpochUnixMs = 1'704'067'200'000;

// Options of SnowflakeGenerator and BucketedIdGenerator.
struct SnowflakeOptions {
  // IDs count milliseconds from here. All generators writing one column must
  // agree on it (and so must DecodeSnowflake).
  std::int64_t epoch_unix_ms = kDefaultIdEpochUnixMs;
  // A clock step back up to this is waited out; a larger one throws.
  std::chrono::milliseconds max_clock_step_back{10};
  std::shared_ptr<IdClock> clock;  // null: the system clock
};

namespace detail {
class TickSequencer;
}

class SnowflakeGenerator {
 public:
  static constexpr int kTimestampBits = 41;
  static constexpr int kWorkerBits = 10;
  static constexpr int kSequenceBits = 12;
  static constexpr int kMaxWorkerId = (1 << kWorkerBits) - 1;  // 1023
  static constexpr int kIdsPerMs = 1 << kSequenceBits;         // 4096

  // A configured worker id in 0..1023; IdGeneratorError otherwise. The caller
  // guarantees no other process uses it (prefer a lease).
  explicit SnowflakeGenerator(int worker_id, SnowflakeOptions options = {});
  // The lease's worker id; stops issuing when the lease is no longer valid.
  // IdGeneratorError if the id is out of range or the lease already feeds
  // another generator.
  explicit SnowflakeGenerator(std::shared_ptr<WorkerLease> lease, SnowflakeOptions options = {});
  ~SnowflakeGenerator();
  SnowflakeGenerator(const SnowflakeGenerator&) = delete;
  SnowflakeGenerator& operator=(const SnowflakeGenerator&) = delete;

  // Throws IdGeneratorError: clock stepped back beyond tolerance, clock
  // before the epoch or past its 69 years, lease not valid, forked child.
  [[nodiscard]] std::int64_t Next();

  [[nodiscard]] int WorkerId() const noexcept { return worker_id_; }
  [[nodiscard]] std::int64_t EpochUnixMs() const noexcept;

 private:
  int worker_id_;
  std::unique_ptr<detail::TickSequencer> sequencer_;
};

struct SnowflakeParts {
  std::int64_t unix_ms = 0;  // the timestamp, as Unix milliseconds
  int worker_id = 0;
  int sequence = 0;
  friend bool operator==(const SnowflakeParts&, const SnowflakeParts&) = default;
};

// Splits an ID; IdFormatError if it is negative (bit 63 is always 0).
[[nodiscard]] SnowflakeParts DecodeSnowflake(std::int64_t id, std::int64_t epoch_unix_ms = kDefaultIdEpochUnixMs);
// The inverse; IdFormatError if a part does not fit its bits. With worker 0
// and sequence 0 it is the smallest ID of a millisecond, handy for
// "WHERE order_id >= $1" time-range scans.
[[nodiscard]] std::int64_t ComposeSnowflake(const SnowflakeParts& parts,
                                            std::int64_t epoch_unix_ms = kDefaultIdEpochUnixMs);

}  // namespace shardkit
