// shardctl sql "SELECT ..." [-p VALUE | -n]... [--explain] [--json]
//   -> the rows as psql aligns them, or as JSON; --explain: where it would run.
// -p VALUE and -n (NULL) are $1, $2... in the order given.
// A syntax error or a refusal exits 1 with the message (psql's form) on
// stderr; with --json every error is a JSON object on stdout instead
// ({"error": {"kind": ...}}), with the same exit code.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"

namespace {

// Display width of UTF-8 text (one column a code point).
std::size_t Width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string Pad(const std::string& text, std::size_t width, bool right) {
  const std::string fill(width > Width(text) ? width - Width(text) : 0, ' ');
  return right ? fill + text : text + fill;
}

// Numeric types print right-aligned, as psql does.
bool IsNumeric(unsigned oid) {
  return oid == 20 || oid == 21 || oid == 23 || oid == 26 || oid == 700 || oid == 701 || oid == 1700;
}

using Json = nlohmann::ordered_json;

// Text that is not UTF-8 (a SQL_ASCII database) prints with U+FFFD in its place.
std::string Dump(const Json& json) {
  return json.dump(2, ' ', false, Json::error_handler_t::replace);
}

Json PlanJson(const shardkit::SqlPlanInfo& plan) {
  Json out{{"plan", plan.Describe()},
           {"kind", plan.kind == shardkit::SqlPlanInfo::Kind::kRouted    ? "routed"
                    : plan.kind == shardkit::SqlPlanInfo::Kind::kScatter ? "scatter"
                                                                         : "any_shard"},
           {"shard", shardkit::ToInt(plan.shard)},
           {"statement", plan.statement},
           {"read_only", plan.read_only},
           {"sharded_tables", plan.sharded_tables},
           {"reference_tables", plan.reference_tables}};
  if (plan.kind == shardkit::SqlPlanInfo::Kind::kScatter) {
    out["shard_count"] = plan.shard_count;
    out["shard_sql"] = plan.shard_sql;
    out["merge"] = plan.merge;
  }
  // The key under its column's name: a number for integer keys.
  if (plan.key) {
    if (const auto value = plan.key->Integer()) {
      out[plan.key_column] = *value;
    } else {
      out[plan.key_column] = plan.key->ToString();
    }
  }
  if (plan.bucket) out["bucket"] = shardkit::ToInt(*plan.bucket);
  return out;
}

// The built-in types' OIDs and names (pg_type.typname; an array type as its
// element's name and "[]"), as PostgreSQL assigns them.
constexpr std::string_view kBuiltinTypes =
    "16 bool 17 bytea 18 char 19 name 20 int8 21 int2 22 int2vector 23 int4 24 regproc 25 text "
    "26 oid 27 tid 28 xid 29 cid 30 oidvector 114 json 142 xml 143 xml[] 199 json[] 271 xid8[] "
    "600 point 601 lseg 602 path 603 box 604 polygon 628 line 650 cidr 651 cidr[] 700 float4 "
    "701 float8 705 unknown 718 circle 774 macaddr8 790 money 791 money[] 829 macaddr 869 inet "
    "1000 bool[] 1001 bytea[] 1002 char[] 1003 name[] 1005 int2[] 1007 int4[] 1008 regproc[] "
    "1009 text[] 1010 tid[] 1011 xid[] 1012 cid[] 1014 bpchar[] 1015 varchar[] 1016 int8[] "
    "1017 point[] 1021 float4[] 1022 float8[] 1028 oid[] 1040 macaddr[] 1041 inet[] 1042 bpchar "
    "1043 varchar 1082 date 1083 time 1114 timestamp 1115 timestamp[] 1182 date[] 1183 time[] "
    "1184 timestamptz 1185 timestamptz[] 1186 interval 1187 interval[] 1231 numeric[] 1266 timetz "
    "1270 timetz[] 1560 bit 1561 bit[] 1562 varbit 1563 varbit[] 1700 numeric 1790 refcursor "
    "2202 regprocedure 2203 regoper 2204 regoperator 2205 regclass 2206 regtype 2210 regclass[] "
    "2211 regtype[] 2249 record 2275 cstring 2278 void 2287 record[] 2950 uuid 2951 uuid[] "
    "3220 pg_lsn 3221 pg_lsn[] 3614 tsvector 3615 tsquery 3643 tsvector[] 3645 tsquery[] "
    "3734 regconfig 3769 regdictionary 3802 jsonb 3807 jsonb[] 3904 int4range 3905 int4range[] "
    "3906 numrange 3907 numrange[] 3908 tsrange 3909 tsrange[] 3910 tstzrange 3911 tstzrange[] "
    "3912 daterange 3913 daterange[] 3926 int8range 3927 int8range[] 4072 jsonpath 4073 jsonpath[] "
    "4089 regnamespace 4096 regrole 5069 xid8";

// A column type's name: a built-in type's, or "oid:<N>" for any other (a
// domain, an enum, an extension's type).
std::string TypeName(unsigned oid) {
  static const std::map<unsigned, std::string> kNames = [] {
    std::map<unsigned, std::string> names;
    std::istringstream in{std::string(kBuiltinTypes)};
    unsigned number = 0;
    for (std::string name; in >> number >> name;) names.emplace(number, name);
    return names;
  }();
  const auto it = kNames.find(oid);
  return it != kNames.end() ? it->second : fmt::format("oid:{}", oid);
}

// The rows in column order (a duplicate column name loses nothing), each
// value its text or null, then the plan's fields.
Json ResultJson(const shardkit::SqlResult& result) {
  Json columns = Json::array();
  for (std::size_t i = 0; i < result.columns.size(); ++i) {
    const unsigned oid = i < result.types.size() ? result.types[i] : 0;
    columns.push_back(Json{{"name", result.columns[i]}, {"type", TypeName(oid)}, {"oid", oid}});
  }
  Json rows = Json::array();
  for (const auto& row : result.rows) {
    Json values = Json::array();
    for (const auto& value : row) values.push_back(value ? Json(*value) : Json(nullptr));
    rows.push_back(std::move(values));
  }
  Json out{{"columns", std::move(columns)}, {"rows", std::move(rows)}, {"affected", result.affected}};
  const Json plan = PlanJson(result.plan);
  for (const auto& [key, value] : plan.items()) {
    if (!out.contains(key)) out[key] = value;
  }
  return out;
}

void SetPlace(Json& out, int position, int line, int column) {
  if (position <= 0) return;
  out["position"] = position;
  out["line"] = line;
  out["column"] = column;
}

// For a catch block: the error being handled, as --json prints it
// ({"kind": ..., "message": ..., and the fields that apply}), and the exit
// code main.cpp gives it (2 for a bad configuration, else 1).
std::pair<Json, int> CurrentErrorJson() {
  Json out;
  int code = 1;
  const auto shard_error = [&out](const char* kind, const shardkit::ShardError& e) {
    out["kind"] = kind;
    out["message"] = e.what();
    out["shard"] = shardkit::ToInt(e.shard());
    if (!e.sqlstate().empty()) out["sqlstate"] = e.sqlstate();
  };
  try {
    throw;
  } catch (const shardkit::SqlError& e) {
    if (e.kind() == shardkit::SqlError::Kind::kSyntax) {
      out["kind"] = "syntax";
      out["message"] = e.message();
      out["sqlstate"] = "42601";  // syntax_error: PostgreSQL's parser, run before any shard is asked
    } else {
      out["kind"] = "refused";
      out["message"] = e.message();
      out["construct"] = e.construct();
      out["reason"] = e.reason();
      out["advice"] = e.advice();
    }
    SetPlace(out, e.position(), e.line(), e.column());
  } catch (const shardkit::ShardQueryError& e) {
    shard_error("server", e);
  } catch (const shardkit::ShardUnavailable& e) {
    shard_error("unavailable", e);
  } catch (const shardkit::OutcomeUnknown& e) {
    shard_error("outcome_unknown", e);
  } catch (const shardkit::ShardError& e) {  // a pool's timeout, a refused bucket, no replica
    shard_error("shard", e);
  } catch (const shardkit::ScatterError& e) {
    out["kind"] = "scatter";
    out["message"] = e.what();
    Json failures = Json::array();
    std::optional<std::string> sqlstate;
    bool one_sqlstate = true;
    for (const auto& failure : e.failures()) {
      Json f{{"shard", shardkit::ToInt(failure.shard)}, {"message", failure.cause}};
      if (!failure.sqlstate.empty()) f["sqlstate"] = failure.sqlstate;
      if (failure.stale_directory) f["stale_directory"] = true;
      failures.push_back(std::move(f));
      if (sqlstate && *sqlstate != failure.sqlstate) one_sqlstate = false;
      sqlstate = failure.sqlstate;
    }
    // The failures' SQLSTATE when they all have the same one.
    if (one_sqlstate && sqlstate && !sqlstate->empty()) out["sqlstate"] = *sqlstate;
    out["failures"] = std::move(failures);
  } catch (const shardkit::UnmergeableQuery& e) {
    out["kind"] = "unmergeable";
    out["message"] = e.what();
  } catch (const shardkit::ConfigError& e) {
    out["kind"] = "config";
    out["message"] = e.what();
    out["key"] = e.key();
    code = 2;
  } catch (const shardkit::CatalogError& e) {
    out["kind"] = "catalog";
    out["message"] = e.what();
  } catch (const std::exception& e) {
    out["kind"] = "error";
    out["message"] = e.what();
  }
  return {std::move(out), code};
}

}  // namespace

void PrintAligned(const shardkit::SqlResult& result) {
  if (result.columns.empty()) {
    fmt::print("{} {}\n", result.plan.statement, result.affected);
    return;
  }
  std::vector<std::size_t> widths;
  for (const auto& c : result.columns) widths.push_back(Width(c));
  for (const auto& row : result.rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], Width(row[i].value_or("")));
  }
  std::string header;
  std::string rule;
  for (std::size_t i = 0; i < widths.size(); ++i) {
    const std::size_t left = (widths[i] - Width(result.columns[i])) / 2;
    header += (i ? " | " : " ") + Pad(std::string(left, ' ') + result.columns[i], widths[i], false);
    rule += (i ? "-+-" : "-") + std::string(widths[i], '-');
  }
  fmt::print("{}\n{}-\n", header, rule);
  for (const auto& row : result.rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += (i ? " | " : " ") +
              Pad(row[i].value_or(""), widths[i], i < result.types.size() && IsNumeric(result.types[i]));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
  fmt::print("({} row{})\n", result.rows.size(), result.rows.size() == 1 ? "" : "s");
}

void AddSqlCommand(CLI::App& app, CliContext& context) {
  auto* sql = app.add_subcommand("sql",
                                 "run one SQL statement: on its customer's shard, or over every shard merged into the "
                                 "unsharded answer (or say why not)");
  sql->footer(
      "Parameters: -p VALUE and -n are $1, $2... in the order given: -p 1 -n -p x runs with $1 = '1', $2 = NULL, "
      "$3 = 'x'.\n"
      "--json prints {\"columns\": [{\"name\", \"type\", \"oid\"}...], \"rows\": [[text or null, ...]...], "
      "\"affected\", and the plan's fields (plan, kind, shard, statement...)}; an error prints {\"error\": {\"kind\": "
      "syntax|refused|server|unavailable|scatter|..., \"message\", and what applies: sqlstate, line, column, "
      "position, construct, reason, advice, shard, failures}} on stdout, with the same exit code as without --json.");
  auto text = std::make_shared<std::string>();
  auto params = std::make_shared<shardkit::SqlParams>();
  auto explain = std::make_shared<bool>(false);
  sql->add_option("statement", *text, "the statement; $1, $2... are the -p (and -n) values in order")->required();
  // Each occurrence appends when it is parsed, so -p and -n keep their order
  // across each other (one value per -p: "[1,2]" is one parameter).
  sql->add_option_function<std::string>(
         "-p,--param", [params](const std::string& value) { params->emplace_back(value); },
         "a parameter value: the next of $1, $2... (repeat)")
      ->trigger_on_parse();
  sql->add_flag_callback(
         "-n,--null", [params] { params->emplace_back(std::nullopt); }, "a NULL as the next parameter")
      ->trigger_on_parse();
  sql->add_flag("--explain", *explain, "say where it would run, without running it");
  sql->final_callback([&context, text, params, explain] {
    try {
      const auto cluster = shardkit::Cluster::Open(context.LoadConfig());
      if (*explain) {
        const shardkit::SqlPlanInfo plan = cluster->Explain(*text, *params);
        if (context.json) {
          fmt::print("{}\n", Dump(PlanJson(plan)));
        } else {
          fmt::print("{}\n", plan.Describe());
        }
        return;
      }
      const shardkit::SqlResult result = cluster->Execute(*text, *params);
      if (context.json) {
        fmt::print("{}\n", Dump(ResultJson(result)));
      } else {
        PrintAligned(result);
      }
    } catch (const std::exception&) {
      if (!context.json) throw;  // main.cpp prints it on stderr
      auto [error, code] = CurrentErrorJson();
      fmt::print("{}\n", Dump(Json{{"error", std::move(error)}}));
      throw ErrorPrinted(code);
    }
  });
}
