// Group keys of every type and the session settings that change what a
// statement means, against the reference server.
//
// The rows are spread so that values equal for PostgreSQL but printed
// differently ('1 mon' and '30 days', 1.5 and 1.50, 'a' and 'a ' as bpchar,
// -0 and 0) land on different shards. Types whose equality shardkit knows
// must give the reference's groups (checked by the server's own equality:
// each merged group's count is the reference's count of rows equal to its
// key); the others must be refused by type when the shards answer.
//
// The shards' scratch databases default to settings that change how the
// same statement text is read (DateStyle SQL, DMY; standard_conforming_strings
// off; bytea_output escape; transform_null_equals; array_nulls off; another
// text search configuration, search_path and time zone abbreviations), and
// one shard's DSN asks for DateStyle SQL, DMY itself: the pools must pin all
// of them, and connections that are not a pool's must fail the check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/pg/result_values.hpp"
#include "shardkit/pg/session.hpp"
#include "shardkit/pool/pool.hpp"
#include "shardkit/queries/aggregate_query.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/queries/scatter_merge.hpp"
#include "shardkit/routing/directory.hpp"
#include "shardkit/routing/resolver.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

using Classes = std::vector<std::vector<const char*>>;

// Each column's values: classes of values equal for the server, printed
// differently. Row i takes class i % classes, variant (i / classes) % size.
struct ColumnData {
  const char* name;
  const char* type;  // as declared, and to cast a key back for the server's equality
  Classes classes;
};

const std::vector<ColumnData>& Columns() {
  static const std::vector<ColumnData> columns = {
      {"iv", "interval", {{"1 mon", "30 days", "720:00:00"}, {"1 day", "24:00:00"}, {"2 hours", "120 minutes"}}},
      {"bp", "bpchar", {{"a", "a ", "a   "}, {"b", "b  "}, {" c", " c "}}},
      {"c3", "char(3)", {{"x"}, {"yy"}, {"zzz"}}},
      {"num", "numeric", {{"1.5", "1.50", "1.500"}, {"0", "0.0", "-0.00"}, {"2"}, {"-7.25", "-7.250"}}},
      {"f8", "float8", {{"0", "-0"}, {"NaN"}, {"1.25"}, {"-3"}, {"Infinity"}}},
      {"js", "jsonb", {{"{\"k\": 0}", "{\"k\": 0.00}"}, {"{\"a\": 1, \"b\": 2}", "{\"b\": 2, \"a\": 1}"}}},
      {"na", "numeric[]", {{"{1.5}", "{1.50}"}, {"{2}"}}},
      {"d",
       "date",
       {{"0044-03-15 BC"},
        {"0001-01-01 BC"},
        {"0001-01-01"},
        {"2020-03-04"},
        {"10000-01-01"},
        {"infinity"},
        {"-infinity"},
        {"NULL"}}},
      {"ts",
       "timestamp",
       {{"0044-03-15 12:00:00 BC"},
        {"2020-01-01 00:00:00"},
        {"2020-01-01 00:00:00.5"},
        {"10000-01-01 00:00:00"},
        {"infinity"},
        {"-infinity"}}},
      {"by", "bytea", {{"\\x00"}, {"\\x0102"}, {"\\xff"}, {"\\x"}}},
      {"u",
       "uuid",
       {{"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
        {"{00000000-0000-0000-0000-000000000001}", "00000000000000000000000000000001"}}},
      {"t", "text", {{"a"}, {"b"}, {"A"}, {"\xc3\xa4"}, {"back\\slash"}}},
  };
  return columns;
}

constexpr int kRows = 360;
constexpr const char* kTable = "merge_keys";

// Settings of the shards' databases (never of the reference's).
const std::vector<std::string> kShardDatabaseSettings = {
    "DateStyle = 'SQL, DMY'",
    "standard_conforming_strings = off",
    "bytea_output = 'escape'",
    "transform_null_equals = on",
    "array_nulls = off",
    "default_text_search_config = 'pg_catalog.simple'",
    "search_path = elsewhere, public",
    "timezone_abbreviations = 'India'",
    "IntervalStyle = 'sql_standard'",
    "TimeZone = 'Asia/Kolkata'",
};

std::string ValueSql(pqxx::transaction_base& tx, const ColumnData& c, int row) {
  const auto& cls = c.classes[static_cast<std::size_t>(row) % c.classes.size()];
  const std::string v = cls[(static_cast<std::size_t>(row) / c.classes.size()) % cls.size()];
  if (v == "NULL") return "NULL";
  return tx.quote(v) + "::" + c.type;
}

class MergeKeysPg : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("merge_keys_pgtest");
    const BucketDirectory directory = BucketDirectory::EvenSplit(cluster_->ShardCount());
    std::string columns;
    for (const auto& c : Columns()) columns += std::string(", ") + c.name + " " + c.type;
    const std::string create = std::string("CREATE TABLE ") + kTable +
                               " (id bigint NOT NULL, customer_id integer NOT NULL, bucket smallint NOT NULL"
                               "  CHECK (bucket = bucket_of(customer_id))" +
                               columns + ", PRIMARY KEY (customer_id, id))";
    std::vector<std::string> rows_per_server(static_cast<std::size_t>(cluster_->ShardCount()) + 1);
    {
      pqxx::connection reference{cluster_->ReferenceDsn().Reveal()};
      pqxx::nontransaction tx{reference};
      for (int i = 0; i < kRows; ++i) {
        const CustomerId customer{1000 + i * 37};
        std::string row = "(" + std::to_string(i) + ", " + std::to_string(ToInt(customer)) + ", " +
                          std::to_string(ToInt(BucketOf(customer)));
        for (const auto& c : Columns()) row += ", " + ValueSql(tx, c, i);
        row += ")";
        for (const std::size_t s :
             {static_cast<std::size_t>(ToInt(directory.ShardFor(customer))), rows_per_server.size() - 1}) {
          rows_per_server[s] += (rows_per_server[s].empty() ? "" : ", ") + row;
        }
      }
    }
    for (int s = 0; s <= cluster_->ShardCount(); ++s) {
      const bool reference = s == cluster_->ShardCount();
      pqxx::connection c{(reference ? cluster_->ReferenceDsn() : cluster_->ShardDsn(s)).Reveal()};
      pqxx::nontransaction tx{c};
      tx.exec(create);
      tx.exec(std::string("INSERT INTO ") + kTable + " VALUES " + rows_per_server[static_cast<std::size_t>(s)]);
      if (reference) continue;
      // A table of the same name in another schema: a shard that resolved
      // names by its database's search_path would read it instead.
      tx.exec(std::string("CREATE SCHEMA elsewhere; CREATE TABLE elsewhere.") + kTable + " (LIKE public." + kTable +
              ")");
      for (const auto& setting : kShardDatabaseSettings) {
        tx.exec("ALTER DATABASE " + tx.quote_name(cluster_->ShardDatabaseName(s)) + " SET " + setting);
      }
    }
    // The last shard's DSN asks for DMY dates itself.
    ClusterConfig config = cluster_->Config();
    Dsn& dsn = config.shards.back().dsn;
    if (!dsn.Reveal().starts_with("postgres")) {
      dsn = Dsn(dsn.Reveal() + " options='-c DateStyle=SQL,DMY -c bytea_output=escape'");
    }
    resolver_ = BucketShardResolver::FromConfig(config).release();
    scatter_ = new ScatterGather(*resolver_);
  }

  static void TearDownTestSuite() {
    delete scatter_;
    delete resolver_;
    delete cluster_;
  }

  static pqxx::result OnReference(const std::string& sql, const SqlParams& params = {}) {
    pqxx::connection c{cluster_->ReferenceDsn().Reveal()};
    pqxx::nontransaction tx{c};
    std::vector<const char*> raw;
    for (const auto& p : params) raw.push_back(p ? p->c_str() : nullptr);
    return tx.exec_params(sql, pqxx::prepare::make_dynamic_params(raw));
  }

  // The server's equality of two values of `type`.
  static bool EqualOnServer(const Value& a, const Value& b, const std::string& type) {
    if (a.IsNull() || b.IsNull()) return a.IsNull() && b.IsNull();
    return OnReference("SELECT $1::" + type + " = $2::" + type, {a.ToString(), b.ToString()})[0][0].as<bool>();
  }

  static std::string RefusalOf(const MergePlan& plan) {
    try {
      (void)ScatterMerge(*scatter_, plan);
    } catch (const UnmergeableQuery& e) {
      return e.what();
    }
    return "<merged>";
  }

  static inline test::ScratchCluster* cluster_ = nullptr;
  static inline BucketShardResolver* resolver_ = nullptr;
  static inline ScatterGather* scatter_ = nullptr;
};

// interval, jsonb, arrays and records: equal values print differently,
// so the merge refuses them as keys, by the type the shards report, with
// what to write instead; the advice gives the reference's groups.
TEST_F(MergeKeysPg, KeysWhoseTextIsNotOnePerValueAreRefusedByType) {
  struct Case {
    std::string expression;
    std::string type;
    std::string advice;
  };
  for (const Case& c : std::vector<Case>{{"iv", "interval", "justify_interval(x)::text"},
                                         {"js", "jsonb", "(x->>'k')::numeric"},
                                         {"na", "numeric[]", "element"},
                                         {"ARRAY[f8]", "double precision[]", "element"},
                                         {"ROW(num)", "record", "field"}}) {
    const std::string m = RefusalOf(AggregateQuery::From(kTable).GroupByExpr(c.expression, "k").Count("n").Plan());
    EXPECT_NE(m.find("merged column \"k\""), std::string::npos) << c.expression << ": " << m;
    EXPECT_NE(m.find(" " + c.type + " values"), std::string::npos) << c.expression << ": " << m;
    EXPECT_NE(m.find(c.advice), std::string::npos) << c.expression << ": " << m;
  }
  // Hand-written per-shard SQL is held to the same rule when its rows arrive.
  MergePlan own{std::string("SELECT iv AS k, count(*) AS n FROM ") + kTable + " GROUP BY iv"};
  own.Key("k").Count("n");
  EXPECT_NE(RefusalOf(own).find("interval values"), std::string::npos) << RefusalOf(own);

  // The advice: one text per interval value, so the reference's groups.
  const MergedResult justified = ScatterMerge(
      *scatter_, AggregateQuery::From(kTable).GroupByExpr("justify_interval(iv)::text", "k").Count("n").Plan());
  const auto reference_groups =
      OnReference(std::string("SELECT iv, count(*) FROM ") + kTable + " GROUP BY iv ORDER BY 2, 1");
  ASSERT_EQ(justified.rows.size(), reference_groups.size()) << justified.Format();
  EXPECT_EQ(justified.rows.size(), 3U);
  std::vector<std::int64_t> merged_counts;
  for (const auto& row : justified.rows) merged_counts.push_back(row[1].AsInt());
  std::sort(merged_counts.begin(), merged_counts.end());
  for (std::size_t i = 0; i < merged_counts.size(); ++i) {
    EXPECT_EQ(merged_counts[i], reference_groups[static_cast<pqxx::result::size_type>(i)][1].as<std::int64_t>());
  }
}

// Every accepted key type: the merge's groups are the server's. Checked by
// the server's equality: as many groups as GROUP BY gives, and each merged
// group's count is the count of rows equal to its key.
TEST_F(MergeKeysPg, AcceptedKeyTypesGroupByTheServersEquality) {
  for (const char* column : {"bp", "c3", "num", "f8", "d", "ts", "by", "u", "t"}) {
    std::string type;
    for (const auto& c : Columns()) {
      if (std::string(c.name) == column) type = c.type == std::string("char(3)") ? "bpchar" : c.type;
    }
    const MergedResult merged = ScatterMerge(*scatter_, AggregateQuery::From(kTable).GroupBy(column).Count("n").Plan());
    const auto groups =
        OnReference(std::string("SELECT count(*) FROM (SELECT 1 FROM ") + kTable + " GROUP BY " + column + ") g")[0][0]
            .as<std::size_t>();
    EXPECT_EQ(merged.rows.size(), groups) << column << "\n" << merged.Format();
    std::int64_t total = 0;
    for (const auto& row : merged.rows) {
      const std::string where =
          row[0].IsNull() ? std::string(column) + " IS NULL" : std::string(column) + " = $1::" + type;
      const SqlParams params = row[0].IsNull() ? SqlParams{} : SqlParams{row[0].ToString()};
      const auto expected = OnReference(std::string("SELECT count(*) FROM ") + kTable + " WHERE " + where, params)[0][0]
                                .as<std::int64_t>();
      EXPECT_EQ(row[1].AsInt(), expected) << column << " = " << row[0].ToString();
      total += row[1].AsInt();
    }
    EXPECT_EQ(total, kRows) << column;
  }
}

// ORDER BY, MIN and MAX in the server's order: BC dates, years past 9999,
// infinities, bpchar's trailing blanks, -0 and NaN, bytes.
TEST_F(MergeKeysPg, OrderedTypesOrderAsTheServerDoes) {
  for (const char* column : {"bp", "c3", "num", "f8", "d", "ts", "by", "u", "t"}) {
    std::string type;
    for (const auto& c : Columns()) {
      if (std::string(c.name) == column) type = c.type == std::string("char(3)") ? "bpchar" : c.type;
    }
    for (const auto direction : {SortDirection::kAsc, SortDirection::kDesc}) {
      const bool desc = direction == SortDirection::kDesc;
      const MergedResult merged = ScatterMerge(
          *scatter_, AggregateQuery::From(kTable).GroupBy(column).Count("n").OrderBy(column, direction).Plan());
      const ResultSet expected = ReadResultSet(OnReference(std::string("SELECT ") + column + ", count(*) AS n FROM " +
                                                           kTable + " GROUP BY 1 ORDER BY 1" + (desc ? " DESC" : "")));
      ASSERT_EQ(merged.rows.size(), expected.rows.size()) << column;
      for (std::size_t i = 0; i < merged.rows.size(); ++i) {
        EXPECT_TRUE(EqualOnServer(merged.rows[i][0], expected.rows[i][0], type))
            << column << (desc ? " DESC" : "") << " row " << i << ": merged " << merged.rows[i][0].ToString()
            << ", reference " << expected.rows[i][0].ToString();
        EXPECT_EQ(merged.rows[i][1].AsInt(), expected.rows[i][1].AsInt()) << column << " row " << i;
      }
    }
  }
  // PostgreSQL has min and max for these (not for bytea or uuid).
  for (const char* column : {"bp", "num", "f8", "d", "ts", "t"}) {
    std::string type;
    for (const auto& c : Columns()) {
      if (std::string(c.name) == column) type = c.type;
    }
    const MergedResult merged =
        ScatterMerge(*scatter_, AggregateQuery::From(kTable).Min(column, "lo").Max(column, "hi").Plan());
    const ResultSet expected =
        ReadResultSet(OnReference(std::string("SELECT min(") + column + "), max(" + column + ") FROM " + kTable));
    ASSERT_EQ(merged.rows.size(), 1U);
    EXPECT_TRUE(EqualOnServer(merged.rows[0][0], expected.rows[0][0], type))
        << "min(" << column << "): merged " << merged.rows[0][0].ToString() << ", reference "
        << expected.rows[0][0].ToString();
    EXPECT_TRUE(EqualOnServer(merged.rows[0][1], expected.rows[0][1], type))
        << "max(" << column << "): merged " << merged.rows[0][1].ToString() << ", reference "
        << expected.rows[0][1].ToString();
  }
}

// The same statement text on shards whose databases (and one DSN) default to
// settings that read it differently: the pools pin them, so every count is
// the reference's. The shards' own sessions answer otherwise (the probe can
// fail).
TEST_F(MergeKeysPg, SettingsThatChangeAStatementsMeaningArePinned) {
  struct Probe {
    std::string what;
    std::string condition;
    SqlParams params;
    // The unpinned check reads public's table, unless the probe is the search_path.
    std::string unpinned_table = std::string("public.") + kTable;
  };
  const std::vector<Probe> probes = {
      {"DateStyle DMY, literal", "d = '03/04/2020'", {}},
      {"DateStyle DMY, parameter", "d = $1", {"03/04/2020"}},
      {"standard_conforming_strings", "t = 'back\\slash'", {}},
      {"transform_null_equals", "d = NULL", {}},
      {"array_nulls", "('{NULL}'::text[])[1] IS NULL", {}},
      {"default_text_search_config", "to_tsvector('running') @@ to_tsquery('run')", {}},
      {"timezone_abbreviations", "'2020-01-01 00:00 IST'::timestamptz = '2019-12-31 22:00:00+00'", {}},
      {"IntervalStyle input", "'-1 2:00:00'::interval = '-1 day +2 hours'::interval", {}},
      {"search_path", "true", {}, kTable},
      {"bytea_output, a key's text", "by::text = '\\x0102'", {}},
  };
  for (const Probe& p : probes) {
    const MergedResult merged =
        ScatterMerge(*scatter_, AggregateQuery::From(kTable).Where(p.condition).Count("n").Plan(), p.params);
    const auto expected =
        OnReference(std::string("SELECT count(*) FROM ") + kTable + " WHERE " + p.condition, p.params)[0][0]
            .as<std::int64_t>();
    EXPECT_EQ(merged.rows.at(0).at(0).AsInt(), expected) << p.what << ": " << p.condition;

    // The shards' own sessions (their databases' settings) give another answer.
    std::int64_t unpinned = 0;
    for (int s = 0; s < cluster_->ShardCount(); ++s) {
      pqxx::connection c{cluster_->ShardDsn(s).Reveal()};
      pqxx::nontransaction tx{c};
      std::vector<const char*> raw;
      for (const auto& v : p.params) raw.push_back(v ? v->c_str() : nullptr);
      unpinned += tx.exec_params("SELECT count(*) FROM " + p.unpinned_table + " WHERE " + p.condition,
                                 pqxx::prepare::make_dynamic_params(raw))[0][0]
                      .as<std::int64_t>();
    }
    EXPECT_NE(unpinned, expected) << p.what << ": the probe does not tell the settings apart";
  }
  // bytea keys print in one format on every shard: one group per value.
  const MergedResult bytes = ScatterMerge(*scatter_, AggregateQuery::From(kTable).GroupBy("by").Count("n").Plan());
  EXPECT_EQ(bytes.rows.size(), 4U) << bytes.Format();
}

// Every pooled connection runs with every pinned value; a connection that is
// not a pool's (here: the databases' own settings) fails the check, naming
// the shard, the setting and both values.
TEST_F(MergeKeysPg, ConnectionsWithOtherSettingsAreRefusedNamingTheSetting) {
  for (ConnectionPool& pool : resolver_->AllShards()) {
    auto lease = pool.Acquire();
    const auto facts = pool.Facts();
    ASSERT_NE(facts, nullptr);
    for (const auto& [name, value] : PinnedSettings({})) {
      EXPECT_TRUE(SameSettingValue(facts->Setting(name), value))
          << "shard " << pool.Shard() << ": " << name << " = " << facts->Setting(name) << ", pinned " << value;
    }
    EXPECT_EQ(facts->server_encoding, "UTF8");
  }
  EXPECT_NO_THROW(CheckMergeAssumptions(*resolver_));

  pqxx::connection raw{cluster_->ShardDsn(1).Reveal()};
  const SessionFacts facts = ReadSessionFacts(raw, ShardId{1});
  EXPECT_EQ(facts.Setting("bytea_output"), "escape");
  try {
    VerifyPinnedSettings(facts, SessionChoices{}, ShardId{1});
    ADD_FAILURE() << "a session in DateStyle SQL, DMY passed";
  } catch (const ShardError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.shard(), ShardId{1});
    EXPECT_NE(m.find("shard 1: the server runs this connection with DateStyle = 'SQL, DMY', but shardkit pinned "
                     "'ISO, MDY'"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("connection pooler"), std::string::npos) << m;
  }
  try {
    CheckMergeAssumptions(raw, ShardId{1});
    ADD_FAILURE() << "the merge check passed a session in DateStyle SQL, DMY";
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("DateStyle"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardkit
