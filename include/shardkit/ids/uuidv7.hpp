// shardkit/ids/uuidv7.hpp — UUIDs, and time-ordered UUIDv7 per RFC 9562.
//
// A UUIDv7 starts with the Unix time in milliseconds, so new keys land at the
// right edge of a B-tree index like a sequence would, yet need no
// coordination between shards or processes.
//
//   shardkit::Uuid id = shardkit::NewUuidv7();          // thread-local generator
//   std::string text = id.ToString();                   // "018f3c4e-9a1b-7c3d-8e4f-..."
//   tx.exec_params("INSERT INTO events (event_id) VALUES ($1)", id);   // uuid column
//   auto back = row[0].as<shardkit::Uuid>();
//   std::optional<std::int64_t> ms = back.Uuidv7UnixMs();
//
// Layout of the IDs Uuidv7Generator makes (RFC 9562 section 5.7, with the
// monotonic methods of section 6.2):
//
//   48 bits unix_ts_ms | 4 bits version 7 | 12 bits rand_a | 2 bits variant 10 | 62 bits rand_b
//   rand_a = sub-millisecond fraction of the clock, in 1/4096 ms (method 3,
//            as PostgreSQL 18's uuidv7() does)
//   rand_b = 14-bit counter (method 1; starts at a random value below 8192
//            in every new 1/4096 ms and counts up within it) | 48 random bits
//
// Within one generator the IDs are strictly increasing, even when called
// faster than the clock ticks or when the wall clock steps back: the
// generator then carries on from its last value (its timestamps run ahead of
// the clock by at most the size of the step until the clock catches up).
// Uniqueness across generators rests on the 48 (up to 61) random bits per
// ID, drawn from a ChaCha12 stream (the CSPRNG of Rust's rand) keyed from
// getrandom(2), re-keyed every 64 KiB and in a child after fork(), so no two
// generators or processes share a stream.
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <pqxx/strconv>

#include "shardkit/ids/id_clock.hpp"

namespace shardkit {

using UuidBytes = std::array<std::uint8_t, 16>;

enum class UuidVariant {
  kNcs,        // 0xx: NCS backward compatibility
  kRfc9562,    // 10x: RFC 9562 / RFC 4122, the one all modern UUIDs use
  kMicrosoft,  // 110: Microsoft GUIDs
  kFuture,     // 111: reserved
};

// A 128-bit UUID of any version, stored in network byte order. Compares
// like PostgreSQL's uuid type (bytewise, unsigned), so UUIDv7s sort by time.
class Uuid {
 public:
  static constexpr std::size_t kTextSize = 36;  // 8-4-4-4-12

  constexpr Uuid() noexcept = default;  // the nil UUID
  constexpr explicit Uuid(const UuidBytes& bytes) noexcept : bytes_(bytes) {}

  // Exactly 16 bytes, else IdFormatError.
  [[nodiscard]] static Uuid FromBytes(std::span<const std::uint8_t> bytes);
  // Accepts what PostgreSQL prints and what people paste: 8-4-4-4-12 or 32
  // hex digits, either case, optionally in braces or after "urn:uuid:".
  // Throws IdFormatError saying which character or length is wrong.
  [[nodiscard]] static Uuid Parse(std::string_view text);
  [[nodiscard]] static std::optional<Uuid> TryParse(std::string_view text) noexcept;
  // Assembles a version 7 UUID from its RFC 9562 fields (excess high bits
  // are cut off). FromUuidv7Fields(0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F)
  // is the example of RFC 9562 appendix A.6.
  [[nodiscard]] static constexpr Uuid FromUuidv7Fields(std::uint64_t unix_ts_ms, std::uint16_t rand_a,
                                                       std::uint64_t rand_b) noexcept;

  [[nodiscard]] constexpr const UuidBytes& Bytes() const noexcept { return bytes_; }
  // Lowercase 8-4-4-4-12.
  [[nodiscard]] std::string ToString() const;
  // The same 36 characters written to `out`, no allocation.
  void WriteText(std::span<char, kTextSize> out) const noexcept;

  [[nodiscard]] constexpr int Version() const noexcept { return bytes_[6] >> 4; }
  [[nodiscard]] UuidVariant Variant() const noexcept;
  [[nodiscard]] constexpr bool IsNil() const noexcept { return *this == Uuid{}; }
  // The 48-bit Unix millisecond timestamp of a version 7 UUID (RFC variant);
  // nullopt for any other UUID.
  [[nodiscard]] std::optional<std::int64_t> Uuidv7UnixMs() const noexcept;
  // The 12 bits after the version (rand_a). In shardkit's and PostgreSQL 18's
  // UUIDv7s it is the sub-millisecond fraction in 1/4096 ms.
  [[nodiscard]] constexpr int RandA() const noexcept { return ((bytes_[6] & 0x0F) << 8) | bytes_[7]; }

  friend constexpr bool operator==(const Uuid&, const Uuid&) noexcept = default;
  friend constexpr std::strong_ordering operator<=>(const Uuid&, const Uuid&) noexcept = default;

 private:
  UuidBytes bytes_{};
};

constexpr Uuid Uuid::FromUuidv7Fields(std::uint64_t unix_ts_ms, std::uint16_t rand_a, std::uint64_t rand_b) noexcept {
  const std::uint64_t high = ((unix_ts_ms & 0xFFFF'FFFF'FFFFULL) << 16) | 0x7000U | (rand_a & 0x0FFFU);
  const std::uint64_t low = 0x8000'0000'0000'0000ULL | (rand_b & 0x3FFF'FFFF'FFFF'FFFFULL);
  // Network byte order: two byte swaps (bswap) on little-endian machines.
  struct Halves {
    std::uint64_t high;
    std::uint64_t low;
  };
  if constexpr (std::endian::native == std::endian::little) {
    return Uuid{std::bit_cast<UuidBytes>(Halves{__builtin_bswap64(high), __builtin_bswap64(low)})};
  } else {
    return Uuid{std::bit_cast<UuidBytes>(Halves{high, low})};
  }
}

namespace detail {
struct Uuidv7State;
}

// Makes strictly increasing UUIDv7s (see the layout above). Not thread-safe,
// like a random engine: give each thread its own generator, or call
// NewUuidv7(). Cheap to create (one getrandom call); movable (a moved-from
// generator may only be assigned to or destroyed).
class Uuidv7Generator {
 public:
  // Null clock: the system wall clock, read through the CPU's cycle counter
  // and re-synchronised with CLOCK_REALTIME every 100 microseconds (as
  // absl::Now does), because reading the kernel clock costs more than the
  // rest of the ID. Throws IdGeneratorError if the system has no entropy.
  explicit Uuidv7Generator(std::shared_ptr<IdClock> clock = nullptr);
  ~Uuidv7Generator();
  Uuidv7Generator(Uuidv7Generator&&) noexcept;
  Uuidv7Generator& operator=(Uuidv7Generator&&) noexcept;
  Uuidv7Generator(const Uuidv7Generator&) = delete;
  Uuidv7Generator& operator=(const Uuidv7Generator&) = delete;

  [[nodiscard]] Uuid Next();
  // Fills `out` with increasing UUIDv7s, reading the clock once (bulk inserts).
  void Fill(std::span<Uuid> out);

 private:
  std::unique_ptr<detail::Uuidv7State> state_;
};

// A UUIDv7 from the calling thread's own generator.
[[nodiscard]] Uuid NewUuidv7();

}  // namespace shardkit

template <>
struct std::hash<shardkit::Uuid> {
  std::size_t operator()(const shardkit::Uuid& id) const noexcept;
};

// Lets libpqxx bind a Uuid to a uuid parameter and read a uuid field:
// exec_params("... WHERE id = $1", id), field.as<shardkit::Uuid>().
template <>
struct pqxx::string_traits<shardkit::Uuid> {
  static constexpr const char* name() noexcept { return "shardkit::Uuid"; }
  static constexpr bool has_null() noexcept { return false; }
  static bool is_null(const shardkit::Uuid&) noexcept { return false; }
  [[noreturn]] static shardkit::Uuid null() { internal::throw_null_conversion(name()); }
  static void from_string(const char text[], shardkit::Uuid& out) { out = shardkit::Uuid::Parse(text); }
  static std::string to_string(const shardkit::Uuid& id) { return id.ToString(); }
};
