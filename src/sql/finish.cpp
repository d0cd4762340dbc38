#include "sql/finish.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/sql_text.hpp"
#include "shardkit/errors.hpp"
#include "sql/parse.hpp"

namespace shardkit::sql {
std::vector<std::string> NumberedColumns(std::size_t count) {
  std::vector<std::string> columns;
  for (std::size_t c = 1; c <= count; ++c) columns.push_back(fmt::format("c{}", c));
  return columns;
}

std::string SelectNamed(const std::vector<std::string>& names, const std::string& input, bool distinct) {
  std::string select = distinct ? "SELECT DISTINCT " : "SELECT ";
  for (std::size_t c = 0; c < names.size(); ++c) {
    select += fmt::format("{}c{} AS {}", c == 0 ? "" : ", ", c + 1, shardkit::detail::QuoteIdentifier(names[c]));
  }
  return select + " FROM " + input;
}

std::string TextArrayLiteral(const std::vector<std::vector<std::optional<std::string>>>& rows, std::size_t column) {
  std::string out = "{";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (r > 0) out += ',';
    const std::optional<std::string>& value = rows[r][column];
    if (!value) {
      out += "NULL";
      continue;
    }
    out += '"';
    for (const char c : *value) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

std::vector<int> ParamsIn(const std::string& sql) {
  std::set<int> found;
  for (const Token& token : ScanTokens(sql)) {
    if (token.kind != shardkit::detail::kPgParam) continue;
    found.insert(std::stoi(
        sql.substr(static_cast<std::size_t>(token.start) + 1, static_cast<std::size_t>(token.end - token.start - 1))));
  }
  return {found.begin(), found.end()};
}

FinishStatement BuildFinishStatement(const FinishStep& step, const std::vector<FinishInput>& inputs,
                                     const SqlParams& params) {
  if (inputs.size() != step.inputs.size()) {
    throw Error(fmt::format("sql: the finishing step reads {} inputs, {} given", step.inputs.size(), inputs.size()));
  }
  FinishStatement out;
  out.params = params;
  std::string with;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<std::string>& names = step.inputs[i];
    const FinishInput& input = inputs[i];
    if (input.types.size() != names.size()) {
      throw Error(fmt::format("sql: the finishing step's input {} has {} columns, {} types given", i + 1, names.size(),
                              input.types.size()));
    }
    std::string columns;
    std::string casts;
    std::string arrays;
    std::string unnested;
    for (std::size_t c = 0; c < names.size(); ++c) {
      const char* comma = c == 0 ? "" : ", ";
      columns += fmt::format("{}{}", comma, names[c]);
      casts += fmt::format("{}u.c{}::{}", comma, c + 1, input.types[c]);
      out.params.emplace_back(TextArrayLiteral(input.rows, c));
      arrays += fmt::format("{}${}::text[]", comma, out.params.size());
      unnested += fmt::format("{}c{}", comma, c + 1);
    }
    with += fmt::format("{}_m{}({}) AS (SELECT {} FROM unnest({}) AS u({}))", with.empty() ? "WITH " : ", ", i + 1,
                        columns, casts, arrays, unnested);
  }
  // The statement's parameters the SELECT does not use, typed all the same.
  std::string unused;
  for (std::size_t p = 1; p <= params.size(); ++p) {
    if (std::binary_search(step.params_used.begin(), step.params_used.end(), static_cast<int>(p))) continue;
    unused += fmt::format("{}${}::text", unused.empty() ? "" : ", ", p);
  }
  if (!unused.empty()) with += fmt::format("{}_unused AS (SELECT {})", with.empty() ? "WITH " : ", ", unused);
  out.sql = with + " " + step.select;
  return out;
}

}  // namespace shardkit::sql
