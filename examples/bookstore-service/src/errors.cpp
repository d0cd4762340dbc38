#include "errors.hpp"

#include <shardkit/errors.hpp>

namespace bookstore {
namespace {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

ErrorAnswer Answer(int status, const std::string& message) {
  ErrorAnswer answer;
  answer.status = status;
  answer.body = {{"error", message}, {"status", status}};
  if (status == 503) answer.retry_after_seconds = 1;
  return answer;
}

}  // namespace

std::optional<int> StatusForSqlState(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return std::nullopt;
  if (StartsWith(sqlstate, "08")) return 503;                                         // connection exception
  if (sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03") return 503;  // shutting down, starting up
  if (StartsWith(sqlstate, "53")) return 503;                                         // insufficient resources
  if (sqlstate == "40001" || sqlstate == "40P01") return 503;                         // serialization failure, deadlock
  if (sqlstate == "25006") return 503;                                                // read-only transaction
  if (sqlstate == "57014") return 504;                                                // cancelled: the deadline
  if (sqlstate == "23505") return 409;                                                // unique violation
  if (StartsWith(sqlstate, "23") || StartsWith(sqlstate, "22")) return 422;           // integrity, data
  return 500;
}

ErrorAnswer AnswerFor(const std::exception& error, const std::function<std::string(shardkit::ShardId)>& shard_name) {
  if (const auto* api = dynamic_cast<const ApiError*>(&error)) {
    ErrorAnswer answer = Answer(api->status(), api->what());
    for (const auto& [key, value] : api->detail().items()) answer.body[key] = value;
    return answer;
  }
  if (const auto* shard = dynamic_cast<const shardkit::ShardError*>(&error)) {
    int status = 500;
    if (dynamic_cast<const shardkit::PoolTimeout*>(&error) != nullptr ||
        dynamic_cast<const shardkit::PoolExhausted*>(&error) != nullptr ||
        dynamic_cast<const shardkit::ShardUnavailable*>(&error) != nullptr ||
        // A bucket still refused at the deadline (frozen for a move's
        // cutover, moved): nothing was written; later it goes through.
        dynamic_cast<const shardkit::BucketRefused*>(&error) != nullptr ||
        // The connection was lost during COMMIT (as 08007 before).
        dynamic_cast<const shardkit::OutcomeUnknown*>(&error) != nullptr) {
      status = 503;
    }
    if (const auto by_code = StatusForSqlState(shard->sqlstate())) status = *by_code;
    ErrorAnswer answer = Answer(status, shard->what());
    answer.body["shard"] = shardkit::ToInt(shard->shard());
    answer.body["shard_name"] = shard_name(shard->shard());
    if (!shard->sqlstate().empty()) answer.body["sqlstate"] = shard->sqlstate();
    return answer;
  }
  if (const auto* scatter = dynamic_cast<const shardkit::ScatterError*>(&error)) {
    // The worst failure decides: a shard that cannot answer (503) before
    // one cut at the deadline (504) before a statement that failed (500).
    int status = 0;
    nlohmann::json failed = nlohmann::json::array();
    for (const auto& f : scatter->failures()) {
      const int s = StatusForSqlState(f.sqlstate).value_or(f.sqlstate.empty() ? 503 : 500);
      if (s == 503 || status == 0 || (status != 503 && s == 504)) status = s;
      nlohmann::json one = {
          {"shard", shardkit::ToInt(f.shard)}, {"shard_name", shard_name(f.shard)}, {"cause", f.cause}};
      if (!f.sqlstate.empty()) one["sqlstate"] = f.sqlstate;
      failed.push_back(std::move(one));
    }
    ErrorAnswer answer = Answer(status == 0 ? 500 : status, scatter->what());
    if (!scatter->failures().empty()) {
      answer.body["shard"] = shardkit::ToInt(scatter->failures().front().shard);
      answer.body["shard_name"] = shard_name(scatter->failures().front().shard);
    }
    answer.body["failed_shards"] = std::move(failed);
    return answer;
  }
  if (const auto* sql = dynamic_cast<const shardkit::SqlError*>(&error)) {
    // Every statement is the service's own text (request values go in
    // parameters): a syntax error or a refusal is a bug in the service.
    const bool syntax = sql->kind() == shardkit::SqlError::Kind::kSyntax;
    ErrorAnswer answer = Answer(500, std::string(syntax ? "a statement of the service has a syntax error: "
                                                        : "shardkit refused a statement of the service: ") +
                                         sql->what());
    nlohmann::json detail = {{"kind", syntax ? "syntax" : "refused"}, {"line", sql->line()}, {"column", sql->column()}};
    if (!sql->construct().empty()) detail["construct"] = sql->construct();
    if (!sql->reason().empty()) detail["reason"] = sql->reason();
    if (!sql->advice().empty()) detail["advice"] = sql->advice();
    answer.body["sql_error"] = std::move(detail);
    return answer;
  }
  if (dynamic_cast<const shardkit::IdGeneratorError*>(&error) != nullptr) {
    return Answer(503, std::string("cannot issue order ids: ") + error.what());
  }
  if (dynamic_cast<const shardkit::Error*>(&error) != nullptr) return Answer(500, error.what());
  return Answer(500, std::string("internal error: ") + error.what());
}

}  // namespace bookstore
