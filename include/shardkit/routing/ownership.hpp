// shardkit/routing/ownership.hpp — which buckets a shard owns, as the shard itself
// knows it: the storage-side fence and the visibility of rows.
//
// A router may hold a stale directory and raw SQL bypasses the library, so
// every shard keeps its own ownership table (sql/010_bucket_ownership.sql)
// and a trigger on every sharded table refuses writes to buckets it does not
// own, inside the database, with documented SQLSTATEs:
//
//   SK001  write refused: bucket not owned here (moved away, arriving, absent)
//   SK002  write refused: bucket frozen for a move's cutover (retry shortly)
//   SK003  read refused: this shard does not serve the bucket (moved away,
//          arriving, absent: the caller's directory is out of date), or not
//          for a moment (state "frozen": a move's cutover; retry shortly)
//   SK004  misuse (a table without a bucket column, a bulk load during a move...)
//
// Each message names the table, the bucket, the shard and (where known) the
// new owner and the move, and what to run if the refusal lasts; the DETAIL
// line repeats them as key=value pairs that ParseFenceRefusal() reads.
//
// Reads are exact: a shard serves a bucket's reads only while it owns it,
// so a read is never answered by a shard that lacks an acknowledged write
// of the bucket (move.hpp). Row-level security shows each statement only
// the buckets in the transaction-local setting shardkit.buckets (a BucketSet
// mask the library sets: the buckets its directory version assigns to that
// shard), or, without it, the buckets the shard owns. shardkit_check_buckets()
// refuses (SK003) a mask naming a bucket the shard does not own and takes the
// read hold that a move's cutover waits for; a caller's own SQL sets the mask
// and runs the check in one statement, as the library does:
//
//   shardkit::BucketSet mine = shardkit::BucketSet::Of(*directory, shardkit::ShardId{1});
//   tx.exec("SELECT set_config('shardkit.buckets', '" + mine.Setting() + "', true), shardkit_check_buckets()");
//   try { ... } catch (const pqxx::sql_error& e) {
//     if (auto refusal = shardkit::ParseFenceRefusal(e)) retry_on(refusal->new_owner); }
//
// The setting alone (SET LOCAL shardkit.buckets = '...') refuses every
// statement that meets a row of a bucket the shard does not own, but not one
// that meets no row at all (PostgreSQL evaluates a row-level security
// condition only on the rows a scan reaches), nor does it hold the bucket
// through a READ COMMITTED transaction: always run the check with it.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/errors.hpp"

namespace pqxx {
class connection_base;
}

namespace shardkit {

class BucketDirectory;
struct ClusterConfig;

inline constexpr std::string_view kSqlStateNotOwned = "SK001";
inline constexpr std::string_view kSqlStateFrozen = "SK002";
inline constexpr std::string_view kSqlStateNotReadable = "SK003";
inline constexpr std::string_view kSqlStateMisuse = "SK004";
// First key of the advisory locks that freeze a bucket (the second is the
// bucket): pg_advisory_lock(21323, bucket). 21323 = 'S' * 256 + 'K'.
inline constexpr int kFenceLockKey = 21323;
// First key of the read holds (the second is the bucket): the check takes
// pg_try_advisory_xact_lock_shared(21326, bucket) for a bucket a move is
// taking away; the cutover waits for the exclusive lock before it retires it.
inline constexpr int kReadHoldLockKey = 21326;

// A set of buckets as a 64-bit mask (bit b = bucket b).
class BucketSet {
 public:
  constexpr BucketSet() noexcept = default;
  constexpr explicit BucketSet(std::uint64_t bits) noexcept : bits_(bits) {}
  [[nodiscard]] static constexpr BucketSet All() noexcept { return BucketSet(~std::uint64_t{0}); }
  [[nodiscard]] static constexpr BucketSet One(BucketId bucket) noexcept {
    return BucketSet(std::uint64_t{1} << static_cast<unsigned>(ToInt(bucket)));
  }
  // The buckets `directory` assigns to `shard`.
  [[nodiscard]] static BucketSet Of(const BucketDirectory& directory, ShardId shard);

  constexpr void Add(BucketId bucket) noexcept { bits_ |= One(bucket).bits_; }
  [[nodiscard]] constexpr bool Contains(BucketId bucket) const noexcept { return (bits_ & One(bucket).bits_) != 0; }
  [[nodiscard]] constexpr bool Empty() const noexcept { return bits_ == 0; }
  [[nodiscard]] int Size() const noexcept;
  [[nodiscard]] constexpr std::uint64_t Bits() const noexcept { return bits_; }
  [[nodiscard]] std::vector<BucketId> Buckets() const;
  // The value of shardkit.buckets: the mask as a signed 64-bit decimal.
  [[nodiscard]] std::string Setting() const;
  // The fence, first in every transaction that reads or writes sharded
  // rows: shardkit.buckets = these buckets for the transaction, then
  // shardkit_check_buckets(), which refuses a bucket the shard does not
  // serve (sql/010, sql/014). One statement (set_config runs before the
  // check: a target list is evaluated in order). `with_read_token`: the
  // check's value is a write's read token, "<xid> <horizon> <position>"
  // (sql/046), else the buckets.
  [[nodiscard]] std::string FenceSql(bool with_read_token = false) const;
  // "0-20, 54-63"
  [[nodiscard]] std::string Ranges() const;
  friend constexpr bool operator==(BucketSet, BucketSet) noexcept = default;

 private:
  std::uint64_t bits_ = 0;
};

enum class OwnershipState { kOwned, kIncoming, kRetired, kCleaning };
[[nodiscard]] std::string_view OwnershipStateName(OwnershipState state) noexcept;  // "owned", ...
[[nodiscard]] std::optional<OwnershipState> ParseOwnershipState(std::string_view name) noexcept;

struct BucketOwnership {
  BucketId bucket{};
  OwnershipState state = OwnershipState::kOwned;
  std::int64_t directory_version = 0;
  std::optional<ShardId> new_owner;
  std::optional<std::int64_t> move_id;
};

// One shard's view of itself.
struct ShardOwnership {
  std::optional<ShardId> enrolled_as;    // nullopt: not enrolled (no fence)
  std::vector<BucketOwnership> buckets;  // in bucket order
  // The buckets the fence admits without reading the table (sql/014): owned
  // ones marked by the last SyncFence; never a bucket not owned.
  BucketSet fast_path;
  [[nodiscard]] BucketSet InState(OwnershipState state) const noexcept;
  [[nodiscard]] const BucketOwnership* Find(BucketId bucket) const noexcept;
};

// Reads shardkit_shard_identity and shardkit_bucket_ownership.
[[nodiscard]] ShardOwnership ReadOwnership(pqxx::connection_base& shard);

// Makes the database behind `shard` shard `as`, owning `buckets` as of
// directory version `version`, and fences every registered sharded table
// (shardkit_enroll_shard). Idempotent with the same arguments; `replace`
// overwrites another ownership (an empty cluster only: refused while a move
// runs). Throws Error naming the shard on refusal.
void EnrollShard(pqxx::connection_base& shard, ShardId as, const BucketSet& buckets, std::int64_t version,
                 bool replace = false);

// Lets the fence's fast path admit writes to the buckets `shard` owns
// (shardkit_fence_sync(), sql/014): after enrolling, after a move made the
// shard the owner, after editing the ownership by hand. Without it the fence
// is as correct, only slower. Run it outside a transaction that changed the
// ownership. Returns the buckets marked.
BucketSet SyncFence(pqxx::connection_base& shard);

// Enrolls every shard of `config` with the buckets the catalog's directory
// gives it (EnrollShard), and registers it in the catalog's shard registry
// (shardkit_shards). Returns what each shard owns afterwards. Throws
// CatalogError / ShardError naming the culprit.
struct EnrolledShard {
  ShardId shard{};
  std::string name;
  BucketSet owned;
};
std::vector<EnrolledShard> EnrollShards(const ClusterConfig& config, bool replace = false);

// The sharded tables registered on a shard (shardkit_sharded_tables), in
// name order, as quoted identifiers fit for SQL.
[[nodiscard]] std::vector<std::string> ShardedTables(pqxx::connection_base& shard);

// A fence or visibility refusal, read from a libpqxx exception (SQLSTATE
// SK001..SK003 and the DETAIL line); nullopt for any other error.
struct FenceRefusal {
  BucketRefused::Kind kind = BucketRefused::Kind::kNotOwned;
  BucketId bucket{};
  std::optional<ShardId> shard;      // the refusing shard, as it knows itself
  std::optional<ShardId> new_owner;  // where the bucket went (or is going)
  std::string state;                 // owned, incoming, retired, cleaning, absent, changed
  std::optional<std::int64_t> move_id;
  std::string message;  // the server's message, first line
};
[[nodiscard]] std::optional<FenceRefusal> ParseFenceRefusal(const std::exception& error);

// The refusal as the exception routed calls throw (BucketRefused).
[[nodiscard]] BucketRefused ToException(const FenceRefusal& refusal, ShardId refusing_shard,
                                        const std::string& context = {});

}  // namespace shardkit
