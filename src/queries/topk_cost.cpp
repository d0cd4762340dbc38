// kAuto's cost model (shardkit/queries/topk_cost.hpp).
#include "shardkit/queries/topk_cost.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace shardkit {

namespace {

// One shard's link as the model uses it: microseconds per round trip and
// per payload byte.
struct LinkCost {
  double round_trip_us;
  double us_per_byte;
};

LinkCost CostOf(const TopKCostInputs& in, std::size_t shard, bool& measured) {
  const ShardLink link = shard < in.links.size() ? in.links[shard] : ShardLink{};
  LinkCost c{static_cast<double>(in.default_round_trip.count()), 1e6 / in.default_bytes_per_second};
  measured = link.round_trip_samples > 0;
  if (link.round_trip_samples > 0) c.round_trip_us = static_cast<double>(link.round_trip.count());
  if (link.transfer_samples > 0 && link.bytes_per_second > 0) c.us_per_byte = 1e6 / link.bytes_per_second;
  return c;
}

std::string Thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Bytes(double bytes) {
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.0f} KB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace

TopKEstimate EstimateTopKCosts(const TopKCostInputs& in) {
  TopKEstimate e;
  e.after_phase1 = in.after_phase1;
  const std::size_t m = std::max(in.data.groups.size(), in.links.size());
  const double bpr = in.data.bytes_per_row > 0 ? in.data.bytes_per_row : in.default_bytes_per_row;
  const auto k = static_cast<double>(in.k);
  // Per phase, the slowest shard (they run in parallel); the client's
  // decoding is one row after another.
  double ap_slowest = 0, p1_slowest = 0, p2_slowest = 0, p3_slowest = 0, commit_slowest = 0;
  double ap_rows = 0, p2_rows = 0, p1_rows = 0;
  double slowest_rate_us_per_byte = 0;
  for (std::size_t s = 0; s < m; ++s) {
    bool measured = false;
    const LinkCost link = CostOf(in, s, measured);
    if (measured) ++e.measured_links;
    const double groups =
        s < in.data.groups.size() ? static_cast<double>(std::max<std::int64_t>(0, in.data.groups[s])) : 0;
    const double phase2 =
        s < in.data.phase2_rows.size() ? static_cast<double>(std::max<std::int64_t>(0, in.data.phase2_rows[s])) : 0;
    const double top = std::min(k, groups);
    e.groups += static_cast<std::int64_t>(groups);
    e.phase2_rows += static_cast<std::int64_t>(phase2);
    e.round_trip_ms = std::max(e.round_trip_ms, link.round_trip_us / 1000);
    slowest_rate_us_per_byte = std::max(slowest_rate_us_per_byte, link.us_per_byte);
    if (in.after_phase1) {
      // The rest of the partials: one statement scanning the table.
      const double rest = groups - top;
      ap_rows += rest;
      ap_slowest = std::max(ap_slowest, link.round_trip_us + in.statement_us + groups * in.scan_us_per_group +
                                            rest * bpr * link.us_per_byte);
    } else {
      ap_rows += groups;
      ap_slowest = std::max(ap_slowest, link.round_trip_us + groups * bpr * link.us_per_byte);
      p1_rows += top;
      p1_slowest =
          std::max(p1_slowest, link.round_trip_us + groups * in.fill_us_per_group + top * bpr * link.us_per_byte);
    }
    p2_rows += phase2;
    p2_slowest = std::max(p2_slowest, link.round_trip_us + in.statement_us + groups * in.scan_us_per_group +
                                          phase2 * bpr * link.us_per_byte);
    p3_slowest = std::max(p3_slowest, link.round_trip_us + in.statement_us);
    commit_slowest = std::max(commit_slowest, link.round_trip_us);
  }
  double ap_us = ap_slowest + ap_rows * in.decode_us_per_row;
  double tput_us = p2_slowest + p3_slowest + commit_slowest + p2_rows * in.decode_us_per_row;
  if (in.after_phase1) {
    ap_us += commit_slowest;  // the session's COMMIT follows the rest too
    e.all_partials_round_trips = 2;
    e.tput_round_trips = 3;
  } else {
    tput_us += p1_slowest + p1_rows * in.decode_us_per_row;
    e.all_partials_round_trips = 1;
    e.tput_round_trips = 4;
  }
  e.all_partials_ms = ap_us / 1000;
  e.tput_ms = tput_us / 1000;
  e.all_partials_bytes = ap_rows * bpr;
  e.tput_bytes = (p1_rows + p2_rows) * bpr;
  e.megabytes_per_s = e.measured_links > 0 && slowest_rate_us_per_byte > 0 ? 1 / slowest_rate_us_per_byte : 0;
  // Ties go to all partials: one statement, no session.
  e.choice = e.tput_ms < e.all_partials_ms ? TopKMethod::kTput : TopKMethod::kAllPartials;
  return e;
}

std::string TopKEstimate::Describe() const {
  return fmt::format(
      "{}TPUT {:.2f} ms vs {} {:.2f} ms: {} groups ({}) vs {} in phase 2 ({}); {} vs {} round trips of {:.2f} ms; "
      "{} -> {}",
      after_phase1 ? "after phase 1: " : "", tput_ms, after_phase1 ? "the rest of the partials" : "all partials",
      all_partials_ms, Thousands(groups), Bytes(all_partials_bytes), Thousands(phase2_rows), Bytes(tput_bytes),
      tput_round_trips, all_partials_round_trips, round_trip_ms,
      megabytes_per_s > 0 ? fmt::format("{:.1f} MB/s", megabytes_per_s) : std::string("rate not measured yet"),
      choice == TopKMethod::kTput ? "TPUT"
      : after_phase1              ? "the rest of the partials"
                                  : "all partials");
}

}  // namespace shardkit
