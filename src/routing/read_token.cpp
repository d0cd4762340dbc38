#include "shardkit/routing/read_token.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

constexpr std::string_view kVersion = "v1";

// A hexadecimal or decimal number that fills `text` exactly.
template <typename Int>
bool ParseNumber(std::string_view text, int base, Int& out) {
  if (text.empty()) return false;
  const auto* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, out, base);
  return error == std::errc() && at == end;
}

}  // namespace

std::string FormatLsn(std::uint64_t lsn) {
  return fmt::format("{:X}/{:X}", lsn >> 32U, lsn & 0xFFFFFFFFU);
}

std::uint64_t ParseLsn(std::string_view text) {
  const auto slash = text.find('/');
  std::uint32_t high = 0;
  std::uint32_t low = 0;
  if (slash == std::string_view::npos || !ParseNumber(text.substr(0, slash), 16, high) ||
      !ParseNumber(text.substr(slash + 1), 16, low)) {
    throw ReadTokenError(std::string(text), fmt::format("\"{}\" is not a WAL position like \"16/B374D848\"", text));
  }
  return (std::uint64_t{high} << 32U) | low;
}

ReadToken ReadToken::At(ShardId shard, std::uint64_t lsn) {
  ReadToken token;
  token.Add(shard, lsn);
  return token;
}

void ReadToken::Add(ShardId shard, std::uint64_t lsn) {
  auto at =
      std::lower_bound(entries_.begin(), entries_.end(), shard, [](const Entry& e, ShardId s) { return e.shard < s; });
  if (at == entries_.end() || at->shard != shard) {
    entries_.insert(at, Entry{shard, lsn});
    return;
  }
  at->lsn = std::max(at->lsn, lsn);
}

void ReadToken::Combine(const ReadToken& other) {
  for (const Entry& e : other.entries_) Add(e.shard, e.lsn);
}

const ReadToken::Entry* ReadToken::Find(ShardId shard) const noexcept {
  const auto at =
      std::lower_bound(entries_.begin(), entries_.end(), shard, [](const Entry& e, ShardId s) { return e.shard < s; });
  return at != entries_.end() && at->shard == shard ? &*at : nullptr;
}

std::string ReadToken::ToString() const {
  std::string text(kVersion);
  for (const Entry& e : entries_) text += fmt::format("_{}.{:X}", ToInt(e.shard), e.lsn);
  return text;
}

ReadToken ReadToken::Parse(std::string_view text) {
  const auto refuse = [&](const std::string& why) {
    return ReadTokenError(std::string(text.substr(0, 200)),
                          fmt::format("read token \"{}\" {}: expected \"v1\" followed by \"_<shard>.<WAL position in "
                                      "hex>\" per shard, as ReadToken::ToString() writes it",
                                      text.substr(0, 200), why));
  };
  if (!text.starts_with(kVersion)) throw refuse("does not start with v1");
  ReadToken token;
  std::string_view rest = text.substr(kVersion.size());
  while (!rest.empty()) {
    if (rest.front() != '_') throw refuse("has something other than _ between its entries");
    rest.remove_prefix(1);
    const auto next = rest.find('_');
    const std::string_view entry = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    const auto dot = entry.find('.');
    int shard = 0;
    std::uint64_t lsn = 0;
    if (dot == std::string_view::npos || !ParseNumber(entry.substr(0, dot), 10, shard) ||
        !ParseNumber(entry.substr(dot + 1), 16, lsn)) {
      throw refuse(fmt::format("has an entry \"{}\" that is not <shard>.<position>", entry));
    }
    if (shard < 0 || shard >= kBucketCount) {
      throw refuse(fmt::format("has an entry \"{}\" with a shard outside 0..63", entry));
    }
    if (token.Find(ShardId{shard}) != nullptr) throw refuse(fmt::format("names shard {} twice", shard));
    token.Add(ShardId{shard}, lsn);
  }
  return token;
}

}  // namespace shardkit
