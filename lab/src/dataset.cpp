#include "dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "shardkit/ids/snowflake.hpp"

namespace shardkit::lab {
namespace {

struct CategoryShape {
  const char* name;
  double weight;  // share of the catalogue
  int min_price;  // whole units; prices end in .99
  int max_price;
};

constexpr std::array<CategoryShape, 12> kCategoryShapes{{
    {"Fiction", 18, 8, 24},
    {"Mystery", 12, 7, 20},
    {"Science Fiction", 9, 8, 26},
    {"Fantasy", 9, 9, 29},
    {"Romance", 8, 5, 16},
    {"History", 7, 14, 45},
    {"Biography", 6, 12, 35},
    {"Science", 6, 15, 60},
    {"Children", 9, 4, 15},
    {"Poetry", 3, 6, 18},
    {"Cooking", 6, 12, 40},
    {"Computing", 7, 25, 80},
}};

constexpr std::array<const char*, 16> kTitleAdjectives{"Silent",  "Hidden",  "Last",   "Golden", "Broken", "Northern",
                                                       "Quiet",   "Endless", "Paper",  "Winter", "Secret", "Distant",
                                                       "Burning", "Little",  "Second", "Crooked"};
constexpr std::array<const char*, 16> kTitleNouns{"Harbor",  "Garden",  "Library", "River",   "Orchard", "Lantern",
                                                  "Bridge",  "Archive", "Island",  "Compass", "Kingdom", "Letter",
                                                  "Station", "Mirror",  "Theory",  "Recipe"};

// Hot books' sales in the last 30 days: copies -> share of hot books.
constexpr std::array<std::pair<int, double>, 5> kHotSales{{{14, 0.20}, {15, 0.30}, {16, 0.33}, {17, 0.15}, {18, 0.02}}};

// Items per order and quantity per item.
constexpr std::array<double, 3> kLinesPerOrder{0.35, 0.40, 0.25};  // 1, 2, 3 lines
constexpr std::array<double, 3> kQuantity{0.88, 0.10, 0.02};       // 1, 2, 3 copies

constexpr UnixSeconds kLaunch = UtcDate(2022, 10, 1);  // the first orders
constexpr UnixSeconds kFirstSignup = UtcDate(2022, 9, 1);

// A time in [start, end) whose density grows linearly by `growth` (0 = flat,
// 1 = twice as dense at the end as at the start): inverse of the CDF.
UnixSeconds GrowingTime(Rng& rng, UnixSeconds start, UnixSeconds end, double growth) {
  const double u = rng.Unit();
  double x = u;
  if (growth > 0) {
    x = (-1.0 + std::sqrt(1.0 + 2.0 * growth * u * (1.0 + growth / 2.0))) / growth;
  }
  const auto span = static_cast<double>(end - start);
  auto t = start + static_cast<UnixSeconds>(std::floor(x * span));
  return std::clamp(t, start, end - 1);
}

std::size_t Pick(Rng& rng, const std::array<double, 3>& probabilities) {
  double u = rng.Unit();
  for (std::size_t i = 0; i + 1 < probabilities.size(); ++i) {
    if (u < probabilities[i]) return i;
    u -= probabilities[i];
  }
  return probabilities.size() - 1;
}

}  // namespace

std::string FormatTimestamp(UnixSeconds t) {
  const UnixSeconds days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  const UnixSeconds secs = t - days * 86400;
  // Howard Hinnant's civil_from_days.
  const UnixSeconds z = days + 719468;
  const UnixSeconds era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const UnixSeconds y0 = static_cast<UnixSeconds>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  const UnixSeconds y = y0 + (m <= 2 ? 1 : 0);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}+00", y, m, d, secs / 3600, (secs / 60) % 60, secs % 60);
}

int YearOf(UnixSeconds t) noexcept {
  int year = 1970;
  while (year < 9999 && UtcDate(year + 1, 1, 1) <= t) ++year;
  return year;
}

std::string FormatCents(std::int64_t cents) {
  const char* sign = cents < 0 ? "-" : "";
  const std::int64_t a = cents < 0 ? -cents : cents;
  return fmt::format("{}{}.{:02}", sign, a / 100, a % 100);
}

std::uint64_t Rng::Below(std::uint64_t n) {
  if (n == 0) throw std::invalid_argument("Rng::Below(0)");
  // Rejection keeps it unbiased: draws at or above the largest multiple of n
  // are thrown away.
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t r = Next();
  while (r >= limit) r = Next();
  return r % n;
}

std::int64_t Rng::Between(std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(Below(static_cast<std::uint64_t>(hi - lo) + 1));
}

double Rng::Unit() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

WeightedSampler::WeightedSampler(const std::vector<double>& weights) {
  cumulative_.reserve(weights.size());
  double sum = 0;
  for (double w : weights) {
    sum += w;
    cumulative_.push_back(sum);
  }
  if (cumulative_.empty() || !(sum > 0)) throw std::invalid_argument("WeightedSampler: no positive weight");
}

std::size_t WeightedSampler::Sample(Rng& rng) const {
  const double target = rng.Unit() * cumulative_.back();
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), target);
  return std::min(static_cast<std::size_t>(it - cumulative_.begin()), cumulative_.size() - 1);
}

std::vector<double> ZipfWeights(std::size_t n, double s) {
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = 1.0 / std::pow(static_cast<double>(i + 1), s);
  return w;
}

const std::vector<std::string>& Categories() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& c : kCategoryShapes) v.emplace_back(c.name);
    return v;
  }();
  return names;
}

std::int64_t Scaled(std::int64_t count, double scale, std::int64_t minimum) {
  const auto n = static_cast<std::int64_t>(std::llround(static_cast<double>(count) * scale));
  return std::max(n, minimum);
}

std::int64_t LabOrderId(UnixSeconds ordered_at, int sequence) {
  return ComposeSnowflake({.unix_ms = ordered_at * 1000, .worker_id = kHistoryWorkerId, .sequence = sequence},
                          kLabIdEpochMs);
}

Dataset GenerateDataset(const DatasetParams& params) {
  if (!(params.scale > 0) || params.scale > 10) {
    throw std::invalid_argument(fmt::format("scale {} is out of range (0, 10]", params.scale));
  }
  const double scale = params.scale;
  Dataset data;
  data.params = params;
  Rng rng(params.seed * 0x9E3779B97F4A7C15ULL + 0x5EED001);

  // --- books
  const auto book_count = Scaled(kSeedBookCount, scale, 50);
  std::vector<double> category_weights;
  for (const auto& c : kCategoryShapes) category_weights.push_back(c.weight);
  const WeightedSampler category_sampler(category_weights);
  data.books.reserve(static_cast<std::size_t>(book_count));
  for (std::int64_t id = 1; id <= book_count; ++id) {
    Book b;
    b.book_id = id;
    b.category = static_cast<int>(category_sampler.Sample(rng));
    const auto& shape = kCategoryShapes[static_cast<std::size_t>(b.category)];
    b.price_cents = rng.Between(shape.min_price, shape.max_price) * 100 + 99;
    b.title = fmt::format("The {} {}", kTitleAdjectives[rng.Below(kTitleAdjectives.size())],
                          kTitleNouns[rng.Below(kTitleNouns.size())]);
    if (rng.Chance(0.3)) b.title += fmt::format(", Vol. {}", rng.Between(2, 5));
    data.books.push_back(std::move(b));
  }
  auto price_of = [&](std::int64_t book_id) { return data.books[static_cast<std::size_t>(book_id - 1)].price_cents; };

  // --- order times: exact counts per segment, growing within each
  struct Segment {
    UnixSeconds start, end;
    std::int64_t count;
    double growth;
  };
  std::vector<Segment> segments;
  const auto window_orders = Scaled(kSeedLast30Days, scale);
  for (const auto& [year, orders] : kSeedYears) {
    const auto n = Scaled(orders, scale);
    const UnixSeconds start = year == kFirstYear ? kLaunch : UtcDate(year, 1, 1);
    if (year == kLastYear) {
      segments.push_back({start, kWindowStart, std::max<std::int64_t>(n - window_orders, 0), 0.3});
      segments.push_back({kWindowStart, kLabNow, window_orders, 0.05});
    } else {
      segments.push_back({start, UtcDate(year + 1, 1, 1), n, year == kFirstYear ? 3.0 : 0.6});
    }
  }
  std::int64_t order_count = 0;
  for (const auto& s : segments) order_count += s.count;
  data.orders.reserve(static_cast<std::size_t>(order_count));
  for (const auto& s : segments) {
    for (std::int64_t i = 0; i < s.count; ++i) {
      Order o;
      o.ordered_at = GrowingTime(rng, s.start, s.end, s.growth);
      data.orders.push_back(o);
    }
  }
  std::stable_sort(data.orders.begin(), data.orders.end(),
                   [](const Order& a, const Order& b) { return a.ordered_at < b.ordered_at; });

  // --- customers: 1..N plus the seed's three, who get exactly 10 orders each
  const auto customer_count = Scaled(kSeedCustomerCount, scale, 100);
  std::unordered_set<CustomerId> special(kSeedCustomers.begin(), kSeedCustomers.end());
  const auto needed = static_cast<std::int64_t>(kSeedCustomers.size()) * kSeedCustomerOrders;
  if (order_count < needed * 3) {
    throw std::invalid_argument(fmt::format("scale {} is too small: {} orders", scale, order_count));
  }
  std::vector<bool> taken(static_cast<std::size_t>(order_count), false);
  for (CustomerId c : kSeedCustomers) {
    for (int k = 0; k < kSeedCustomerOrders; ++k) {
      std::size_t idx = 0;
      do {
        idx = static_cast<std::size_t>(rng.Below(static_cast<std::uint64_t>(order_count)));
      } while (taken[idx]);
      taken[idx] = true;
      data.orders[idx].customer_id = c;
    }
  }
  for (std::size_t i = 0; i < data.orders.size(); ++i) {
    if (taken[i]) continue;
    CustomerId c{};
    do {
      c = CustomerId{static_cast<std::int32_t>(rng.Between(1, customer_count))};
    } while (special.contains(c));
    data.orders[i].customer_id = c;
  }

  // --- order ids, in time order (Snowflake layout; see LabOrderId)
  {
    UnixSeconds second = -1;
    int sequence = 0;
    for (auto& o : data.orders) {
      sequence = o.ordered_at == second ? sequence + 1 : 0;
      second = o.ordered_at;
      o.order_id = LabOrderId(o.ordered_at, sequence);
      o.bucket = BucketOf(o.customer_id);
    }
  }

  // --- items: book choice for history orders from a Zipf popularity over a
  // shuffled catalogue; for the last 30 days from a flat "deck"
  std::vector<std::int64_t> popularity_order(static_cast<std::size_t>(book_count));
  for (std::size_t i = 0; i < popularity_order.size(); ++i) popularity_order[i] = static_cast<std::int64_t>(i) + 1;
  rng.Shuffle(popularity_order);
  const WeightedSampler history_sampler(ZipfWeights(popularity_order.size(), 0.8));

  std::vector<std::size_t> window_slots;
  data.items.reserve(static_cast<std::size_t>(order_count) * 2);
  for (auto& o : data.orders) {
    o.first_item = static_cast<std::uint32_t>(data.items.size());
    o.item_count = static_cast<std::uint8_t>(Pick(rng, kLinesPerOrder) + 1);
    const bool in_window = o.ordered_at >= kWindowStart;
    for (int line = 0; line < o.item_count; ++line) {
      OrderItem item;
      if (in_window) {
        window_slots.push_back(data.items.size());
      } else {
        item.book_id = popularity_order[history_sampler.Sample(rng)];
        item.quantity = static_cast<std::int32_t>(Pick(rng, kQuantity) + 1);
      }
      data.items.push_back(item);
    }
  }

  // The last 30 days: hot books sell a fixed number of copies each (one card
  // per copy, dealt to random window lines); the other lines go to the rest
  // of the catalogue with mildly uneven weights, below the hot books.
  std::vector<std::int64_t> shuffled_ids = popularity_order;
  rng.Shuffle(shuffled_ids);
  auto hot_count = static_cast<std::size_t>(std::min(Scaled(kSeedHotBooks, scale, 10), book_count / 2));
  std::vector<std::int64_t> deck;
  auto build_deck = [&] {
    deck.clear();
    for (std::size_t i = 0; i < hot_count; ++i) {
      double u = rng.Unit();
      int copies = kHotSales.back().first;
      for (const auto& [c, p] : kHotSales) {
        if (u < p) {
          copies = c;
          break;
        }
        u -= p;
      }
      for (int k = 0; k < copies; ++k) deck.push_back(shuffled_ids[i]);
    }
  };
  build_deck();
  while (hot_count > 1 && deck.size() * 10 > window_slots.size() * 6) {  // keep room for the tail
    hot_count = hot_count * 3 / 4;
    build_deck();
  }
  rng.Shuffle(deck);
  rng.Shuffle(window_slots);
  std::vector<std::int64_t> tail_ids(shuffled_ids.begin() + static_cast<std::ptrdiff_t>(hot_count), shuffled_ids.end());
  std::vector<double> tail_weights(tail_ids.size());
  for (auto& w : tail_weights) {
    const double u = rng.Unit();
    w = 0.25 + 1.75 * u * u * u;
  }
  const WeightedSampler tail_sampler(tail_weights);
  for (std::size_t i = 0; i < window_slots.size(); ++i) {
    OrderItem& item = data.items[window_slots[i]];
    if (i < deck.size()) {
      item.book_id = deck[i];
      item.quantity = 1;
    } else {
      item.book_id = tail_ids[tail_sampler.Sample(rng)];
      item.quantity = static_cast<std::int32_t>(Pick(rng, kQuantity) + 1);
    }
  }

  // Prices and order totals.
  for (auto& o : data.orders) {
    std::int64_t total = 0;
    for (std::uint32_t k = o.first_item; k < o.first_item + o.item_count; ++k) {
      OrderItem& item = data.items[k];
      item.unit_price_cents = price_of(item.book_id);
      total += item.unit_price_cents * item.quantity;
    }
    o.total_cents = total;
  }

  // --- customer rows: signed up shortly before their first order
  std::vector<CustomerId> ids;
  for (std::int64_t c = 1; c <= customer_count; ++c) ids.push_back(CustomerId{static_cast<std::int32_t>(c)});
  for (CustomerId c : kSeedCustomers) {
    if (ToInt(c) > customer_count) ids.push_back(c);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<UnixSeconds> first_order(ids.size(), std::numeric_limits<UnixSeconds>::max());
  auto index_of = [&](CustomerId c) {
    return static_cast<std::size_t>(std::lower_bound(ids.begin(), ids.end(), c) - ids.begin());
  };
  for (const auto& o : data.orders) {
    auto& f = first_order[index_of(o.customer_id)];
    f = std::min(f, o.ordered_at);
  }
  data.customers.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Customer c;
    c.customer_id = ids[i];
    c.bucket = BucketOf(c.customer_id);
    if (first_order[i] == std::numeric_limits<UnixSeconds>::max()) {
      c.created_at = rng.Between(kFirstSignup, kLabNow - 1);
    } else {
      c.created_at = std::max(kFirstSignup, first_order[i] - rng.Between(0, 45 * 86400));
    }
    data.customers.push_back(c);
  }
  return data;
}

}  // namespace shardkit::lab
