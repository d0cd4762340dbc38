// dataset.hpp — the Bookstore data of the Bookstore case, generated deterministically.
//
// The same (scale, seed) gives the same rows on every machine and every
// library version: the generator uses std::mt19937_64 (its output sequence is
// fixed by the C++ standard) and its own uniform, weighted and Zipf helpers
// (std:: distributions differ between standard libraries).
//
//   auto data = shardkit::lab::GenerateDataset({.scale = 0.01, .seed = 1});
//   for (const auto& o : data.orders) use(o.customer_id, o.order_id, o.ordered_at);
//
// Shape at scale 1 (the Bookstore case): ~1M orders, 2022: 1,111, 2023: 79,166,
// 2024: 204,167, 2025: 329,167, 2026: 386,391, of which 39,875 in the last 30
// days before the fixed lab date kLabNow (2026-11-14 00:00 UTC, the seed's
// publication day), so runs are reproducible whatever today's date is.
// 100,000 customers; customers 4242, 4243 and 77777 always exist with exactly
// 10 orders each. 1-3 items per order. 30,000 books in 12 categories; the
// last 30 days' sales are flat: ~2,000 "hot" books each sold 14-18 copies,
// the rest of the catalogue less, so the best sellers sell only a little more
// than many others and a per-shard top 10 misses them.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/bucket.hpp"

namespace shardkit::lab {

// Times are whole seconds since 1970-01-01 UTC.
using UnixSeconds = std::int64_t;

inline constexpr UnixSeconds kLabNow = 1794614400;  // 2026-11-14 00:00:00 UTC
inline constexpr UnixSeconds kWindowSeconds = 30LL * 86400;
inline constexpr UnixSeconds kWindowStart = kLabNow - kWindowSeconds;  // 2026-10-15 00:00:00 UTC
inline constexpr std::array<CustomerId, 3> kSeedCustomers{CustomerId{4242}, CustomerId{4243}, CustomerId{77777}};
inline constexpr int kSeedCustomerOrders = 10;
inline constexpr int kFirstYear = 2022;
inline constexpr int kLastYear = 2026;
// Bumped whenever the generator's output changes: stored data from another
// generator version is reloaded.
inline constexpr int kGeneratorVersion = 1;

// "2026-11-14 00:00:00+00" (PostgreSQL timestamptz text, UTC).
[[nodiscard]] std::string FormatTimestamp(UnixSeconds t);
// Seconds since the epoch of a UTC calendar date.
[[nodiscard]] constexpr UnixSeconds DaysFromCivil(int y, unsigned m, unsigned d) noexcept {
  // Howard Hinnant's days_from_civil.
  y -= m <= 2 ? 1 : 0;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? static_cast<unsigned>(-3) : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return static_cast<UnixSeconds>(era) * 146097 + static_cast<UnixSeconds>(doe) - 719468;
}
[[nodiscard]] constexpr UnixSeconds UtcDate(int y, unsigned m, unsigned d) noexcept {
  return DaysFromCivil(y, m, d) * 86400;
}
static_assert(UtcDate(2026, 11, 14) == kLabNow);
[[nodiscard]] int YearOf(UnixSeconds t) noexcept;
// Cents as numeric text: 1299 -> "12.99".
[[nodiscard]] std::string FormatCents(std::int64_t cents);

// The random source: std::mt19937_64 plus distributions written out here so
// that their results do not depend on the standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  std::uint64_t Next() { return engine_(); }
  // Uniform in [0, n), n > 0, without modulo bias.
  std::uint64_t Below(std::uint64_t n);
  // Uniform in [lo, hi].
  std::int64_t Between(std::int64_t lo, std::int64_t hi);
  // Uniform in [0, 1), 53 bits.
  double Unit();
  bool Chance(double p) { return Unit() < p; }
  template <class T>
  void Shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(Below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

// Draws index i with probability weights[i] / sum(weights).
class WeightedSampler {
 public:
  explicit WeightedSampler(const std::vector<double>& weights);
  [[nodiscard]] std::size_t Sample(Rng& rng) const;
  [[nodiscard]] std::size_t Size() const noexcept { return cumulative_.size(); }

 private:
  std::vector<double> cumulative_;
};

// Zipf weights 1/(rank+1)^s for ranks 0..n-1.
[[nodiscard]] std::vector<double> ZipfWeights(std::size_t n, double s);

struct Book {
  std::int64_t book_id = 0;
  std::string title;
  int category = 0;  // index into Categories()
  std::int64_t price_cents = 0;
};

struct Customer {
  CustomerId customer_id{};
  BucketId bucket{};
  UnixSeconds created_at = 0;
};

struct Order {
  CustomerId customer_id{};
  BucketId bucket{};
  std::int64_t order_id = 0;
  UnixSeconds ordered_at = 0;
  std::int64_t total_cents = 0;
  std::uint32_t first_item = 0;  // index into Dataset::items
  std::uint8_t item_count = 0;
};

struct OrderItem {
  std::int64_t book_id = 0;
  std::int32_t quantity = 0;
  std::int64_t unit_price_cents = 0;
};

struct DatasetParams {
  double scale = 1.0;
  std::uint64_t seed = 1;
};

struct Dataset {
  DatasetParams params;
  std::vector<Book> books;
  std::vector<Customer> customers;  // by customer_id
  std::vector<Order> orders;        // by ordered_at
  std::vector<OrderItem> items;     // grouped by order (Order::first_item)
  [[nodiscard]] std::size_t TotalRows() const noexcept {
    return books.size() + customers.size() + orders.size() + items.size();
  }
};

[[nodiscard]] const std::vector<std::string>& Categories();

// Orders per calendar year at scale 1 (the Bookstore case's per-shard figures added up)
// and in the last 30 days.
struct YearShape {
  int year;
  std::int64_t orders;
};
inline constexpr std::array<YearShape, 5> kSeedYears{
    {{2022, 1111}, {2023, 79166}, {2024, 204167}, {2025, 329167}, {2026, 386391}}};
inline constexpr std::int64_t kSeedLast30Days = 39875;
inline constexpr std::int64_t kSeedCustomerCount = 100000;
inline constexpr std::int64_t kSeedBookCount = 30000;
inline constexpr std::int64_t kSeedHotBooks = 2000;

[[nodiscard]] Dataset GenerateDataset(const DatasetParams& params);

// The scaled count (at least `minimum`).
[[nodiscard]] std::int64_t Scaled(std::int64_t count, double scale, std::int64_t minimum = 1);

// Order ids are shardkit Snowflake IDs (snowflake.hpp), composed from the
// order's own time so that they are deterministic and sort by time: 41 bits
// of milliseconds since kLabIdEpochMs (the generator's default epoch,
// 2024-01-01, is later than the first orders), worker kHistoryWorkerId, and
// the order's rank within its second as the sequence. Live IDs (the ids demo)
// come from SnowflakeGenerator with the same epoch.
inline constexpr std::int64_t kLabIdEpochMs = 1'577'836'800'000;  // 2020-01-01 00:00:00 UTC
inline constexpr int kHistoryWorkerId = 1023;
[[nodiscard]] std::int64_t LabOrderId(UnixSeconds ordered_at, int sequence);

}  // namespace shardkit::lab
