// How failures become HTTP answers: by exception type and by the SQLSTATE
// shardkit carries on shard failures (no message text is parsed).
#include "../src/errors.hpp"

#include <gtest/gtest.h>

#include <shardkit/errors.hpp>

namespace bookstore {
namespace {

std::string Name(shardkit::ShardId shard) {
  return "shard" + std::to_string(shardkit::ToInt(shard));
}

TEST(StatusForSqlState, MapsClassesAndCodes) {
  EXPECT_EQ(StatusForSqlState("08006"), 503);
  EXPECT_EQ(StatusForSqlState("08001"), 503);
  EXPECT_EQ(StatusForSqlState("57P01"), 503);
  EXPECT_EQ(StatusForSqlState("53300"), 503);
  EXPECT_EQ(StatusForSqlState("40001"), 503);
  EXPECT_EQ(StatusForSqlState("40P01"), 503);
  EXPECT_EQ(StatusForSqlState("25006"), 503);
  EXPECT_EQ(StatusForSqlState("57014"), 504);
  EXPECT_EQ(StatusForSqlState("23505"), 409);
  EXPECT_EQ(StatusForSqlState("23514"), 422);
  EXPECT_EQ(StatusForSqlState("22003"), 422);
  EXPECT_EQ(StatusForSqlState("42P01"), 500);
  EXPECT_EQ(StatusForSqlState(""), std::nullopt);
}

TEST(AnswerFor, ShardErrorsNameTheShardAndUseTheirSqlState) {
  const auto unavailable = AnswerFor(shardkit::ShardUnavailable(shardkit::ShardId{1}, "shard 1 is unreachable"), Name);
  EXPECT_EQ(unavailable.status, 503);
  EXPECT_EQ(unavailable.retry_after_seconds, 1);
  EXPECT_EQ(unavailable.body["shard"], 1);
  EXPECT_EQ(unavailable.body["shard_name"], "shard1");
  EXPECT_EQ(unavailable.body["sqlstate"], "08006");

  const auto serialization =
      AnswerFor(shardkit::ShardQueryError(shardkit::ShardId{0}, "could not serialize", "40001"), Name);
  EXPECT_EQ(serialization.status, 503);
  EXPECT_EQ(serialization.body["sqlstate"], "40001");
  EXPECT_EQ(AnswerFor(shardkit::ShardQueryError(shardkit::ShardId{0}, "duplicate", "23505"), Name).status, 409);
  EXPECT_EQ(AnswerFor(shardkit::ShardQueryError(shardkit::ShardId{0}, "no table", "42P01"), Name).status, 500);
  EXPECT_EQ(AnswerFor(shardkit::PoolTimeout(shardkit::ShardId{2}, "busy"), Name).status, 503);
  // A bucket still refused at the deadline (a move's cutover), a COMMIT
  // whose outcome is unknown: try later.
  EXPECT_EQ(AnswerFor(shardkit::BucketRefused(shardkit::BucketRefused::Kind::kFrozen, shardkit::ShardId{0},
                                              shardkit::BucketId{7}, shardkit::ShardId{2}, "owned", "frozen"),
                      Name)
                .status,
            503);
  EXPECT_EQ(AnswerFor(shardkit::OutcomeUnknown(shardkit::ShardId{1}, "lost during COMMIT"), Name).status, 503);
  EXPECT_EQ(AnswerFor(shardkit::PoolExhausted(shardkit::ShardId{2}, "busy"), Name).body["shard_name"], "shard2");
}

TEST(AnswerFor, ScatterErrorsTakeTheWorstFailure) {
  using Failure = shardkit::ScatterError::Failure;
  const auto down = AnswerFor(shardkit::ScatterError("failed", {Failure{shardkit::ShardId{0}, "bad sql", "42601"},
                                                                Failure{shardkit::ShardId{1}, "unreachable", "08006"}}),
                              Name);
  EXPECT_EQ(down.status, 503);
  EXPECT_EQ(down.body["failed_shards"].size(), 2U);
  EXPECT_EQ(down.body["failed_shards"][1]["sqlstate"], "08006");
  const auto slow = AnswerFor(shardkit::ScatterError("failed", {Failure{shardkit::ShardId{0}, "bad sql", "42601"},
                                                                Failure{shardkit::ShardId{1}, "cut", "57014"}}),
                              Name);
  EXPECT_EQ(slow.status, 504);
  const auto bug =
      AnswerFor(shardkit::ScatterError("failed", {Failure{shardkit::ShardId{1}, "bad sql", "42601"}}), Name);
  EXPECT_EQ(bug.status, 500);
  EXPECT_EQ(bug.body["shard"], 1);
  // No SQLSTATE: no worker or connection before the deadline.
  EXPECT_EQ(AnswerFor(shardkit::ScatterError("failed", {Failure{shardkit::ShardId{1}, "no answer"}}), Name).status,
            503);
}

TEST(AnswerFor, RefusedRequestsKeepTheirStatusAndDetail) {
  const auto answer = AnswerFor(ApiError(422, "no such book: 9", {{"unknown_books", {9}}}), Name);
  EXPECT_EQ(answer.status, 422);
  EXPECT_EQ(answer.body["error"], "no such book: 9");
  EXPECT_EQ(answer.body["unknown_books"][0], 9);
  EXPECT_FALSE(answer.retry_after_seconds.has_value());
  EXPECT_EQ(AnswerFor(shardkit::IdGeneratorError("lease lost"), Name).status, 503);
  EXPECT_EQ(AnswerFor(std::runtime_error("boom"), Name).status, 500);
}

// The service writes every statement itself: a refusal or a syntax error is
// its own bug, a 500 that says what shardkit said.
TEST(AnswerFor, SqlErrorsAreTheServicesBugsWithTheRefusalSpelledOut) {
  shardkit::SqlError::Details refused;
  refused.kind = shardkit::SqlError::Kind::kRefused;
  refused.construct = "the table order_items";
  refused.reason = "its customer_id is not pinned in a subquery or CTE";
  refused.advice = "pin i.customer_id";
  refused.line = 1;
  refused.column = 135;
  const auto answer = AnswerFor(
      shardkit::SqlError("the table order_items at line 1, column 135: its customer_id is not pinned", refused), Name);
  EXPECT_EQ(answer.status, 500);
  EXPECT_FALSE(answer.retry_after_seconds.has_value());
  EXPECT_NE(answer.body["error"].get<std::string>().find("refused"), std::string::npos) << answer.body;
  EXPECT_NE(answer.body["error"].get<std::string>().find("line 1, column 135"), std::string::npos) << answer.body;
  EXPECT_EQ(answer.body["sql_error"]["kind"], "refused");
  EXPECT_EQ(answer.body["sql_error"]["construct"], "the table order_items");
  EXPECT_EQ(answer.body["sql_error"]["advice"], "pin i.customer_id");
  EXPECT_EQ(answer.body["sql_error"]["line"], 1);
  EXPECT_EQ(answer.body["sql_error"]["column"], 135);

  shardkit::SqlError::Details syntax;
  syntax.kind = shardkit::SqlError::Kind::kSyntax;
  syntax.message = "syntax error at or near \"FORM\"";
  const auto bad = AnswerFor(shardkit::SqlError("syntax error at or near \"FORM\"", syntax), Name);
  EXPECT_EQ(bad.status, 500);
  EXPECT_EQ(bad.body["sql_error"]["kind"], "syntax");
  EXPECT_NE(bad.body["error"].get<std::string>().find("FORM"), std::string::npos) << bad.body;
}

}  // namespace
}  // namespace bookstore
