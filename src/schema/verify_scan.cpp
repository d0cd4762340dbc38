// One pass over every server, and the catalog's live moves (verify_scan.hpp).
#include "schema/verify_scan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <thread>
#include <tuple>

#include "pg/server_message.hpp"
#include "shardkit/core/shard_key.hpp"

namespace shardkit::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Tables of the current schema with a bucket column and a shard key: the
// one registered (sql/038), else customer_id. {} is the registered key's
// expression (NULL on a schema without sql/038).
constexpr const char* kShardedTables = R"(
SELECT c.relname, quote_ident(k.key),
  (SELECT format_type(a.atttypid, NULL) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = k.key)
FROM pg_class c
CROSS JOIN LATERAL (SELECT coalesce({},
  (SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'customer_id'
     AND NOT a.attisdropped)) AS key) k
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND k.key IS NOT NULL
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'bucket' AND NOT a.attisdropped)
ORDER BY 1
)";
constexpr const char* kRegisteredKey =
    "(SELECT s.key_column::text FROM shardkit_sharded_tables s WHERE s.table_name = c.oid)";
constexpr const char* kHasRegisteredKeys =
    "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('shardkit_sharded_tables') "
    "AND attname = 'key_column' AND NOT attisdropped)";

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

std::vector<std::string> KeyColumns(pqxx::transaction_base& tx, const std::string& table) {
  std::vector<std::string> key;
  for (const auto& row : tx.exec_params(kPrimaryKey, tx.quote_name(table))) key.push_back(row[0].as<std::string>());
  return key;
}

// Shards: every sharded table; the reference server: the mirrored ones.
void ScanServer(ScannedServer& s, const std::vector<std::string>& reference_tables,
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
    const bool registered_keys = tx.exec1(kHasRegisteredKeys)[0].as<bool>();
    for (const auto& row : tx.exec(fmt::format(kShardedTables, registered_keys ? kRegisteredKey : "NULL::text"))) {
      s.sharded_tables.push_back(row[0].as<std::string>());
      const std::string key = row[1].as<std::string>();
      const auto type = ShardKeyTypeOfSql(row[2].c_str()).value_or(ShardKeyType::kInt4);
      s.shard_keys[row[0].as<std::string>()] = {key, fmt::format("{}({})", BucketFunction(type), key)};
    }
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
        std::tie(scan.shard_key, scan.bucket_of) = s.shard_keys.at(table);
        const std::string name = tx.quote_name(table);
        const std::string sql =
            s.shard
                ? fmt::format("SELECT coalesce({}, -1), bucket, count(*) FROM {} GROUP BY 1, 2", scan.bucket_of, name)
                : fmt::format("SELECT coalesce({}, -1), -1, count(*) FROM {} GROUP BY 1", scan.bucket_of, name);
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
      for (const auto& row : tx.exec_params(kColumns, tx.quote_name(table)))
        columns.push_back(row[0].as<std::string>());
    };
    for (const auto& table : s.sharded_tables) describe(table);
    for (const auto& table : reference_tables) {
      ReferenceTableSum sum;
      sum.present = tx.exec_params1("SELECT to_regclass($1) IS NOT NULL", tx.quote_name(table))[0].as<bool>();
      if (sum.present) {
        describe(table);
        sum.key = KeyColumns(tx, table);
        // Order-independent: the sum of a 64-bit hash of each row's text.
        const auto row = tx.exec1(
            fmt::format("SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0)::text FROM {} AS t",
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

}  // namespace

const TableScan* ScanOf(const ScannedServer& s, const std::string& table) {
  for (const auto& scan : s.scans) {
    if (scan.table == table) return &scan;
  }
  return nullptr;
}

// Every shard and the reference server, scanned at once.
std::vector<ScannedServer> ScanServers(const ClusterConfig& config, const VerifyOptions& options) {
  std::vector<ScannedServer> servers;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    servers.push_back(ScannedServer{config.shards[i].name.empty() ? fmt::format("shard{}", i) : config.shards[i].name,
                                    config.shards[i].dsn,
                                    static_cast<ShardId>(i),
                                    {},
                                    {},
                                    {},
                                    {},
                                    {},
                                    {},
                                    {},
                                    {}});
  }
  if (config.reference_dsn) {
    servers.push_back(ScannedServer{"reference", *config.reference_dsn, std::nullopt, {}, {}, {}, {}, {}, {}, {}, {}});
  }
  std::vector<std::thread> threads;
  for (auto& s : servers) {
    threads.emplace_back(
        [&s, &options] { ScanServer(s, *options.reference_tables, options.mirrored_tables, options.connect_timeout); });
  }
  for (auto& t : threads) t.join();
  return servers;
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
    for (const auto& row :
         tx.exec("SELECT m.move_id, m.bucket, m.source, m.target, m.state, "
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

}  // namespace shardkit::detail
