// How the Bookstore service answers failures: a request it refuses is an
// ApiError (4xx, thrown by the handlers); everything shardkit throws is
// mapped here, by exception type and by the SQLSTATE shardkit carries on
// shard failures, to a status and a JSON body that names the shard.
//
//   503  a shard is unreachable (SQLSTATE class 08, 57P0x), overloaded (pool
//        timeout or waiter bound, class 53), or asks for a retry (40001,
//        40P01, 25006: read-only during a failover or a move); Retry-After
//   504  a statement was cut at the request's deadline (57014)
//   409  unique violation (23505); 422 other integrity or data errors
//   500  everything else (a schema that does not match, a bug); also a
//        shardkit::SqlError (a syntax error or a refused statement: the
//        service writes every statement itself, so it is a bug), with its
//        kind, construct, reason, advice, line and column in "sql_error"
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <shardkit/core/bucket.hpp>

namespace bookstore {

// A request the service refuses, with the status to answer.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, nlohmann::json detail = nlohmann::json::object())
      : std::runtime_error(message), status_(status), detail_(std::move(detail)) {}
  [[nodiscard]] int status() const noexcept { return status_; }
  [[nodiscard]] const nlohmann::json& detail() const noexcept { return detail_; }

 private:
  int status_;
  nlohmann::json detail_;
};

struct ErrorAnswer {
  int status = 500;
  nlohmann::json body;                     // {"error": "...", "status": 503, "shard": 1, ...}
  std::optional<int> retry_after_seconds;  // for 503
};

// The status a shard failure with this SQLSTATE deserves; nullopt: no
// opinion (the exception's type decides).
[[nodiscard]] std::optional<int> StatusForSqlState(std::string_view sqlstate);

// What to answer for an exception a handler threw; shard_name names shards.
[[nodiscard]] ErrorAnswer AnswerFor(const std::exception& error,
                                    const std::function<std::string(shardkit::ShardId)>& shard_name);

}  // namespace bookstore
