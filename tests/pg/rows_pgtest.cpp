// pg::Rows against a real server's results: every value reads as libpqxx
// reads the same statement's pqxx::result (the text, NULL, each type the
// code base converts to, the errors of a NULL or malformed value), columns
// by number and name (an unknown name refused as libpqxx refuses it), and a
// result shared by copies, rows and fields outliving the Rows they came from.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "shardkit/core/bucket.hpp"
#include "shardkit/ids/uuidv7.hpp"
#include "shardkit/pg/rows.hpp"
#include "support/test_cluster.hpp"

namespace shardkit {
namespace {

// One column of each type the code base reads, a NULL of each, and values
// at the edges of their types.
constexpr const char* kTypes = R"(
  SELECT 7::smallint AS small, '-2147483648'::int AS int4, 9223372036854775807::bigint AS int8,
         true AS yes, false AS no, 1.5::real AS real4, 0.1::float8 AS float8, 'NaN'::float8 AS nan,
         '-12.3400'::numeric AS num, 'text é'::text AS txt, 'ab  '::char(4) AS bpchar, ''::text AS empty,
         '2024-02-29'::date AS day, '2024-02-29 12:34:56.789+00'::timestamptz AS ts,
         '0191e1a4-0c49-7cc0-8a2b-000000000001'::uuid AS id, '{1,NULL,3}'::int[] AS arr,
         '{"a": [1, 2]}'::jsonb AS doc, '\x00ff'::bytea AS bin, 4242 AS customer, 44 AS bucket,
         NULL::int AS null_int, NULL::text AS null_text, NULL::bool AS null_bool, NULL::float8 AS null_float,
         NULL::bigint AS null_int8, 'abc'::text AS "MixedCase")";

class RowsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new test::ScratchCluster("rows_pgtest", test::ScratchOptions().Shards(1).Unmigrated());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    conn_ = PQconnectdb(cluster_->ReferenceDsn().Reveal().c_str());
    ASSERT_EQ(PQstatus(conn_), CONNECTION_OK) << PQerrorMessage(conn_);
    pqxx_ = std::make_unique<pqxx::connection>(cluster_->ReferenceDsn().Reveal());
  }
  void TearDown() override { PQfinish(conn_); }

  // The statement's rows through libpq straight into pg::Rows.
  pg::Rows Exec(const std::string& sql) {
    PGresult* result = PQexec(conn_, sql.c_str());
    const auto status = PQresultStatus(result);
    EXPECT_TRUE(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) << PQresultErrorMessage(result);
    return pg::Rows(result);
  }
  // The same statement through libpqxx.
  pqxx::result Expected(const std::string& sql) {
    pqxx::nontransaction tx{*pqxx_};
    return tx.exec(sql);
  }

  static test::ScratchCluster* cluster_;
  PGconn* conn_ = nullptr;
  std::unique_ptr<pqxx::connection> pqxx_;
};

test::ScratchCluster* RowsTest::cluster_ = nullptr;

// The exception's type when fn throws, "" when it does not.
template <typename Fn>
std::string Thrown(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return typeid(e).name() + std::string(": ") + e.what();
  }
  return "";
}

// Equal values (NaN equal to NaN).
template <typename T>
bool Same(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
  } else {
    return a == b;
  }
}
template <typename T>
bool Same(const std::optional<T>& a, const std::optional<T>& b) {
  return a.has_value() == b.has_value() && (!a || Same(*a, *b));
}

// Every conversion of one field, by both libraries: the values or the
// exceptions (type and message) must be the same.
template <typename T>
void ExpectSameAs(const pg::Field& ours, const pqxx::field& theirs) {
  SCOPED_TRACE(std::string(theirs.name()) + " as " + typeid(T).name());
  const std::string our_error = Thrown([&] { (void)ours.as<T>(); });
  EXPECT_EQ(our_error, Thrown([&] { (void)theirs.as<T>(); }));
  if (our_error.empty()) {
    EXPECT_TRUE(Same(ours.as<T>(), theirs.as<T>()));
  }
  // libpqxx here has no as<std::optional<T>>: NULL is nullopt, else as<T>().
  const auto their_optional = [&] { return theirs.is_null() ? std::nullopt : std::optional<T>(theirs.as<T>()); };
  const std::string our_optional_error = Thrown([&] { (void)ours.as<std::optional<T>>(); });
  EXPECT_EQ(our_optional_error, Thrown(their_optional));
  if (our_optional_error.empty()) {
    EXPECT_TRUE(Same(ours.as<std::optional<T>>(), their_optional()));
  }
  T ours_to{};
  T theirs_to{};
  const std::string to_error = Thrown([&] { (void)ours.to(ours_to); });
  EXPECT_EQ(to_error, Thrown([&] { (void)theirs.to(theirs_to); }));
  if (to_error.empty()) {
    EXPECT_EQ(ours.to(ours_to), theirs.to(theirs_to));
    EXPECT_TRUE(Same(ours_to, theirs_to));
  }
}

TEST_F(RowsTest, EveryFieldReadsAsLibpqxxReadsIt) {
  const pg::Rows rows = Exec(kTypes);
  const pqxx::result expected = Expected(kTypes);
  ASSERT_EQ(rows.size(), expected.size());
  ASSERT_EQ(rows.size(), 1U);
  ASSERT_EQ(rows.columns(), expected.columns());
  for (pqxx::row_size_type c = 0; c < rows.columns(); ++c) {
    EXPECT_STREQ(rows.column_name(c), expected.column_name(c));
    EXPECT_EQ(rows.column_type(c), expected.column_type(c));
    EXPECT_EQ(Thrown([&] { EXPECT_EQ(rows.column_number(rows.column_name(c)), c); }),
              Thrown([&] { (void)expected.column_number(expected.column_name(c)); }));
    const pg::Field ours = rows[0][c];
    const pqxx::field theirs = expected[0][c];
    SCOPED_TRACE(theirs.name());
    EXPECT_STREQ(ours.name(), theirs.name());
    EXPECT_EQ(ours.type(), theirs.type());
    EXPECT_EQ(ours.num(), theirs.num());
    EXPECT_EQ(ours.is_null(), theirs.is_null());
    EXPECT_STREQ(ours.c_str(), theirs.c_str());
    EXPECT_EQ(ours.size(), theirs.size());
    EXPECT_EQ(ours.view(), std::string_view(theirs.c_str(), theirs.size()));
    ExpectSameAs<std::string>(ours, theirs);
    ExpectSameAs<int>(ours, theirs);
    ExpectSameAs<long>(ours, theirs);
    ExpectSameAs<long long>(ours, theirs);
    ExpectSameAs<std::int16_t>(ours, theirs);
    ExpectSameAs<std::int32_t>(ours, theirs);
    ExpectSameAs<std::int64_t>(ours, theirs);
    ExpectSameAs<unsigned>(ours, theirs);
    ExpectSameAs<bool>(ours, theirs);
    ExpectSameAs<float>(ours, theirs);
    ExpectSameAs<double>(ours, theirs);
    ExpectSameAs<CustomerId>(ours, theirs);
    ExpectSameAs<BucketId>(ours, theirs);
    ExpectSameAs<Uuid>(ours, theirs);
    EXPECT_EQ(ours.as<std::string>("default"), theirs.as<std::string>("default"));
  }
}

TEST_F(RowsTest, NullsReadAsLibpqxxReadsThem) {
  const pg::Rows rows = Exec(kTypes);
  const pg::Row row = rows[0];
  const pg::Field null_int = row["null_int"];
  EXPECT_TRUE(null_int.is_null());
  EXPECT_STREQ(null_int.c_str(), "");
  EXPECT_EQ(null_int.size(), 0U);
  EXPECT_THROW((void)null_int.as<int>(), pqxx::conversion_error);
  EXPECT_THROW((void)row["null_text"].as<std::string>(), pqxx::conversion_error);
  EXPECT_THROW((void)row["null_bool"].as<bool>(), pqxx::conversion_error);
  EXPECT_THROW((void)row["null_int8"].as<CustomerId>(), pqxx::conversion_error);
  EXPECT_EQ(null_int.as<int>(17), 17);
  EXPECT_EQ(row["null_text"].as<std::string>("none"), "none");
  EXPECT_EQ(null_int.as<std::optional<int>>(), std::nullopt);
  EXPECT_EQ(row["null_float"].as<std::optional<double>>(), std::nullopt);
  int untouched = 5;
  EXPECT_FALSE(null_int.to(untouched));
  EXPECT_EQ(untouched, 5);
  EXPECT_FALSE(null_int.to(untouched, 9));
  EXPECT_EQ(untouched, 9);
  const char* text = "unset";
  EXPECT_FALSE(row["null_text"].to(text));
  EXPECT_STREQ(text, "unset");
  // An empty text is not NULL.
  EXPECT_FALSE(row["empty"].is_null());
  EXPECT_EQ(row["empty"].as<std::string>(), "");
  EXPECT_EQ(row["empty"].as<std::optional<std::string>>(), std::optional<std::string>(""));
  EXPECT_TRUE(row["empty"].to(text));
  EXPECT_STREQ(text, "");
}

TEST_F(RowsTest, ValuesConvertToTheirTypes) {
  const pg::Rows rows = Exec(kTypes);
  const pg::Row row = rows[0];
  EXPECT_EQ(row["small"].as<int>(), 7);
  EXPECT_EQ(row["int4"].as<int>(), -2147483648);
  EXPECT_EQ(row["int8"].as<std::int64_t>(), 9223372036854775807);
  EXPECT_TRUE(row["yes"].as<bool>());
  EXPECT_FALSE(row["no"].as<bool>());
  EXPECT_EQ(row["real4"].as<double>(), 1.5);
  EXPECT_EQ(row["num"].as<std::string>(), "-12.3400");
  EXPECT_EQ(row["txt"].as<std::string>(), "text é");
  EXPECT_EQ(row["bpchar"].as<std::string>(), "ab  ");
  EXPECT_EQ(row["id"].as<Uuid>().ToString(), "0191e1a4-0c49-7cc0-8a2b-000000000001");
  EXPECT_EQ(row["customer"].as<CustomerId>(), CustomerId{4242});
  EXPECT_EQ(row["bucket"].as<BucketId>(), BucketId{44});
  EXPECT_EQ(row["arr"].as<std::string>(), "{1,NULL,3}");
  EXPECT_EQ(row["bin"].as<std::string>(), "\\x00ff");
  // Out of the type's range or not a number: libpqxx's conversion_error.
  EXPECT_THROW((void)row["int8"].as<int>(), pqxx::conversion_error);
  EXPECT_THROW((void)row["txt"].as<int>(), pqxx::conversion_error);
  EXPECT_THROW((void)row["txt"].as<bool>(), pqxx::conversion_error);
}

TEST_F(RowsTest, ColumnsByNameAsLibpq) {
  const pg::Rows rows = Exec(kTypes);
  const pqxx::result expected = Expected(kTypes);
  EXPECT_EQ(rows.column_number("txt"), expected.column_number("txt"));
  EXPECT_EQ(rows.column_number(std::string("int8")), 2U);
  EXPECT_EQ(rows.column_type("num"), expected.column_type("num"));
  EXPECT_EQ(rows[0].column_number("yes"), 3U);
  // PQfnumber's rules: an unquoted name is folded to lower case.
  EXPECT_EQ(rows.column_number("\"MixedCase\""), expected.column_number("\"MixedCase\""));
  EXPECT_EQ(rows.column_number("TXT"), expected.column_number("TXT"));
  EXPECT_EQ(Thrown([&] { (void)rows.column_number("MixedCase"); }),
            Thrown([&] { (void)expected.column_number("MixedCase"); }));
  // An unknown name: the same exception libpqxx throws, naming the column.
  const std::string unknown = Thrown([&] { (void)rows.column_number("no_such_column"); });
  EXPECT_EQ(unknown, Thrown([&] { (void)expected.column_number("no_such_column"); }));
  EXPECT_NE(unknown.find("no_such_column"), std::string::npos);
  EXPECT_THROW((void)rows[0]["no_such_column"], pqxx::argument_error);
  EXPECT_EQ(Thrown([&] { (void)rows[0]["no_such_column"]; }), Thrown([&] { (void)expected[0]["no_such_column"]; }));
  EXPECT_THROW((void)rows.column_type("no_such_column"), pqxx::argument_error);
  // Column numbers out of range.
  EXPECT_THROW((void)rows.column_name(rows.columns()), pqxx::range_error);
  EXPECT_EQ(Thrown([&] { (void)rows.column_type(rows.columns()); }),
            Thrown([&] { (void)expected.column_type(expected.columns()); }));
  EXPECT_THROW((void)rows[0].at(rows.columns()), pqxx::range_error);
  EXPECT_THROW((void)rows.at(1), pqxx::range_error);
  EXPECT_EQ(rows.at(0).at(9).as<std::string>(), "text é");
}

TEST_F(RowsTest, RangeForOverRowsAndFields) {
  const std::string sql = "SELECT g AS n, g * 10 AS ten, NULLIF(g, 2) AS maybe FROM generate_series(1, 4) g ORDER BY g";
  const pg::Rows rows = Exec(sql);
  const pqxx::result expected = Expected(sql);
  ASSERT_EQ(rows.size(), 4U);
  EXPECT_FALSE(rows.empty());
  std::vector<std::string> ours;
  std::vector<std::string> theirs;
  for (const auto& row : rows) {
    EXPECT_EQ(row.size(), 3U);
    for (const auto& field : row) ours.push_back(field.is_null() ? "NULL" : field.c_str());
  }
  for (const auto& row : expected) {
    for (const auto& field : row) theirs.push_back(field.is_null() ? "NULL" : field.c_str());
  }
  EXPECT_EQ(ours, theirs);
  std::int64_t sum = 0;
  for (auto row : rows) sum += row[1].as<std::int64_t>();
  EXPECT_EQ(sum, 100);
  EXPECT_EQ(rows.end() - rows.begin(), 4);
  EXPECT_EQ(rows[0].end() - rows[0].begin(), 3);
  EXPECT_EQ(rows.front()[0].as<int>(), 1);
  EXPECT_EQ(rows.back()[0].as<int>(), 4);
  EXPECT_EQ(rows[2].rownumber(), 2U);
  EXPECT_EQ(rows.begin()->size(), 3U);
  EXPECT_EQ((rows.begin() + 3)->operator[](0).as<int>(), 4);
  EXPECT_EQ(rows.begin()[0].size(), 3U);
}

TEST_F(RowsTest, CopiesShareOneResult) {
  std::optional<pg::Row> row;
  std::optional<pg::Field> field;
  pg::Rows copy;
  {
    pg::Rows rows = Exec("SELECT 'kept' AS word, 2 AS n");
    copy = rows;
    row = rows[0];
    field = rows[0][1];
    pg::Rows moved = std::move(rows);
    EXPECT_EQ(moved.size(), 1U);
  }
  // The Rows is gone: its copies, rows and fields still read the result.
  EXPECT_EQ((*row)["word"].as<std::string>(), "kept");
  EXPECT_EQ(field->as<int>(), 2);
  EXPECT_STREQ(field->name(), "n");
  EXPECT_EQ(copy[0][0].as<std::string>(), "kept");
}

TEST_F(RowsTest, NoResultAndCommands) {
  const pg::Rows none;
  EXPECT_EQ(none.size(), 0U);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.columns(), 0U);
  EXPECT_TRUE(none.begin() == none.end());
  EXPECT_EQ(none.affected_rows(), 0U);
  EXPECT_THROW((void)none.column_name(0), pqxx::range_error);
  EXPECT_THROW((void)none.column_number("x"), pqxx::argument_error);
  const pg::Rows nothing = pg::Rows(nullptr);
  EXPECT_TRUE(nothing.empty());

  const pg::Rows empty = Exec("SELECT 1 AS one WHERE false");
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.columns(), 1U);
  EXPECT_STREQ(empty.column_name(0), "one");

  (void)Exec("CREATE TEMP TABLE t (a int)");
  EXPECT_EQ(Exec("INSERT INTO t SELECT generate_series(1, 3)").affected_rows(), 3U);
  const pg::Rows updated = Exec("UPDATE t SET a = a + 1 WHERE a > 1");
  EXPECT_EQ(updated.affected_rows(), 2U);
  EXPECT_EQ(updated.columns(), 0U);
  EXPECT_EQ(Exec("SELECT * FROM t").affected_rows(), 3U);
}

}  // namespace
}  // namespace shardkit
