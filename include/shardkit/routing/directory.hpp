// shardkit/routing/directory.hpp — the bucket directory of a running
// process and of the catalog.
//
// A BucketDirectory (core/bucket_directory.hpp) is an immutable snapshot.
// Changing the placement means building a new snapshot with a higher version
// and publishing it through a DirectoryHolder; readers that already hold the
// old snapshot keep a consistent view, new readers see the new one. The
// catalog's shard_directory table holds the authoritative one.
//
//   auto dir = shardkit::BucketDirectory::EvenSplit(2);      // 0-31 -> 0, 32-63 -> 1
//   shardkit::DirectoryHolder holder{dir};
//   holder.Publish(dir.WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{0}));  // version + 1
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "shardkit/core/bucket.hpp"
#include "shardkit/core/bucket_directory.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/core/thread_annotations.hpp"

namespace pqxx {
class connection_base;
class transaction_base;
}  // namespace pqxx

namespace shardkit {

// Reads the shard_directory table (sql/) through an open connection.
// CatalogError if it cannot be read (no table, server gone), DirectoryError
// if what it holds is not a valid directory.
[[nodiscard]] BucketDirectory LoadDirectory(pqxx::connection_base& connection, int shard_count);
// Replaces the shard_directory table's rows with `directory`, in one transaction.
// Refuses (DirectoryError) if the stored version is not lower than the new one.
void StoreDirectory(pqxx::connection_base& connection, const BucketDirectory& directory);
// Compare-and-set: replaces the shard_directory rows with `next` only if the
// stored version is exactly `expected_version`, and returns whether it did.
// `next` must have a higher version (DirectoryError otherwise). The catalog's
// trigger (sql/012) NOTIFYs routers of the new version at commit. The
// transaction overload leaves the commit to the caller (a move flips the
// directory and writes its journal in one transaction).
[[nodiscard]] bool CompareAndSetDirectory(pqxx::connection_base& connection, std::int64_t expected_version,
                                          const BucketDirectory& next);
[[nodiscard]] bool CompareAndSetDirectory(pqxx::transaction_base& tx, std::int64_t expected_version,
                                          const BucketDirectory& next);

// The current directory of a running process: Publish() replaces it, readers
// on any number of threads route with it.
//
//   shardkit::DirectoryHolder holder{shardkit::BucketDirectory::EvenSplit(2)};
//   shardkit::ShardId s = holder.ShardFor(shardkit::CustomerId{4242});   // one atomic load
//   auto where = holder.PlacementOf(shardkit::CustomerId{4242});         // bucket, shard, version: one load
//   auto snapshot = holder.Current();                                    // the whole directory, kept alive
//   holder.Publish(snapshot->WithBucketMoved(shardkit::BucketId{44}, shardkit::ShardId{0}));  // version + 1
//
// Thread safety: every member function may be called from any number of
// threads at once (BucketDirectory itself is immutable, so a snapshot is too).
//
// How: routing never touches the snapshot. The holder keeps a table of 64
// words, one per bucket, each holding (version << 8 | shard) of the latest
// publish; a lookup is one atomic load of one word: no lock, no reference
// count, no memory to reclaim, so nothing a reader holds can be freed under
// it. Readers of one bucket see either the old or the new (version, shard)
// pair, never a mix, and never go back to an older version.
// Current() returns the whole snapshot as a shared_ptr from a small cache of
// the calling thread, checked against the published version: one atomic
// load and a reference count private to the thread; only the first call on a
// thread after each publish takes the publisher's mutex. (Each thread keeps
// at most a few snapshots alive that way, until its next call or its exit.)
// A publish stores the snapshot, then the version, then the 64 words: a
// reader that saw version v in a routing word gets version v or later from
// Current().
class DirectoryHolder {
 public:
  // What one lookup answers: the shard holding `bucket` in directory `version`.
  struct Placement {
    BucketId bucket{};
    ShardId shard{};
    std::int64_t version = 0;
  };

  explicit DirectoryHolder(BucketDirectory initial);

  [[nodiscard]] ShardId ShardFor(const ShardKey& key) const noexcept {
    return ShardId{static_cast<int>(Word(key.bucket()) & kShardMask)};
  }
  [[nodiscard]] Placement PlacementOf(const ShardKey& key) const noexcept {
    const BucketId bucket = key.bucket();
    const std::uint64_t word = Word(bucket);
    return Placement{bucket, ShardId{static_cast<int>(word & kShardMask)},
                     static_cast<std::int64_t>(word >> kShardBits)};
  }
  // The version of the latest publish (one atomic load).
  [[nodiscard]] std::int64_t Version() const noexcept { return version_.load(std::memory_order_acquire); }
  // The whole current snapshot; the pointer keeps it alive as long as it is
  // held. A few nanoseconds (see above); for one customer, ShardFor/PlacementOf.
  [[nodiscard]] std::shared_ptr<const BucketDirectory> Current() const;
  // Publishes `next` if its version is higher than the current one (and
  // below 2^56) and it has the same shard count; throws DirectoryError
  // otherwise. Publishers are serialised; readers never wait for them.
  void Publish(BucketDirectory next);

 private:
  static constexpr int kShardBits = 8;  // shards are < 64
  static constexpr std::uint64_t kShardMask = (std::uint64_t{1} << kShardBits) - 1;
  [[nodiscard]] std::uint64_t Word(BucketId bucket) const noexcept {
    return routes_[static_cast<std::size_t>(ToInt(bucket))].load(std::memory_order_acquire);
  }
  void WriteRoutes(const BucketDirectory& directory) noexcept;

  // One word per bucket: (version << 8) | shard.
  alignas(64) std::array<std::atomic<std::uint64_t>, kBucketCount> routes_;
  std::atomic<std::int64_t> version_{0};
  const std::uint64_t id_;  // names this holder in the threads' snapshot caches; never reused
  mutable std::mutex publish_mutex_;
  std::shared_ptr<const BucketDirectory> current_ SHARDKIT_GUARDED_BY(publish_mutex_);
};

}  // namespace shardkit
