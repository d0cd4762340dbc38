// CopyWriter and ShardedCopy (shardkit/resharding/copy.hpp): COPY FROM STDIN in text
// format, fed through libpq's PQputCopyData in large chunks.
#include "shardkit/resharding/copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <pqxx/pqxx>
#include <utility>

#include "pg/libpq_handle.hpp"
#include "shardkit/core/decimal.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string CopyCommand(std::string_view qualified_table, const std::vector<std::string>& columns) {
  std::string sql = fmt::format("COPY {}", qualified_table);
  if (!columns.empty()) {
    sql += " (";
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (i > 0) sql += ", ";
      sql += QuoteIdentifier(columns[i]);
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

// PostgreSQL type oids with a binary form here.
constexpr unsigned kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23, kText = 25, kBpchar = 1042, kVarchar = 1043,
                   kTimestamp = 1114, kTimestamptz = 1184, kNumeric = 1700;

bool BinarySupported(unsigned type) {
  switch (type) {
    case kBool: case kInt8: case kInt2: case kInt4: case kText: case kBpchar: case kVarchar: case kTimestamp:
    case kTimestamptz: case kNumeric:
      return true;
    default:
      return false;
  }
}

const char* TypeName(unsigned type) {
  switch (type) {
    case kBool: return "boolean";
    case kInt8: return "bigint";
    case kInt2: return "smallint";
    case kInt4: return "integer";
    case kText: return "text";
    case kBpchar: return "character";
    case kVarchar: return "character varying";
    case kTimestamp: return "timestamp";
    case kTimestamptz: return "timestamptz";
    case kNumeric: return "numeric";
    default: return "?";
  }
}

void Put16(std::string& out, std::uint16_t v) {
  const char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 2);
}
void Put32(std::string& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  out.append(b, 4);
}
void Put64(std::string& out, std::uint64_t v) {
  Put32(out, static_cast<std::uint32_t>(v >> 32));
  Put32(out, static_cast<std::uint32_t>(v));
}

// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
constexpr std::int64_t kPostgresEpochMicros = 946'684'800'000'000;

// Two digits of 0..99.
void Put2(std::string& out, unsigned v) {
  out.push_back(static_cast<char>('0' + v / 10));
  out.push_back(static_cast<char>('0' + v % 10));
}

}  // namespace

CopyWriter::CopyWriter(pqxx::transaction_base& tx, std::string_view table, std::vector<std::string> columns,
                       CopyOptions options)
    : label_(options.label.empty() ? std::string(table) : std::move(options.label)),
      binary_(options.format == CopyFormat::kBinary),
      flush_at_(std::max<std::size_t>(options.buffer_bytes, 1024)) {
  Start(tx, QuoteIdentifier(table), std::move(columns));
}

CopyWriter::CopyWriter(pqxx::transaction_base& tx, std::string_view schema, std::string_view table,
                       std::vector<std::string> columns, CopyOptions options)
    : label_(options.label.empty() ? fmt::format("{}.{}", schema, table) : std::move(options.label)),
      binary_(options.format == CopyFormat::kBinary),
      flush_at_(std::max<std::size_t>(options.buffer_bytes, 1024)) {
  Start(tx, QuoteIdentifier(schema) + "." + QuoteIdentifier(table), std::move(columns));
}

void CopyWriter::Start(pqxx::transaction_base& tx, const std::string& qualified_table,
                       std::vector<std::string> columns) {
  PGconn* conn = detail::LibpqHandle(tx.conn());
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
      throw Error(fmt::format("COPY into {}: column \"{}\" has a type (oid {}) this writer has no binary form "
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

unsigned CopyWriter::NextColumnType(const char* what) {
  if (column_ >= column_types_.size()) {
    throw Error(fmt::format("COPY into {}: row {} has more fields than the {} columns (at {})", label_, rows_ + 1,
                            column_types_.size(), what));
  }
  if (column_ == 0) Put16(buffer_, static_cast<std::uint16_t>(column_types_.size()));
  return column_types_[column_++];
}

void CopyWriter::EndBinaryRow() {
  if (column_ != column_types_.size()) {
    throw Error(fmt::format("COPY into {}: row {} has {} fields for {} columns", label_, rows_ + 1, column_,
                            column_types_.size()));
  }
  column_ = 0;
}

namespace {
[[noreturn]] void WrongType(const std::string& label, const std::string& column, unsigned type, const char* given) {
  throw Error(fmt::format("COPY into {}: column \"{}\" is {}, and a {} cannot be written to it in binary format; "
                          "pass a matching value or use CopyFormat::kText",
                          label, column, TypeName(type), given));
}
}  // namespace

CopyWriter& CopyWriter::Null() {
  if (binary_) {
    (void)NextColumnType("NULL");
    Put32(buffer_, 0xFFFFFFFFu);
    return *this;
  }
  Separate();
  buffer_.append("\\N");
  return *this;
}

CopyWriter& CopyWriter::Field(bool value) {
  if (binary_) {
    const unsigned type = NextColumnType("boolean");
    if (type != kBool) WrongType(label_, column_names_[column_ - 1], type, "boolean");
    Put32(buffer_, 1);
    buffer_.push_back(value ? '\1' : '\0');
    return *this;
  }
  Separate();
  buffer_.push_back(value ? 't' : 'f');
  return *this;
}

CopyWriter& CopyWriter::BinaryUnsigned(std::uint64_t value) {
  if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return BinaryInteger(0, true);
  }
  return BinaryInteger(static_cast<std::int64_t>(value), false);
}

CopyWriter& CopyWriter::BinaryInteger(std::int64_t value, bool too_large) {
  const unsigned type = NextColumnType("integer");
  const std::string& column = column_names_[column_ - 1];
  auto out_of_range = [&](const char* range) {
    throw Error(fmt::format("COPY into {}: row {}: {} does not fit column \"{}\" ({}: {})", label_, rows_ + 1,
                            too_large ? std::string("an unsigned value above 2^63") : std::to_string(value), column,
                            TypeName(type), range));
  };
  if (too_large) out_of_range("at most 2^63-1");
  switch (type) {
    case kInt2:
      if (value < -32768 || value > 32767) out_of_range("-32768..32767");
      Put32(buffer_, 2);
      Put16(buffer_, static_cast<std::uint16_t>(static_cast<std::int16_t>(value)));
      return *this;
    case kInt4:
      if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max()) {
        out_of_range("32-bit");
      }
      Put32(buffer_, 4);
      Put32(buffer_, static_cast<std::uint32_t>(static_cast<std::int32_t>(value)));
      return *this;
    case kInt8:
      Put32(buffer_, 8);
      Put64(buffer_, static_cast<std::uint64_t>(value));
      return *this;
    case kNumeric: {
      --column_;  // BinaryNumeric takes the column again
      const bool negative = value < 0;
      const std::uint64_t magnitude =
          negative ? ~static_cast<std::uint64_t>(value) + 1 : static_cast<std::uint64_t>(value);
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, magnitude).ptr;
      return BinaryNumeric(negative, std::string_view(digits, static_cast<std::size_t>(end - digits)), 0);
    }
    default:
      WrongType(label_, column, type, "integer");
  }
}

// numeric's binary form: ndigits, weight, sign, dscale (int16 each), then
// ndigits base-10000 digits. `digits`: the unscaled value's decimal digits.
CopyWriter& CopyWriter::BinaryNumeric(bool negative, std::string_view digits, int scale) {
  const unsigned type = NextColumnType("numeric");
  if (type != kNumeric) WrongType(label_, column_names_[column_ - 1], type, "number with a fraction");
  const auto fraction = static_cast<std::size_t>(scale);
  // Integer part (may be empty) and fraction part padded to `fraction` digits.
  std::string_view int_part;
  std::string frac_part;
  if (digits.size() > fraction) {
    int_part = digits.substr(0, digits.size() - fraction);
    frac_part = std::string(digits.substr(digits.size() - fraction));
  } else {
    frac_part = std::string(fraction - digits.size(), '0') + std::string(digits);
  }
  std::uint16_t groups[64];
  int count = 0;
  const std::size_t int_lead = (4 - int_part.size() % 4) % 4;  // zeros padded on the left
  const int int_groups = static_cast<int>((int_part.size() + int_lead) / 4);
  auto digit_at_int = [&](std::size_t i) -> unsigned {  // i over the padded integer part
    return i < int_lead ? 0U : static_cast<unsigned>(int_part[i - int_lead] - '0');
  };
  for (int g = 0; g < int_groups; ++g) {
    unsigned v = 0;
    for (std::size_t d = 0; d < 4; ++d) v = v * 10 + digit_at_int(static_cast<std::size_t>(g) * 4 + d);
    groups[count++] = static_cast<std::uint16_t>(v);
  }
  const int frac_groups = static_cast<int>((frac_part.size() + 3) / 4);
  for (int g = 0; g < frac_groups; ++g) {
    unsigned v = 0;
    for (std::size_t d = 0; d < 4; ++d) {
      const std::size_t i = static_cast<std::size_t>(g) * 4 + d;
      v = v * 10 + (i < frac_part.size() ? static_cast<unsigned>(frac_part[i] - '0') : 0U);
    }
    groups[count++] = static_cast<std::uint16_t>(v);
  }
  int weight = int_groups - 1;
  int first = 0;
  while (first < count && groups[first] == 0) {
    ++first;
    --weight;
  }
  int last = count;
  while (last > first && groups[last - 1] == 0) --last;
  const int ndigits = last - first;
  if (ndigits == 0) {
    weight = 0;
    negative = false;
  }
  Put32(buffer_, static_cast<std::uint32_t>(8 + 2 * ndigits));
  Put16(buffer_, static_cast<std::uint16_t>(ndigits));
  Put16(buffer_, static_cast<std::uint16_t>(static_cast<std::int16_t>(weight)));
  Put16(buffer_, negative ? 0x4000 : 0x0000);
  Put16(buffer_, static_cast<std::uint16_t>(scale));
  for (int i = first; i < last; ++i) Put16(buffer_, groups[i]);
  return *this;
}

CopyWriter& CopyWriter::Field(std::string_view text) {
  if (binary_) {
    const unsigned type = NextColumnType("text");
    if (type == kText || type == kVarchar || type == kBpchar) {
      if (text.size() > 0x3FFFFFFF) throw Error(fmt::format("COPY into {}: a text field over 1 GB", label_));
      Put32(buffer_, static_cast<std::uint32_t>(text.size()));
      buffer_.append(text);
      return *this;
    }
    if (type == kNumeric) {
      // [+-]digits[.digits]
      --column_;
      std::string_view t = text;
      bool negative = false;
      if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
        negative = t[0] == '-';
        t.remove_prefix(1);
      }
      const auto dot = t.find('.');
      std::string digits(t.substr(0, dot));
      int scale = 0;
      if (dot != std::string_view::npos) {
        digits += t.substr(dot + 1);
        scale = static_cast<int>(t.size() - dot - 1);
      }
      const bool valid = !digits.empty() && digits.size() <= 200 &&
                         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!valid) {
        throw Error(fmt::format("COPY into {}: row {}: '{}' is not a plain decimal number for column \"{}\" "
                                "(binary format takes [-]digits[.digits])",
                                label_, rows_ + 1, text, column_names_[column_]));
      }
      const auto nonzero = digits.find_first_not_of('0');
      return BinaryNumeric(negative, nonzero == std::string::npos ? std::string_view("0")
                                                                   : std::string_view(digits).substr(nonzero),
                           scale);
    }
    WrongType(label_, column_names_[column_ - 1], type, "text");
  }
  Separate();
  // Most text needs no escaping: append runs between special bytes.
  std::size_t run = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char* escape = nullptr;
    switch (c) {
      case '\\': escape = "\\\\"; break;
      case '\t': escape = "\\t"; break;
      case '\n': escape = "\\n"; break;
      case '\r': escape = "\\r"; break;
      default: continue;
    }
    buffer_.append(text.data() + run, i - run);
    buffer_.append(escape, 2);
    run = i + 1;
  }
  buffer_.append(text.data() + run, text.size() - run);
  return *this;
}

CopyWriter& CopyWriter::Field(CopyFixed value) {
  if (value.scale < 0 || value.scale > 18) {
    throw Error(fmt::format("COPY into {}: CopyFixed scale {} is outside 0..18", label_, value.scale));
  }
  // Magnitude as unsigned, so INT64_MIN works too.
  const bool negative = value.unscaled < 0;
  const std::uint64_t magnitude =
      negative ? ~static_cast<std::uint64_t>(value.unscaled) + 1 : static_cast<std::uint64_t>(value.unscaled);
  char digits[24];
  char* end = std::to_chars(digits, digits + sizeof digits, magnitude).ptr;
  auto length = static_cast<std::size_t>(end - digits);
  if (binary_) return BinaryNumeric(negative, std::string_view(digits, length), value.scale);
  Separate();
  const auto scale = static_cast<std::size_t>(value.scale);
  if (negative) buffer_.push_back('-');
  if (scale == 0) {
    buffer_.append(digits, length);
    return *this;
  }
  if (length <= scale) {
    buffer_.append("0.");
    buffer_.append(scale - length, '0');
    buffer_.append(digits, length);
    return *this;
  }
  buffer_.append(digits, length - scale);
  buffer_.push_back('.');
  buffer_.append(digits + (length - scale), scale);
  return *this;
}

CopyWriter& CopyWriter::Field(CopyTimestamp value) {
  using namespace std::chrono;
  if (binary_) {
    const unsigned type = NextColumnType("timestamp");
    if (type != kTimestamptz && type != kTimestamp) WrongType(label_, column_names_[column_ - 1], type, "timestamp");
    Put32(buffer_, 8);
    Put64(buffer_, static_cast<std::uint64_t>(value.time.time_since_epoch().count() - kPostgresEpochMicros));
    return *this;
  }
  Separate();
  const auto day = floor<days>(value.time);
  const year_month_day ymd{day};
  const hh_mm_ss<microseconds> tod{value.time - day};
  const int year = static_cast<int>(ymd.year());
  if (year < 1 || year > 9999) {
    throw Error(fmt::format("COPY into {}: timestamp year {} is outside 1..9999", label_, year));
  }
  char y[8];
  const auto yend = std::to_chars(y, y + sizeof y, year).ptr;
  buffer_.append(static_cast<std::size_t>(4 - (yend - y)), '0');
  buffer_.append(y, yend);
  buffer_.push_back('-');
  Put2(buffer_, static_cast<unsigned>(ymd.month()));
  buffer_.push_back('-');
  Put2(buffer_, static_cast<unsigned>(ymd.day()));
  buffer_.push_back(' ');
  Put2(buffer_, static_cast<unsigned>(tod.hours().count()));
  buffer_.push_back(':');
  Put2(buffer_, static_cast<unsigned>(tod.minutes().count()));
  buffer_.push_back(':');
  Put2(buffer_, static_cast<unsigned>(tod.seconds().count()));
  if (const auto micros = tod.subseconds().count(); micros != 0) {
    char frac[8];
    auto v = static_cast<unsigned>(micros);
    for (int i = 5; i >= 0; --i) {
      frac[i] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
    buffer_.push_back('.');
    buffer_.append(frac, 6);
  }
  buffer_.append("+00");
  return *this;
}

CopyWriter& CopyWriter::Field(const Decimal& value) {
  const std::string text = value.ToString();
  if (binary_) return Field(std::string_view(text));
  return Raw(text);
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
    throw Error(fmt::format("ShardedCopy into {}: {} transactions given for a directory of {} shards; give one "
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
