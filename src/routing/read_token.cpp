#include "shardkit/routing/read_token.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

constexpr std::string_view kPositions = "v1";     // positions only
constexpr std::string_view kTransactions = "v2";  // positions and transaction ids

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
  token.Add(Entry{shard, lsn});
  return token;
}

ReadToken ReadToken::Of(ShardId shard, std::uint64_t lsn, std::uint64_t xid, std::uint64_t horizon) {
  ReadToken token;
  token.Add(Entry{shard, lsn, xid, horizon});
  return token;
}

void ReadToken::Add(const Entry& write) {
  auto at = std::lower_bound(entries_.begin(), entries_.end(), write.shard,
                             [](const Entry& e, ShardId s) { return e.shard < s; });
  if (at == entries_.end() || at->shard != write.shard) {
    entries_.insert(at, write);
    return;
  }
  at->lsn = std::max(at->lsn, write.lsn);
  if (write.xid == 0) return;
  if (at->xid == 0) {
    at->xid = write.xid;
    at->horizon = write.horizon;
    return;
  }
  const Entry& later = at->xid >= write.xid ? *at : write;
  const Entry& earlier = at->xid >= write.xid ? write : *at;
  // The later transaction's commit shows the earlier one's only if that
  // one had finished when the later one began (older than its horizon).
  std::uint64_t horizon = 0;
  if (earlier.xid == later.xid) {
    horizon = std::min(earlier.horizon, later.horizon);
  } else if (earlier.xid < later.horizon) {
    horizon = later.horizon;
  }
  at->xid = later.xid;
  at->horizon = horizon;
}

void ReadToken::Combine(const ReadToken& other) {
  for (const Entry& e : other.entries_) Add(e);
}

const ReadToken::Entry* ReadToken::Find(ShardId shard) const noexcept {
  const auto at =
      std::lower_bound(entries_.begin(), entries_.end(), shard, [](const Entry& e, ShardId s) { return e.shard < s; });
  return at != entries_.end() && at->shard == shard ? &*at : nullptr;
}

std::string ReadToken::ToString() const {
  const bool transactions = std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.xid != 0; });
  std::string text(transactions ? kTransactions : kPositions);
  for (const Entry& e : entries_) {
    text += fmt::format("_{}.{:X}", ToInt(e.shard), e.lsn);
    if (e.xid != 0) text += fmt::format(".{:X}.{:X}", e.xid, e.horizon);
  }
  return text;
}

ReadToken ReadToken::Parse(std::string_view text) {
  const auto refuse = [&](const std::string& why) {
    return ReadTokenError(std::string(text.substr(0, 200)),
                          fmt::format("read token \"{}\" {}: expected \"v2\" followed by \"_<shard>.<WAL position in "
                                      "hex>[.<transaction>.<horizon>]\" per shard (or \"v1\" and positions only), as "
                                      "ReadToken::ToString() writes it",
                                      text.substr(0, 200), why));
  };
  const bool transactions = text.starts_with(kTransactions);
  if (!transactions && !text.starts_with(kPositions)) throw refuse("does not start with v2 or v1");
  ReadToken token;
  std::string_view rest = text.substr(kPositions.size());
  while (!rest.empty()) {
    if (rest.front() != '_') throw refuse("has something other than _ between its entries");
    rest.remove_prefix(1);
    const auto next = rest.find('_');
    const std::string_view entry = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    // <shard>.<lsn>, and in v2 optionally .<xid>.<horizon>
    std::vector<std::string_view> fields;
    for (std::size_t from = 0;;) {
      const auto dot = entry.find('.', from);
      fields.push_back(entry.substr(from, dot == std::string_view::npos ? dot : dot - from));
      if (dot == std::string_view::npos) break;
      from = dot + 1;
    }
    int shard = 0;
    Entry e;
    const bool parsed =
        (fields.size() == 2 || (transactions && fields.size() == 4)) && ParseNumber(fields[0], 10, shard) &&
        ParseNumber(fields[1], 16, e.lsn) &&
        (fields.size() == 2 || (ParseNumber(fields[2], 16, e.xid) && ParseNumber(fields[3], 16, e.horizon) &&
                                e.xid != 0 && e.horizon <= e.xid));
    if (!parsed) {
      throw refuse(fmt::format("has an entry \"{}\" that is not <shard>.<position>{}", entry,
                               transactions ? "[.<transaction>.<horizon>]" : ""));
    }
    if (shard < 0 || shard >= kBucketCount) {
      throw refuse(fmt::format("has an entry \"{}\" with a shard outside 0..63", entry));
    }
    if (token.Find(ShardId{shard}) != nullptr) throw refuse(fmt::format("names shard {} twice", shard));
    e.shard = ShardId{shard};
    token.Add(e);
  }
  return token;
}

}  // namespace shardkit
