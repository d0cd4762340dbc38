// shardctl verify: the cluster against its directory (verify.hpp).
#include "shardkit/schema/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "shardkit/config.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;

// Tables of the current schema with both shard-key columns.
constexpr const char* kShardedTables = R"(
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'customer_id' AND NOT a.attisdropped)
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'bucket' AND NOT a.attisdropped)
ORDER BY 1
)";

constexpr const char* kColumns = R"(
SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
)";

constexpr const char* kPrimaryKey = R"(
SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = to_regclass($1) AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)
)";

std::string ErrorText(const std::exception& e) {
  std::string text = RedactDsn(e.what());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string Rows(std::int64_t n) { return fmt::format("{} row{}", n, n == 1 ? "" : "s"); }
// "1 row stores", "2 rows store"
std::string RowsDo(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", Rows(n), n == 1 ? one : many);
}

struct Group {
  int computed = 0;  // bucket_of(customer_id), -1 if NULL
  int stored = 0;
  std::int64_t rows = 0;
};

struct TableScan {
  std::string table;
  std::vector<std::string> key;  // primary key columns
  std::vector<Group> groups;     // shards
  TableCounts counts;
};

struct ReferenceTableSum {
  bool present = false;
  std::vector<std::string> key;
  std::int64_t rows = 0;
  std::string hash_sum;
};

// A shard's ownership row of a bucket (sql/010).
struct OwnershipRow {
  std::string state;
  std::optional<std::int64_t> move_id;
  std::optional<int> new_owner;
};

// A live move in the catalog's journal.
struct LiveMove {
  std::int64_t move_id = 0;
  int bucket = 0;
  int source = 0;
  int target = 0;
  std::string state;
  double idle_s = 0;              // since its last journaled step
  std::optional<int> mover_pid;   // the catalog session running it, if any
};

struct Server {
  std::string name;
  Dsn dsn;
  std::optional<ShardId> shard;
  std::unique_ptr<pqxx::connection> connection;
  std::string error;
  std::vector<std::string> sharded_tables;  // discovered there
  std::vector<TableScan> scans;
  std::map<std::string, ReferenceTableSum> reference_sums;
  std::map<std::string, std::vector<std::string>> columns;  // table -> "name type [not null]"
  std::map<int, OwnershipRow> ownership;                     // bucket -> row (enrolled shards)
  std::chrono::microseconds elapsed{0};
};

std::vector<std::string> KeyColumns(pqxx::transaction_base& tx, const std::string& table) {
  std::vector<std::string> key;
  for (const auto& row : tx.exec_params(kPrimaryKey, tx.quote_name(table))) key.push_back(row[0].as<std::string>());
  return key;
}

// "(customer_id, order_id) = (4242, 17)"
std::string DescribeKey(const std::vector<std::string>& columns, const std::vector<std::string>& values) {
  std::string names, text;
  for (const auto& c : columns) names += (names.empty() ? "" : ", ") + c;
  for (const auto& v : values) text += (text.empty() ? "" : ", ") + v;
  return fmt::format("({}) = ({})", names, text);
}

// Shards: every sharded table; the reference server: the mirrored ones.
void ScanServer(Server& s, const std::vector<std::string>& reference_tables,
                const std::vector<std::string>& mirrored_tables, std::chrono::milliseconds connect_timeout) {
  const auto start = Clock::now();
  try {
    s.connection = std::make_unique<pqxx::connection>(WithConnectTimeout(s.dsn, connect_timeout).Reveal());
    {
      // Every row, whatever bucket it belongs to: an enrolled shard shows
      // only the buckets it owns unless asked for all (ownership.hpp).
      pqxx::nontransaction session{*s.connection};
      session.exec0("SET shardkit.buckets = 'all'");
    }
    pqxx::read_transaction tx{*s.connection, "verify"};
    // Short aggregates over a few million rows: compiling them costs more than it saves.
    tx.exec0("SET LOCAL jit = off");
    tx.exec0("SET LOCAL application_name = 'shardkit verify'");
    for (const auto& row : tx.exec(kShardedTables)) s.sharded_tables.push_back(row[0].as<std::string>());
    if (s.shard && tx.exec1("SELECT to_regclass('shardkit_bucket_ownership') IS NOT NULL")[0].as<bool>()) {
      for (const auto& row : tx.exec("SELECT bucket, state, move_id, new_owner FROM shardkit_bucket_ownership")) {
        OwnershipRow o;
        o.state = row[1].as<std::string>();
        if (!row[2].is_null()) o.move_id = row[2].as<std::int64_t>();
        if (!row[3].is_null()) o.new_owner = row[3].as<int>();
        s.ownership[row[0].as<int>()] = std::move(o);
      }
    }
    {
      for (const auto& table : s.sharded_tables) {
        if (!s.shard && std::find(mirrored_tables.begin(), mirrored_tables.end(), table) == mirrored_tables.end()) {
          continue;
        }
        TableScan scan;
        scan.table = table;
        scan.counts.table = table;
        scan.key = KeyColumns(tx, table);
        const std::string name = tx.quote_name(table);
        const std::string sql =
            s.shard ? fmt::format("SELECT coalesce(bucket_of(customer_id), -1), bucket, count(*) FROM {} GROUP BY 1, 2",
                                  name)
                    : fmt::format("SELECT coalesce(bucket_of(customer_id), -1), -1, count(*) FROM {} GROUP BY 1", name);
        for (const auto& row : tx.exec(sql)) {
          Group g{row[0].as<int>(), row[1].is_null() ? -1 : row[1].as<int>(), row[2].as<std::int64_t>()};
          scan.counts.rows += g.rows;
          if (g.computed >= 0 && g.computed < kBucketCount) {
            scan.counts.by_bucket[static_cast<std::size_t>(g.computed)] += g.rows;
          }
          scan.groups.push_back(g);
        }
        s.scans.push_back(std::move(scan));
      }
    }
    auto describe = [&](const std::string& table) {
      auto& columns = s.columns[table];
      for (const auto& row : tx.exec_params(kColumns, tx.quote_name(table))) columns.push_back(row[0].as<std::string>());
    };
    for (const auto& table : s.sharded_tables) describe(table);
    for (const auto& table : reference_tables) {
      ReferenceTableSum sum;
      sum.present = tx.exec_params1("SELECT to_regclass($1) IS NOT NULL", tx.quote_name(table))[0].as<bool>();
      if (sum.present) {
        describe(table);
        sum.key = KeyColumns(tx, table);
        // Order-independent: the sum of a 64-bit hash of each row's text.
        const auto row = tx.exec1(fmt::format(
            "SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text FROM {} AS t",
            tx.quote_name(table)));
        sum.rows = row[0].as<std::int64_t>();
        sum.hash_sum = row[1].as<std::string>();
      }
      s.reference_sums[table] = std::move(sum);
    }
    tx.commit();
  } catch (const std::exception& e) {
    s.error = ErrorText(e);
    s.connection.reset();
  }
  s.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

// Up to `limit` primary keys (as text) of `table` rows matching `where`.
std::vector<std::vector<std::string>> SampleKeys(pqxx::connection_base& c, const std::string& table,
                                                 const std::vector<std::string>& key, const std::string& where,
                                                 int limit, const std::vector<int>& params) {
  pqxx::read_transaction tx{c, "verify sample"};
  std::string columns;
  for (const auto& k : key) columns += (columns.empty() ? "" : ", ") + tx.quote_name(k) + "::text";
  if (columns.empty()) columns = "t::text";
  pqxx::result rows;
  const std::string sql = fmt::format("SELECT {} FROM {} AS t WHERE {} LIMIT {}", columns, tx.quote_name(table), where, limit);
  if (params.size() == 1) {
    rows = tx.exec_params(sql, params[0]);
  } else {
    rows = tx.exec(sql);
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& row : rows) {
    std::vector<std::string> values;
    for (const auto& field : row) values.push_back(field.is_null() ? "NULL" : field.as<std::string>());
    out.push_back(std::move(values));
  }
  return out;
}

bool HasKey(pqxx::connection_base& c, const std::string& table, const std::vector<std::string>& key,
            const std::vector<std::string>& values) {
  pqxx::read_transaction tx{c, "verify owner"};
  std::string where;
  for (std::size_t i = 0; i < key.size(); ++i) {
    where += fmt::format("{}{}::text = {}", i ? " AND " : "", tx.quote_name(key[i]), tx.quote(values[i]));
  }
  // The key's columns as text: exact for the integer keys of sharded tables;
  // customer_id first lets the primary key index find the customer's rows.
  const std::string sql = fmt::format("SELECT EXISTS (SELECT 1 FROM {} WHERE {}{})", tx.quote_name(table),
                                      key.empty() ? "false" : where,
                                      key.empty() || key[0] != "customer_id"
                                          ? std::string()
                                          : fmt::format(" AND customer_id = {}::integer", tx.quote(values[0])));
  return tx.exec1(sql)[0].as<bool>();
}

// key (as text) -> row hash, of a whole table.
std::map<std::vector<std::string>, std::int64_t> RowHashes(pqxx::connection_base& c, const std::string& table,
                                                           const std::vector<std::string>& key) {
  pqxx::read_transaction tx{c, "verify diff"};
  std::string columns;
  for (const auto& k : key) columns += tx.quote_name(k) + "::text, ";
  if (key.empty()) columns = "t::text, ";
  std::map<std::vector<std::string>, std::int64_t> out;
  for (const auto& row : tx.exec(fmt::format("SELECT {}hashtextextended(t::text, 0) FROM {} AS t", columns,
                                             tx.quote_name(table)))) {
    std::vector<std::string> k;
    for (std::size_t i = 0; i + 1 < row.size(); ++i) k.push_back(row[static_cast<pqxx::row::size_type>(i)].is_null() ? "NULL" : row[static_cast<pqxx::row::size_type>(i)].as<std::string>());
    const auto hash = row[static_cast<pqxx::row::size_type>(row.size() - 1)].as<std::int64_t>();
    out[std::move(k)] += hash;  // without a key, equal rows add up
  }
  return out;
}

// The catalog's live moves; empty without a catalog or its journal.
std::vector<LiveMove> LiveMoves(const ClusterConfig& config, std::chrono::milliseconds connect_timeout,
                                std::string& error) {
  std::vector<LiveMove> moves;
  if (!config.catalog_dsn) return moves;
  try {
    pqxx::connection c{WithConnectTimeout(*config.catalog_dsn, connect_timeout).Reveal()};
    pqxx::read_transaction tx{c, "verify moves"};
    if (tx.exec1("SELECT to_regclass('shardkit_moves') IS NULL")[0].as<bool>()) return moves;
    for (const auto& row : tx.exec(
             "SELECT m.move_id, m.bucket, m.source, m.target, m.state, "
             "extract(epoch FROM clock_timestamp() - m.updated_at)::float8, "
             "(SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = 21324 "
             "AND l.objid::bigint = m.move_id AND l.objsubid = 2 AND l.granted AND l.database = "
             "(SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1) "
             "FROM shardkit_moves m WHERE m.state NOT IN ('done', 'aborted') ORDER BY m.bucket")) {
      LiveMove m;
      m.move_id = row[0].as<std::int64_t>();
      m.bucket = row[1].as<int>();
      m.source = row[2].as<int>();
      m.target = row[3].as<int>();
      m.state = row[4].as<std::string>();
      m.idle_s = row[5].as<double>();
      if (!row[6].is_null()) m.mover_pid = row[6].as<int>();
      moves.push_back(std::move(m));
    }
  } catch (const std::exception& e) {
    error = ErrorText(e);
  }
  return moves;
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

VerifyReport VerifyCluster(const ClusterConfig& config, const VerifyOptions& options) {
  const auto started = Clock::now();
  VerifyReport report;
  report.shard_count = static_cast<int>(config.shards.size());
  report.reference_tables = options.reference_tables;
  auto add = [&report](FindingKind kind, std::string server, std::string table, std::optional<BucketId> bucket,
                       std::int64_t rows, std::string sample, std::string detail) {
    report.findings.push_back(VerifyFinding{kind, std::move(server), std::move(table), bucket, rows, std::move(sample),
                                            std::move(detail)});
  };

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

  // The directory.
  std::optional<BucketDirectory> directory;
  report.directory_source = config.directory_source == DirectorySource::kCatalog ? "catalog" : "config";
  try {
    directory = config.directory_source == DirectorySource::kCatalog ? LoadCatalogDirectory(config) : config.directory;
    report.directory_version = directory->Version();
  } catch (const std::exception& e) {
    add(FindingKind::kDirectory, report.directory_source, "", std::nullopt, 0, "",
        fmt::format("{}: the directory cannot be read: {}; rows cannot be checked against it", report.directory_source,
                    ErrorText(e)));
  }

  // Every shard and the reference server at once.
  const bool count_reference = !options.mirrored_tables.empty() && config.reference_dsn.has_value();
  std::vector<Server> servers;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    servers.push_back(Server{config.shards[i].name.empty() ? fmt::format("shard{}", i) : config.shards[i].name,
                             config.shards[i].dsn, static_cast<ShardId>(i), {}, {}, {}, {}, {}, {}, {}});
  }
  if (config.reference_dsn) {
    servers.push_back(Server{"reference", *config.reference_dsn, std::nullopt, {}, {}, {}, {}, {}, {}, {}});
  }
  {
    std::vector<std::thread> threads;
    for (auto& s : servers) {
      threads.emplace_back([&s, &options, count_reference] {
        ScanServer(s, options.reference_tables, options.mirrored_tables, options.connect_timeout);
      });
    }
    for (auto& t : threads) t.join();
  }
  std::set<std::string> unreachable;
  for (const auto& s : servers) {
    if (s.connection) continue;
    unreachable.insert(s.name);
    add(FindingKind::kUnreachable, s.name, "", std::nullopt, 0, "",
        fmt::format("{}: cannot be checked: {}", s.name, s.error));
  }

  // The sharded tables: those of any shard; each shard must have them all.
  std::set<std::string> sharded;
  for (const auto& s : servers) {
    if (s.shard && s.connection) sharded.insert(s.sharded_tables.begin(), s.sharded_tables.end());
  }
  report.sharded_tables.assign(sharded.begin(), sharded.end());
  auto mirrored = [&options](const std::string& table) {
    return std::find(options.mirrored_tables.begin(), options.mirrored_tables.end(), table) !=
           options.mirrored_tables.end();
  };
  for (const auto& s : servers) {
    if (!s.connection || (!s.shard && !count_reference)) continue;
    for (const auto& table : report.sharded_tables) {
      if (!s.shard && !mirrored(table)) continue;
      if (std::find(s.sharded_tables.begin(), s.sharded_tables.end(), table) == s.sharded_tables.end()) {
        add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
            fmt::format("{}: sharded table {} is missing ({})", s.name, table,
                        s.shard ? "other shards have it" : "it mirrors every shard's rows"));
      }
    }
  }
  auto scan_of = [](const Server& s, const std::string& table) -> const TableScan* {
    for (const auto& scan : s.scans) {
      if (scan.table == table) return &scan;
    }
    return nullptr;
  };

  // One definition of each table everywhere: the columns, their types and
  // NOT NULL, in order, as on the reference server (else the first shard).
  {
    std::set<std::string> tables(report.sharded_tables.begin(), report.sharded_tables.end());
    tables.insert(options.reference_tables.begin(), options.reference_tables.end());
    for (const auto& table : tables) {
      const Server* baseline = nullptr;
      for (const auto& candidate : servers) {
        if (!candidate.connection || !candidate.columns.contains(table)) continue;
        if (baseline == nullptr || !candidate.shard) baseline = &candidate;  // the reference wins
      }
      if (baseline == nullptr) continue;
      const auto& want = baseline->columns.at(table);
      for (const auto& s : servers) {
        if (&s == baseline || !s.connection || !s.columns.contains(table)) continue;
        const auto& have = s.columns.at(table);
        if (have == want) continue;
        std::string first;
        for (std::size_t i = 0; i < std::max(have.size(), want.size()) && first.empty(); ++i) {
          const std::string h = i < have.size() ? have[i] : "(none)";
          const std::string w = i < want.size() ? want[i] : "(none)";
          if (h != w) first = fmt::format("column {}: {} here, {} on {}", i + 1, h, w, baseline->name);
        }
        add(FindingKind::kTableDefinition, s.name, table, std::nullopt, 0, "",
            fmt::format("{} {}: the table's columns differ from {}'s ({})", s.name, table, baseline->name, first));
      }
    }
  }

  // Buckets in a move (live in the journal, or marked on a shard): their
  // rows are on two shards on purpose, and the one the directory names may
  // not be the one holding the latest writes (the target owns the bucket
  // before the directory flips). One finding each, naming the move and
  // what to run; no orphan, misplaced or count finding for them, since
  // deleting either copy by hand could delete the only copy of writes.
  std::set<int> in_motion;
  {
    std::string moves_error;
    const std::vector<LiveMove> live = LiveMoves(config, options.connect_timeout, moves_error);
    std::map<int, const LiveMove*> live_by_bucket;
    for (const auto& m : live) live_by_bucket[m.bucket] = &m;
    auto shard_name = [&](int shard) {
      return shard >= 0 && static_cast<std::size_t>(shard) < config.shards.size()
                 ? servers[static_cast<std::size_t>(shard)].name
                 : fmt::format("shard {}", shard);
    };
    for (int bucket = 0; bucket < kBucketCount; ++bucket) {
      std::vector<std::string> marks;   // "shard0: retired (move 12)"
      std::vector<std::string> serving;  // shards that own it
      std::optional<std::int64_t> marked_move;
      for (const auto& srv : servers) {
        if (!srv.shard || !srv.connection) continue;
        const auto it = srv.ownership.find(bucket);
        if (it == srv.ownership.end()) continue;
        const OwnershipRow& o = it->second;
        if (o.state == "owned") serving.push_back(srv.name);
        if (o.state != "owned" || o.move_id) {
          marks.push_back(fmt::format("{} {}{}", srv.name, o.state,
                                      o.move_id ? fmt::format(" (move {})", *o.move_id) : std::string()));
          if (o.move_id) marked_move = o.move_id;
        }
      }
      const auto live_it = live_by_bucket.find(bucket);
      if (live_it == live_by_bucket.end() && marks.empty()) continue;
      in_motion.insert(bucket);
      std::string marks_text;
      for (const auto& m : marks) marks_text += (marks_text.empty() ? "" : ", ") + m;
      std::string serving_text =
          serving.size() == 1 ? fmt::format("{} serves the bucket (it holds every acknowledged write of it)",
                                            serving.front())
          : serving.empty()   ? std::string("no shard serves the bucket for now (its reads and writes are refused, "
                                            "retryably)")
                              : fmt::format("{} shards own the bucket at once", serving.size());
      std::string detail;
      std::string server;
      if (live_it != live_by_bucket.end()) {
        const LiveMove& m = *live_it->second;
        server = shard_name(m.source);
        const bool abortable = m.state != "owned" && m.state != "flipped" && m.state != "replication_dropped" &&
                               m.state != "cleaning";
        detail = fmt::format(
            "bucket {}: move {} ({} -> {}) is in progress, state {}, last step {:.1f} s ago, {}; {}{}; its rows on "
            "{} and {} belong to the move: delete none of them by hand; {}",
            bucket, m.move_id, shard_name(m.source), shard_name(m.target), m.state, m.idle_s,
            m.mover_pid ? fmt::format("run by a mover (catalog session pid {})", *m.mover_pid)
                        : std::string("and no mover is running it"),
            serving_text, marks_text.empty() ? "" : " (" + marks_text + ")", shard_name(m.source),
            shard_name(m.target),
            m.mover_pid ? std::string("wait for it (shardctl moves --live)")
                        : abortable ? fmt::format("finish it with shardctl move resume {} or roll it back with "
                                                  "shardctl move abort {}",
                                                  m.move_id, m.move_id)
                                    : fmt::format("finish it with shardctl move resume {}", m.move_id));
      } else {
        server = marks.front().substr(0, marks.front().find(' '));
        detail = fmt::format("bucket {}: {} (marked for a move the catalog does not list as live{}); {}; delete none "
                             "of its rows by hand; see shardctl move show {} and finish it with shardctl move "
                             "resume {}",
                             bucket, marks_text, moves_error.empty() ? "" : ": the catalog: " + moves_error,
                             serving_text, marked_move ? std::to_string(*marked_move) : "<id>",
                             marked_move ? std::to_string(*marked_move) : "<id>");
      }
      add(FindingKind::kMoveInProgress, server, "", BucketId{bucket}, 0, "", detail);
    }
  }

  // Rows on the wrong shard or with the wrong bucket.
  for (auto& s : servers) {
    if (!s.shard || !s.connection) continue;
    const ShardId shard = *s.shard;
    for (const auto& scan : s.scans) {
      std::map<int, std::int64_t> not_owned;  // bucket -> rows
      for (const auto& g : scan.groups) {
        if (g.stored != g.computed) {
          std::string sample;
          try {
            const auto keys = SampleKeys(*s.connection, scan.table, scan.key,
                                         "bucket = $1 AND bucket IS DISTINCT FROM bucket_of(customer_id)", 1,
                                         {g.stored});
            if (!keys.empty()) sample = DescribeKey(scan.key, keys.front());
          } catch (const std::exception& e) {
            sample = "(no sample: " + ErrorText(e) + ")";
          }
          add(FindingKind::kWrongBucket, s.name, scan.table, BucketId{g.stored}, g.rows, sample,
              g.computed < 0 ? fmt::format("{} {}: {} with bucket {} and a NULL customer_id, e.g. {}", s.name,
                                           scan.table, Rows(g.rows), g.stored, sample)
                             : fmt::format("{} {}: {} bucket {} but bucket_of(customer_id) = {}, e.g. {}", s.name,
                                           scan.table, RowsDo(g.rows, "stores", "store"), g.stored, g.computed, sample));
        }
        if (directory && g.computed >= 0 && directory->ShardOf(BucketId{g.computed}) != shard) {
          not_owned[g.computed] += g.rows;
        }
      }
      for (const auto& [bucket, rows] : not_owned) {
        if (in_motion.contains(bucket)) continue;
        const ShardId owner = directory->ShardOf(BucketId{bucket});
        const Server& owner_server = servers[static_cast<std::size_t>(ToInt(owner))];
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
          add(FindingKind::kOrphanBucket, s.name, scan.table, BucketId{bucket}, rows, sample,
              fmt::format("{} {}: {} of bucket {}, which {} owns, e.g. {}; {} has that row too: an orphan copy (an "
                          "interrupted move?) to delete from {}",
                          s.name, scan.table, Rows(rows), bucket, owner_server.name, sample, owner_server.name,
                          s.name));
        } else {
          add(FindingKind::kMisplacedRows, s.name, scan.table, BucketId{bucket}, rows, sample,
              fmt::format("{} {}: {} of bucket {}, which {} owns, e.g. {}; {}", s.name, scan.table, Rows(rows),
                          bucket, owner_server.name, sample,
                          owner_has.has_value() ? fmt::format("{} lacks that row: misplaced, it belongs on {}",
                                                              owner_server.name, owner_server.name)
                                                : fmt::format("whether {} has it too is unknown", owner_server.name)));
        }
      }
    }
  }

  // Each bucket's rows on its owner against the reference server's.
  if (count_reference && directory && servers.back().connection) {
    const Server& reference = servers.back();
    for (const auto& table : report.sharded_tables) {
      const TableScan* ref_scan = mirrored(table) ? scan_of(reference, table) : nullptr;
      if (ref_scan == nullptr) continue;
      for (int bucket = 0; bucket < kBucketCount; ++bucket) {
        if (in_motion.contains(bucket)) continue;
        const ShardId owner = directory->ShardOf(BucketId{bucket});
        const Server& owner_server = servers[static_cast<std::size_t>(ToInt(owner))];
        const TableScan* owner_scan = owner_server.connection ? scan_of(owner_server, table) : nullptr;
        if (owner_scan == nullptr) continue;
        const auto b = static_cast<std::size_t>(bucket);
        const std::int64_t have = owner_scan->counts.by_bucket[b];
        const std::int64_t want = ref_scan->counts.by_bucket[b];
        if (have == want) continue;
        add(FindingKind::kCountDiffers, owner_server.name, table, BucketId{bucket}, want - have, "",
            fmt::format("{} {} bucket {}: {} on its owner, {} on the reference server ({} {})", owner_server.name,
                        table, bucket, Rows(have), want, have < want ? "missing" : "extra",
                        have < want ? want - have : have - want));
      }
    }
  }

  // Reference tables: identical everywhere.
  for (const auto& table : options.reference_tables) {
    const Server* baseline = nullptr;
    if (config.reference_dsn && servers.back().connection && servers.back().reference_sums[table].present) {
      baseline = &servers.back();
    }
    for (const auto& s : servers) {
      if (!s.connection) continue;
      if (!s.reference_sums.at(table).present) {
        add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
            fmt::format("{}: reference table {} is missing", s.name, table));
      } else if (baseline == nullptr && s.shard) {
        baseline = &s;
      }
    }
    if (baseline == nullptr) continue;
    const ReferenceTableSum& want = baseline->reference_sums.at(table);
    std::optional<std::map<std::vector<std::string>, std::int64_t>> baseline_rows;
    for (const auto& s : servers) {
      if (&s == baseline || !s.shard || !s.connection) continue;
      const ReferenceTableSum& have = s.reference_sums.at(table);
      if (!have.present || (have.rows == want.rows && have.hash_sum == want.hash_sum)) continue;
      std::int64_t differing = 0;
      std::vector<std::string> samples;
      try {
        if (!baseline_rows) baseline_rows = RowHashes(*baseline->connection, table, want.key);
        const auto rows = RowHashes(*s.connection, table, want.key);
        auto note = [&](const std::vector<std::string>& key, const char* what) {
          ++differing;
          if (static_cast<int>(samples.size()) < options.max_samples) {
            samples.push_back(fmt::format("{} {}", DescribeKey(want.key.empty() ? std::vector<std::string>{"row"} : want.key, key), what));
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
      std::string sample_text;
      for (const auto& sample : samples) sample_text += (sample_text.empty() ? "" : "; ") + sample;
      add(FindingKind::kReferenceDiffers, s.name, table, std::nullopt, differing, samples.empty() ? "" : samples.front(),
          fmt::format("{} {}: {} from the {} copy ({} rows there, {} here), e.g. {}", s.name, table,
                      RowsDo(differing, "differs", "differ"),
                      baseline->shard ? baseline->name + "'s" : std::string("reference server's"), want.rows,
                      have.rows, sample_text));
    }
  }

  // Migration versions.
  if (migration_thread.joinable()) migration_thread.join();
  if (migration_status) {
    const auto problems = migration_status->Problems();
    for (std::size_t i = 0; i < migration_status->Servers().size(); ++i) {
      const auto& server = migration_status->Servers()[i];
      const std::string& name = server.server.name;
      if (!server.reachable) {
        if (!unreachable.contains(name)) {
          unreachable.insert(name);
          add(FindingKind::kUnreachable, name, "", std::nullopt, 0, "", fmt::format("{}: unreachable ({})", name, server.error));
        }
        continue;
      }
      std::string detail;
      for (const auto& p : problems) {
        if (p.starts_with(name + ":")) detail += (detail.empty() ? "" : "; ") + p.substr(name.size() + 2);
      }
      if (detail.empty()) continue;
      const auto version = migration_status->VersionOf(i);
      add(FindingKind::kSchemaVersion, name, "", std::nullopt, 0, "",
          fmt::format("{}: schema version {} of {}: {}", name, version ? fmt::format("{:03}", *version) : "?",
                      fmt::format("{:03}", options.migrations->LatestVersion()), detail));
    }
    if (migration_status->AtOneVersion()) report.schema_version = migration_status->VersionOf(0);
  }

  for (const auto& s : servers) {
    ServerCounts counts;
    counts.server = s.name;
    counts.shard = s.shard;
    counts.reachable = s.connection != nullptr;
    counts.elapsed = s.elapsed;
    for (const auto& scan : s.scans) counts.tables.push_back(scan.counts);
    report.servers.push_back(std::move(counts));
  }
  report.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  return report;
}

}  // namespace shardkit
