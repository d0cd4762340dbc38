// Demo 3: identity sequences are per shard, so two shards hand out the same
// order_id; shardkit's Snowflake IDs are unique across shards.
#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <set>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/worker_lease.hpp"

namespace shardkit::lab {
namespace {

// Each shard's own scratch table with an identity column, as a single-server
// schema would have it. Temporary: it vanishes with the transaction.
constexpr const char* kIdentityTable =
    "CREATE TEMP TABLE lab_identity_orders ("
    " order_id bigint GENERATED ALWAYS AS IDENTITY (START WITH 1000001) PRIMARY KEY,"
    " customer_id integer NOT NULL, ordered_at timestamptz NOT NULL DEFAULT now()) ON COMMIT DROP";
constexpr const char* kPlainTable =
    "CREATE TEMP TABLE lab_snowflake_orders ("
    " order_id bigint PRIMARY KEY, customer_id integer NOT NULL,"
    " ordered_at timestamptz NOT NULL DEFAULT now()) ON COMMIT DROP";
// Orders per shard in the bulk comparison.
constexpr int kBulkOrders = 10000;

struct Placed {
  CustomerId customer{};
  ShardId shard{};
  std::int64_t order_id = 0;
  std::vector<std::int64_t> bulk;  // kBulkOrders more ids from the same shard
};

std::string PgBigintArray(const std::vector<std::int64_t>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out + "}";
}

std::size_t Common(std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<std::int64_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both.size();
}

// Two service instances, each with its own worker id: leased from the
// catalog's shardkit_worker_ids table like a real fleet, or fixed ids if the
// configuration has no catalog or the table is not there.
struct Instances {
  std::vector<std::shared_ptr<WorkerLease>> leases;
  std::vector<std::unique_ptr<SnowflakeGenerator>> generators;
  std::string how;
};

Instances StartInstances(Lab& lab) {
  Instances in;
  SnowflakeOptions options;
  options.epoch_unix_ms = kLabIdEpochMs;  // the orders column's epoch
  try {
    if (!lab.Config().catalog_dsn) {
      throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog], where the leases are", lab.Config().origin));
    }
    const Dsn catalog = WithConnectTimeout(*lab.Config().catalog_dsn, lab.Config().pool.connect_timeout);
    for (int i = 0; i < 2; ++i) {
      WorkerLeaseOptions lease_options;
      lease_options.id_space = "bookstore-lab-orders";
      lease_options.owner = fmt::format("bookstore-lab instance {}", i);
      auto lease = WorkerLease::Claim(catalog, lease_options);
      in.generators.push_back(std::make_unique<SnowflakeGenerator>(lease, options));
      in.leases.push_back(std::move(lease));
    }
    in.how = "worker ids leased from the catalog's shardkit_worker_ids";
  } catch (const Error& e) {
    in.leases.clear();
    in.generators.clear();
    for (int worker : {1, 2}) in.generators.push_back(std::make_unique<SnowflakeGenerator>(worker, options));
    in.how = fmt::format("fixed worker ids 1 and 2 (no lease: {})", e.what());
  }
  return in;
}

}  // namespace

DemoResult RunIds(Lab& lab) {
  DemoResult r;
  r.name = "ids";
  const std::vector<CustomerId> customers{CustomerId{4242}, CustomerId{4243}};

  // 1. Identity: one order for 4242 on its shard, one for 4243 on its shard.
  std::vector<Placed> identity;
  for (CustomerId c : customers) {
    Placed p;
    p.customer = c;
    p.shard = lab.Resolver().ShardFor(c);
    auto lease = lab.Resolver().PoolFor(c).Acquire();
    pqxx::work tx{*lease};
    tx.exec0(kIdentityTable);
    p.order_id =
        tx.exec_params1("INSERT INTO lab_identity_orders (customer_id) VALUES ($1::integer) RETURNING order_id", c)[0]
            .as<std::int64_t>();
    for (const auto& row : tx.exec_params("INSERT INTO lab_identity_orders (customer_id) SELECT $1::integer FROM "
                                          "generate_series(1, $2::integer) RETURNING order_id",
                                          c, kBulkOrders)) {
      p.bulk.push_back(row[0].as<std::int64_t>());
    }
    tx.abort();
    identity.push_back(std::move(p));
  }
  r.text += "with GENERATED AS IDENTITY (START WITH 1000001) on each shard:\n";
  for (const auto& p : identity) {
    r.text += fmt::format("customer {} on shard {}: order_id {}\n", p.customer, p.shard, p.order_id);
  }
  const bool same_first = identity.size() == 2 && identity[0].order_id == identity[1].order_id;
  const std::size_t identity_common = Common(identity[0].bulk, identity[1].bulk);
  r.text += fmt::format("-> two different orders, one number. {} more orders on each shard: {} numbers used twice.\n",
                        Thousands(kBulkOrders), Thousands(static_cast<std::int64_t>(identity_common)));
  const bool distinct_shards = identity[0].shard != identity[1].shard;
  r.Expect("ids.identity_collides", !distinct_shards || (same_first && identity_common == kBulkOrders),
           distinct_shards ? fmt::format("first order_id {} and {}; {} of {} bulk ids on both shards",
                                         identity[0].order_id, identity[1].order_id, identity_common, kBulkOrders)
                           : "4242 and 4243 are on the same shard in this directory: no collision to show");

  // 2. shardkit Snowflake IDs: two service instances, one per customer.
  Instances instances = StartInstances(lab);
  std::vector<Placed> snowflake;
  for (std::size_t i = 0; i < customers.size(); ++i) {
    const CustomerId c = customers[i];
    SnowflakeGenerator& ids = *instances.generators[i];
    Placed p;
    p.customer = c;
    p.shard = lab.Resolver().ShardFor(c);
    p.order_id = ids.Next();
    for (int k = 0; k < kBulkOrders; ++k) p.bulk.push_back(ids.Next());
    auto lease = lab.Resolver().PoolFor(c).Acquire();
    pqxx::work tx{*lease};
    tx.exec0(kPlainTable);
    tx.exec_params0("INSERT INTO lab_snowflake_orders (order_id, customer_id) VALUES ($1, $2)", p.order_id, c);
    tx.exec_params0("INSERT INTO lab_snowflake_orders (order_id, customer_id) SELECT unnest($1::bigint[]), $2::integer",
                    PgBigintArray(p.bulk), c);
    std::vector<std::int64_t> stored;
    for (const auto& row : tx.exec("SELECT order_id FROM lab_snowflake_orders"))
      stored.push_back(row[0].as<std::int64_t>());
    tx.abort();
    r.Expect(fmt::format("ids.snowflake.stored.{}", c), stored.size() == p.bulk.size() + 1,
             fmt::format("{} rows stored on shard {}", stored.size(), p.shard));
    snowflake.push_back(std::move(p));
  }
  r.text += fmt::format("\nwith shardkit Snowflake IDs (41 bits ms | 10 bits worker | 12 bits sequence; {}):\n",
                        instances.how);
  Json snow = Json::array();
  for (std::size_t i = 0; i < snowflake.size(); ++i) {
    const auto& p = snowflake[i];
    const SnowflakeParts parts = DecodeSnowflake(p.order_id, kLabIdEpochMs);
    r.text += fmt::format("customer {} on shard {}: order_id {}  (ms {}, worker {}, sequence {})\n", p.customer,
                          p.shard, p.order_id, parts.unix_ms, parts.worker_id, parts.sequence);
    snow.push_back({{"customer_id", p.customer},
                    {"shard", p.shard},
                    {"order_id", p.order_id},
                    {"unix_ms", parts.unix_ms},
                    {"worker_id", parts.worker_id},
                    {"sequence", parts.sequence}});
  }
  std::vector<std::int64_t> all_a = snowflake[0].bulk;
  all_a.push_back(snowflake[0].order_id);
  std::vector<std::int64_t> all_b = snowflake[1].bulk;
  all_b.push_back(snowflake[1].order_id);
  const std::size_t snowflake_common = Common(all_a, all_b);
  r.text += fmt::format("-> {} more orders on each shard: {} numbers used twice.\n", Thousands(kBulkOrders),
                        Thousands(static_cast<std::int64_t>(snowflake_common)));
  r.Expect("ids.snowflake_unique", snowflake_common == 0 && snowflake[0].order_id != snowflake[1].order_id,
           fmt::format("{} ids shared between the shards (of {} each)", snowflake_common, kBulkOrders + 1));

  // 3. The loaded orders: every order_id is unique across all shards, and an
  // order_id decodes to its own ordered_at.
  pqxx::nontransaction ref{lab.Reference()};
  const auto counts = ref.exec1("SELECT count(*), count(DISTINCT order_id) FROM orders");
  const auto rows = counts[0].as<std::int64_t>();
  const auto distinct = counts[1].as<std::int64_t>();
  r.Expect("ids.loaded_orders_unique", rows == distinct && rows > 0,
           fmt::format("{} orders, {} distinct order_id values (reference server)", rows, distinct));
  const auto sample = ref.exec_params1(
      "SELECT order_id, (extract(epoch FROM ordered_at) * 1000)::bigint FROM orders WHERE customer_id = $1 "
      "ORDER BY ordered_at DESC LIMIT 1",
      4242);
  const auto sample_id = sample[0].as<std::int64_t>();
  const auto sample_ms = sample[1].as<std::int64_t>();
  const SnowflakeParts sample_parts = DecodeSnowflake(sample_id, kLabIdEpochMs);
  r.Expect("ids.loaded_id_decodes_to_its_time", sample_parts.unix_ms == sample_ms,
           fmt::format("order {} decodes to {} ms, ordered_at is {} ms", sample_id, sample_parts.unix_ms, sample_ms));
  r.text += fmt::format(
      "the loaded data: {} orders, {} distinct order_id values across the shards; e.g. customer 4242's latest "
      "order {} decodes to {} (worker {}) = its ordered_at\n",
      Thousands(rows), Thousands(distinct), sample_id, FormatTimestamp(sample_parts.unix_ms / 1000),
      sample_parts.worker_id);

  r.figures = {
      {"identity",
       {{"orders",
         Json::array(
             {{{"customer_id", identity[0].customer}, {"shard", identity[0].shard}, {"order_id", identity[0].order_id}},
              {{"customer_id", identity[1].customer},
               {"shard", identity[1].shard},
               {"order_id", identity[1].order_id}}})},
        {"bulk_per_shard", kBulkOrders},
        {"ids_used_twice", identity_common}}},
      {"snowflake",
       {{"orders", snow},
        {"epoch_unix_ms", kLabIdEpochMs},
        {"worker_ids", instances.how},
        {"bulk_per_shard", kBulkOrders},
        {"ids_used_twice", snowflake_common}}},
      {"loaded", {{"orders", rows}, {"distinct_order_ids", distinct}}}};
  return r;
}

}  // namespace shardkit::lab
