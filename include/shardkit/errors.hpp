// shardkit/errors.hpp — the one exception hierarchy of shardkit.
//
// Every error names what it is about (a config key, a bucket, a shard) and,
// where it helps, what to do. Messages never contain passwords: connection
// strings are Dsn values, which show redacted, and text from libpq or a
// server that may quote one goes through RedactDsn() (core/dsn.hpp).
//
//   try { auto lease = pool.Acquire(deadline); ... }
//   catch (const shardkit::PoolTimeout& e) { log(e.what()); e.shard(); }
//   catch (const shardkit::ShardError& e) { /* any failure tied to one shard */ }
//   catch (const shardkit::Error& e)      { /* anything shardkit throws */ }
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit {

// Base of everything shardkit throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The configuration file or an option in it is wrong. key() is the dotted
// path of the culprit, e.g. "shards[1].dsn" or "pool.max_size".
class ConfigError : public Error {
 public:
  ConfigError(std::string key, const std::string& message)
      : Error("config " + key + ": " + message), key_(std::move(key)) {}
  [[nodiscard]] const std::string& key() const noexcept { return key_; }

 private:
  std::string key_;
};

// A bucket->shard directory is invalid (a bucket unmapped or mapped twice,
// a shard index that does not exist, a stale version).
class DirectoryError : public Error {
 public:
  explicit DirectoryError(const std::string& message, std::optional<BucketId> bucket = {},
                          std::optional<ShardId> shard = {})
      : Error("directory: " + message), bucket_(bucket), shard_(shard) {}
  [[nodiscard]] std::optional<BucketId> bucket() const noexcept { return bucket_; }
  [[nodiscard]] std::optional<ShardId> shard() const noexcept { return shard_; }

 private:
  std::optional<BucketId> bucket_;
  std::optional<ShardId> shard_;
};

// The catalog database ([catalog] dsn) cannot be reached or does not hold
// what it should (no shard_directory table: run shardctl migrate).
class CatalogError : public Error {
 public:
  using Error::Error;
};

// A schema migration cannot be loaded, planned or applied. server() names
// the server ("shard1", "reference", "catalog") and version() the migration,
// where the error is about one; the message says what to do.
class MigrationError : public Error {
 public:
  explicit MigrationError(const std::string& message, std::string server = {}, std::optional<int> version = {})
      : Error("migrate: " + message), server_(std::move(server)), version_(version) {}
  [[nodiscard]] const std::string& server() const noexcept { return server_; }
  [[nodiscard]] std::optional<int> version() const noexcept { return version_; }

 private:
  std::string server_;
  std::optional<int> version_;
};

// A migration run was refused before anything was applied: a file changed
// after it was applied, a server has a version no file describes, or a
// failed non-transactional step left something to resolve (an INVALID
// index). problems() lists each, naming the server and the version.
class MigrationRefused : public MigrationError {
 public:
  MigrationRefused(const std::string& message, std::vector<std::string> problems)
      : MigrationError(message), problems_(std::move(problems)) {}
  [[nodiscard]] const std::vector<std::string>& problems() const noexcept { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// A failure tied to one shard. sqlstate() is its SQLSTATE, PostgreSQL's
// five-character error code, so callers branch on a field and not on message
// text: "40001"/"40P01" (serialization failure, deadlock: retry), "57014"
// (cancelled, statement_timeout), "23505" (unique violation), class "08"
// except "08P01" (the shard cannot be reached: libpq reports that without a
// code, so shardkit says "08006", connection_failure, as pgjdbc does; test
// it with IsConnectionLost). Empty when there is none (a pool timeout, a
// malformed answer).
//
//   catch (const shardkit::ShardError& e) {
//     if (e.sqlstate() == "40001") retry();
//     else if (shardkit::IsConnectionLost(e.sqlstate())) report_unreachable(e.shard());
//   }
class ShardError : public Error {
 public:
  ShardError(ShardId shard, const std::string& message, std::string sqlstate = {})
      : Error(message), shard_(shard), sqlstate_(std::move(sqlstate)) {}
  [[nodiscard]] ShardId shard() const noexcept { return shard_; }
  [[nodiscard]] const std::string& sqlstate() const noexcept { return sqlstate_; }

 private:
  ShardId shard_;
  std::string sqlstate_;
};

// SQLSTATE of a shard that cannot be reached (connect failed, connection lost).
inline constexpr const char* kSqlStateConnectionFailure = "08006";

// Whether a SQLSTATE says the connection is gone: class 08, except 08P01
// (protocol_violation), which the server sends for a statement it refuses
// as sent (a wrong parameter count): the statement's error, not the link's,
// so it is never retried.
[[nodiscard]] constexpr bool IsConnectionLost(std::string_view sqlstate) noexcept {
  return sqlstate.starts_with("08") && sqlstate != "08P01";
}

// Whether a SQLSTATE says the server is shutting down or starting (57P01
// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now), not
// 57014 (a cancelled statement).
[[nodiscard]] constexpr bool IsServerGoingAway(std::string_view sqlstate) noexcept {
  return sqlstate.starts_with("57P");
}

// The shard index is not part of the cluster.
class UnknownShard : public ShardError {
 public:
  UnknownShard(ShardId shard, int shard_count)
      : ShardError(shard, "unknown shard " + std::to_string(ToInt(shard)) + ": the cluster has " +
                              std::to_string(shard_count) + " shards (0.." + std::to_string(shard_count - 1) + ")") {}
};

// The shard's server cannot be reached (connect failed, connection lost).
// sqlstate() is "08006" unless the server sent a code of its own (e.g.
// "57P03", the server is starting up or shutting down).
class ShardUnavailable : public ShardError {
 public:
  ShardUnavailable(ShardId shard, const std::string& message, std::string sqlstate = kSqlStateConnectionFailure)
      : ShardError(shard, message, std::move(sqlstate)) {}
};

// A pool could not hand out a connection before the caller's deadline.
class PoolTimeout : public ShardError {
 public:
  using ShardError::ShardError;
};

// A pool refused to queue another waiter (its waiter bound is reached).
class PoolExhausted : public ShardError {
 public:
  using ShardError::ShardError;
};

// A statement failed on one shard (SQL error, server-side cancel...);
// sqlstate() is the server's code.
class ShardQueryError : public ShardError {
 public:
  using ShardError::ShardError;
};

// A shard refused to serve a bucket (include/shardkit/routing/ownership.hpp): the
// fence refused a write (SQLSTATE SK001: not owned there, SK002: frozen for a
// move's cutover) or the visibility rule refused a read (SK003: the caller's
// directory is out of date). Nothing was written: the refusal happens before
// any effect, so the transaction may be retried (routed.hpp does). new_owner()
// is where the bucket went, when the shard knows.
class BucketRefused : public ShardError {
 public:
  enum class Kind { kNotOwned, kFrozen, kNotReadable };
  BucketRefused(Kind kind, ShardId shard, BucketId bucket, std::optional<ShardId> new_owner, std::string state,
                const std::string& message)
      : ShardError(shard, message), kind_(kind), bucket_(bucket), new_owner_(new_owner), state_(std::move(state)) {}
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] BucketId bucket() const noexcept { return bucket_; }
  [[nodiscard]] std::optional<ShardId> new_owner() const noexcept { return new_owner_; }
  // The bucket's ownership state on that shard: owned, incoming, retired,
  // cleaning, absent (or changed: an old REPEATABLE READ snapshot).
  [[nodiscard]] const std::string& state() const noexcept { return state_; }

 private:
  Kind kind_;
  BucketId bucket_;
  std::optional<ShardId> new_owner_;
  std::string state_;
};

// No replica of a shard may serve a read that asked for replicas only
// (ReadPreference::kReplicaOnly, routing/read_policy.hpp): each is
// unreachable, further behind its primary than the read allows, has not
// replayed the writes the read must see (its read token), or the shard has
// none. skipped() names each replica and why.
class ReplicaUnavailable : public ShardError {
 public:
  struct Skipped {
    std::string replica;  // its name in the configuration
    std::string reason;   // "lag 2.4 s over max_lag 1 s", "unreachable: ...", ...
  };
  ReplicaUnavailable(ShardId shard, const std::string& message, std::vector<Skipped> skipped)
      : ShardError(shard, message), skipped_(std::move(skipped)) {}
  [[nodiscard]] const std::vector<Skipped>& skipped() const noexcept { return skipped_; }

 private:
  std::vector<Skipped> skipped_;
};

// A routed transaction lost its connection while committing: it may or may
// not have committed. Never retried blindly; check (e.g. by the IDs it wrote)
// before doing it again.
class OutcomeUnknown : public ShardError {
 public:
  using ShardError::ShardError;
};

// A bucket move could not start, failed (and was rolled back, or left to
// resume), or a move command was refused. move_id() names the move when it
// exists; the message says which step and what to do.
class MoveError : public Error {
 public:
  MoveError(const std::string& message, std::optional<std::int64_t> move_id = {}, std::optional<BucketId> bucket = {})
      : Error(message), move_id_(move_id), bucket_(bucket) {}
  [[nodiscard]] std::optional<std::int64_t> move_id() const noexcept { return move_id_; }
  [[nodiscard]] std::optional<BucketId> bucket() const noexcept { return bucket_; }

 private:
  std::optional<std::int64_t> move_id_;
  std::optional<BucketId> bucket_;
};

// A failover was refused before it changed anything (an unknown replica, an
// old primary that cannot be fenced without --force, a replica that did not
// catch up), or failed at a step; the message says which and what to do.
// promoted() tells whether a replica had been promoted when it stopped.
class FailoverError : public Error {
 public:
  explicit FailoverError(const std::string& message, bool promoted = false) : Error(message), promoted_(promoted) {}
  [[nodiscard]] bool promoted() const noexcept { return promoted_; }

 private:
  bool promoted_;
};

// A replica rebuild (topology/replica_rebuild.hpp) was refused (the server
// is the shard's primary, the catalog cannot say which server is, the data
// directory is not the server's) or failed at a step; the message names the
// server and says what to do. Running the same rebuild again finishes one
// that failed after it began.
class ReplicaRebuildError : public Error {
 public:
  using Error::Error;
};

// A scatter over several shards failed on one or more of them.
class ScatterError : public Error {
 public:
  // sqlstate as ShardError::sqlstate(): the server's code ("57014" when
  // the statement was cut at the deadline), "08006" when the shard could not
  // be reached or the connection was lost, empty otherwise (no free worker
  // or connection before the deadline: the scatter's own limits).
  struct Failure {
    ShardId shard;
    std::string cause;
    std::string sqlstate{};
    // The scatter's directory is out of date: the shard refused a bucket
    // the directory assigned to it (SQLSTATE SK003), or its primary was
    // read-only and the catalog names a successor (a failover, "25006").
    bool stale_directory = false;
  };
  ScatterError(const std::string& message, std::vector<Failure> failures)
      : Error(message), failures_(std::move(failures)) {}
  [[nodiscard]] const std::vector<Failure>& failures() const noexcept { return failures_; }

 private:
  std::vector<Failure> failures_;
};

// A query cannot be answered exactly from per-shard partials (median,
// percentiles, COUNT(DISTINCT x) on a non-shard-key column...). The message
// says why and what to do instead; nothing is answered.
class UnmergeableQuery : public Error {
 public:
  using Error::Error;
};

// An ID generator cannot issue an ID without risking a duplicate (clock moved
// back beyond tolerance, worker-id lease lost, bad worker id...).
class IdGeneratorError : public Error {
 public:
  using Error::Error;
};

// An ID's text or value is not what it claims to be: a malformed UUID, a
// negative Snowflake, a bucket outside 0..63. input() is the offending text
// (or the number as text); the message says what was expected.
class IdFormatError : public Error {
 public:
  IdFormatError(std::string input, const std::string& message) : Error(message), input_(std::move(input)) {}
  [[nodiscard]] const std::string& input() const noexcept { return input_; }

 private:
  std::string input_;
};

// A read token's text (routing/read_token.hpp) is not one: a cookie or
// header that was cut, edited or made by something else. input() is the
// text; the message says what was expected.
class ReadTokenError : public Error {
 public:
  ReadTokenError(std::string input, const std::string& message) : Error(message), input_(std::move(input)) {}
  [[nodiscard]] const std::string& input() const noexcept { return input_; }

 private:
  std::string input_;
};

// A worker partition lease cannot be claimed, renewed or released (the
// catalog is unreachable, the group's partition count disagrees...).
// Partitions already held stay usable until their local deadline.
class LeaseError : public Error {
 public:
  using Error::Error;
};

// A job could not be enqueued, taken or completed on a shard, or a job
// queue is misconfigured. shard() names the shard when one is involved.
class JobError : public Error {
 public:
  explicit JobError(const std::string& message, std::optional<ShardId> shard = {}) : Error(message), shard_(shard) {}
  [[nodiscard]] std::optional<ShardId> shard() const noexcept { return shard_; }

 private:
  std::optional<ShardId> shard_;
};

// A statement given as SQL text (Cluster::Execute, sql/) is not valid SQL, or
// cannot be answered exactly on one shard. For a syntax error message() is
// PostgreSQL's own; for a refusal construct() names what is refused, reason()
// why it cannot be answered exactly across shards and advice() what to do.
// position() is the 1-based character offset in the statement (0: none),
// line() and column() the same as 1-based line and column. what() reads as
// psql prints an error:
//
//   ERROR:  syntax error at or near "SELEC"
//   LINE 1: SELEC 1
//           ^
class SqlError : public Error {
 public:
  enum class Kind { kSyntax, kRefused };
  struct Details {
    Kind kind = Kind::kRefused;
    std::string message;  // syntax: PostgreSQL's; refusal: "<construct> at line L, column C: <reason>; <advice>"
    std::string construct{};
    std::string reason{};
    std::string advice{};
    int position = 0;
    int line = 0;
    int column = 0;
  };
  SqlError(const std::string& what, Details details) : Error(what), details_(std::move(details)) {}
  [[nodiscard]] Kind kind() const noexcept { return details_.kind; }
  [[nodiscard]] const std::string& message() const noexcept { return details_.message; }
  [[nodiscard]] const std::string& construct() const noexcept { return details_.construct; }
  [[nodiscard]] const std::string& reason() const noexcept { return details_.reason; }
  [[nodiscard]] const std::string& advice() const noexcept { return details_.advice; }
  [[nodiscard]] int position() const noexcept { return details_.position; }
  [[nodiscard]] int line() const noexcept { return details_.line; }
  [[nodiscard]] int column() const noexcept { return details_.column; }

 private:
  Details details_;
};

}  // namespace shardkit
