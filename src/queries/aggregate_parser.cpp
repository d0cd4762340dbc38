// The aggregate parser (aggregate_parser.hpp).
#include "queries/aggregate_parser.hpp"

#include <cctype>
#include <set>

#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace {

constexpr std::string_view kSelectItem = "the select item";

enum class AggregateClass { kMergeable, kHolistic, kOrderedList, kStatistic, kBoolOrBit, kNone };

AggregateClass Classify(std::string_view name) {
  static const std::set<std::string_view> kMergeable = {"count", "sum", "min", "max", "avg"};
  static const std::set<std::string_view> kHolistic = {"median", "percentile_cont", "percentile_disc", "mode",
                                                       "rank",   "dense_rank",      "percent_rank",    "cume_dist"};
  static const std::set<std::string_view> kOrderedList = {
      "string_agg", "array_agg",       "json_agg",         "jsonb_agg",     "json_object_agg", "jsonb_object_agg",
      "xmlagg",     "json_agg_strict", "jsonb_agg_strict", "json_arrayagg", "json_objectagg",  "range_agg"};
  static const std::set<std::string_view> kStatistic = {
      "stddev",         "stddev_pop", "stddev_samp", "variance",  "var_pop",   "var_samp",
      "covar_pop",      "covar_samp", "corr",        "regr_avgx", "regr_avgy", "regr_count",
      "regr_intercept", "regr_r2",    "regr_slope",  "regr_sxx",  "regr_sxy",  "regr_syy"};
  static const std::set<std::string_view> kBoolOrBit = {
      "bool_and", "bool_or", "every", "bit_and", "bit_or", "bit_xor", "range_intersect_agg"};
  if (kMergeable.contains(name)) return AggregateClass::kMergeable;
  if (kHolistic.contains(name)) return AggregateClass::kHolistic;
  if (kOrderedList.contains(name)) return AggregateClass::kOrderedList;
  if (kStatistic.contains(name)) return AggregateClass::kStatistic;
  if (kBoolOrBit.contains(name)) return AggregateClass::kBoolOrBit;
  return AggregateClass::kNone;
}

std::string HolisticMessage(const std::string& call, const std::string& name) {
  if (name == "median") {
    return call +
           " cannot be merged from per-shard partials: the median of the shards' medians is not "
           "the median of all rows. Ask for it exactly with Median() and Percentiles() (distributed "
           "selection, shardkit/queries/percentile.hpp), or use an approximate quantile sketch.";
  }
  if (name == "mode") {
    return call +
           " cannot be merged from per-shard partials: the most common value on each shard need "
           "not be the most common overall. Merge per-value counts instead (GROUP BY the value with "
           "count(*)) and ORDER BY that count DESC LIMIT 1 after the merge.";
  }
  if (name == "percentile_cont" || name == "percentile_disc") {
    return call +
           " cannot be merged from per-shard partials: no combination of per-shard percentiles "
           "gives the percentile of all rows. Ask for it exactly with PercentileCont()/PercentileDisc() "
           "and Percentiles() (distributed selection, shardkit/queries/percentile.hpp), or use an "
           "approximate quantile sketch.";
  }
  return call +
         " cannot be merged from per-shard partials: a row's rank depends on the rows of every "
         "shard. Fetch the rows and compute it in one place.";
}

// Functions whose value is not the same on every shard for the same row:
// random or sequence values, and facts about the server or session.
bool IsVolatile(std::string_view name) {
  static const std::set<std::string_view> kNames = {"random",
                                                    "random_normal",
                                                    "setseed",
                                                    "gen_random_uuid",
                                                    "uuid_generate_v1",
                                                    "uuid_generate_v1mc",
                                                    "uuid_generate_v4",
                                                    "gen_random_bytes",
                                                    "gen_salt",
                                                    "nextval",
                                                    "currval",
                                                    "lastval",
                                                    "setval",
                                                    "pg_backend_pid",
                                                    "inet_server_addr",
                                                    "inet_server_port",
                                                    "txid_current",
                                                    "txid_current_if_assigned",
                                                    "pg_current_xact_id",
                                                    "pg_current_xact_id_if_assigned",
                                                    "pg_current_wal_lsn",
                                                    "pg_postmaster_start_time",
                                                    "pg_conf_load_time"};
  return kNames.contains(name);
}

// The current time, as functions or as SQL's value keywords (no parentheses needed).
bool IsClockFunction(std::string_view name) {
  static const std::set<std::string_view> kNames = {"now", "transaction_timestamp", "statement_timestamp",
                                                    "clock_timestamp", "timeofday"};
  return kNames.contains(name);
}
bool IsClockKeyword(std::string_view word) {
  static const std::set<std::string_view> kWords = {"current_timestamp", "current_date", "current_time", "localtime",
                                                    "localtimestamp"};
  return kWords.contains(word);
}
// 'now', 'today', 'tomorrow', 'yesterday' read as a date or time.
bool IsClockLiteral(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto first = text.find_first_not_of(' ');
  const auto last = text.find_last_not_of(' ');
  if (first == std::string::npos) return false;
  text = text.substr(first, last - first + 1);
  return text == "now" || text == "today" || text == "tomorrow" || text == "yesterday";
}
bool IsDateTimeTypeWord(std::string_view word) {
  static const std::set<std::string_view> kWords = {"timestamp", "timestamptz", "date", "time", "timetz"};
  return kWords.contains(word);
}

bool IsName(const Token& t) {
  return t.type == Token::Type::kIdent || t.type == Token::Type::kQuotedIdent;
}

// age(x) with one argument is age(current_date, x).
bool IsOneArgumentCall(const std::vector<Token>& tokens, std::size_t open, std::size_t end) {
  int depth = 0;
  for (std::size_t i = open; i < end; ++i) {
    if (IsPunct(tokens[i], '(') || IsPunct(tokens[i], '[')) ++depth;
    if (IsPunct(tokens[i], ')') || IsPunct(tokens[i], ']')) {
      if (--depth == 0) return true;
    }
    if (depth == 1 && IsPunct(tokens[i], ',')) return false;
  }
  return true;
}

std::string CollationAfter(const std::vector<Token>& tokens, std::size_t collate, std::size_t end) {
  // COLLATE name, or COLLATE schema.name: the last part names the collation.
  std::size_t i = collate + 1;
  std::string name;
  while (i < end && IsName(tokens[i])) {
    name = tokens[i].text;  // quoted: as written; unquoted: lowercased, as the server folds it
    if (i + 2 < end && IsPunct(tokens[i + 1], '.') && IsName(tokens[i + 2])) {
      i += 2;
      continue;
    }
    break;
  }
  return name;
}

bool IsBytewiseCollation(const std::string& name) {
  // "default" is the database's, which the pools check is C.
  return name == "C" || name == "POSIX" || name == "default" || name == "c" || name == "posix";
}

}  // namespace

void RequireRowLocal(const std::vector<Token>& tokens, std::size_t begin, std::size_t end, const std::string& subject,
                     bool merged_text) {
  for (std::size_t i = begin; i < end; ++i) {
    const Token& t = tokens[i];
    const bool opens_subquery =
        IsPunct(t, '(') && i + 1 < end &&
        (IsWord(tokens[i + 1], "values") || IsWord(tokens[i + 1], "table") || IsWord(tokens[i + 1], "with"));
    if (IsWord(t, "select") || opens_subquery) {
      throw UnmergeableQuery(
          subject +
          " contains a subquery: each shard runs it over its own rows only, so it can see other rows "
          "than one server would and the merged answer differs. Compute it first and pass the result "
          "as a parameter (e.g. x = ANY($1)), or join a co-located or reference table in the FROM clause.");
    }
    const bool call = t.type == Token::Type::kIdent && i + 1 < end && IsPunct(tokens[i + 1], '(');
    if (call && IsVolatile(t.text)) {
      throw UnmergeableQuery(subject + " calls " + t.text +
                             "(), whose value differs from shard to shard (volatile, or a fact about one "
                             "server): the merged answer would not be what one server computes. Compute the "
                             "value in the application and pass it as a parameter.");
    }
    const bool literal_time =
        t.type == Token::Type::kString && IsClockLiteral(t.text) &&
        ((i + 1 < end && tokens[i + 1].type == Token::Type::kOperator && tokens[i + 1].text == "::") ||
         (i + 1 < end && IsWord(tokens[i + 1], "as")) ||
         (i > begin && tokens[i - 1].type == Token::Type::kIdent && IsDateTimeTypeWord(tokens[i - 1].text)));
    const bool clock_call =
        call && (IsClockFunction(t.text) || (t.text == "age" && IsOneArgumentCall(tokens, i + 1, end)));
    if (clock_call || (t.type == Token::Type::kIdent && IsClockKeyword(t.text)) || literal_time) {
      const std::string what = t.type == Token::Type::kString ? "'" + t.text + "'" : call ? t.text + "()" : t.text;
      throw UnmergeableQuery(subject + " uses " + what +
                             ": each shard reads the clock at its own moment, so rows near the boundary "
                             "fall differently than on one server. Pass the instant as a parameter, e.g. "
                             "ordered_at >= $1::timestamptz, so every shard uses the same one.");
    }
    if (merged_text && IsWord(t, "collate")) {
      const std::string collation = CollationAfter(tokens, i, end);
      if (!IsBytewiseCollation(collation)) {
        throw UnmergeableQuery(subject + " uses COLLATE \"" + collation +
                               "\": shardkit merges text in byte order (the C collation), so keys, MIN/MAX, "
                               "ORDER BY and HAVING on it would differ from the server's. Drop the COLLATE "
                               "clause or use COLLATE \"C\", and order by that collation in the application.");
      }
    }
  }
}

void CheckKeyExpression(std::string_view expression, const std::string& name) {
  const std::vector<Token> tokens = Lex(expression, "the group key expression");
  if (tokens.empty()) throw UnmergeableQuery("group key \"" + name + "\": the expression is empty");
  RequireRowLocal(tokens, 0, tokens.size(), "group key \"" + name + "\" (" + std::string(expression) + ")", true);
}

void CheckCondition(std::string_view condition) {
  const std::vector<Token> tokens = Lex(condition, "the WHERE condition");
  RequireRowLocal(tokens, 0, tokens.size(), "WHERE " + std::string(condition), false);
}

namespace {

bool IsShardKeyArgument(const std::vector<Token>& tokens, const std::string& shard_key) {
  // column, table.column or schema.table.column, naming the shard key.
  if (tokens.empty() || tokens.size() % 2 == 0) return false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool want_name = i % 2 == 0;
    if (want_name && !IsName(tokens[i])) return false;
    if (!want_name && !IsPunct(tokens[i], '.')) return false;
  }
  return tokens.back().text == shard_key;
}

[[noreturn]] void Unparsable(std::string_view text, const std::string& why) {
  throw UnmergeableQuery("cannot read the select item \"" + std::string(text) + "\": " + why);
}

}  // namespace

ParsedAggregate ParseAggregateCall(std::string_view text, const std::string& shard_key) {
  const std::vector<Token> tokens = Lex(text, kSelectItem);
  const std::string call(text);
  if (tokens.empty()) throw UnmergeableQuery("empty select item: write an aggregate call such as sum(x)");

  // First, any refused aggregate anywhere gets its own explanation.
  bool has_aggregate = false;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (tokens[i].type != Token::Type::kIdent || !IsPunct(tokens[i + 1], '(')) continue;
    const std::string& name = tokens[i].text;
    switch (Classify(name)) {
      case AggregateClass::kHolistic:
        throw UnmergeableQuery(HolisticMessage(call, name));
      case AggregateClass::kOrderedList:
        throw UnmergeableQuery(call +
                               " cannot be merged exactly: the shards build their lists independently, so the "
                               "element order of a concatenation differs from one server's (an ORDER BY inside the "
                               "aggregate orders each shard's part only). Fetch the rows with an ORDER BY and build "
                               "the list in the application.");
      case AggregateClass::kStatistic:
        throw UnmergeableQuery(call +
                               " is not merged by shardkit (it merges count, sum, min, max and avg): select "
                               "count(x), sum(x) and sum(x*x) as separate columns (exact numeric) and compute the "
                               "statistic from the merged values.");
      case AggregateClass::kBoolOrBit:
        throw UnmergeableQuery(call +
                               " is not merged by shardkit (it merges count, sum, min, max and avg): "
                               "use min(x::int) for bool_and/every and max(x::int) for bool_or, "
                               "or fetch the values.");
      case AggregateClass::kMergeable:
        has_aggregate = true;
        break;
      case AggregateClass::kNone:
        break;
    }
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (IsWord(tokens[i], "over")) {
      throw UnmergeableQuery(call +
                             " is a window function (OVER): it sees every row of every shard, so "
                             "it cannot be merged from partials; compute it over the merged rows.");
    }
    if (IsWord(tokens[i], "within") && i + 1 < tokens.size() && IsWord(tokens[i + 1], "group")) {
      throw UnmergeableQuery(HolisticMessage(call, "ordered-set"));
    }
  }

  const bool single_call = tokens.size() >= 3 && tokens[0].type == Token::Type::kIdent && IsPunct(tokens[1], '(');
  if (!has_aggregate) {
    if (single_call && Classify(tokens[0].text) == AggregateClass::kNone) {
      throw UnmergeableQuery(call +
                             " is not an aggregate shardkit can merge (count, sum, min, max, avg); "
                             "if it is not an aggregate at all, declare it as a group key with "
                             "GroupByExpr.");
    }
    throw UnmergeableQuery(call +
                           " contains no aggregate call: declare group keys with GroupBy or "
                           "GroupByExpr, aggregates as count(x), sum(x), min(x), max(x) or avg(x).");
  }
  const std::string expression_message =
      call +
      " puts aggregates inside an expression: the expression's per-shard values do not merge "
      "(sum(a)-sum(b), avg(x)*2 or sum(a)/sum(b) per shard do not add up to the overall value). "
      "Select each aggregate as its own column (e.g. sum(a) and sum(b)) and compute the "
      "expression from the merged row.";
  if (!single_call || Classify(tokens[0].text) != AggregateClass::kMergeable) {
    throw UnmergeableQuery(expression_message);
  }
  const std::size_t close = MatchingParen(tokens, 1, text, kSelectItem);
  std::size_t next = close + 1;
  ParsedAggregate out;
  out.function = tokens[0].text;
  if (next < tokens.size() && IsWord(tokens[next], "filter")) {
    if (next + 2 >= tokens.size() || !IsPunct(tokens[next + 1], '(') || !IsWord(tokens[next + 2], "where")) {
      Unparsable(text, "FILTER must be followed by (WHERE ...)");
    }
    const std::size_t filter_close = MatchingParen(tokens, next + 1, text, kSelectItem);
    // A FILTER decides which rows count: row-local, or each shard decides differently.
    RequireRowLocal(tokens, next + 2, filter_close, call, false);
    out.filter = " FILTER " +
                 std::string(text.substr(tokens[next + 1].begin, tokens[filter_close].end - tokens[next + 1].begin));
    for (std::size_t i = next + 2; i < filter_close; ++i) {
      if (tokens[i].type == Token::Type::kIdent && i + 1 < filter_close && IsPunct(tokens[i + 1], '(') &&
          Classify(tokens[i].text) != AggregateClass::kNone) {
        Unparsable(text, "aggregate calls are not allowed in FILTER");
      }
    }
    next = filter_close + 1;
  }
  if (next != tokens.size()) throw UnmergeableQuery(expression_message);

  // The argument list.
  std::vector<Token> inner(tokens.begin() + 2, tokens.begin() + static_cast<std::ptrdiff_t>(close));
  if (inner.empty()) Unparsable(text, out.function + "() needs an argument");
  RequireRowLocal(inner, 0, inner.size(), call, true);
  int depth = 0;
  for (std::size_t i = 0; i < inner.size(); ++i) {
    if (IsPunct(inner[i], '(') || IsPunct(inner[i], '[')) ++depth;
    if (IsPunct(inner[i], ')') || IsPunct(inner[i], ']')) --depth;
    if (depth == 0 && IsPunct(inner[i], ',')) {
      Unparsable(text, out.function + "() takes one argument");
    }
    if (depth == 0 && IsWord(inner[i], "order") && i + 1 < inner.size() && IsWord(inner[i + 1], "by")) {
      throw UnmergeableQuery(call +
                             " has an ORDER BY inside the aggregate: it would be applied on each "
                             "shard separately; " +
                             out.function +
                             " does not depend on input order, "
                             "so drop the ORDER BY.");
    }
    if (inner[i].type == Token::Type::kIdent && i + 1 < inner.size() && IsPunct(inner[i + 1], '(') &&
        Classify(inner[i].text) == AggregateClass::kMergeable) {
      throw UnmergeableQuery(call +
                             " nests aggregate calls, which SQL does not allow; select the inner "
                             "aggregate and compute the outer one from the merged rows.");
    }
  }
  std::size_t first = 0;
  if (IsWord(inner[0], "distinct")) {
    out.distinct = true;
    first = 1;
  } else if (IsWord(inner[0], "all")) {
    first = 1;
  }
  if (first >= inner.size()) Unparsable(text, "missing argument after DISTINCT/ALL");
  out.argument_tokens.assign(inner.begin() + static_cast<std::ptrdiff_t>(first), inner.end());
  if (out.argument_tokens.size() == 1 && out.argument_tokens[0].type == Token::Type::kOperator &&
      out.argument_tokens[0].text == "*") {
    if (out.function != "count" || out.distinct) Unparsable(text, "only count(*) takes *");
    out.count_star = true;
  } else {
    out.argument = std::string(text.substr(out.argument_tokens.front().begin,
                                           out.argument_tokens.back().end - out.argument_tokens.front().begin));
  }
  if (out.distinct && (out.function == "count" || out.function == "sum" || out.function == "avg") &&
      !IsShardKeyArgument(out.argument_tokens, shard_key)) {
    throw UnmergeableQuery(call +
                           " cannot be merged from per-shard partials: the same value can be on several shards, "
                           "so per-shard DISTINCT results over-count it. Ask for it exactly with "
                           "CountDistinctValues() and Percentiles() (each shard's distinct values merged, "
                           "shardkit/queries/percentile.hpp), or use an approximate distinct-count sketch "
                           "(HyperLogLog). Only the shard key (" +
                           shard_key + ") never spans shards, so " + out.function + "(DISTINCT " + shard_key +
                           ") is merged exactly.");
  }
  if (out.distinct && (out.function == "min" || out.function == "max")) out.distinct = false;  // no effect
  return out;
}

}  // namespace shardkit::detail
