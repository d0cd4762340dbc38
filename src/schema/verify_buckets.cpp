// Verify's checks of where each bucket's rows are (verify_checks.hpp):
// buckets in a move, rows with the wrong bucket or on a shard that does not
// own it, counts against the reference server.
#include "schema/verify_checks.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

#include "pg/server_message.hpp"
#include "schema/verify_samples.hpp"

namespace shardkit::detail {
namespace {

// A shard's name by number, also for a number the configuration lacks.
std::string ShardName(const VerifyRun& run, int shard) {
  return shard >= 0 && static_cast<std::size_t>(shard) < run.config.shards.size()
             ? run.servers[static_cast<std::size_t>(shard)].name
             : fmt::format("shard {}", shard);
}

// What the shards' ownership rows say of one bucket.
struct BucketMarks {
  std::vector<std::string> marks;    // "shard0 retired (move 12)"
  std::vector<std::string> serving;  // shards that own it
  std::optional<std::int64_t> marked_move;
};

BucketMarks MarksOf(const std::vector<ScannedServer>& servers, int bucket) {
  BucketMarks b;
  for (const auto& srv : servers) {
    if (!srv.shard || !srv.connection) continue;
    const auto it = srv.ownership.find(bucket);
    if (it == srv.ownership.end()) continue;
    const OwnershipRow& o = it->second;
    if (o.state == "owned") b.serving.push_back(srv.name);
    if (o.state != "owned" || o.move_id) {
      b.marks.push_back(
          fmt::format("{} {}{}", srv.name, o.state, o.move_id ? fmt::format(" (move {})", *o.move_id) : std::string()));
      if (o.move_id) b.marked_move = o.move_id;
    }
  }
  return b;
}

// The finding of a bucket in a move the catalog lists as live: who serves
// it, whether a mover runs it, what to run.
std::string LiveMoveDetail(const VerifyRun& run, int bucket, const LiveMove& m, const std::string& serving_text,
                           const std::string& marks_text) {
  const bool abortable =
      m.state != "owned" && m.state != "flipped" && m.state != "replication_dropped" && m.state != "cleaning";
  return fmt::format(
      "bucket {}: move {} ({} -> {}) is in progress, state {}, last step {:.1f} s ago, {}; {}{}; its rows on "
      "{} and {} belong to the move: delete none of them by hand; {}",
      bucket, m.move_id, ShardName(run, m.source), ShardName(run, m.target), m.state, m.idle_s,
      m.mover_pid ? fmt::format("run by a mover (catalog session pid {})", *m.mover_pid)
                  : std::string("and no mover is running it"),
      serving_text, marks_text.empty() ? "" : " (" + marks_text + ")", ShardName(run, m.source),
      ShardName(run, m.target),
      m.mover_pid ? std::string("wait for it (shardctl moves --live)")
      : abortable ? fmt::format("finish it with shardctl move resume {} or roll it back with "
                                "shardctl move abort {}",
                                m.move_id, m.move_id)
                  : fmt::format("finish it with shardctl move resume {}", m.move_id));
}

// Rows whose bucket is not bucket_of(<key>): a finding per stored
// bucket. Returns the rows per computed bucket that the shard does not own.
std::map<int, std::int64_t> CheckBucketColumn(VerifyRun& run, ScannedServer& s, const TableScan& scan) {
  std::map<int, std::int64_t> not_owned;  // bucket -> rows
  for (const auto& g : scan.groups) {
    if (g.stored != g.computed) {
      std::string sample;
      try {
        const auto keys =
            SampleKeys(*s.connection, scan.table, scan.key,
                       fmt::format("bucket = $1 AND bucket IS DISTINCT FROM {}", scan.bucket_of), 1, {g.stored});
        if (!keys.empty()) sample = DescribeKey(scan.key, keys.front());
      } catch (const std::exception& e) {
        sample = "(no sample: " + ErrorText(e) + ")";
      }
      run.Add(FindingKind::kWrongBucket, s.name, scan.table, BucketId{g.stored}, g.rows, sample,
              g.computed < 0
                  ? fmt::format("{} {}: {} with bucket {} and a NULL {}, e.g. {}", s.name, scan.table, Rows(g.rows),
                                g.stored, scan.shard_key, sample)
                  : fmt::format("{} {}: {} bucket {} but {} = {}, e.g. {}", s.name, scan.table,
                                RowsDo(g.rows, "stores", "store"), g.stored, scan.bucket_of, g.computed, sample));
    }
    if (run.directory && g.computed >= 0 && run.directory->ShardOf(BucketId{g.computed}) != *s.shard) {
      not_owned[g.computed] += g.rows;
    }
  }
  return not_owned;
}

// `rows` of `bucket` on a shard that does not own it: an orphan copy if the
// owner has a sample row too, else misplaced.
void CheckNotOwned(VerifyRun& run, ScannedServer& s, const TableScan& scan, int bucket, std::int64_t rows) {
  const ShardId owner = run.directory->ShardOf(BucketId{bucket});
  const ScannedServer& owner_server = run.servers[static_cast<std::size_t>(ToInt(owner))];
  std::vector<std::string> sample_values;
  std::string sample;
  try {
    auto keys = SampleKeys(*s.connection, scan.table, scan.key, fmt::format("bucket = $1 AND {} = $1", scan.bucket_of),
                           1, {bucket});
    if (keys.empty()) {
      keys = SampleKeys(*s.connection, scan.table, scan.key, fmt::format("{} = $1", scan.bucket_of), 1, {bucket});
    }
    if (!keys.empty()) {
      sample_values = keys.front();
      sample = DescribeKey(scan.key, sample_values);
    }
  } catch (const std::exception& e) {
    sample = "(no sample: " + ErrorText(e) + ")";
  }
  std::optional<bool> owner_has;
  if (owner_server.connection && !sample_values.empty() && !scan.key.empty()) {
    try {
      owner_has = HasKey(*owner_server.connection, scan.table, scan.key, sample_values);
    } catch (const std::exception&) {
      owner_has.reset();
    }
  }
  if (owner_has.value_or(false)) {
    run.Add(FindingKind::kOrphanBucket, s.name, scan.table, BucketId{bucket}, rows, sample,
            fmt::format("{} {}: {} of bucket {}, which {} owns, e.g. {}; {} has that row too: an orphan copy (an "
                        "interrupted move?) to delete from {}",
                        s.name, scan.table, Rows(rows), bucket, owner_server.name, sample, owner_server.name, s.name));
  } else {
    run.Add(FindingKind::kMisplacedRows, s.name, scan.table, BucketId{bucket}, rows, sample,
            fmt::format("{} {}: {} of bucket {}, which {} owns, e.g. {}; {}", s.name, scan.table, Rows(rows), bucket,
                        owner_server.name, sample,
                        owner_has.has_value() ? fmt::format("{} lacks that row: misplaced, it belongs on {}",
                                                            owner_server.name, owner_server.name)
                                              : fmt::format("whether {} has it too is unknown", owner_server.name)));
  }
}

}  // namespace

std::set<int> CheckMovesInProgress(VerifyRun& run) {
  std::set<int> in_motion;
  std::string moves_error;
  const std::vector<LiveMove> live = LiveMoves(run.config, run.options.connect_timeout, moves_error);
  std::map<int, const LiveMove*> live_by_bucket;
  for (const auto& m : live) live_by_bucket[m.bucket] = &m;
  for (int bucket = 0; bucket < kBucketCount; ++bucket) {
    const BucketMarks b = MarksOf(run.servers, bucket);
    const auto live_it = live_by_bucket.find(bucket);
    if (live_it == live_by_bucket.end() && b.marks.empty()) continue;
    in_motion.insert(bucket);
    std::string marks_text;
    for (const auto& m : b.marks) marks_text += (marks_text.empty() ? "" : ", ") + m;
    std::string serving_text =
        b.serving.size() == 1
            ? fmt::format("{} serves the bucket (it holds every acknowledged write of it)", b.serving.front())
        : b.serving.empty() ? std::string(
                                  "no shard serves the bucket for now (its reads and writes are refused, "
                                  "retryably)")
                            : fmt::format("{} shards own the bucket at once", b.serving.size());
    std::string detail;
    std::string server;
    if (live_it != live_by_bucket.end()) {
      server = ShardName(run, live_it->second->source);
      detail = LiveMoveDetail(run, bucket, *live_it->second, serving_text, marks_text);
    } else {
      server = b.marks.front().substr(0, b.marks.front().find(' '));
      detail = fmt::format(
          "bucket {}: {} (marked for a move the catalog does not list as live{}); {}; delete none "
          "of its rows by hand; see shardctl move show {} and finish it with shardctl move "
          "resume {}",
          bucket, marks_text, moves_error.empty() ? "" : ": the catalog: " + moves_error, serving_text,
          b.marked_move ? std::to_string(*b.marked_move) : "<id>",
          b.marked_move ? std::to_string(*b.marked_move) : "<id>");
    }
    run.Add(FindingKind::kMoveInProgress, server, "", BucketId{bucket}, 0, "", detail);
  }
  return in_motion;
}

void CheckRowPlacement(VerifyRun& run, const std::set<int>& in_motion) {
  for (auto& s : run.servers) {
    if (!s.shard || !s.connection) continue;
    for (const auto& scan : s.scans) {
      for (const auto& [bucket, rows] : CheckBucketColumn(run, s, scan)) {
        if (in_motion.contains(bucket)) continue;
        CheckNotOwned(run, s, scan, bucket, rows);
      }
    }
  }
}

void CheckCountsAgainstReference(VerifyRun& run, const std::set<int>& in_motion) {
  if (!run.count_reference || !run.directory || !run.servers.back().connection) return;
  const ScannedServer& reference = run.servers.back();
  for (const auto& table : run.report.sharded_tables) {
    const TableScan* ref_scan = run.Mirrored(table) ? ScanOf(reference, table) : nullptr;
    if (ref_scan == nullptr) continue;
    for (int bucket = 0; bucket < kBucketCount; ++bucket) {
      if (in_motion.contains(bucket)) continue;
      const ShardId owner = run.directory->ShardOf(BucketId{bucket});
      const ScannedServer& owner_server = run.servers[static_cast<std::size_t>(ToInt(owner))];
      const TableScan* owner_scan = owner_server.connection ? ScanOf(owner_server, table) : nullptr;
      if (owner_scan == nullptr) continue;
      const auto b = static_cast<std::size_t>(bucket);
      const std::int64_t have = owner_scan->counts.by_bucket[b];
      const std::int64_t want = ref_scan->counts.by_bucket[b];
      if (have == want) continue;
      run.Add(FindingKind::kCountDiffers, owner_server.name, table, BucketId{bucket}, want - have, "",
              fmt::format("{} {} bucket {}: {} on its owner, {} on the reference server ({} {})", owner_server.name,
                          table, bucket, Rows(have), want, have < want ? "missing" : "extra",
                          have < want ? want - have : have - want));
    }
  }
}

}  // namespace shardkit::detail
