// shardctl verify: the cluster against its directory (verify.hpp).
#include "shardkit/schema/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "schema/error_text.hpp"
#include "schema/verify_samples.hpp"
#include "schema/verify_scan.hpp"
#include "shardkit/config.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;
using detail::DescribeKey;
using detail::ErrorText;
using detail::HasKey;
using detail::LiveMove;
using detail::LiveMoves;
using detail::OwnershipRow;
using detail::ReferenceTableSum;
using detail::RowHashes;
using detail::SampleKeys;
using detail::ScannedServer;
using detail::ScanOf;
using detail::ScanServers;
using detail::TableScan;

std::string Rows(std::int64_t n) { return fmt::format("{} row{}", n, n == 1 ? "" : "s"); }
// "1 row stores", "2 rows store"
std::string RowsDo(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", Rows(n), n == 1 ? one : many);
}

}  // namespace

std::string_view FindingName(FindingKind kind) noexcept {
  switch (kind) {
    case FindingKind::kUnreachable:
      return "unreachable";
    case FindingKind::kDirectory:
      return "directory";
    case FindingKind::kSchemaVersion:
      return "schema version";
    case FindingKind::kMissingTable:
      return "missing table";
    case FindingKind::kTableDefinition:
      return "table definition";
    case FindingKind::kWrongBucket:
      return "wrong bucket";
    case FindingKind::kMisplacedRows:
      return "misplaced rows";
    case FindingKind::kOrphanBucket:
      return "orphan bucket";
    case FindingKind::kReferenceDiffers:
      return "reference table differs";
    case FindingKind::kCountDiffers:
      return "count differs";
    case FindingKind::kMoveInProgress:
      return "move in progress";
  }
  return "?";
}

namespace {

void AddFinding(VerifyReport& report, FindingKind kind, std::string server, std::string table,
                std::optional<BucketId> bucket, std::int64_t rows, std::string sample, std::string detail) {
  report.findings.push_back(VerifyFinding{kind, std::move(server), std::move(table), bucket, rows, std::move(sample),
                                          std::move(detail)});
}

// What the checks share: the configuration and options, every server as
// scanned (the shards in order, then the reference server), the directory
// if it could be read, and the report the findings go to.
struct VerifyRun {
  const ClusterConfig& config;
  const VerifyOptions& options;
  std::vector<ScannedServer>& servers;
  const std::optional<BucketDirectory>& directory;
  VerifyReport& report;
  // Compare the reference server's rows of the mirrored tables, per bucket.
  bool count_reference = false;

  void Add(FindingKind kind, std::string server, std::string table, std::optional<BucketId> bucket, std::int64_t rows,
           std::string sample, std::string detail) {
    AddFinding(report, kind, std::move(server), std::move(table), bucket, rows, std::move(sample), std::move(detail));
  }
  [[nodiscard]] bool Mirrored(const std::string& table) const {
    return std::find(options.mirrored_tables.begin(), options.mirrored_tables.end(), table) !=
           options.mirrored_tables.end();
  }
};

// The directory the rows are checked against; nullopt, and a finding, if it
// cannot be read.
std::optional<BucketDirectory> LoadDirectory(const ClusterConfig& config, VerifyReport& report) {
  std::optional<BucketDirectory> directory;
  report.directory_source = config.directory_source == DirectorySource::kCatalog ? "catalog" : "config";
  try {
    directory = config.directory_source == DirectorySource::kCatalog ? LoadCatalogDirectory(config) : config.directory;
    report.directory_version = directory->Version();
  } catch (const std::exception& e) {
    AddFinding(report, FindingKind::kDirectory, report.directory_source, "", std::nullopt, 0, "",
               fmt::format("{}: the directory cannot be read: {}; rows cannot be checked against it",
                           report.directory_source, ErrorText(e)));
  }
  return directory;
}

// A finding per server that could not be scanned; their names.
std::set<std::string> CheckReachable(VerifyRun& run) {
  std::set<std::string> unreachable;
  for (const auto& s : run.servers) {
    if (s.connection) continue;
    unreachable.insert(s.name);
    run.Add(FindingKind::kUnreachable, s.name, "", std::nullopt, 0, "",
            fmt::format("{}: cannot be checked: {}", s.name, s.error));
  }
  return unreachable;
}

// The sharded tables: those of any shard (report.sharded_tables); each
// shard must have them all, the reference server the mirrored ones.
void CheckShardedTablesPresent(VerifyRun& run) {
  std::set<std::string> sharded;
  for (const auto& s : run.servers) {
    if (s.shard && s.connection) sharded.insert(s.sharded_tables.begin(), s.sharded_tables.end());
  }
  run.report.sharded_tables.assign(sharded.begin(), sharded.end());
  for (const auto& s : run.servers) {
    if (!s.connection || (!s.shard && !run.count_reference)) continue;
    for (const auto& table : run.report.sharded_tables) {
      if (!s.shard && !run.Mirrored(table)) continue;
      if (std::find(s.sharded_tables.begin(), s.sharded_tables.end(), table) == s.sharded_tables.end()) {
        run.Add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
                fmt::format("{}: sharded table {} is missing ({})", s.name, table,
                            s.shard ? "other shards have it" : "it mirrors every shard's rows"));
      }
    }
  }
}

// One definition of each table everywhere: the columns, their types and
// NOT NULL, in order, as on the reference server (else the first shard).
void CheckTableDefinitions(VerifyRun& run) {
  std::set<std::string> tables(run.report.sharded_tables.begin(), run.report.sharded_tables.end());
  tables.insert(run.options.reference_tables.begin(), run.options.reference_tables.end());
  for (const auto& table : tables) {
    const ScannedServer* baseline = nullptr;
    for (const auto& candidate : run.servers) {
      if (!candidate.connection || !candidate.columns.contains(table)) continue;
      if (baseline == nullptr || !candidate.shard) baseline = &candidate;  // the reference wins
    }
    if (baseline == nullptr) continue;
    const auto& want = baseline->columns.at(table);
    for (const auto& s : run.servers) {
      if (&s == baseline || !s.connection || !s.columns.contains(table)) continue;
      const auto& have = s.columns.at(table);
      if (have == want) continue;
      std::string first;
      for (std::size_t i = 0; i < std::max(have.size(), want.size()) && first.empty(); ++i) {
        const std::string h = i < have.size() ? have[i] : "(none)";
        const std::string w = i < want.size() ? want[i] : "(none)";
        if (h != w) first = fmt::format("column {}: {} here, {} on {}", i + 1, h, w, baseline->name);
      }
      run.Add(FindingKind::kTableDefinition, s.name, table, std::nullopt, 0, "",
              fmt::format("{} {}: the table's columns differ from {}'s ({})", s.name, table, baseline->name, first));
    }
  }
}

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
      b.marks.push_back(fmt::format("{} {}{}", srv.name, o.state,
                                    o.move_id ? fmt::format(" (move {})", *o.move_id) : std::string()));
      if (o.move_id) b.marked_move = o.move_id;
    }
  }
  return b;
}

// The finding of a bucket in a move the catalog lists as live: who serves
// it, whether a mover runs it, what to run.
std::string LiveMoveDetail(const VerifyRun& run, int bucket, const LiveMove& m, const std::string& serving_text,
                           const std::string& marks_text) {
  const bool abortable = m.state != "owned" && m.state != "flipped" && m.state != "replication_dropped" &&
                         m.state != "cleaning";
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

// Buckets in a move (live in the journal, or marked on a shard): their
// rows are on two shards on purpose, and the one the directory names may
// not be the one holding the latest writes (the target owns the bucket
// before the directory flips). One finding each, naming the move and
// what to run; no orphan, misplaced or count finding for them (the
// returned buckets), since deleting either copy by hand could delete the
// only copy of writes.
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
        b.serving.size() == 1 ? fmt::format("{} serves the bucket (it holds every acknowledged write of it)",
                                            b.serving.front())
        : b.serving.empty()   ? std::string("no shard serves the bucket for now (its reads and writes are refused, "
                                            "retryably)")
                              : fmt::format("{} shards own the bucket at once", b.serving.size());
    std::string detail;
    std::string server;
    if (live_it != live_by_bucket.end()) {
      server = ShardName(run, live_it->second->source);
      detail = LiveMoveDetail(run, bucket, *live_it->second, serving_text, marks_text);
    } else {
      server = b.marks.front().substr(0, b.marks.front().find(' '));
      detail = fmt::format("bucket {}: {} (marked for a move the catalog does not list as live{}); {}; delete none "
                           "of its rows by hand; see shardctl move show {} and finish it with shardctl move "
                           "resume {}",
                           bucket, marks_text, moves_error.empty() ? "" : ": the catalog: " + moves_error,
                           serving_text, b.marked_move ? std::to_string(*b.marked_move) : "<id>",
                           b.marked_move ? std::to_string(*b.marked_move) : "<id>");
    }
    run.Add(FindingKind::kMoveInProgress, server, "", BucketId{bucket}, 0, "", detail);
  }
  return in_motion;
}

// Rows whose bucket is not bucket_of(customer_id): a finding per stored
// bucket. Returns the rows per computed bucket that the shard does not own.
std::map<int, std::int64_t> CheckBucketColumn(VerifyRun& run, ScannedServer& s, const TableScan& scan) {
  std::map<int, std::int64_t> not_owned;  // bucket -> rows
  for (const auto& g : scan.groups) {
    if (g.stored != g.computed) {
      std::string sample;
      try {
        const auto keys = SampleKeys(*s.connection, scan.table, scan.key,
                                     "bucket = $1 AND bucket IS DISTINCT FROM bucket_of(customer_id)", 1, {g.stored});
        if (!keys.empty()) sample = DescribeKey(scan.key, keys.front());
      } catch (const std::exception& e) {
        sample = "(no sample: " + ErrorText(e) + ")";
      }
      run.Add(FindingKind::kWrongBucket, s.name, scan.table, BucketId{g.stored}, g.rows, sample,
              g.computed < 0 ? fmt::format("{} {}: {} with bucket {} and a NULL customer_id, e.g. {}", s.name,
                                           scan.table, Rows(g.rows), g.stored, sample)
                             : fmt::format("{} {}: {} bucket {} but bucket_of(customer_id) = {}, e.g. {}", s.name,
                                           scan.table, RowsDo(g.rows, "stores", "store"), g.stored, g.computed,
                                           sample));
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
    auto keys = SampleKeys(*s.connection, scan.table, scan.key, "bucket = $1 AND bucket_of(customer_id) = $1", 1,
                           {bucket});
    if (keys.empty()) {
      keys = SampleKeys(*s.connection, scan.table, scan.key, "bucket_of(customer_id) = $1", 1, {bucket});
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
                        s.name, scan.table, Rows(rows), bucket, owner_server.name, sample, owner_server.name,
                        s.name));
  } else {
    run.Add(FindingKind::kMisplacedRows, s.name, scan.table, BucketId{bucket}, rows, sample,
            fmt::format("{} {}: {} of bucket {}, which {} owns, e.g. {}; {}", s.name, scan.table, Rows(rows),
                        bucket, owner_server.name, sample,
                        owner_has.has_value() ? fmt::format("{} lacks that row: misplaced, it belongs on {}",
                                                            owner_server.name, owner_server.name)
                                              : fmt::format("whether {} has it too is unknown", owner_server.name)));
  }
}

// Rows on the wrong shard or with the wrong bucket.
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

// Each bucket's rows on its owner against the reference server's.
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

// The keys of `s`'s copy of a reference table that differ from the
// baseline's (`baseline_rows`, read on first use): how many, and the first
// few as samples.
std::int64_t DiffReferenceTable(const VerifyRun& run, const ScannedServer& baseline, const ScannedServer& s, const std::string& table,
                                const ReferenceTableSum& want,
                                std::optional<std::map<std::vector<std::string>, std::int64_t>>& baseline_rows,
                                std::vector<std::string>& samples) {
  std::int64_t differing = 0;
  try {
    if (!baseline_rows) baseline_rows = RowHashes(*baseline.connection, table, want.key);
    const auto rows = RowHashes(*s.connection, table, want.key);
    auto note = [&](const std::vector<std::string>& key, const char* what) {
      ++differing;
      if (static_cast<int>(samples.size()) < run.options.max_samples) {
        samples.push_back(fmt::format(
            "{} {}", DescribeKey(want.key.empty() ? std::vector<std::string>{"row"} : want.key, key), what));
      }
    };
    for (const auto& [key, hash] : *baseline_rows) {
      const auto it = rows.find(key);
      if (it == rows.end()) {
        note(key, "missing");
      } else if (it->second != hash) {
        note(key, "differs");
      }
    }
    for (const auto& [key, hash] : rows) {
      if (!baseline_rows->contains(key)) note(key, "extra");
    }
  } catch (const std::exception& e) {
    samples.push_back("(no sample: " + ErrorText(e) + ")");
  }
  return differing;
}

// Reference tables: identical everywhere.
void CheckReferenceTables(VerifyRun& run) {
  for (const auto& table : run.options.reference_tables) {
    const ScannedServer* baseline = nullptr;
    if (run.config.reference_dsn && run.servers.back().connection &&
        run.servers.back().reference_sums[table].present) {
      baseline = &run.servers.back();
    }
    for (const auto& s : run.servers) {
      if (!s.connection) continue;
      if (!s.reference_sums.at(table).present) {
        run.Add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
                fmt::format("{}: reference table {} is missing", s.name, table));
      } else if (baseline == nullptr && s.shard) {
        baseline = &s;
      }
    }
    if (baseline == nullptr) continue;
    const ReferenceTableSum& want = baseline->reference_sums.at(table);
    std::optional<std::map<std::vector<std::string>, std::int64_t>> baseline_rows;
    for (const auto& s : run.servers) {
      if (&s == baseline || !s.shard || !s.connection) continue;
      const ReferenceTableSum& have = s.reference_sums.at(table);
      if (!have.present || (have.rows == want.rows && have.hash_sum == want.hash_sum)) continue;
      std::vector<std::string> samples;
      const std::int64_t differing = DiffReferenceTable(run, *baseline, s, table, want, baseline_rows, samples);
      std::string sample_text;
      for (const auto& sample : samples) sample_text += (sample_text.empty() ? "" : "; ") + sample;
      run.Add(FindingKind::kReferenceDiffers, s.name, table, std::nullopt, differing,
              samples.empty() ? "" : samples.front(),
              fmt::format("{} {}: {} from the {} copy ({} rows there, {} here), e.g. {}", s.name, table,
                          RowsDo(differing, "differs", "differ"),
                          baseline->shard ? baseline->name + "'s" : std::string("reference server's"), want.rows,
                          have.rows, sample_text));
    }
  }
}

// Migration versions: a finding per server with problems (one per
// unreachable server not found so already, added to `unreachable`), and
// report.schema_version when all are at one.
void CheckMigrationVersions(VerifyRun& run, const MigrationStatus& migration_status,
                            std::set<std::string>& unreachable) {
  const auto problems = migration_status.Problems();
  for (std::size_t i = 0; i < migration_status.Servers().size(); ++i) {
    const auto& server = migration_status.Servers()[i];
    const std::string& name = server.server.name;
    if (!server.reachable) {
      if (!unreachable.contains(name)) {
        unreachable.insert(name);
        run.Add(FindingKind::kUnreachable, name, "", std::nullopt, 0, "",
                fmt::format("{}: unreachable ({})", name, server.error));
      }
      continue;
    }
    std::string detail;
    for (const auto& p : problems) {
      if (p.starts_with(name + ":")) detail += (detail.empty() ? "" : "; ") + p.substr(name.size() + 2);
    }
    if (detail.empty()) continue;
    const auto version = migration_status.VersionOf(i);
    run.Add(FindingKind::kSchemaVersion, name, "", std::nullopt, 0, "",
            fmt::format("{}: schema version {} of {}: {}", name, version ? fmt::format("{:03}", *version) : "?",
                        fmt::format("{:03}", run.options.migrations->LatestVersion()), detail));
  }
  if (migration_status.AtOneVersion()) run.report.schema_version = migration_status.VersionOf(0);
}

ServerCounts CountsOf(const ScannedServer& s) {
  ServerCounts counts;
  counts.server = s.name;
  counts.shard = s.shard;
  counts.reachable = s.connection != nullptr;
  counts.elapsed = s.elapsed;
  for (const auto& scan : s.scans) counts.tables.push_back(scan.counts);
  return counts;
}

}  // namespace

VerifyReport VerifyCluster(const ClusterConfig& config, const VerifyOptions& options) {
  const auto started = Clock::now();
  VerifyReport report;
  report.shard_count = static_cast<int>(config.shards.size());
  report.reference_tables = options.reference_tables;

  // Migration versions, while the servers are scanned.
  std::optional<MigrationStatus> migration_status;
  std::thread migration_thread;
  if (options.migrations != nullptr) {
    migration_thread = std::thread([&] {
      MigratorOptions migrator_options;
      migrator_options.connect_timeout = options.connect_timeout;
      const Migrator migrator(*options.migrations, MigrationServers(config), migrator_options);
      migration_status.emplace(migrator.Status());
    });
  }

  const std::optional<BucketDirectory> directory = LoadDirectory(config, report);
  std::vector<ScannedServer> servers = ScanServers(config, options);
  const bool count_reference = !options.mirrored_tables.empty() && config.reference_dsn.has_value();
  VerifyRun run{config, options, servers, directory, report, count_reference};
  std::set<std::string> unreachable = CheckReachable(run);
  CheckShardedTablesPresent(run);
  CheckTableDefinitions(run);
  const std::set<int> in_motion = CheckMovesInProgress(run);
  CheckRowPlacement(run, in_motion);
  CheckCountsAgainstReference(run, in_motion);
  CheckReferenceTables(run);
  if (migration_thread.joinable()) migration_thread.join();
  if (migration_status) CheckMigrationVersions(run, *migration_status, unreachable);

  for (const auto& s : servers) report.servers.push_back(CountsOf(s));
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  return report;
}

}  // namespace shardkit
