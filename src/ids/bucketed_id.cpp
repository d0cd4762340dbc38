// IDs that carry their customer's bucket (bucketed_id.hpp).
#include "shardkit/ids/bucketed_id.hpp"

#include <fmt/format.h>

#include "ids/tick_sequencer.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ids/worker_lease.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {

namespace {

constexpr int kSequenceShift = kBucketedIdBucketBits;                   // 6
constexpr int kWorkerShift = kSequenceShift + kBucketedIdSequenceBits;  // 14
constexpr int kTimestampShift = kWorkerShift + kBucketedIdWorkerBits;   // 22
constexpr std::uint64_t kSequenceMask = (std::uint64_t{1} << kBucketedIdSequenceBits) - 1;

int LeaseWorkerId(const std::shared_ptr<WorkerLease>& lease) {
  if (!lease) throw IdGeneratorError("bucketed ID generator: the worker-id lease is null");
  return lease->WorkerId();
}

}  // namespace

BucketedIdGenerator::BucketedIdGenerator(int worker_id, SnowflakeOptions options)
    : worker_id_(worker_id),
      sequencer_(std::make_unique<detail::TickSequencer>("bucketed ID", worker_id, kBucketedIdWorkerBits,
                                                         kBucketedIdSequenceBits, std::move(options), nullptr)) {}

BucketedIdGenerator::BucketedIdGenerator(std::shared_ptr<WorkerLease> lease, SnowflakeOptions options)
    : worker_id_(LeaseWorkerId(lease)),
      sequencer_(std::make_unique<detail::TickSequencer>("bucketed ID", worker_id_, kBucketedIdWorkerBits,
                                                         kBucketedIdSequenceBits, std::move(options),
                                                         std::move(lease))) {}

BucketedIdGenerator::~BucketedIdGenerator() = default;

std::int64_t BucketedIdGenerator::Next(BucketId bucket) {
  if (ToInt(bucket) < 0 || ToInt(bucket) >= kBucketCount) {
    throw IdGeneratorError(
        fmt::format("bucketed ID generator: bucket {} is out of range 0..{}", bucket, kBucketCount - 1));
  }
  const std::uint64_t tick = sequencer_->Next();  // ms << 8 | sequence
  const std::uint64_t ms = tick >> kBucketedIdSequenceBits;
  return static_cast<std::int64_t>((ms << kTimestampShift) | (static_cast<std::uint64_t>(worker_id_) << kWorkerShift) |
                                   ((tick & kSequenceMask) << kSequenceShift) |
                                   static_cast<std::uint64_t>(ToInt(bucket)));
}

std::int64_t BucketedIdGenerator::EpochUnixMs() const noexcept {
  return sequencer_->EpochUnixMs();
}

ShardId ShardOfId(const BucketDirectory& directory, std::int64_t id) {
  if (id < 0) {
    throw IdFormatError(std::to_string(id),
                        fmt::format("{} is not a bucketed ID (they are positive): cannot route it to a shard", id));
  }
  return directory.ShardOf(BucketOfId(id));
}

BucketedIdParts DecodeBucketedId(std::int64_t id, std::int64_t epoch_unix_ms) {
  if (id < 0) {
    throw IdFormatError(std::to_string(id),
                        fmt::format("{} is not a bucketed ID: the sign bit is always 0 (IDs are positive)", id));
  }
  const auto bits = static_cast<std::uint64_t>(id);
  BucketedIdParts parts;
  parts.unix_ms = static_cast<std::int64_t>(bits >> kTimestampShift) + epoch_unix_ms;
  parts.bucket = BucketOfId(id);
  parts.worker_id = static_cast<int>((bits >> kWorkerShift) & BucketedIdGenerator::kMaxWorkerId);
  parts.sequence = static_cast<int>((bits >> kSequenceShift) & kSequenceMask);
  return parts;
}

std::int64_t ComposeBucketedId(const BucketedIdParts& parts, std::int64_t epoch_unix_ms) {
  const std::int64_t ms = parts.unix_ms - epoch_unix_ms;
  const std::string what = fmt::format("{{unix_ms {}, bucket {}, worker {}, sequence {}}}", parts.unix_ms, parts.bucket,
                                       parts.worker_id, parts.sequence);
  if (ms < 0 || ms > detail::TickSequencer::kMaxMs) {
    throw IdFormatError(what, fmt::format("bucketed ID {}: the time is outside the 41-bit range from the epoch {}",
                                          what, FormatUnixMsUtc(epoch_unix_ms)));
  }
  if (ToInt(parts.bucket) < 0 || ToInt(parts.bucket) >= kBucketCount) {
    throw IdFormatError(what, fmt::format("bucketed ID {}: bucket must be 0..{}", what, kBucketCount - 1));
  }
  if (parts.worker_id < 0 || parts.worker_id > BucketedIdGenerator::kMaxWorkerId) {
    throw IdFormatError(what, fmt::format("bucketed ID {}: worker id must be 0..255", what));
  }
  if (parts.sequence < 0 || parts.sequence >= BucketedIdGenerator::kIdsPerMs) {
    throw IdFormatError(what, fmt::format("bucketed ID {}: sequence must be 0..255", what));
  }
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(ms) << kTimestampShift) |
                                   (static_cast<std::uint64_t>(parts.worker_id) << kWorkerShift) |
                                   (static_cast<std::uint64_t>(parts.sequence) << kSequenceShift) |
                                   static_cast<std::uint64_t>(ToInt(parts.bucket)));
}

}  // namespace shardkit
