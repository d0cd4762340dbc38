// Demo 6 (the Bookstore case's first exercise): add a third shard. With 64 fixed
// buckets only the buckets the new shard takes over move; with
// customer_id % shard_count about two thirds of all customers move.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/routing/directory.hpp"

namespace shardkit::lab {
namespace {

// "0-20, 54-63"
std::string Ranges(std::vector<BucketId> buckets) {
  if (buckets.empty()) return "-";
  std::sort(buckets.begin(), buckets.end());
  std::string out;
  std::size_t i = 0;
  while (i < buckets.size()) {
    std::size_t j = i;
    while (j + 1 < buckets.size() && ToInt(buckets[j + 1]) == ToInt(buckets[j]) + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ", ",
                       i == j ? fmt::format("{}", buckets[i]) : fmt::format("{}-{}", buckets[i], buckets[j]));
    i = j + 1;
  }
  return out;
}

std::string PgIntArray(const std::vector<BucketId>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(ToInt(values[i]));
  return out + "}";
}

// Per bucket: rows, and rows whose customer_id % old != customer_id % new.
struct BucketRows {
  std::int64_t rows = 0;
  std::int64_t modulo_moves = 0;
};

}  // namespace

DemoResult RunThirdShard(Lab& lab) {
  DemoResult r;
  r.name = "third-shard";
  const auto before = lab.Resolver().Directory();
  const int n = before->ShardCount();
  const BucketDirectory after = before->WithShardAdded();

  std::vector<BucketId> moved;
  for (const BucketId b : AllBuckets()) {
    if (before->ShardOf(b) != after.ShardOf(b)) moved.push_back(b);
  }
  TextTable table({{"shard", TextTable::Align::kLeft},
                   {"buckets before", TextTable::Align::kLeft},
                   {"buckets after", TextTable::Align::kLeft},
                   {"gives up", TextTable::Align::kLeft}});
  bool balanced_after = true;
  for (const ShardId s : FirstShards(n + 1)) {
    const bool is_new = ToInt(s) == n;
    const auto b = !is_new ? before->BucketsOf(s) : std::vector<BucketId>{};
    const auto a = after.BucketsOf(s);
    std::vector<BucketId> gives;
    for (BucketId x : b) {
      if (after.ShardOf(x) != s) gives.push_back(x);
    }
    table.AddRow({fmt::format("shard{}{}", s, is_new ? " (new)" : ""),
                  !is_new ? fmt::format("{} ({})", Ranges(b), b.size()) : "-",
                  fmt::format("{} ({})", Ranges(a), a.size()),
                  gives.empty() ? "" : fmt::format("{} ({})", Ranges(gives), gives.size())});
    const auto size = static_cast<int>(a.size());
    balanced_after = balanced_after && size >= kBucketCount / (n + 1) && size <= (kBucketCount + n) / (n + 1);
  }
  r.text += fmt::format("a directory for {} shards that moves as few buckets as possible (version {} -> {}):\n", n + 1,
                        before->Version(), after.Version());
  r.text += table.Render();

  // Measured on the data: rows per bucket from the shards, and how many
  // customer_id % n != customer_id % (n+1).
  const std::string per_bucket_sql =
      "SELECT bucket, count(*) AS n, count(*) FILTER (WHERE customer_id % $1 <> customer_id % $2) AS modulo_moves "
      "FROM {} GROUP BY bucket";
  std::map<std::string, std::map<BucketId, BucketRows>> tables;
  for (const std::string table_name : {"customers", "orders"}) {
    const ScatterResult result =
        lab.Run("third-shard: " + table_name + " per bucket", fmt::format(fmt::runtime(per_bucket_sql), table_name),
                {std::to_string(n), std::to_string(n + 1)});
    auto& rows = tables[table_name];
    for (const auto& s : result.shards) {
      for (const auto& row : s.rows) {
        auto& br = rows[row[0].as<BucketId>()];
        br.rows += row[1].as<std::int64_t>();
        br.modulo_moves += row[2].as<std::int64_t>();
      }
    }
  }
  pqxx::nontransaction ref{lab.Reference()};
  Json measured = Json::object();
  for (const auto& [table_name, rows] : tables) {
    std::int64_t total = 0, bucket_moves = 0, modulo_moves = 0;
    for (const auto& [bucket, br] : rows) {
      total += br.rows;
      modulo_moves += br.modulo_moves;
      if (std::find(moved.begin(), moved.end(), bucket) != moved.end()) bucket_moves += br.rows;
    }
    const double bucket_share = total > 0 ? static_cast<double>(bucket_moves) / static_cast<double>(total) : 0;
    const double modulo_share = total > 0 ? static_cast<double>(modulo_moves) / static_cast<double>(total) : 0;
    r.text += fmt::format("{:<9} moved: buckets {:>9} of {} ({}),  customer_id % {} -> % {}: {:>9} ({})\n", table_name,
                          Thousands(bucket_moves), Thousands(total), Percent(bucket_share), n, n + 1,
                          Thousands(modulo_moves), Percent(modulo_share));
    // The reference, asked directly, must agree with the per-bucket sums.
    const auto truth =
        ref.exec_params1(fmt::format("SELECT count(*), count(*) FILTER (WHERE bucket = ANY($1::int[])), "
                                     "count(*) FILTER (WHERE customer_id % $2 <> customer_id % $3) FROM {}",
                                     table_name),
                         PgIntArray(moved), n, n + 1);
    const auto ref_total = truth[0].as<std::int64_t>();
    const auto ref_bucket = truth[1].as<std::int64_t>();
    const auto ref_modulo = truth[2].as<std::int64_t>();
    r.Expect("third-shard." + table_name + ".measured_equals_reference",
             ref_total == total && ref_bucket == bucket_moves && ref_modulo == modulo_moves,
             fmt::format("shards: {} rows, {} in moved buckets, {} modulo moves; reference: {}, {}, {}", total,
                         bucket_moves, modulo_moves, ref_total, ref_bucket, ref_modulo));
    r.Expect("third-shard." + table_name + ".buckets_move_fewer", total > 0 && bucket_moves < modulo_moves,
             fmt::format("bucket moves {} vs modulo {}", Percent(bucket_share), Percent(modulo_share)));
    measured[table_name] = {{"rows", total},
                            {"bucket_moves", bucket_moves},
                            {"bucket_share", bucket_share},
                            {"modulo_moves", modulo_moves},
                            {"modulo_share", modulo_share}};
  }
  const int minimum = kBucketCount / (n + 1);
  r.text += fmt::format(
      "buckets moved: {} of {} ({}); the minimum, since the new shard must hold at least {} of {} buckets. "
      "Only those buckets' directory rows change; customer_id % {} -> % {} moves about {} of everyone.\n",
      moved.size(), kBucketCount, Percent(static_cast<double>(moved.size()) / kBucketCount), minimum, kBucketCount, n,
      n + 1, Percent(1.0 - 1.0 / (n + 1), 0));

  r.Expect("third-shard.directory_valid", after.ShardCount() == n + 1 && balanced_after,
           fmt::format("{} shards holding {}..{} buckets each", n + 1, kBucketCount / (n + 1),
                       (kBucketCount + n) / (n + 1)));
  // From an even split the fewest moves are exactly the new shard's share.
  int min_before = kBucketCount, max_before = 0;
  for (const ShardId s : FirstShards(n)) {
    const auto size = static_cast<int>(before->BucketsOf(s).size());
    min_before = std::min(min_before, size);
    max_before = std::max(max_before, size);
  }
  if (max_before - min_before <= 1) {
    r.Expect("third-shard.fewest_moves", static_cast<int>(moved.size()) == minimum,
             fmt::format("{} buckets moved, minimum {}", moved.size(), minimum));
  }
  Json directory = Json::array();
  for (const BucketId b : AllBuckets()) directory.push_back(after.ShardOf(b));
  r.figures = {{"shards_before", n},     {"shards_after", n + 1},    {"buckets_moved", moved.size()},
               {"moved_buckets", moved}, {"minimum_moves", minimum}, {"directory_after", directory},
               {"measured", measured}};
  return r;
}

}  // namespace shardkit::lab
