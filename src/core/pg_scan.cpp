// The scanner's result is a protobuf ScanResult; its few fields are read
// here from the wire format (the shared library bundles protobuf-c but
// installs no header for it).
#include "core/pg_scan.hpp"

#include <pg_query.h>

#include <cstdint>
#include <memory>

#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

struct ScanResultDeleter {
  void operator()(PgQueryScanResult* r) const {
    pg_query_free_scan_result(*r);
    delete r;
  }
};

// Protobuf wire format: varints and length-delimited fields.
class WireReader {
 public:
  WireReader(const std::uint8_t* data, std::size_t size) : at_(data), end_(data + size) {}
  [[nodiscard]] bool Done() const { return at_ >= end_; }
  std::uint64_t Varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= end_) throw Error("sql: malformed scanner result (truncated varint)");
      const std::uint8_t byte = *at_++;
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    throw Error("sql: malformed scanner result (varint too long)");
  }
  WireReader Nested() {
    const std::uint64_t size = Varint();
    if (size > static_cast<std::uint64_t>(end_ - at_)) throw Error("sql: malformed scanner result (length)");
    WireReader nested(at_, static_cast<std::size_t>(size));
    at_ += size;
    return nested;
  }
  void Skip(std::uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        Varint();
        return;
      case 1:
        Advance(8);
        return;
      case 2:
        Nested();
        return;
      case 5:
        Advance(4);
        return;
      default:
        throw Error("sql: malformed scanner result (wire type)");
    }
  }

 private:
  void Advance(std::size_t n) {
    if (n > static_cast<std::size_t>(end_ - at_)) throw Error("sql: malformed scanner result (truncated)");
    at_ += n;
  }
  const std::uint8_t* at_;
  const std::uint8_t* end_;
};

// ScanResult { int32 version = 1; repeated ScanToken tokens = 2; }
// ScanToken { int32 start = 1; int32 end = 2; Token token = 4; KeywordKind keyword_kind = 5; }
std::vector<PgToken> DecodeScanResult(const std::uint8_t* data, std::size_t size) {
  std::vector<PgToken> tokens;
  WireReader reader(data, size);
  while (!reader.Done()) {
    const std::uint64_t key = reader.Varint();
    const auto wire_type = static_cast<std::uint32_t>(key & 7);
    if ((key >> 3) != 2 || wire_type != 2) {
      reader.Skip(wire_type);
      continue;
    }
    WireReader message = reader.Nested();
    PgToken token;
    while (!message.Done()) {
      const std::uint64_t field = message.Varint();
      const auto type = static_cast<std::uint32_t>(field & 7);
      if (type != 0) {
        message.Skip(type);
        continue;
      }
      const auto value = static_cast<int>(static_cast<std::int32_t>(message.Varint()));
      switch (field >> 3) {
        case 1:
          token.start = value;
          break;
        case 2:
          token.end = value;
          break;
        case 4:
          token.kind = value;
          break;
        case 5:
          token.keyword = value != 0;
          break;
        default:
          break;
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

}  // namespace

PgScan ScanSql(const std::string& text) {
  std::unique_ptr<PgQueryScanResult, ScanResultDeleter> result(new PgQueryScanResult(pg_query_scan(text.c_str())));
  PgScan scan;
  if (result->error != nullptr) {
    scan.error = result->error->message;
    scan.error_position = result->error->cursorpos;
    return scan;
  }
  scan.tokens = DecodeScanResult(reinterpret_cast<const std::uint8_t*>(result->pbuf.data), result->pbuf.len);
  return scan;
}

}  // namespace shardkit::detail
