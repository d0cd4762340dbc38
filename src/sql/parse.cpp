// libpg_query behind RAII: the parse tree (JSON) and the scanner's tokens.
// The scanner's result is a protobuf ScanResult; its few fields are read
// here from the wire format (the shared library bundles protobuf-c but
// installs no header for it).
#include "sql/parse.hpp"

#include <pg_query.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "shardkit/errors.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

struct ParseResultDeleter {
  void operator()(PgQueryParseResult* r) const {
    pg_query_free_parse_result(*r);
    delete r;
  }
};
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
std::vector<Token> DecodeScanResult(const std::uint8_t* data, std::size_t size) {
  std::vector<Token> tokens;
  WireReader reader(data, size);
  while (!reader.Done()) {
    const std::uint64_t key = reader.Varint();
    const auto wire_type = static_cast<std::uint32_t>(key & 7);
    if ((key >> 3) != 2 || wire_type != 2) {
      reader.Skip(wire_type);
      continue;
    }
    WireReader message = reader.Nested();
    Token token;
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
        default:
          break;
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

}  // namespace

std::size_t ParsedStatement::TokenAt(int byte_offset) const {
  const auto it = std::lower_bound(tokens.begin(), tokens.end(), byte_offset,
                                   [](const Token& t, int offset) { return t.start < offset; });
  return static_cast<std::size_t>(it - tokens.begin());
}

std::vector<Token> ScanTokens(const std::string& text) {
  std::unique_ptr<PgQueryScanResult, ScanResultDeleter> result(new PgQueryScanResult(pg_query_scan(text.c_str())));
  if (result->error != nullptr) throw SyntaxError(text, result->error->message, result->error->cursorpos);
  return DecodeScanResult(reinterpret_cast<const std::uint8_t*>(result->pbuf.data), result->pbuf.len);
}

ParsedStatement ParseStatement(const std::string& text) {
  std::unique_ptr<PgQueryParseResult, ParseResultDeleter> result(new PgQueryParseResult(pg_query_parse(text.c_str())));
  if (result->error != nullptr) throw SyntaxError(text, result->error->message, result->error->cursorpos);
  ParsedStatement parsed;
  parsed.text = text;
  nlohmann::json tree = nlohmann::json::parse(result->parse_tree);
  result.reset();
  const auto stmts = tree.find("stmts");
  if (stmts == tree.end() || stmts->empty()) {
    throw Refusal(text, -1, "an empty statement", "there is nothing to run", "give one SQL statement");
  }
  if (stmts->size() > 1) {
    int location = (*stmts)[1].value("stmt_location", 0);
    while (location < static_cast<int>(text.size()) &&
           (text[static_cast<std::size_t>(location)] == ' ' || text[static_cast<std::size_t>(location)] == '\n' ||
            text[static_cast<std::size_t>(location)] == '\t' || text[static_cast<std::size_t>(location)] == '\r')) {
      ++location;
    }
    throw Refusal(text, location, "a second statement",
                  "one call runs one statement (several would not be one transaction on one shard)",
                  "send each statement in a call of its own");
  }
  parsed.tree = std::move((*stmts)[0]["stmt"]);
  parsed.tokens = ScanTokens(text);
  return parsed;
}

}  // namespace shardkit::sql
