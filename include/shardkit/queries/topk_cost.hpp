// shardkit/queries/topk_cost.hpp — how exact top-k's kAuto picks a method:
// the predicted time of TPUT and of all partials from measured inputs.
//
// Both methods aggregate once per shard; they differ in what follows. All
// partials ship every group in one round trip; TPUT writes its groups into
// a temporary table, ships a few of them and pays three more round trips
// (phases 2 and 3, the COMMIT). So the model prices, per shard and per
// phase (the shards run in parallel, the client decodes one row at a time):
//   bytes shipped (groups x bytes per partial) / the link's measured rate
//   + round trips x the link's measured round trip
//   + the fixed costs: per statement, per group written or scanned on the
//     shard, per row decoded on the client.
// The inputs come from the links ScatterGather measured (ShardLink) and
// from what a run of the same query showed (TopKObserved: each shard's
// group count, and how many rows TPUT's phase 2 sends from it, estimated
// from phase 1's histogram or counted).
//
//   shardkit::TopKCostInputs in;
//   in.groups = {15000, 15000};  in.phase2_rows = {1500, 1500};
//   in.links = {scatter.Link(shardkit::ShardId{0}), scatter.Link(shardkit::ShardId{1})};
//   in.bytes_per_row = 9;
//   shardkit::TopKEstimate e = shardkit::EstimateTopKCosts(in);   // e.choice, e.tput_ms, e.all_partials_ms,
//   e.Describe()
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardkit/queries/scatter.hpp"

namespace shardkit {

enum class TopKMethod {
  kTput,         // exact, three phases
  kAllPartials,  // exact, ships every group's partial from every shard
  kAuto,         // exact: whichever of the two the cost model (EstimateTopKCosts) predicts faster
};
[[nodiscard]] const char* TopKMethodName(TopKMethod method) noexcept;

// What one run of a top-k showed about its data, remembered for the next
// decision on the same query. Per shard (index = shard).
struct TopKObserved {
  std::vector<std::int64_t> groups;       // groups (partials) on the shard
  std::vector<std::int64_t> phase2_rows;  // rows TPUT's phase 2 sends (or would send) from it
  double bytes_per_row = 0;               // payload bytes of one partial (key and sum)
};

struct TopKCostInputs {
  std::size_t k = 10;
  TopKObserved data;             // groups and phase2_rows: one entry per shard
  std::vector<ShardLink> links;  // per shard; a link without samples takes the defaults below
  // Phase 1 (with its statistics) has run already: its costs are paid, and
  // the choice is between TPUT's phases 2 and 3 and the rest of the
  // partials, both read from the session's table.
  bool after_phase1 = false;

  // The fixed costs, measured on the local cluster (bench/results.md,
  // "Top-k: auto's cost model"); the defaults stand for a link never
  // measured yet (loopback-like).
  double statement_us = 150;        // a statement on the shard: parse, plan, executor start
  double fill_us_per_group = 0.35;  // writing one partial into the session's table (TPUT's phase 1)
  double scan_us_per_group = 0.08;  // one group of that table scanned (phase 2, the rest of the partials)
  double decode_us_per_row = 0.12;  // the client's decoding and merging of one shipped partial
  double default_bytes_per_row = 10;
  std::chrono::microseconds default_round_trip{150};
  double default_bytes_per_second = 150e6;
};

struct TopKEstimate {
  TopKMethod choice = TopKMethod::kTput;  // kTput or kAllPartials
  // Predicted time beyond the shards' aggregation, which both pay alike.
  double tput_ms = 0;
  double all_partials_ms = 0;
  // The inputs it came from, summed or worst over the shards.
  bool after_phase1 = false;
  std::int64_t groups = 0;        // over all shards
  std::int64_t phase2_rows = 0;   // over all shards
  double all_partials_bytes = 0;  // what all partials (or the rest of them) would ship
  double tput_bytes = 0;          // what TPUT's phases would ship
  int tput_round_trips = 0;       // from the point of decision
  int all_partials_round_trips = 0;
  double round_trip_ms = 0;    // the slowest shard's measured round trip
  double megabytes_per_s = 0;  // the slowest shard's measured rate (0: none measured, default used)
  int measured_links = 0;      // shards whose link had samples
  // "TPUT 3.1 ms vs all partials 4.8 ms: 31,000 groups (310 KB) vs 2,900 in phase 2 (29 KB); 4 vs 1 round trips
  // of 0.21 ms; 95 MB/s -> TPUT"
  [[nodiscard]] std::string Describe() const;
};

// The model above; a pure function of its inputs.
[[nodiscard]] TopKEstimate EstimateTopKCosts(const TopKCostInputs& inputs);

}  // namespace shardkit
