#include "support/bookstore_rows.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

namespace shardkit::test {
namespace {

// Per table: its key order and the columns compared (created_at is the
// server's now() at insert, different on each server).
struct Table {
  std::string name;
  std::string key;
  std::string columns;
};
const std::vector<Table>& Tables() {
  static const std::vector<Table> tables{
      {"customers", "customer_id", "customer_id, bucket, name, email"},
      {"orders", "customer_id, order_id", "customer_id, bucket, order_id, ordered_at, status, total"},
      {"order_items", "customer_id, order_id, line_no",
       "customer_id, bucket, order_id, line_no, book_id, quantity, unit_price"},
      // The outbox tables (sql/020, 022): co-located, they move with their bucket.
      {"shardkit_jobs", "customer_id, job_id", "customer_id, bucket, job_id, queue, partition, kind, payload, state"},
      {"notification_log", "customer_id, notification_id, fence",
       "customer_id, bucket, notification_id, fence, order_id, kind, sent_by"},
      {"order_tracking", "customer_id, order_id", "customer_id, bucket, order_id, status, status_seq"},
  };
  return tables;
}

BucketDigests Digest(const Dsn& dsn) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::work tx{c};
  tx.exec("SET LOCAL shardkit.buckets = 'all'");
  BucketDigests out;
  for (const auto& table : Tables()) {
    for (const auto& row : tx.exec(fmt::format("SELECT bucket, count(*), md5(string_agg(({})::text, '|' ORDER BY {})) "
                                               "FROM {} GROUP BY bucket",
                                               table.columns, table.key, table.name))) {
      out[{table.name, row[0].as<int>()}] = TableDigest{row[1].as<std::int64_t>(), row[2].as<std::string>()};
    }
  }
  return out;
}

}  // namespace

void FillBookstore(const ScratchCluster& cluster, int customers) {
  const auto& directory = cluster.Directory();
  std::vector<std::string> per_shard(static_cast<std::size_t>(cluster.ShardCount()));
  std::string all;
  auto add = [&](int customer, const std::string& sql) {
    per_shard[static_cast<std::size_t>(ToInt(directory.ShardFor(CustomerId{customer})))] += sql;
    all += sql;
  };
  for (int id = 1; id <= customers; ++id) {
    add(id, fmt::format("INSERT INTO customers (customer_id, bucket, name, email) VALUES ({0}, bucket_of({0}), "
                        "'customer {0}', 'c{0}@example.com');\n",
                        id));
    const int orders = id % 5;
    for (int o = 1; o <= orders; ++o) {
      const std::int64_t order_id = std::int64_t{id} * 100 + o;
      const int items = 1 + (id + o) % 3;
      add(id,
          fmt::format("INSERT INTO orders (customer_id, bucket, order_id, ordered_at, total) VALUES ({0}, "
                      "bucket_of({0}), {1}, timestamptz '2026-01-01' + interval '1 hour' * ({1} % 9000), {2}.50);\n",
                      id, order_id, 10 * items));
      add(id, fmt::format("INSERT INTO shardkit_jobs (customer_id, bucket, job_id, partition, kind, payload, state) "
                          "VALUES ({0}, bucket_of({0}), {1}, bucket_of({0}), 'order_placed', '{1}', 'done');\n"
                          "INSERT INTO notification_log (customer_id, bucket, notification_id, fence, order_id, kind, "
                          "sent_by) VALUES ({0}, bucket_of({0}), {1}, 1, {1}, 'order_placed', 'worker-1');\n"
                          "INSERT INTO order_tracking (customer_id, bucket, order_id, status, status_seq) VALUES "
                          "({0}, bucket_of({0}), {1}, 'placed', 1);\n",
                          id, order_id));
      for (int line = 1; line <= items; ++line) {
        add(id, fmt::format("INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, "
                            "unit_price) VALUES ({0}, bucket_of({0}), {1}, {2}, {3}, {4}, 9.99);\n",
                            id, order_id, line, (id * 7 + line) % 50, 1 + line % 2));
      }
    }
  }
  for (int s = 0; s < cluster.ShardCount(); ++s) {
    if (!per_shard[static_cast<std::size_t>(s)].empty()) cluster.ExecOnShard(s, per_shard[static_cast<std::size_t>(s)]);
  }
  cluster.ExecOnReference(all);
}

BucketDigests ReferenceDigests(const ScratchCluster& cluster) {
  return Digest(cluster.ReferenceDsn());
}

std::vector<BucketDigests> DigestsPerShard(const ScratchCluster& cluster) {
  std::vector<BucketDigests> out;
  for (int s = 0; s < cluster.ShardCount(); ++s) out.push_back(Digest(cluster.AdminDsn(s)));
  return out;
}

BucketDigests ShardDigests(const ScratchCluster& cluster, std::vector<std::string>* extra_copies) {
  BucketDigests out;
  const auto per_shard = DigestsPerShard(cluster);
  for (std::size_t s = 0; s < per_shard.size(); ++s) {
    for (const auto& [key, digest] : per_shard[s]) {
      if (out.contains(key)) {
        if (extra_copies != nullptr) {
          extra_copies->push_back(fmt::format("{} bucket {} also on shard {}", key.first, key.second, s));
        }
        continue;
      }
      out[key] = digest;
    }
  }
  return out;
}

std::vector<std::string> Differences(const BucketDigests& actual, const BucketDigests& expected) {
  std::vector<std::string> out;
  for (const auto& [key, want] : expected) {
    const auto it = actual.find(key);
    if (it == actual.end()) {
      out.push_back(fmt::format("{} bucket {}: missing ({} rows expected)", key.first, key.second, want.rows));
    } else if (!(it->second == want)) {
      out.push_back(fmt::format("{} bucket {}: {} rows (hash {}), expected {} rows (hash {})", key.first, key.second,
                                it->second.rows, it->second.hash, want.rows, want.hash));
    }
  }
  for (const auto& [key, have] : actual) {
    if (!expected.contains(key)) {
      out.push_back(fmt::format("{} bucket {}: {} unexpected rows", key.first, key.second, have.rows));
    }
  }
  return out;
}

}  // namespace shardkit::test
