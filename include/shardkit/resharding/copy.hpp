// shardkit/resharding/copy.hpp — bulk loading with COPY, rows formatted straight into
// the COPY stream; for sharded tables, each row routed to its shard's stream.
//
// CopyWriter runs one `COPY table (columns) FROM STDIN` on the connection of
// a libpqxx transaction. Each field is encoded directly into a 64 KiB buffer
// and the buffer goes to libpq in one PQputCopyData call when full: no
// per-field std::string, no per-row call into libpq. Two formats:
//   - binary (the default): the writer reads the columns' types once and
//     encodes each field in the type's binary form (int2/int4/int8 with a
//     range check, numeric, timestamptz, text...), which spares the server
//     parsing text: the fastest way into PostgreSQL;
//   - text: integers with std::to_chars, text escaped for COPY, NULL as \N;
//     any column type whose text input accepts what is written. ShardedCopy holds
// one CopyWriter per shard and routes each row by its customer through one
// directory snapshot, for services that import data and for copying buckets.
//
//   pqxx::work tx{*lease};
//   shardkit::CopyWriter out{tx, "orders", {"customer_id", "bucket", "order_id", "ordered_at", "status", "total"}};
//   out.Row(customer, shardkit::BucketOf(customer), order_id, shardkit::CopyTimestamp{ordered_at}, "placed",
//           shardkit::CopyFixed{total_cents, 2});
//   out.Complete();   // ends the COPY; then tx.commit()
//
//   shardkit::ShardedCopy copy{resolver.Directory(), {&tx0, &tx1}, "orders", columns};
//   copy.For(customer).Row(customer, shardkit::BucketOf(customer), ...);
//   copy.Complete();  // every shard's COPY; then commit each transaction
//
// The sharded tables of an enrolled shard are under row-level security,
// which PostgreSQL's COPY FROM refuses: bracket the COPY with
// `SELECT shardkit_bulk_load_begin()` (first in the transaction) and
// `SELECT shardkit_bulk_load_end()` (before COMMIT; it refuses rows of
// buckets the shard does not own), see ownership.hpp.
//
// While a COPY is open its transaction must not be used for anything else.
// A CopyWriter destroyed without Complete() aborts its COPY, which fails the
// transaction (roll it back). Thread safety: one thread at a time per
// CopyWriter / ShardedCopy.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/routing/directory.hpp"

namespace pqxx {
class transaction_base;
}
struct pg_conn;  // libpq's PGconn

namespace shardkit {

class Decimal;

// A fixed-point number unscaled * 10^-scale, e.g. CopyFixed{1999, 2} is 19.99.
struct CopyFixed {
  std::int64_t unscaled = 0;
  int scale = 0;  // 0..18
};

// A timestamptz in UTC, written as "2026-10-15 12:00:00+00" (fractional
// seconds only when not zero), so the session's TimeZone does not matter.
struct CopyTimestamp {
  std::chrono::sys_time<std::chrono::microseconds> time;
  CopyTimestamp(std::chrono::sys_time<std::chrono::microseconds> t) : time(t) {}  // NOLINT: implicit on purpose
  explicit CopyTimestamp(std::int64_t unix_seconds)
      : time(std::chrono::sys_seconds(std::chrono::seconds(unix_seconds))) {}
};

enum class CopyFormat {
  kBinary,  // bool, smallint, integer, bigint, numeric, text, varchar, timestamptz, timestamp columns
  kText,    // any column type
};

struct CopyOptions {
  CopyFormat format = CopyFormat::kBinary;
  // Named in errors, e.g. "shard 1 (shard1)". Default: the table.
  std::string label;
  // Bytes gathered before one PQputCopyData call.
  std::size_t buffer_bytes = 64 * 1024;
};

class CopyWriter {
 public:
  // Sends `COPY table (columns) FROM STDIN`; an empty column list means all
  // columns in table order. table and columns are identifiers: quoted here
  // ("public.orders" is one name; give a schema-qualified table as
  // "public", "orders" through the two-part constructor). Throws
  // shardkit::Error naming options.label if the server refuses the COPY,
  // if tx is not a dbtransaction (a pqxx::nontransaction) or, in binary
  // format, a column's type has no binary encoding here.
  CopyWriter(pqxx::transaction_base& tx, std::string_view table, std::vector<std::string> columns = {},
             CopyOptions options = {});
  CopyWriter(pqxx::transaction_base& tx, std::string_view schema, std::string_view table,
             std::vector<std::string> columns, CopyOptions options = {});
  ~CopyWriter();
  CopyWriter(const CopyWriter&) = delete;
  CopyWriter& operator=(const CopyWriter&) = delete;
  CopyWriter(CopyWriter&& other) noexcept;
  CopyWriter& operator=(CopyWriter&&) = delete;

  // One row, fields in column order: integers, bool, text (std::string,
  // std::string_view, const char*), CustomerId/BucketId/ShardId, CopyFixed,
  // CopyTimestamp, Decimal, std::nullopt / std::optional<T> (NULL when empty).
  template <class... Fields>
  CopyWriter& Row(const Fields&... fields) {
    (Field(fields), ...);
    return EndRow();
  }

  // Field by field; EndRow() closes the row.
  CopyWriter& Field(std::string_view text);
  CopyWriter& Field(const std::string& text) { return Field(std::string_view(text)); }
  CopyWriter& Field(const char* text) { return text == nullptr ? Null() : Field(std::string_view(text)); }
  CopyWriter& Field(bool value);
  template <class Int>
  requires(std::is_integral_v<Int> && !std::is_same_v<Int, bool> &&
           !std::is_same_v<Int, char>) CopyWriter& Field(Int value) {
    if constexpr (std::is_signed_v<Int>) {
      if (binary_) return BinaryInteger(static_cast<std::int64_t>(value), false);
    } else {
      if (binary_) return BinaryUnsigned(static_cast<std::uint64_t>(value));
    }
    Separate();
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    buffer_.append(digits, end);
    return *this;
  }
  CopyWriter& Field(CustomerId id) { return Field(ToInt(id)); }
  CopyWriter& Field(BucketId id) { return Field(ToInt(id)); }
  CopyWriter& Field(ShardId id) { return Field(ToInt(id)); }
  CopyWriter& Field(CopyFixed value);
  CopyWriter& Field(CopyTimestamp value);
  CopyWriter& Field(const Decimal& value);
  CopyWriter& Field(std::nullopt_t) { return Null(); }
  template <class T>
  CopyWriter& Field(const std::optional<T>& value) {
    return value ? Field(*value) : Null();
  }
  CopyWriter& Null();
  // Text format: text the caller guarantees needs no COPY escaping (no
  // backslash, tab, newline or carriage return), appended as is. Binary
  // format: the same as Field(text).
  CopyWriter& Raw(std::string_view text) {
    if (binary_) return Field(text);
    Separate();
    buffer_.append(text);
    return *this;
  }
  CopyWriter& EndRow() {
    if (binary_) {
      EndBinaryRow();
    } else {
      buffer_.push_back('\n');
      at_row_start_ = true;
    }
    ++rows_;
    if (buffer_.size() >= flush_at_) Flush();
    return *this;
  }

  // Sends what is buffered and ends the COPY; returns the rows the server
  // took. Throws if the server refused any row (the transaction is then
  // failed: roll it back).
  std::int64_t Complete();
  // Ends the COPY with an error (the server discards the rows; the
  // transaction is failed). Never throws.
  void Abort(std::string_view why) noexcept;

  [[nodiscard]] std::int64_t Rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint64_t BytesSent() const noexcept { return bytes_sent_; }
  [[nodiscard]] bool Open() const noexcept { return conn_ != nullptr; }
  [[nodiscard]] const std::string& Label() const noexcept { return label_; }
  [[nodiscard]] CopyFormat Format() const noexcept { return binary_ ? CopyFormat::kBinary : CopyFormat::kText; }

 private:
  void Start(pqxx::transaction_base& tx, const std::string& qualified_table, std::vector<std::string> columns);
  void ReadColumnTypes(pg_conn* conn, const std::string& qualified_table, const std::vector<std::string>& columns);
  CopyWriter& BinaryInteger(std::int64_t value, bool is_unsigned_overflow);
  CopyWriter& BinaryUnsigned(std::uint64_t value);
  CopyWriter& BinaryNumeric(bool negative, std::string_view digits, int scale);
  // The next column's type oid, after checking the row is not full.
  unsigned NextColumnType(const char* what);
  void EndBinaryRow();
  void Separate() {
    if (!at_row_start_) buffer_.push_back('\t');
    at_row_start_ = false;
  }
  void Flush();
  [[noreturn]] void Fail(std::string_view what);

  pg_conn* conn_ = nullptr;
  std::string label_;
  bool binary_ = false;
  std::vector<unsigned> column_types_;  // binary: type oid per column
  std::vector<std::string> column_names_;
  std::size_t column_ = 0;  // binary: next column of the row
  std::string buffer_;
  std::size_t flush_at_ = 0;
  bool at_row_start_ = true;
  std::int64_t rows_ = 0;
  std::uint64_t bytes_sent_ = 0;
};

// One CopyWriter per shard of a directory snapshot; rows are routed by
// customer with that snapshot (a directory published meanwhile does not
// move rows of this load: check Directory()->Version() against the fence
// before committing if buckets may move).
class ShardedCopy {
 public:
  // shard_transactions[i]: an open transaction on shard i (nullptr for a
  // shard that must receive no row: routing a row there throws). Each
  // shard's writer is labelled "<table> on shard <i>" in errors.
  ShardedCopy(std::shared_ptr<const BucketDirectory> directory,
              const std::vector<pqxx::transaction_base*>& shard_transactions, std::string_view table,
              std::vector<std::string> columns = {}, CopyOptions options = {});

  // The writer of the shard that holds `customer`'s bucket.
  [[nodiscard]] CopyWriter& For(CustomerId customer) { return Shard(directory_->ShardFor(customer)); }
  [[nodiscard]] CopyWriter& Shard(ShardId shard);

  // Completes every shard's COPY (all of them, even after one fails: the
  // first failure is thrown after the others are ended). Returns the rows
  // per shard.
  std::vector<std::int64_t> Complete();

  [[nodiscard]] const std::shared_ptr<const BucketDirectory>& Directory() const noexcept { return directory_; }
  [[nodiscard]] std::int64_t Rows() const noexcept;

 private:
  std::shared_ptr<const BucketDirectory> directory_;
  std::vector<std::optional<CopyWriter>> writers_;
};

}  // namespace shardkit
