// Typed positional parameters (shardkit/core/sql_params.hpp).
#include "shardkit/core/sql_params.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/pg_scan.hpp"

namespace shardkit {
namespace {

// An array element in PostgreSQL's array text: double-quoted, with \ and " escaped.
std::string QuotedElement(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

}  // namespace

SqlParam::SqlParam(double value) : std::optional<std::string>(fmt::format("{}", value)), type_("float8") {
  // fmt prints the shortest text that reads back exactly; the server spells the specials.
  if (value != value) emplace("NaN");
  if (value == std::numeric_limits<double>::infinity()) emplace("Infinity");
  if (value == -std::numeric_limits<double>::infinity()) emplace("-Infinity");
}

SqlParam::SqlParam(std::chrono::system_clock::time_point at) : type_("timestamptz") {
  const auto micros = std::chrono::floor<std::chrono::microseconds>(at);
  const auto seconds = std::chrono::floor<std::chrono::seconds>(micros);
  emplace(fmt::format("{:%Y-%m-%d %H:%M:%S}.{:06d}+00", fmt::gmtime(std::chrono::system_clock::to_time_t(seconds)),
                      static_cast<long long>((micros - seconds).count())));
}

SqlParam::SqlParam(const std::vector<std::int64_t>& values) : type_("int8[]") {
  emplace(fmt::format("{{{}}}", fmt::join(values, ",")));
}

SqlParam::SqlParam(const std::vector<std::string>& values) : type_("text[]") {
  std::string text = "{";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i == 0 ? "" : ",") + QuotedElement(values[i]);
  emplace(text + "}");
}

SqlParam SqlParam::Typed(std::optional<std::string> text, std::string type) {
  SqlParam param(std::move(text));
  param.type_ = std::move(type);
  return param;
}

std::string WithParameterTypes(const std::string& sql, const SqlParams& params) {
  if (std::none_of(params.begin(), params.end(), [](const SqlParam& p) { return !p.type().empty(); })) return sql;
  const detail::PgScan scan = detail::ScanSql(sql);
  if (scan.error) return sql;  // the parser reports it
  std::string out;
  std::size_t copied = 0;
  for (const detail::PgToken& token : scan.tokens) {
    if (token.kind != detail::kPgParam) continue;
    const auto start = static_cast<std::size_t>(token.start);
    const auto end = static_cast<std::size_t>(token.end);
    const std::size_t number = std::stoul(sql.substr(start + 1, end - start - 1));
    if (number == 0 || number > params.size() || params[number - 1].type().empty()) continue;
    out.append(sql, copied, start - copied);
    out += fmt::format("({}::{})", sql.substr(start, end - start), params[number - 1].type());
    copied = end;
  }
  out.append(sql, copied, std::string::npos);
  return out;
}

}  // namespace shardkit
