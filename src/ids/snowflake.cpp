// Snowflake IDs (snowflake.hpp).
#include "shardkit/ids/snowflake.hpp"

#include <fmt/format.h>

#include "ids/tick_sequencer.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ids/worker_lease.hpp"

namespace shardkit {

namespace {

constexpr int kWorkerShift = SnowflakeGenerator::kSequenceBits;
constexpr int kTimestampShift = SnowflakeGenerator::kSequenceBits + SnowflakeGenerator::kWorkerBits;
constexpr std::uint64_t kSequenceMask = (std::uint64_t{1} << SnowflakeGenerator::kSequenceBits) - 1;

int LeaseWorkerId(const std::shared_ptr<WorkerLease>& lease) {
  if (!lease) throw IdGeneratorError("Snowflake generator: the worker-id lease is null");
  return lease->WorkerId();
}

}  // namespace

SnowflakeGenerator::SnowflakeGenerator(int worker_id, SnowflakeOptions options)
    : worker_id_(worker_id),
      sequencer_(std::make_unique<detail::TickSequencer>("Snowflake", worker_id, kWorkerBits, kSequenceBits,
                                                         std::move(options), nullptr)) {}

SnowflakeGenerator::SnowflakeGenerator(std::shared_ptr<WorkerLease> lease, SnowflakeOptions options)
    : worker_id_(LeaseWorkerId(lease)),
      sequencer_(std::make_unique<detail::TickSequencer>("Snowflake", worker_id_, kWorkerBits, kSequenceBits,
                                                         std::move(options), std::move(lease))) {}

SnowflakeGenerator::~SnowflakeGenerator() = default;

std::int64_t SnowflakeGenerator::Next() {
  const std::uint64_t tick = sequencer_->Next();  // ms << 12 | sequence
  const std::uint64_t ms = tick >> kSequenceBits;
  return static_cast<std::int64_t>((ms << kTimestampShift) | (static_cast<std::uint64_t>(worker_id_) << kWorkerShift) |
                                   (tick & kSequenceMask));
}

std::int64_t SnowflakeGenerator::EpochUnixMs() const noexcept {
  return sequencer_->EpochUnixMs();
}

SnowflakeParts DecodeSnowflake(std::int64_t id, std::int64_t epoch_unix_ms) {
  if (id < 0) {
    throw IdFormatError(std::to_string(id),
                        fmt::format("{} is not a Snowflake ID: the sign bit is always 0 (IDs are positive)", id));
  }
  const auto bits = static_cast<std::uint64_t>(id);
  SnowflakeParts parts;
  parts.unix_ms = static_cast<std::int64_t>(bits >> kTimestampShift) + epoch_unix_ms;
  parts.worker_id = static_cast<int>((bits >> kWorkerShift) & SnowflakeGenerator::kMaxWorkerId);
  parts.sequence = static_cast<int>(bits & kSequenceMask);
  return parts;
}

std::int64_t ComposeSnowflake(const SnowflakeParts& parts, std::int64_t epoch_unix_ms) {
  const std::int64_t ms = parts.unix_ms - epoch_unix_ms;
  const std::string what =
      fmt::format("{{unix_ms {}, worker {}, sequence {}}}", parts.unix_ms, parts.worker_id, parts.sequence);
  if (ms < 0 || ms > detail::TickSequencer::kMaxMs) {
    throw IdFormatError(what, fmt::format("Snowflake {}: the time is outside the 41-bit range from the epoch {}", what,
                                          FormatUnixMsUtc(epoch_unix_ms)));
  }
  if (parts.worker_id < 0 || parts.worker_id > SnowflakeGenerator::kMaxWorkerId) {
    throw IdFormatError(what, fmt::format("Snowflake {}: worker id must be 0..1023", what));
  }
  if (parts.sequence < 0 || parts.sequence >= SnowflakeGenerator::kIdsPerMs) {
    throw IdFormatError(what, fmt::format("Snowflake {}: sequence must be 0..4095", what));
  }
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(ms) << kTimestampShift) |
                                   (static_cast<std::uint64_t>(parts.worker_id) << kWorkerShift) |
                                   static_cast<std::uint64_t>(parts.sequence));
}

}  // namespace shardkit
