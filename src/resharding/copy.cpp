// CopyWriter and ShardedCopy (shardkit/resharding/copy.hpp): COPY FROM STDIN in text
// format, fed through libpq's PQputCopyData in large chunks.
#include "shardkit/resharding/copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <utility>

#include "core/sql_text.hpp"
#include "pg/libpq_handle.hpp"
#include "resharding/copy_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {

using namespace detail::copy_format;  // the format's type oids and byte writers

namespace {

std::string CopyCommand(std::string_view qualified_table, const std::vector<std::string>& columns) {
  std::string sql = fmt::format("COPY {}", qualified_table);
  if (!columns.empty()) {
    sql += " (";
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (i > 0) sql += ", ";
      sql += detail::QuoteIdentifier(columns[i]);
    }
    sql += ')';
  }
  sql += " FROM STDIN";
  return sql;
}

std::string Trimmed(const char* message) {
  std::string text = message == nullptr ? "" : message;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.starts_with("ERROR:  ")) text.erase(0, 8);
  return text;
}

bool BinarySupported(unsigned type) {
  switch (type) {
    case kBool:
    case kInt8:
    case kInt2:
    case kInt4:
    case kText:
    case kBpchar:
    case kVarchar:
    case kTimestamp:
    case kTimestamptz:
    case kNumeric:
      return true;
    default:
      return false;
  }
}

}  // namespace

CopyWriter::CopyWriter(pqxx::transaction_base& tx, std::string_view table, std::vector<std::string> columns,
                       CopyOptions options)
    : label_(options.label.empty() ? std::string(table) : std::move(options.label)),
      binary_(options.format == CopyFormat::kBinary),
      flush_at_(std::max<std::size_t>(options.buffer_bytes, 1024)) {
  Start(tx, detail::QuoteIdentifier(table), std::move(columns));
}

CopyWriter::CopyWriter(pqxx::transaction_base& tx, std::string_view schema, std::string_view table,
                       std::vector<std::string> columns, CopyOptions options)
    : label_(options.label.empty() ? fmt::format("{}.{}", schema, table) : std::move(options.label)),
      binary_(options.format == CopyFormat::kBinary),
      flush_at_(std::max<std::size_t>(options.buffer_bytes, 1024)) {
  Start(tx, detail::QuoteIdentifier(schema) + "." + detail::QuoteIdentifier(table), std::move(columns));
}

void CopyWriter::Start(pqxx::transaction_base& tx, const std::string& qualified_table,
                       std::vector<std::string> columns) {
  const auto* transaction = dynamic_cast<const pqxx::dbtransaction*>(&tx);
  if (transaction == nullptr) {
    throw Error(fmt::format("COPY into {}: needs a transaction (pqxx::work), not a nontransaction", label_));
  }
  PGconn* conn = detail::LibpqHandle(*transaction);
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    throw Error(fmt::format("COPY into {}: the connection is closed; acquire a live connection", label_));
  }
  if (binary_) ReadColumnTypes(conn, qualified_table, columns);
  std::string command = CopyCommand(qualified_table, columns);
  if (binary_) command += " (FORMAT binary)";
  buffer_.reserve(flush_at_ + 4096);
  PGresult* res = PQexec(conn, command.c_str());
  const ExecStatusType status = PQresultStatus(res);
  std::string error = status == PGRES_COPY_IN ? std::string() : Trimmed(PQresultErrorMessage(res));
  PQclear(res);
  if (status != PGRES_COPY_IN) {
    // Drain whatever else came (nothing, for one statement).
    while (PGresult* more = PQgetResult(conn)) PQclear(more);
    if (error.empty()) error = Trimmed(PQerrorMessage(conn));
    // PostgreSQL refuses COPY FROM into a table under row-level security:
    // the sharded tables of an enrolled shard (ownership.hpp).
    const bool fenced = error.find("row-level security") != std::string::npos;
    throw Error(fmt::format("COPY into {} refused: {} ({}); {}", label_, error, command,
                            fenced ? "on an enrolled shard, run SELECT shardkit_bulk_load_begin() in the transaction "
                                     "before the COPY and SELECT shardkit_bulk_load_end() before COMMIT (it checks "
                                     "that every row belongs to a bucket the shard owns)"
                                   : "check the table and column names"));
  }
  conn_ = conn;
  if (binary_) {
    // Signature, flags, header extension length.
    buffer_.append("PGCOPY\n\377\r\n\0", 11);
    Put32(buffer_, 0);
    Put32(buffer_, 0);
  }
}

void CopyWriter::ReadColumnTypes(pg_conn* conn, const std::string& qualified_table,
                                 const std::vector<std::string>& columns) {
  // A domain column is written in its base type's binary form.
  constexpr const char* kColumns =
      "SELECT a.attname, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END::int8 "
      "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
      "WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";
  const char* values[1] = {qualified_table.c_str()};
  PGresult* res = PQexecParams(conn, kColumns, 1, nullptr, values, nullptr, nullptr, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK) {
    const std::string error = Trimmed(PQresultErrorMessage(res));
    PQclear(res);
    throw Error(fmt::format("COPY into {}: cannot read the columns of {}: {}; check the table name", label_,
                            qualified_table, error));
  }
  std::vector<std::pair<std::string, unsigned>> all;
  for (int r = 0; r < PQntuples(res); ++r) {
    all.emplace_back(PQgetvalue(res, r, 0), static_cast<unsigned>(std::stoul(PQgetvalue(res, r, 1))));
  }
  PQclear(res);
  std::vector<std::pair<std::string, unsigned>> chosen;
  if (columns.empty()) {
    chosen = all;
  } else {
    for (const auto& name : columns) {
      const auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.first == name; });
      if (it == all.end()) {
        throw Error(fmt::format("COPY into {}: {} has no column \"{}\"", label_, qualified_table, name));
      }
      chosen.push_back(*it);
    }
  }
  for (const auto& [name, type] : chosen) {
    if (!BinarySupported(type)) {
      throw Error(
          fmt::format("COPY into {}: column \"{}\" has a type (oid {}) this writer has no binary form "
                      "for; use CopyFormat::kText",
                      label_, name, type));
    }
    column_names_.push_back(name);
    column_types_.push_back(type);
  }
}

CopyWriter::CopyWriter(CopyWriter&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)),
      label_(std::move(other.label_)),
      binary_(other.binary_),
      column_types_(std::move(other.column_types_)),
      column_names_(std::move(other.column_names_)),
      column_(other.column_),
      buffer_(std::move(other.buffer_)),
      flush_at_(other.flush_at_),
      at_row_start_(other.at_row_start_),
      rows_(other.rows_),
      bytes_sent_(other.bytes_sent_) {}

CopyWriter::~CopyWriter() {
  if (conn_ != nullptr) Abort("the CopyWriter was destroyed before Complete()");
}

void CopyWriter::Flush() {
  if (buffer_.empty()) return;
  if (conn_ == nullptr) Fail("the COPY is no longer open");
  if (PQputCopyData(conn_, buffer_.data(), static_cast<int>(buffer_.size())) != 1) {
    Fail(Trimmed(PQerrorMessage(conn_)));
  }
  bytes_sent_ += buffer_.size();
  buffer_.clear();
}

void CopyWriter::Fail(std::string_view what) {
  std::string message = fmt::format("COPY into {} failed after {} rows: {}", label_, rows_, what);
  if (conn_ != nullptr) {
    // Collect the server's reason, if it already sent one.
    PGconn* conn = std::exchange(conn_, nullptr);
    PQputCopyEnd(conn, "shardkit: COPY abandoned");
    while (PGresult* res = PQgetResult(conn)) {
      if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
        message += fmt::format(" (server: {})", Trimmed(PQresultErrorMessage(res)));
      }
      PQclear(res);
    }
  }
  throw Error(message);
}

std::int64_t CopyWriter::Complete() {
  if (conn_ == nullptr) Fail("Complete() called twice or after a failure");
  if (binary_ ? column_ != 0 : !at_row_start_) Fail("the last row was not ended (call EndRow())");
  if (binary_) Put16(buffer_, 0xFFFF);  // the file trailer
  Flush();
  PGconn* conn = conn_;
  if (PQputCopyEnd(conn, nullptr) != 1) Fail(Trimmed(PQerrorMessage(conn)));
  conn_ = nullptr;
  std::string error;
  std::int64_t taken = -1;
  while (PGresult* res = PQgetResult(conn)) {
    if (PQresultStatus(res) == PGRES_COMMAND_OK) {
      const char* tuples = PQcmdTuples(res);
      if (tuples != nullptr && *tuples != '\0') taken = std::stoll(tuples);
    } else if (error.empty()) {
      error = Trimmed(PQresultErrorMessage(res));
    }
    PQclear(res);
  }
  if (!error.empty()) {
    throw Error(fmt::format("COPY into {} failed: {}; the transaction is aborted, roll it back", label_, error));
  }
  return taken >= 0 ? taken : rows_;
}

void CopyWriter::Abort(std::string_view why) noexcept {
  if (conn_ == nullptr) return;
  PGconn* conn = std::exchange(conn_, nullptr);
  const std::string reason(why);
  PQputCopyEnd(conn, reason.c_str());
  while (PGresult* res = PQgetResult(conn)) PQclear(res);
  buffer_.clear();
}

ShardedCopy::ShardedCopy(std::shared_ptr<const BucketDirectory> directory,
                         const std::vector<pqxx::transaction_base*>& shard_transactions, std::string_view table,
                         std::vector<std::string> columns, CopyOptions options)
    : directory_(std::move(directory)) {
  if (!directory_) throw Error("ShardedCopy: no directory snapshot given");
  const auto shards = static_cast<std::size_t>(directory_->ShardCount());
  if (shard_transactions.size() != shards) {
    throw Error(
        fmt::format("ShardedCopy into {}: {} transactions given for a directory of {} shards; give one "
                    "per shard (nullptr for a shard that gets no rows)",
                    table, shard_transactions.size(), shards));
  }
  writers_.resize(shards);
  try {
    for (std::size_t s = 0; s < shards; ++s) {
      if (shard_transactions[s] == nullptr) continue;
      CopyOptions shard_options = options;
      shard_options.label = fmt::format("{} on shard {}", table, s);
      writers_[s].emplace(*shard_transactions[s], table, columns, std::move(shard_options));
    }
  } catch (const Error& e) {
    for (auto& w : writers_) {
      if (w) w->Abort("another shard refused the COPY");
    }
    throw;
  }
}

CopyWriter& ShardedCopy::Shard(ShardId shard) {
  const auto index = static_cast<std::size_t>(ToInt(shard));
  if (index >= writers_.size()) throw UnknownShard(shard, static_cast<int>(writers_.size()));
  if (!writers_[index]) {
    throw ShardQueryError(shard, fmt::format("ShardedCopy: a row routes to shard {} (directory version {}), "
                                             "which was given no transaction",
                                             shard, directory_->Version()));
  }
  return *writers_[index];
}

std::vector<std::int64_t> ShardedCopy::Complete() {
  std::vector<std::int64_t> rows(writers_.size(), 0);
  std::optional<ShardQueryError> first;
  for (std::size_t s = 0; s < writers_.size(); ++s) {
    if (!writers_[s]) continue;
    try {
      rows[s] = writers_[s]->Complete();
    } catch (const Error& e) {
      if (!first) first.emplace(ShardId{static_cast<int>(s)}, e.what());
    }
  }
  if (first) throw *first;
  return rows;
}

std::int64_t ShardedCopy::Rows() const noexcept {
  std::int64_t n = 0;
  for (const auto& w : writers_) {
    if (w) n += w->Rows();
  }
  return n;
}

}  // namespace shardkit
