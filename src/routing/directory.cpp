#include "shardkit/routing/directory.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>
#include <vector>

#include "shardkit/core/dsn.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

BucketDirectory LoadDirectory(pqxx::connection_base& connection, int shard_count) {
  pqxx::result rows;
  try {
    pqxx::read_transaction tx{connection};
    rows = tx.exec("SELECT bucket, shard, version FROM shard_directory ORDER BY bucket");
  } catch (const pqxx::undefined_table&) {
    throw CatalogError(
        fmt::format("database {} has no shard_directory table: run `shardctl migrate` first", connection.dbname()));
  } catch (const pqxx::sql_error& e) {
    throw CatalogError(fmt::format("reading the directory from database {} failed (SQLSTATE {}): {}",
                                   connection.dbname(), e.sqlstate(), RedactDsn(e.what())));
  } catch (const pqxx::failure& e) {
    throw CatalogError(fmt::format("reading the directory from database {} failed: {}; check that the server is up",
                                   connection.dbname(), RedactDsn(e.what())));
  }
  if (rows.empty()) {
    throw DirectoryError(
        "table shard_directory is empty: fill it with one row per bucket (0-63) or "
        "use directory.source = \"config\"");
  }
  std::vector<std::pair<BucketId, ShardId>> pairs;
  std::int64_t version = 0;
  for (const auto& row : rows) {
    pairs.emplace_back(BucketId{row[0].as<int>()}, ShardId{row[1].as<int>()});
    const auto row_version = row[2].as<std::int64_t>();
    if (version != 0 && row_version != version) {
      throw DirectoryError(fmt::format("shard_directory mixes versions {} and {} (bucket {}): a "
                                       "directory change was half-written",
                                       version, row_version, row[0].as<int>()),
                           BucketId{row[0].as<int>()});
    }
    version = row_version;
  }
  return BucketDirectory::FromRows(pairs, shard_count, version);
}

void StoreDirectory(pqxx::connection_base& connection, const BucketDirectory& directory) {
  pqxx::work tx{connection};
  // Serialise writers: the lock is held until commit.
  tx.exec("LOCK TABLE shard_directory IN EXCLUSIVE MODE");
  const auto stored = tx.exec("SELECT coalesce(max(version), 0) FROM shard_directory")[0][0].as<std::int64_t>();
  if (stored >= directory.Version()) {
    throw DirectoryError(
        fmt::format("stored directory version {} is not lower than the new version {}", stored, directory.Version()));
  }
  tx.exec("DELETE FROM shard_directory");
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    tx.exec_params("INSERT INTO shard_directory (bucket, shard, version) VALUES ($1, $2, $3)", bucket,
                   ToInt(directory.ShardOf(BucketId{bucket})), directory.Version());
  }
  tx.commit();
}

bool CompareAndSetDirectory(pqxx::transaction_base& tx, std::int64_t expected_version, const BucketDirectory& next) {
  if (next.Version() <= expected_version) {
    throw DirectoryError(fmt::format("compare-and-set: the new version {} must be higher than the expected {}",
                                     next.Version(), expected_version));
  }
  // Serialise writers: the lock is held until the caller's commit.
  tx.exec("LOCK TABLE shard_directory IN EXCLUSIVE MODE");
  const auto stored = tx.exec("SELECT coalesce(max(version), 0) FROM shard_directory")[0][0].as<std::int64_t>();
  if (stored != expected_version) return false;
  std::string buckets = "{";
  std::string shards = "{";
  for (const BucketId b : AllBuckets()) {
    buckets += fmt::format("{}{}", ToInt(b) == 0 ? "" : ",", ToInt(b));
    shards += fmt::format("{}{}", ToInt(b) == 0 ? "" : ",", ToInt(next.ShardOf(b)));
  }
  buckets += "}";
  shards += "}";
  tx.exec_params(
      "INSERT INTO shard_directory (bucket, shard, version, updated_at) "
      "SELECT b, s, $3, now() FROM unnest($1::smallint[], $2::integer[]) AS v(b, s) "
      "ON CONFLICT (bucket) DO UPDATE SET shard = EXCLUDED.shard, version = EXCLUDED.version, "
      "updated_at = EXCLUDED.updated_at",
      buckets, shards, next.Version());
  return true;
}

bool CompareAndSetDirectory(pqxx::connection_base& connection, std::int64_t expected_version,
                            const BucketDirectory& next) {
  pqxx::work tx{connection};
  if (!CompareAndSetDirectory(tx, expected_version, next)) return false;
  tx.commit();
  return true;
}

namespace {

// Versions share a routing word with the shard: 56 bits.
constexpr std::int64_t kMaxPublishedVersion = (std::int64_t{1} << 56) - 1;

void CheckPublishable(const BucketDirectory& directory) {
  if (directory.Version() > kMaxPublishedVersion) {
    throw DirectoryError(fmt::format("version {} is too large to publish (at most 2^56 - 1)", directory.Version()));
  }
}

std::atomic<std::uint64_t> next_holder_id{1};

// Each thread's recent snapshots, one per holder it read lately. The
// shared_ptr handed out aliases a control block of this thread's own, so the
// reference counting of readers on different threads never contends.
struct CachedSnapshot {
  std::uint64_t holder = 0;
  std::int64_t version = 0;
  std::shared_ptr<const BucketDirectory> snapshot;
};
constexpr std::size_t kCachedHolders = 4;
thread_local std::array<CachedSnapshot, kCachedHolders> t_snapshots;
thread_local std::size_t t_next_victim = 0;

}  // namespace

DirectoryHolder::DirectoryHolder(BucketDirectory initial) : id_(next_holder_id.fetch_add(1)) {
  CheckPublishable(initial);
  WriteRoutes(initial);
  version_.store(initial.Version(), std::memory_order_release);
  current_ = std::make_shared<const BucketDirectory>(std::move(initial));
}

void DirectoryHolder::WriteRoutes(const BucketDirectory& directory) noexcept {
  const auto version = static_cast<std::uint64_t>(directory.Version());
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    const auto shard = static_cast<std::uint64_t>(ToInt(directory.AssignmentTable()[static_cast<std::size_t>(bucket)]));
    routes_[static_cast<std::size_t>(bucket)].store((version << kShardBits) | shard, std::memory_order_release);
  }
}

std::shared_ptr<const BucketDirectory> DirectoryHolder::Current() const {
  const std::int64_t version = version_.load(std::memory_order_acquire);
  CachedSnapshot* entry = nullptr;
  for (auto& cached : t_snapshots) {
    if (cached.holder == id_) {
      if (cached.version == version) return cached.snapshot;
      entry = &cached;
      break;
    }
  }
  std::shared_ptr<const BucketDirectory> latest;
  {
    std::lock_guard lock(publish_mutex_);
    latest = current_;  // at least `version`: the version is stored after the snapshot
  }
  if (entry == nullptr) {
    entry = &t_snapshots[t_next_victim];
    t_next_victim = (t_next_victim + 1) % kCachedHolders;
  }
  auto own = std::make_shared<const std::shared_ptr<const BucketDirectory>>(std::move(latest));
  entry->holder = id_;
  entry->version = (*own)->Version();
  entry->snapshot = std::shared_ptr<const BucketDirectory>(own, own->get());
  return entry->snapshot;
}

void DirectoryHolder::Publish(BucketDirectory next) {
  CheckPublishable(next);
  std::lock_guard lock(publish_mutex_);
  if (next.ShardCount() != current_->ShardCount()) {
    throw DirectoryError(
        fmt::format("new directory has {} shards, the cluster has {}", next.ShardCount(), current_->ShardCount()));
  }
  if (next.Version() <= current_->Version()) {
    throw DirectoryError(
        fmt::format("new directory version {} is not higher than the current {}", next.Version(), current_->Version()));
  }
  // Snapshot, version, then the routing words: a reader that saw a word of
  // version v finds Current() at v or later.
  current_ = std::make_shared<const BucketDirectory>(std::move(next));
  version_.store(current_->Version(), std::memory_order_release);
  WriteRoutes(*current_);
}

}  // namespace shardkit
