#include "shardkit/routing/ownership.hpp"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <map>
#include <pqxx/pqxx>

#include "shardkit/config.hpp"
#include "shardkit/core/dsn_format.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

// "key=value key=value" -> map; values have no spaces (numbers, states, names).
std::map<std::string, std::string> ParseFacts(std::string_view text) {
  std::map<std::string, std::string> facts;
  std::size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && text[at] == ' ') ++at;
    const std::size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view word = text.substr(at, end - at);
    if (const auto eq = word.find('='); eq != std::string_view::npos) {
      facts.emplace(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
    }
    at = end;
  }
  return facts;
}

template <class Int>
std::optional<Int> ParseInt(const std::map<std::string, std::string>& facts, const std::string& key) {
  const auto it = facts.find(key);
  if (it == facts.end() || it->second.empty()) return std::nullopt;
  Int value{};
  const auto* begin = it->second.data();
  const auto* end = begin + it->second.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string Line(std::string_view text, std::string_view prefix) {
  const auto at = text.find(prefix);
  if (at == std::string_view::npos) return {};
  const auto start = at + prefix.size();
  const auto end = text.find('\n', start);
  return std::string(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

std::string FirstMessageLine(std::string_view text) {
  for (const std::string_view prefix : {"ERROR:  ", "FATAL:  "}) {
    if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  }
  return std::string(text.substr(0, text.find('\n')));
}

}  // namespace

BucketSet BucketSet::Of(const BucketDirectory& directory, ShardId shard) {
  BucketSet set;
  for (const BucketId b : AllBuckets()) {
    if (directory.ShardOf(b) == shard) set.Add(b);
  }
  return set;
}

int BucketSet::Size() const noexcept {
  return std::popcount(bits_);
}

std::vector<BucketId> BucketSet::Buckets() const {
  std::vector<BucketId> out;
  for (const BucketId b : AllBuckets()) {
    if (Contains(b)) out.push_back(b);
  }
  return out;
}

std::string BucketSet::Setting() const {
  return std::to_string(static_cast<std::int64_t>(bits_));
}

std::string BucketSet::FenceSql(bool with_read_token) const {
  // A number computed here, not a caller's text (SET takes no parameters).
  return "SELECT set_config('shardkit.buckets', '" + Setting() + "', true), shardkit_check_buckets(" +
         (with_read_token ? "true" : "false") + ")";
}

std::string BucketSet::Ranges() const {
  std::string out;
  int b = 0;
  while (b < kBucketCount) {
    if (!Contains(BucketId{b})) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < kBucketCount && Contains(BucketId{e + 1})) ++e;
    out += fmt::format("{}{}", out.empty() ? "" : ", ", b == e ? fmt::format("{}", b) : fmt::format("{}-{}", b, e));
    b = e + 1;
  }
  return out.empty() ? "-" : out;
}

std::string_view OwnershipStateName(OwnershipState state) noexcept {
  switch (state) {
    case OwnershipState::kOwned:
      return "owned";
    case OwnershipState::kIncoming:
      return "incoming";
    case OwnershipState::kRetired:
      return "retired";
    case OwnershipState::kCleaning:
      return "cleaning";
  }
  return "?";
}

std::optional<OwnershipState> ParseOwnershipState(std::string_view name) noexcept {
  for (const auto s :
       {OwnershipState::kOwned, OwnershipState::kIncoming, OwnershipState::kRetired, OwnershipState::kCleaning}) {
    if (OwnershipStateName(s) == name) return s;
  }
  return std::nullopt;
}

BucketSet ShardOwnership::InState(OwnershipState state) const noexcept {
  BucketSet set;
  for (const auto& b : buckets) {
    if (b.state == state) set.Add(b.bucket);
  }
  return set;
}

const BucketOwnership* ShardOwnership::Find(BucketId bucket) const noexcept {
  for (const auto& b : buckets) {
    if (b.bucket == bucket) return &b;
  }
  return nullptr;
}

ShardOwnership ReadOwnership(pqxx::connection_base& shard) {
  pqxx::read_transaction tx{shard};
  ShardOwnership out;
  const auto facts = tx.exec1(
      "SELECT (SELECT shard FROM shardkit_shard_identity), "
      "coalesce(pg_sequence_last_value('shardkit_fence_writable'), 0)");
  if (!facts[0].is_null()) out.enrolled_as = ShardId{facts[0].as<int>()};
  out.fast_path = BucketSet(static_cast<std::uint64_t>(facts[1].as<std::int64_t>()));
  for (const auto& row : tx.exec("SELECT bucket, state, directory_version, new_owner, move_id "
                                 "FROM shardkit_bucket_ownership ORDER BY bucket")) {
    BucketOwnership b;
    b.bucket = BucketId{row[0].as<int>()};
    const auto state = ParseOwnershipState(row[1].c_str());
    if (!state) {
      throw Error(fmt::format("shardkit_bucket_ownership: bucket {} has unknown state '{}'", b.bucket, row[1].c_str()));
    }
    b.state = *state;
    b.directory_version = row[2].as<std::int64_t>();
    if (!row[3].is_null()) b.new_owner = ShardId{row[3].as<int>()};
    if (!row[4].is_null()) b.move_id = row[4].as<std::int64_t>();
    out.buckets.push_back(b);
  }
  return out;
}

void EnrollShard(pqxx::connection_base& shard, ShardId as, const BucketSet& buckets, std::int64_t version,
                 bool replace) {
  std::string array = "{";
  for (const BucketId b : buckets.Buckets()) array += (array.size() > 1 ? "," : "") + std::to_string(ToInt(b));
  array += "}";
  try {
    pqxx::work tx{shard};
    tx.exec_params("SELECT shardkit_enroll_shard($1, $2::integer[], $3, $4)", ToInt(as), array, version, replace);
    tx.commit();
    (void)SyncFence(shard);
  } catch (const pqxx::sql_error& e) {
    throw ShardError(as, fmt::format("enrolling shard {}: {}", as, FirstMessageLine(e.what())));
  }
}

BucketSet SyncFence(pqxx::connection_base& shard) {
  pqxx::nontransaction tx{shard};
  return BucketSet(static_cast<std::uint64_t>(tx.exec("SELECT shardkit_fence_sync()")[0][0].as<std::int64_t>()));
}

std::vector<EnrolledShard> EnrollShards(const ClusterConfig& config, bool replace) {
  const BucketDirectory directory = LoadCatalogDirectory(config);
  std::vector<EnrolledShard> out;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    const ShardId shard{static_cast<int>(i)};
    const auto& c = config.shards[i];
    const BucketSet buckets = BucketSet::Of(directory, shard);
    try {
      pqxx::connection connection{WithConnectTimeout(c.dsn, config.pool.connect_timeout).Reveal()};
      EnrollShard(connection, shard, buckets, directory.Version(), replace);
      out.push_back({shard, c.name, ReadOwnership(connection).InState(OwnershipState::kOwned)});
    } catch (const pqxx::broken_connection& e) {
      throw ShardUnavailable(shard, fmt::format("enrolling shard {} ({}): cannot connect ({}): {}", shard, c.name,
                                                c.dsn, RedactDsn(FirstMessageLine(e.what()))));
    }
  }
  try {
    pqxx::connection catalog{WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout).Reveal()};
    pqxx::work tx{catalog};
    for (const auto& e : out) {
      tx.exec_params(
          "INSERT INTO shardkit_shards (shard, name, enrolled_by) VALUES ($1, $2, current_user) "
          "ON CONFLICT (shard) DO UPDATE SET name = EXCLUDED.name",
          ToInt(e.shard), e.name);
    }
    tx.commit();
  } catch (const pqxx::failure& e) {
    throw CatalogError(
        fmt::format("registering the shards in the catalog failed: {}", RedactDsn(FirstMessageLine(e.what()))));
  }
  return out;
}

std::vector<std::string> ShardedTables(pqxx::connection_base& shard) {
  pqxx::read_transaction tx{shard};
  std::vector<std::string> tables;
  for (const auto& row : tx.exec("SELECT s.table_name::text FROM shardkit_sharded_tables s "
                                 "JOIN pg_class c ON c.oid = s.table_name ORDER BY 1")) {
    tables.push_back(row[0].as<std::string>());
  }
  return tables;
}

std::optional<FenceRefusal> ParseFenceRefusal(const std::exception& error) {
  const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error);
  if (sql == nullptr) return std::nullopt;
  const std::string& state = sql->sqlstate();
  FenceRefusal refusal;
  if (state == kSqlStateNotOwned) {
    refusal.kind = BucketRefused::Kind::kNotOwned;
  } else if (state == kSqlStateFrozen) {
    refusal.kind = BucketRefused::Kind::kFrozen;
  } else if (state == kSqlStateNotReadable) {
    refusal.kind = BucketRefused::Kind::kNotReadable;
  } else {
    return std::nullopt;
  }
  const std::string text = sql->what();
  const auto facts = ParseFacts(Line(text, "DETAIL:  "));
  const auto bucket = ParseInt<int>(facts, "bucket");
  if (!bucket) return std::nullopt;
  refusal.bucket = BucketId{*bucket};
  if (const auto s = ParseInt<int>(facts, "shard")) refusal.shard = ShardId{*s};
  if (const auto s = ParseInt<int>(facts, "new_owner")) refusal.new_owner = ShardId{*s};
  if (const auto it = facts.find("state"); it != facts.end()) refusal.state = it->second;
  refusal.move_id = ParseInt<std::int64_t>(facts, "move_id");
  refusal.message = FirstMessageLine(text);
  return refusal;
}

BucketRefused ToException(const FenceRefusal& refusal, ShardId refusing_shard, const std::string& context) {
  return BucketRefused(refusal.kind, refusing_shard, refusal.bucket, refusal.new_owner, refusal.state,
                       context.empty() ? refusal.message : context + ": " + refusal.message);
}

}  // namespace shardkit
