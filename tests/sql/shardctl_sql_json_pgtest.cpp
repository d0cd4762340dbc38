// shardctl sql --json on a scratch cluster loaded with the Bookstore: the
// columns come as a list (name, type name, OID) and each row as an array in
// column order, so a duplicate column name loses nothing, and the values are
// the reference server's; -n passes a NULL parameter in its place among the
// -p values; errors are JSON on stdout ({"error": {...}}: kind, message,
// SQLSTATE, line and column, or the refusal's construct, reason and advice)
// with the exit codes of the plain output; the plain table prints duplicate
// column names too.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/cluster.hpp"
#include "support/sql_bookstore.hpp"

extern char** environ;

namespace shardkit {
namespace {

struct Ran {
  std::string out;  // stdout
  std::string err;  // stderr
  int code = -1;
};

// shardctl with `args`, stdout and stderr apart.
Ran RunShardctl(const std::vector<std::string>& args) {
  const auto err_path = std::filesystem::temp_directory_path() / fmt::format("shardctl_sql_json_{}.err", ::getpid());
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> text{SHARDCTL_PATH};
  text.insert(text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, SHARDCTL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " SHARDCTL_PATH);
  }
  Ran run;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = ::read(fds[0], buffer.data(), buffer.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    run.out.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ostringstream err;
  err << std::ifstream(err_path).rdbuf();
  run.err = err.str();
  std::filesystem::remove(err_path);
  return run;
}

// JSON rows as SqlResult::rows: each value text or NULL.
test::Rows RowsOf(const nlohmann::json& rows) {
  test::Rows out;
  for (const auto& row : rows) {
    auto& values = out.emplace_back();
    for (const auto& value : row) {
      if (value.is_null()) {
        values.emplace_back(std::nullopt);
      } else {
        values.emplace_back(value.get<std::string>());
      }
    }
  }
  return out;
}

class ShardctlSqlJsonPg : public test::SqlBookstorePg {
 protected:
  static void SetUpTestSuite() {
    SetUpBookstore("shardctl_sql_json_pgtest");
    config_path_ = std::filesystem::temp_directory_path() / fmt::format("shardctl_sql_json_pgtest_{}.toml", ::getpid());
    // The scratch cluster's shards, with the reference table declared.
    std::ofstream out(config_path_);
    out << "[directory]\nsource = \"catalog\"\n[catalog]\ndsn = \"" << scratch_->CatalogDsn().Reveal() << "\"\n"
        << "[sql]\nreference_tables = [\"books\"]\n";
    for (int s = 0; s < scratch_->ShardCount(); ++s) {
      out << "[[shard]]\nname = \"shard" << s << "\"\ndsn = \"" << scratch_->ShardDsn(s).Reveal() << "\"\n";
    }
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(config_path_);
    SqlBookstorePg::TearDownTestSuite();
  }

  // shardctl --config <scratch> sql --json `args`.
  static Ran Sql(std::vector<std::string> args, bool json = true) {
    std::vector<std::string> all{"--config", config_path_.string(), "sql"};
    if (json) all.emplace_back("--json");
    all.insert(all.end(), args.begin(), args.end());
    return RunShardctl(all);
  }

  // Its stdout as JSON (a test failure and null when it is not).
  static nlohmann::json Parsed(const Ran& run) {
    try {
      return nlohmann::json::parse(run.out);
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "not JSON (" << e.what() << "): " << run.out << run.err;
      return nullptr;
    }
  }

  static inline std::filesystem::path config_path_;
};

TEST_F(ShardctlSqlJsonPg, DuplicateColumnNamesKeepEveryValueWithTheirTypes) {
  // Over every shard, merged: two columns named sum, two named n; the
  // reference server's rows, column by column.
  const std::string sql =
      "SELECT status, sum(total), sum(total * 2) AS sum, count(*) AS n, max(ordered_at) AS n, "
      "max(order_id) AS last_order FROM orders GROUP BY status ORDER BY status";
  const Ran run = Sql({sql});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_EQ(run.err, "");
  const nlohmann::json out = Parsed(run);
  ASSERT_TRUE(out.is_object()) << run.out;
  const auto reference = OnReference(sql, {});
  ASSERT_EQ(out["columns"].size(), 6U) << run.out;
  const std::vector<std::pair<std::string, std::string>> want = {{"status", "text"},   {"sum", "numeric"},
                                                                 {"sum", "numeric"},   {"n", "int8"},
                                                                 {"n", "timestamptz"}, {"last_order", "int8"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& column = out["columns"][i];
    EXPECT_EQ(column["name"], want[i].first) << i;
    EXPECT_EQ(column["type"], want[i].second) << i;
    EXPECT_EQ(column["oid"].get<unsigned>(), reference.types.at(i)) << i;
    EXPECT_EQ(column["name"].get<std::string>(), reference.columns.at(i)) << i;
  }
  ASSERT_FALSE(reference.rows.empty());
  EXPECT_EQ(RowsOf(out["rows"]), reference.rows) << run.out;
  for (const auto& row : out["rows"]) {  // both sums are there: the second is twice the first
    ASSERT_EQ(row.size(), 6U);
    EXPECT_NE(row[1], row[2]) << row;
  }
  // The plan's fields stay beside them.
  EXPECT_EQ(out["kind"], "scatter");
  EXPECT_EQ(out["statement"], "SELECT");
  EXPECT_EQ(out["shard_count"].get<int>(), scratch_->ShardCount());
  EXPECT_EQ(out["affected"].get<std::size_t>(), reference.rows.size());
  EXPECT_TRUE(out["plan"].get<std::string>().starts_with("scatter over ")) << out["plan"];
}

TEST_F(ShardctlSqlJsonPg, RoutedRowsAndTheirTypesAreTheReferences) {
  const std::string sql =
      "SELECT order_id, ordered_at, total, status, customer_id FROM orders WHERE customer_id = $1 "
      "ORDER BY ordered_at, order_id";
  const Ran run = Sql({sql, "-p", "42"});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  const nlohmann::json out = Parsed(run);
  const auto reference = OnReference(sql, {"42"});
  ASSERT_FALSE(reference.rows.empty());
  EXPECT_EQ(RowsOf(out["rows"]), reference.rows) << run.out;
  std::vector<std::string> types;
  for (const auto& column : out["columns"]) types.push_back(column["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"int8", "timestamptz", "numeric", "text", "int4"}));
  EXPECT_EQ(out["kind"], "routed");
  EXPECT_EQ(out["customer_id"], 42);
  EXPECT_EQ(out["shard"].get<int>(), ToInt(cluster_->Route(CustomerId{42}).shard));
}

TEST_F(ShardctlSqlJsonPg, NullParametersTakeTheirPlaceAmongTheValues) {
  // -p x -n -p y: $1 = 'x', $2 = NULL, $3 = 'y'; a value that looks like a
  // list is one parameter.
  const Ran run =
      Sql({"SELECT $1::text IS NULL AS a, $2::text IS NULL AS b, $2::text AS c, $3::text AS d, $4::text AS e", "-p",
           "x", "-n", "-p", "y", "--param", "[1,2]"});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  const nlohmann::json out = Parsed(run);
  EXPECT_EQ(RowsOf(out["rows"]), (test::Rows{{"f", "t", std::nullopt, "y", "[1,2]"}})) << run.out;
  EXPECT_EQ(out["columns"][0]["type"], "bool");

  // A routed statement with a NULL parameter: the reference's answer.
  const std::string sql =
      "SELECT count(*), $2::text IS NULL AS unfiltered FROM orders WHERE customer_id = $1 "
      "AND ($2::text IS NULL OR status = $2)";
  const Ran routed = Sql({sql, "-p", "42", "--null"});
  ASSERT_EQ(routed.code, 0) << routed.out << routed.err;
  const auto reference = OnReference(sql, {"42", std::nullopt});
  EXPECT_EQ(RowsOf(Parsed(routed)["rows"]), reference.rows) << routed.out;
  EXPECT_EQ(reference.rows.at(0).at(1), "t");

  // Two NULLs in a row, without --json.
  const Ran plain = Sql({"SELECT $1::int IS NULL AND $2::int IS NULL AS both_null", "-nn"}, false);
  ASSERT_EQ(plain.code, 0) << plain.out << plain.err;
  EXPECT_EQ(plain.out, " both_null\n-----------\n t\n(1 row)\n");
}

TEST_F(ShardctlSqlJsonPg, ErrorsAreJsonOnStdoutWithTheExitCodeOfThePlainOutput) {
  // A syntax error: its SQLSTATE, line and column; exit 1 as without --json.
  const Ran syntax = Sql({"SELECT *\nFROM orders WHERE = 1"});
  EXPECT_EQ(syntax.code, 1) << syntax.out;
  EXPECT_EQ(syntax.err, "");
  const nlohmann::json syntax_error = Parsed(syntax)["error"];
  EXPECT_EQ(syntax_error["kind"], "syntax") << syntax.out;
  EXPECT_EQ(syntax_error["message"], "syntax error at or near \"=\"");
  EXPECT_EQ(syntax_error["sqlstate"], "42601");
  EXPECT_EQ(syntax_error["line"], 2);
  EXPECT_EQ(syntax_error["column"], 19);
  EXPECT_EQ(Sql({"SELECT *\nFROM orders WHERE = 1"}, false).code, syntax.code);

  // The server's error on the customer's shard: its SQLSTATE and the shard.
  const Ran server = Sql({"SELECT no_such_column FROM orders WHERE customer_id = 42"});
  EXPECT_EQ(server.code, 1) << server.out;
  const nlohmann::json server_error = Parsed(server)["error"];
  EXPECT_EQ(server_error["kind"], "server") << server.out;
  EXPECT_EQ(server_error["sqlstate"], "42703");
  EXPECT_EQ(server_error["shard"].get<int>(), ToInt(cluster_->Route(CustomerId{42}).shard));
  EXPECT_NE(server_error["message"].get<std::string>().find("no_such_column"), std::string::npos);

  // Over every shard: each shard's failure, and their common SQLSTATE.
  const Ran scatter = Sql({"SELECT no_such_column FROM orders"});
  EXPECT_EQ(scatter.code, 1) << scatter.out;
  const nlohmann::json scatter_error = Parsed(scatter)["error"];
  EXPECT_EQ(scatter_error["kind"], "scatter") << scatter.out;
  EXPECT_EQ(scatter_error["sqlstate"], "42703");
  ASSERT_EQ(scatter_error["failures"].size(), static_cast<std::size_t>(scratch_->ShardCount())) << scatter.out;
  for (const auto& failure : scatter_error["failures"]) EXPECT_EQ(failure["sqlstate"], "42703") << failure;

  // --explain's errors too.
  const Ran explain = Sql({"--explain", "SELEC 1"});
  EXPECT_EQ(explain.code, 1) << explain.out;
  EXPECT_EQ(Parsed(explain)["error"]["kind"], "syntax") << explain.out;

  // A configuration that cannot be read: bad usage, exit 2 as without --json.
  const Ran config = RunShardctl({"--config", "/nonexistent/shardkit.toml", "sql", "--json", "SELECT 1"});
  EXPECT_EQ(config.code, 2) << config.out << config.err;
  EXPECT_EQ(Parsed(config)["error"]["kind"], "config") << config.out;
}

TEST_F(ShardctlSqlJsonPg, ARefusalHasItsConstructReasonAndAdvice) {
  const Ran run = Sql({"SELECT order_id FROM orders FOR UPDATE"});
  EXPECT_EQ(run.code, 1) << run.out;
  EXPECT_EQ(run.err, "");
  const nlohmann::json error = Parsed(run)["error"];
  EXPECT_EQ(error["kind"], "refused") << run.out;
  EXPECT_EQ(error["construct"], "a locking clause (FOR UPDATE/SHARE) over every shard");
  EXPECT_FALSE(error["reason"].get<std::string>().empty());
  EXPECT_FALSE(error["advice"].get<std::string>().empty());
  EXPECT_EQ(error["line"], 1);
  EXPECT_EQ(error["column"], 29);
  EXPECT_FALSE(error.contains("sqlstate")) << run.out;
  // Without --json: psql's form on stderr, nothing on stdout, the same code.
  const Ran plain = Sql({"SELECT order_id FROM orders FOR UPDATE"}, false);
  EXPECT_EQ(plain.code, run.code);
  EXPECT_EQ(plain.out, "");
  EXPECT_TRUE(plain.err.starts_with("shardkit: a locking clause (FOR UPDATE/SHARE) over every shard at line 1, "))
      << plain.err;
}

TEST_F(ShardctlSqlJsonPg, ThePlainTablePrintsDuplicateColumnNames) {
  const Ran run = Sql({"SELECT 1 AS a, 22 AS a, NULL::text AS a"}, false);
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_EQ(run.out, " a | a  | a\n---+----+---\n 1 | 22 |\n(1 row)\n");
}

}  // namespace
}  // namespace shardkit
