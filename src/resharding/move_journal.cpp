// The journal's records and state names, and the small helpers of a run.
#include "resharding/move_run.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <random>

#include "shardkit/errors.hpp"
#include "shardkit/resharding/move.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit {
namespace {

struct StateName {
  MoveState state;
  std::string_view name;
};
constexpr StateName kStateNames[] = {
    {MoveState::kPlanned, "planned"},
    {MoveState::kPrepared, "prepared"},
    {MoveState::kCopying, "copying"},
    {MoveState::kCopied, "copied"},
    {MoveState::kStreaming, "streaming"},
    {MoveState::kRetired, "retired"},
    {MoveState::kOwned, "owned"},
    {MoveState::kFlipped, "flipped"},
    {MoveState::kReplicationDropped, "replication_dropped"},
    {MoveState::kCleaning, "cleaning"},
    {MoveState::kDone, "done"},
    {MoveState::kAborting, "aborting"},
    {MoveState::kAborted, "aborted"},
};

}  // namespace

std::string_view MoveStateName(MoveState state) noexcept {
  for (const auto& s : kStateNames) {
    if (s.state == state) return s.name;
  }
  return "?";
}

std::optional<MoveState> ParseMoveState(std::string_view name) noexcept {
  for (const auto& s : kStateNames) {
    if (s.name == name) return s.state;
  }
  return std::nullopt;
}

bool IsLive(MoveState state) noexcept {
  return state != MoveState::kDone && state != MoveState::kAborted;
}

bool CanAbort(MoveState state) noexcept {
  switch (state) {
    case MoveState::kPlanned:
    case MoveState::kPrepared:
    case MoveState::kCopying:
    case MoveState::kCopied:
    case MoveState::kStreaming:
    case MoveState::kRetired:
    case MoveState::kAborting:
      return true;
    default:
      return false;
  }
}

}  // namespace shardkit

namespace shardkit::detail::mover {

// The effective user (as the server's logs would show the process), not
// $USER, which services and containers often leave unset.
std::string DefaultRequester() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string user;
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr) {
    user = found->pw_name;
  } else {
    user = fmt::format("uid {}", ::geteuid());
  }
  return fmt::format("{}@{} pid {}", user, host, ::getpid());
}

double Ms(Clock::duration d) {
  return static_cast<double>(duration_cast<microseconds>(d).count()) / 1000.0;
}

MoveRecord ToRecord(const pqxx::row& row) {
  MoveRecord r;
  r.move_id = row[0].as<std::int64_t>();
  r.bucket = BucketId{row[1].as<int>()};
  r.source = ShardId{row[2].as<int>()};
  r.target = ShardId{row[3].as<int>()};
  const auto state = ParseMoveState(row[4].c_str());
  if (!state)
    throw MoveError(fmt::format("move {} has an unknown state '{}' in the journal", r.move_id, row[4].c_str()));
  r.state = *state;
  r.token = row[5].as<std::string>();
  if (!row[6].is_null()) r.plan_id = row[6].as<std::int64_t>();
  r.requested_by = row[7].as<std::string>();
  r.created_at = row[8].as<std::string>();
  r.updated_at = row[9].as<std::string>();
  r.finished_at = row[10].as<std::string>();
  if (!row[11].is_null()) r.directory_version = row[11].as<std::int64_t>();
  r.rows_copied = row[12].as<std::int64_t>();
  if (!row[13].is_null()) r.copy_ms = row[13].as<double>();
  if (!row[14].is_null()) r.stall_ms = row[14].as<double>();
  r.rows_deleted = row[15].as<std::int64_t>();
  r.error = row[16].as<std::string>();
  return r;
}

BucketDirectory DirectoryIn(pqxx::transaction_base& tx, int shard_count) {
  std::vector<std::pair<BucketId, ShardId>> pairs;
  std::int64_t version = 0;
  for (const auto& row : tx.exec("SELECT bucket, shard, version FROM shard_directory ORDER BY bucket")) {
    pairs.emplace_back(BucketId{row[0].as<int>()}, ShardId{row[1].as<int>()});
    version = std::max(version, row[2].as<std::int64_t>());
  }
  if (pairs.empty()) throw CatalogError("the catalog's shard_directory is empty: store a directory first");
  return BucketDirectory::FromRows(pairs, shard_count, version);
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string RandomHex(int digits) {
  std::random_device device;
  std::uniform_int_distribution<unsigned> nibble(0, 15);
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[nibble(device)];
  return out;
}

}  // namespace shardkit::detail::mover
