// A service keyed by tenant_id of type bigint, uuid or text, with only
// shardkit's own migrations and its own: rows written through
// Cluster::Execute land on the shard owning their key's bucket, routed,
// restricted and scattered reads equal the unsharded reference server's
// answers, Transact takes the key, and verify finds nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "shardkit/cluster.hpp"
#include "shardkit/schema/migrate.hpp"
#include "shardkit/schema/verify.hpp"
#include "support/reference_answer.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

// The application's one migration: plans (a reference table), tenants and their invoices.
MigrationSet TenantSchema(ShardKeyType type) {
  const std::string sql = fmt::format(R"(-- shardkit-migration: targets = shard, reference
CREATE TABLE plans (plan_id integer PRIMARY KEY, plan text NOT NULL);
INSERT INTO plans VALUES (0, 'free'), (1, 'team'), (2, 'enterprise');
SELECT shardkit_reference_table('plans');
CREATE TABLE tenants (
  tenant_id {0} PRIMARY KEY,
  bucket    smallint NOT NULL CHECK (bucket = {1}(tenant_id)),
  name      text NOT NULL,
  plan_id   integer NOT NULL DEFAULT 0
);
CREATE TABLE invoices (
  tenant_id  {0} NOT NULL,
  bucket     smallint NOT NULL CHECK (bucket = {1}(tenant_id)),
  invoice_id bigint NOT NULL,
  amount     numeric(12,2) NOT NULL,
  status     text NOT NULL DEFAULT 'open',
  PRIMARY KEY (tenant_id, invoice_id)
);
SELECT shardkit_shard_table('tenants');                -- the key found from the CHECK
SELECT shardkit_shard_table('invoices', 'tenant_id');  -- or named
)",
                                      SqlTypeName(type), BucketFunction(type));
  return MigrationSet::FromMigrations({ParseMigration("001_invoicing.sql", sql)});
}

struct KeyCase {
  ShardKeyType type;
  // The i-th tenant's key as text.
  std::string (*key)(int i);
};

std::string BigintKey(int i) {
  // Small, negative and beyond 32 bits: both halves of bigint's rule.
  const std::int64_t values[] = {i, -i - 1, (std::int64_t{1} << 40) + i * 7919, std::int64_t{9'000'000'000'000} * i};
  return std::to_string(values[i % 4]);
}
std::string UuidKey(int i) {
  return fmt::format("0189a0c2-{:04x}-7abc-8def-{:012x}", i, static_cast<std::uint64_t>(i) * 2654435761U);
}
std::string TextKey(int i) {
  const char* kinds[] = {"acme-{}", "Org {}", "tenant/{}/eu", "ünïcode-{}"};
  return fmt::format(fmt::runtime(kinds[i % 4]), i);
}

std::string Name(const ::testing::TestParamInfo<KeyCase>& info) {
  return std::string(SqlTypeName(info.param.type));
}

class SqlKeyTypes : public ::testing::TestWithParam<KeyCase> {
 protected:
  static constexpr int kTenants = 90;

  void SetUp() override {
    const std::string type{SqlTypeName(GetParam().type)};
    scratch_ = std::make_unique<test::ScratchCluster>(
        "sql_keys_" + type, test::ScratchOptions()
                                .Shards(3)
                                .Directory(test::UnevenSplit(3))
                                .Migrations({MigrationSet::Library(), TenantSchema(GetParam().type)}));
    // The local cluster's configuration declares the lab's books; this service has none.
    config_ = scratch_->Config();
    config_.reference_tables.clear();
    cluster_ = Cluster::Open(config_);
    pqxx::connection reference{scratch_->ReferenceDsn().Reveal()};
    pqxx::work ref{reference};
    for (int i = 0; i < kTenants; ++i) {
      const std::string key = GetParam().key(i);
      const std::string name = fmt::format("tenant {}", i % 30);  // names repeat: GROUP BY merges across shards
      const std::string plan = std::to_string(i % 3);
      EXPECT_EQ(
          cluster_->Execute("INSERT INTO tenants (tenant_id, name, plan_id) VALUES ($1, $2, $3)", {key, name, plan})
              .affected,
          1U);
      ref.exec_params(
          fmt::format("INSERT INTO tenants VALUES ($1, {}($1::{}), $2, $3)", BucketFunction(GetParam().type), type),
          key, name, plan);
      for (int n = 1; n <= 1 + i % 4; ++n) {
        const std::string amount = fmt::format("{}.{:02}", 10 * n + i, i % 100);
        EXPECT_EQ(cluster_
                      ->Execute("INSERT INTO invoices (tenant_id, invoice_id, amount) VALUES ($1, $2, $3)",
                                {key, std::to_string(n), amount})
                      .affected,
                  1U);
        ref.exec_params(
            fmt::format("INSERT INTO invoices VALUES ($1, {}($1::{}), $2, $3)", BucketFunction(GetParam().type), type),
            key, n, amount);
      }
    }
    ref.commit();
  }

  void ExpectAsReference(const std::string& sql, const SqlParams& params = {}) {
    SCOPED_TRACE(sql);
    const SqlResult got = cluster_->Execute(sql, params);
    const test::ReferenceAnswer want = test::AnswerOnReference(*scratch_, sql, params);
    EXPECT_EQ(got.columns, want.columns);
    EXPECT_EQ(got.rows, want.rows) << got.plan.Describe();
    EXPECT_FALSE(want.rows.empty());
  }

  std::unique_ptr<test::ScratchCluster> scratch_;
  ClusterConfig config_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_P(SqlKeyTypes, RowsLandOnTheOwnerOfTheirKeysBucket) {
  const std::string type{SqlTypeName(GetParam().type)};
  std::int64_t total = 0;
  for (int s = 0; s < scratch_->ShardCount(); ++s) {
    pqxx::connection c{scratch_->ShardDsn(s).Reveal()};
    pqxx::work tx{c};
    tx.exec0("SET LOCAL shardkit.buckets = 'all'");
    for (const char* table : {"tenants", "invoices"}) {
      for (const auto& row : tx.exec(fmt::format("SELECT tenant_id::text, bucket FROM {}", table))) {
        const auto key = ShardKey::Parse(GetParam().type, row[0].c_str());
        ASSERT_TRUE(key) << row[0].c_str();
        EXPECT_EQ(ToInt(key->bucket()), row[1].as<int>()) << table << " " << row[0].c_str();
        EXPECT_EQ(scratch_->Directory().ShardOf(key->bucket()), ShardId{s}) << table << " " << row[0].c_str();
        ++total;
      }
    }
  }
  const auto reference =
      test::AnswerOnReference(*scratch_, "SELECT (SELECT count(*) FROM tenants) + (SELECT count(*) FROM invoices)", {});
  EXPECT_EQ(std::to_string(total), reference.rows.at(0).at(0).value());
  // The catalog knows each table's key.
  pqxx::connection c{scratch_->ShardDsn(0).Reveal()};
  pqxx::read_transaction tx{c};
  EXPECT_EQ(tx.exec1("SELECT string_agg(DISTINCT key_column, ',') FROM shardkit_sharded_tables "
                     "WHERE table_name IN ('tenants'::regclass, 'invoices'::regclass)")[0]
                .as<std::string>(),
            "tenant_id");
}

TEST_P(SqlKeyTypes, ReadsAreTheReferenceServersAnswers) {
  ExpectAsReference("SELECT count(*), sum(amount), min(amount), max(amount) FROM invoices");
  ExpectAsReference("SELECT tenant_id, count(*), sum(amount) FROM invoices GROUP BY tenant_id ORDER BY tenant_id");
  ExpectAsReference("SELECT count(DISTINCT tenant_id) FROM invoices");
  ExpectAsReference(
      "SELECT t.name, sum(i.amount) AS billed FROM tenants t JOIN invoices i ON i.tenant_id = t.tenant_id "
      "GROUP BY t.name ORDER BY billed DESC, t.name LIMIT 7");
  ExpectAsReference("SELECT tenant_id, invoice_id FROM invoices ORDER BY amount DESC, tenant_id, invoice_id LIMIT 9");
  // plans is a reference table by its registration alone (no [sql] reference_tables).
  ExpectAsReference(
      "SELECT p.plan, count(*), sum(i.amount) FROM invoices i JOIN tenants t USING (tenant_id) "
      "JOIN plans p USING (plan_id) GROUP BY p.plan ORDER BY p.plan");
  for (const int i : {0, 1, 2, 3, 41, 89}) {
    const std::string key = GetParam().key(i);
    const std::string sql = "SELECT invoice_id, amount, status FROM invoices WHERE tenant_id = $1 ORDER BY invoice_id";
    EXPECT_EQ(cluster_->Explain(sql, {key}).kind, SqlPlanInfo::Kind::kRouted);
    ExpectAsReference(sql, {key});
    // A key list: only its keys' shards.
    const std::string listed = "SELECT count(*), sum(amount) FROM invoices WHERE tenant_id IN ($1, $2)";
    const SqlPlanInfo plan = cluster_->Explain(listed, {key, GetParam().key(i + 5)});
    EXPECT_LE(plan.shard_count, 2);
    ExpectAsReference(listed, {key, GetParam().key(i + 5)});
  }
}

// The merges over a key that is not an integer: every grouping by, ordering
// by and aggregate of the key (uuid's order, text's collation) next to the
// other shapes, generated. Each answer equals the reference server's (in
// order: each ORDER BY orders completely); a refusal is allowed, a wrong
// answer or any other error is not.
TEST_P(SqlKeyTypes, GeneratedStatementsAreTheReferenceServersAnswers) {
  const bool has_min = GetParam().type != ShardKeyType::kUuid;  // PostgreSQL 15 has no min(uuid)
  std::vector<std::string> measures = {"count(*)",
                                       "sum(amount)",
                                       "min(amount), max(amount)",
                                       "avg(amount)",
                                       "count(DISTINCT tenant_id)",
                                       "count(DISTINCT amount)"};
  if (has_min) measures.emplace_back("min(tenant_id), max(tenant_id)");
  const std::vector<std::string> groupings = {"tenant_id", "status", "tenant_id, status", "bucket",
                                              "left(tenant_id::text, 2)"};
  std::vector<std::string> statements;
  for (const std::string& measure : measures) {
    statements.push_back(fmt::format("SELECT {} FROM invoices", measure));
    statements.push_back(fmt::format("SELECT {} FROM invoices WHERE invoice_id > 1", measure));
    for (const std::string& group : groupings) {
      for (const char* tail : {"", " LIMIT 5", " LIMIT 4 OFFSET 3", " DESC LIMIT 6"}) {
        // DESC applies to the last grouping column: still a complete order.
        statements.push_back(
            fmt::format("SELECT {0}, {1} FROM invoices GROUP BY {0} ORDER BY {0}{2}", group, measure, tail));
      }
    }
  }
  for (const std::string& s : std::vector<std::string>{
           "SELECT DISTINCT tenant_id FROM invoices ORDER BY tenant_id",
           "SELECT DISTINCT tenant_id FROM invoices ORDER BY tenant_id DESC LIMIT 7",
           "SELECT tenant_id, invoice_id FROM invoices ORDER BY tenant_id, invoice_id LIMIT 11 OFFSET 5",
           "SELECT tenant_id, invoice_id, amount FROM invoices ORDER BY amount, tenant_id DESC, invoice_id LIMIT 8",
           "SELECT tenant_id, sum(amount) FROM invoices GROUP BY tenant_id HAVING count(*) > 2 ORDER BY tenant_id",
           "SELECT tenant_id, sum(amount) AS s FROM invoices GROUP BY tenant_id ORDER BY s DESC, tenant_id LIMIT 5",
           "SELECT t.tenant_id, t.name, count(*) FROM tenants t JOIN invoices i USING (tenant_id) "
           "GROUP BY t.tenant_id, t.name ORDER BY t.tenant_id",
           "SELECT p.plan, count(DISTINCT t.tenant_id) FROM tenants t JOIN plans p USING (plan_id) "
           "GROUP BY p.plan ORDER BY p.plan",
           "SELECT t.tenant_id FROM tenants t LEFT JOIN invoices i ON i.tenant_id = t.tenant_id AND "
           "i.invoice_id > 3 WHERE i.tenant_id IS NULL ORDER BY t.tenant_id",
           "SELECT tenant_id FROM tenants EXCEPT SELECT tenant_id FROM invoices WHERE invoice_id > 2 ORDER BY 1",
           "SELECT tenant_id FROM invoices WHERE invoice_id = 3 UNION SELECT tenant_id FROM invoices "
           "WHERE invoice_id = 4 ORDER BY 1",
           "SELECT count(*) FROM (SELECT DISTINCT tenant_id FROM invoices) d",
       }) {
    statements.push_back(s);
  }
  int answered = 0;
  std::vector<std::string> refused;
  for (const std::string& sql : statements) {
    SCOPED_TRACE(sql);
    const test::ReferenceAnswer want = test::AnswerOnReference(*scratch_, sql, {});
    try {
      const SqlResult got = cluster_->Execute(sql);
      EXPECT_EQ(got.columns, want.columns);
      EXPECT_EQ(got.rows, want.rows) << got.plan.Describe();
      ++answered;
    } catch (const SqlError& e) {
      if (e.kind() != SqlError::Kind::kRefused) ADD_FAILURE() << e.what();
      refused.push_back(sql + ": " + e.reason());
    }
  }
  fmt::print("{} key: {} of {} statements answered, {} refused\n", SqlTypeName(GetParam().type), answered,
             statements.size(), refused.size());
  for (const std::string& r : refused) fmt::print("  refused: {}\n", r);
  EXPECT_GE(answered * 10, static_cast<int>(statements.size()) * 9) << "more than a tenth refused";
}

TEST_P(SqlKeyTypes, WritesAndTransactionsFollowTheKey) {
  const std::string type{SqlTypeName(GetParam().type)};
  const std::string key = GetParam().key(7);
  const SqlResult updated =
      cluster_->Execute("UPDATE invoices SET status = 'paid' WHERE tenant_id = $1 AND invoice_id = 1", {key});
  EXPECT_EQ(updated.affected, 1U);
  const ShardKey parsed = *ShardKey::Parse(GetParam().type, key);
  EXPECT_EQ(updated.plan.key, parsed);
  EXPECT_EQ(updated.plan.key_column, "tenant_id");
  const std::string moved = cluster_->Transact(parsed, [&](SqlTransaction& tx) {
    tx.Execute("INSERT INTO invoices (tenant_id, invoice_id, amount) VALUES ($1, 99, 1.50)", {key});
    return tx.Execute("SELECT count(*) FROM invoices WHERE tenant_id = $1", {key}).rows.at(0).at(0).value();
  });
  EXPECT_EQ(moved, std::to_string(1 + 7 % 4 + 1));
  pqxx::connection reference{scratch_->ReferenceDsn().Reveal()};
  pqxx::work ref{reference};
  ref.exec_params(fmt::format("UPDATE invoices SET status = 'paid' WHERE tenant_id = $1::{} AND invoice_id = 1", type),
                  key);
  ref.exec_params(
      fmt::format("INSERT INTO invoices VALUES ($1, {}($1::{}), 99, 1.50)", BucketFunction(GetParam().type), type),
      key);
  ref.commit();
  ExpectAsReference("SELECT status, count(*), sum(amount) FROM invoices GROUP BY status ORDER BY status");
  // Another key inside the transaction: refused, naming the key column.
  try {
    cluster_->Transact(parsed, [&](SqlTransaction& tx) {
      (void)tx.Execute("SELECT * FROM invoices WHERE tenant_id = $1", {GetParam().key(8)});
    });
    if (ShardKey::Parse(GetParam().type, GetParam().key(8))->bucket() != parsed.bucket()) ADD_FAILURE() << "ran";
  } catch (const SqlError& e) {
    EXPECT_NE(std::string(e.what()).find("tenant_id"), std::string::npos) << e.what();
  }
  // A malformed key parameter: refused before any server sees it.
  if (GetParam().type != ShardKeyType::kText) {
    try {
      (void)cluster_->Execute("SELECT * FROM invoices WHERE tenant_id = $1", {"12 monkeys"});
      ADD_FAILURE() << "ran";
    } catch (const SqlError& e) {
      EXPECT_NE(e.reason().find(fmt::format("is not a valid tenant_id ({})", type)), std::string::npos) << e.what();
    }
  }
}

TEST_P(SqlKeyTypes, VerifyFindsNothing) {
  VerifyOptions options;
  options.mirrored_tables = {"tenants", "invoices"};
  const VerifyReport report = VerifyCluster(config_, options);
  std::string findings;
  for (const auto& f : report.findings) findings += f.detail + "\n";
  EXPECT_TRUE(report.Ok()) << findings;
  // The registered reference table is compared without being configured.
  EXPECT_EQ(report.reference_tables, std::vector<std::string>{"plans"});
  scratch_->ExecOnShard(1, "UPDATE plans SET plan = 'pro' WHERE plan_id = 1");
  const VerifyReport differs = VerifyCluster(config_, options);
  EXPECT_FALSE(differs.Ok());
  bool named = false;
  for (const auto& f : differs.findings) named = named || f.detail.find("plans") != std::string::npos;
  EXPECT_TRUE(named);
}

INSTANTIATE_TEST_SUITE_P(EveryKeyType, SqlKeyTypes,
                         ::testing::Values(KeyCase{ShardKeyType::kInt8, BigintKey},
                                           KeyCase{ShardKeyType::kUuid, UuidKey},
                                           KeyCase{ShardKeyType::kText, TextKey}),
                         Name);

}  // namespace
}  // namespace shardkit
