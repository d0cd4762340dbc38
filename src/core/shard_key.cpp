#include "shardkit/core/shard_key.hpp"

#include <utility>

#include "core/integer_text.hpp"

namespace shardkit {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// uuid_in's string_to_uuid (PostgreSQL 15, src/backend/utils/adt/uuid.c):
// optional braces, 16 hex pairs, a hyphen allowed after every second pair.
std::optional<std::array<std::uint8_t, 16>> ParseUuid(std::string_view text) {
  std::array<std::uint8_t, 16> bytes{};
  std::size_t at = 0;
  const bool braces = !text.empty() && text.front() == '{';
  if (braces) ++at;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (at + 2 > text.size()) return std::nullopt;
    const int high = HexDigit(text[at]);
    const int low = HexDigit(text[at + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<std::uint8_t>((high << 4) | low);
    at += 2;
    if (at < text.size() && text[at] == '-' && i % 2 == 1 && i < bytes.size() - 1) ++at;
  }
  if (braces) {
    if (at >= text.size() || text[at] != '}') return std::nullopt;
    ++at;
  }
  if (at != text.size()) return std::nullopt;
  return bytes;
}

std::span<const std::uint8_t> BytesOf(const std::string& text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};  // NOLINT: bytes of chars
}

}  // namespace

std::string_view SqlTypeName(ShardKeyType type) noexcept {
  switch (type) {
    case ShardKeyType::kInt4:
      return "integer";
    case ShardKeyType::kInt8:
      return "bigint";
    case ShardKeyType::kUuid:
      return "uuid";
    case ShardKeyType::kText:
      return "text";
  }
  return "?";
}

std::string_view BucketFunction(ShardKeyType type) noexcept {
  switch (type) {
    case ShardKeyType::kInt4:
      return "bucket_of";
    case ShardKeyType::kInt8:
      return "bucket_of_bigint";
    case ShardKeyType::kUuid:
      return "bucket_of_uuid";
    case ShardKeyType::kText:
      return "bucket_of_text";
  }
  return "bucket_of";
}

std::optional<ShardKeyType> ShardKeyTypeOfSql(std::string_view type_name) noexcept {
  if (type_name == "integer" || type_name == "int4" || type_name == "int") return ShardKeyType::kInt4;
  if (type_name == "bigint" || type_name == "int8") return ShardKeyType::kInt8;
  if (type_name == "uuid") return ShardKeyType::kUuid;
  if (type_name == "text" || type_name == "varchar" || type_name.starts_with("character varying")) {
    return ShardKeyType::kText;
  }
  return std::nullopt;
}

ShardKey ShardKey::Text(std::string text) {
  const BucketId bucket = BucketOfBytes(BytesOf(text));
  return ShardKey(ShardKeyType::kText, 0, std::move(text), bucket);
}

ShardKey ShardKey::Uuid(const std::array<std::uint8_t, 16>& bytes) {
  std::string raw(bytes.begin(), bytes.end());
  return ShardKey(ShardKeyType::kUuid, 0, std::move(raw), BucketOfBytes(bytes));
}

std::optional<ShardKey> ShardKey::Parse(ShardKeyType type, std::string_view text) {
  switch (type) {
    case ShardKeyType::kInt4: {
      const auto value = detail::ParseIntegerText(text);
      if (!value || *value < INT32_MIN || *value > INT32_MAX) return std::nullopt;
      return Int4(static_cast<std::int32_t>(*value));
    }
    case ShardKeyType::kInt8: {
      const auto value = detail::ParseIntegerText(text);
      if (!value) return std::nullopt;
      return Int8(*value);
    }
    case ShardKeyType::kUuid: {
      const auto bytes = ParseUuid(text);
      if (!bytes) return std::nullopt;
      return Uuid(*bytes);
    }
    case ShardKeyType::kText:
      return Text(std::string(text));
  }
  return std::nullopt;
}

std::optional<CustomerId> ShardKey::Customer() const noexcept {
  const auto value = Integer();
  if (!value || *value < INT32_MIN || *value > INT32_MAX) return std::nullopt;
  return CustomerId{static_cast<std::int32_t>(*value)};
}

std::string ShardKey::ToString() const {
  if (Integer()) return std::to_string(integer_);
  if (type_ == ShardKeyType::kText) return bytes_;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(36);
  for (std::size_t i = 0; i < bytes_.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    const auto byte = static_cast<unsigned char>(bytes_[i]);
    text += kHex[byte >> 4];
    text += kHex[byte & 0x0F];
  }
  return text;
}

namespace {
// integer and bigint are one family (equal values, equal rows).
int Family(ShardKeyType type) {
  return type == ShardKeyType::kInt8 ? static_cast<int>(ShardKeyType::kInt4) : static_cast<int>(type);
}
}  // namespace

bool operator==(const ShardKey& a, const ShardKey& b) noexcept {
  return Family(a.type_) == Family(b.type_) && a.integer_ == b.integer_ && a.bytes_ == b.bytes_;
}

bool operator<(const ShardKey& a, const ShardKey& b) noexcept {
  if (Family(a.type_) != Family(b.type_)) return Family(a.type_) < Family(b.type_);
  if (a.integer_ != b.integer_) return a.integer_ < b.integer_;
  return a.bytes_ < b.bytes_;
}

}  // namespace shardkit
