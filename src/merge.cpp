// Merge plans: per-shard partial rows -> the rows one unsharded server returns.
#include "shardkit/merge.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <utility>

#include "shardkit/errors.hpp"
#include "shardkit/pool.hpp"
#include "shardkit/resolver.hpp"

namespace shardkit {

// ---------------------------------------------------------------------------
// Identifiers
// ---------------------------------------------------------------------------

std::string QuoteIdentifier(std::string_view identifier) {
  if (identifier.empty()) throw UnmergeableQuery("empty identifier: name the column");
  std::string out = "\"";
  for (const char c : identifier) {
    if (c == '\0') throw UnmergeableQuery("identifier contains a NUL byte");
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

namespace {

constexpr TypeOid kRealOid = 700;

std::string RoleName(MergeColumn::Role role) {
  switch (role) {
    case MergeColumn::Role::kGroupKey: return "key";
    case MergeColumn::Role::kCount: return "COUNT";
    case MergeColumn::Role::kSum: return "SUM";
    case MergeColumn::Role::kMin: return "MIN";
    case MergeColumn::Role::kMax: return "MAX";
    case MergeColumn::Role::kAvg: return "AVG";
  }
  return "?";
}

std::string OpText(CompareOp op) {
  switch (op) {
    case CompareOp::kEq: return "=";
    case CompareOp::kNe: return "<>";
    case CompareOp::kLt: return "<";
    case CompareOp::kLe: return "<=";
    case CompareOp::kGt: return ">";
    case CompareOp::kGe: return ">=";
    case CompareOp::kIsNull: return "IS NULL";
    case CompareOp::kIsNotNull: return "IS NOT NULL";
  }
  return "?";
}

bool NullsFirst(const SortKey& key) {
  if (key.nulls == NullsOrder::kDefault) return key.direction == SortDirection::kDesc;
  return key.nulls == NullsOrder::kFirst;
}

// ---------------------------------------------------------------------------
// A small SQL lexer: enough to find aggregate calls in one select item
// without being fooled by strings, quoted identifiers or comments.
// ---------------------------------------------------------------------------

struct Token {
  enum class Type { kIdent, kQuotedIdent, kNumber, kString, kParam, kPunct, kOperator };
  Type type;
  std::string text;  // identifiers lowercased; quoted identifiers unquoted
  std::size_t begin;
  std::size_t end;
};

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool IsIdentChar(char c) {
  return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '$';
}
bool IsOperatorChar(char c) { return std::string_view("+-*/<>=~!@#%^&|`?").find(c) != std::string_view::npos; }

[[noreturn]] void Unparsable(std::string_view text, const std::string& why) {
  throw UnmergeableQuery("cannot read the select item \"" + std::string(text) + "\": " + why);
}

std::vector<Token> Lex(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  const std::size_t n = s.size();
  auto quoted = [&](std::size_t start, char quote, bool backslash_escapes) {
    std::size_t j = start + 1;
    std::string body;
    while (true) {
      if (j >= n) Unparsable(s, "unterminated quote");
      if (backslash_escapes && s[j] == '\\' && j + 1 < n) {
        body.push_back(s[j + 1]);
        j += 2;
        continue;
      }
      if (s[j] == quote) {
        if (j + 1 < n && s[j + 1] == quote) {
          body.push_back(quote);
          j += 2;
          continue;
        }
        return std::make_pair(j + 1, body);
      }
      body.push_back(s[j]);
      ++j;
    }
  };
  while (i < n) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '-' && i + 1 < n && s[i + 1] == '-') {
      while (i < n && s[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      int depth = 0;
      do {
        if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
          ++depth;
          i += 2;
        } else if (i + 1 < n && s[i] == '*' && s[i + 1] == '/') {
          --depth;
          i += 2;
        } else if (i >= n) {
          Unparsable(s, "unterminated comment");
        } else {
          ++i;
        }
      } while (depth > 0);
    } else if (c == '\'') {
      auto [end, body] = quoted(i, '\'', false);
      out.push_back({Token::Type::kString, body, i, end});
      i = end;
    } else if (c == '"') {
      auto [end, body] = quoted(i, '"', false);
      out.push_back({Token::Type::kQuotedIdent, body, i, end});
      i = end;
    } else if (c == '$' && i + 1 < n && std::isdigit(static_cast<unsigned char>(s[i + 1])) != 0) {
      std::size_t j = i + 1;
      while (j < n && std::isdigit(static_cast<unsigned char>(s[j])) != 0) ++j;
      out.push_back({Token::Type::kParam, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else if (c == '$') {
      // Dollar quoting: $tag$ ... $tag$
      std::size_t j = i + 1;
      while (j < n && s[j] != '$' && IsIdentChar(s[j])) ++j;
      if (j >= n || s[j] != '$') Unparsable(s, "stray '$'");
      const std::string_view tag = s.substr(i, j - i + 1);
      const std::size_t close = s.find(tag, j + 1);
      if (close == std::string_view::npos) Unparsable(s, "unterminated dollar quote");
      out.push_back({Token::Type::kString, std::string(s.substr(j + 1, close - j - 1)), i, close + tag.size()});
      i = close + tag.size();
    } else if (IsIdentStart(c)) {
      std::size_t j = i;
      while (j < n && IsIdentChar(s[j])) ++j;
      std::string word(s.substr(i, j - i));
      std::string lower = word;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      // E'..', B'..', X'..', N'..' string constants
      if (j < n && s[j] == '\'' && (lower == "e" || lower == "b" || lower == "x" || lower == "n")) {
        auto [end, body] = quoted(j, '\'', lower == "e");
        out.push_back({Token::Type::kString, body, i, end});
        i = end;
        continue;
      }
      out.push_back({Token::Type::kIdent, lower, i, j});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0 ||
               (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(s[i + 1])) != 0)) {
      std::size_t j = i;
      while (j < n && (std::isdigit(static_cast<unsigned char>(s[j])) != 0 || s[j] == '.')) ++j;
      if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < n && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < n && std::isdigit(static_cast<unsigned char>(s[k])) != 0) {
          j = k;
          while (j < n && std::isdigit(static_cast<unsigned char>(s[j])) != 0) ++j;
        }
      }
      out.push_back({Token::Type::kNumber, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else if (c == '(' || c == ')' || c == ',' || c == '[' || c == ']' || c == ';' || c == '.') {
      out.push_back({Token::Type::kPunct, std::string(1, c), i, i + 1});
      ++i;
    } else if (c == ':' && i + 1 < n && s[i + 1] == ':') {
      out.push_back({Token::Type::kOperator, "::", i, i + 2});
      i += 2;
    } else if (IsOperatorChar(c) || c == ':') {
      std::size_t j = i;
      while (j < n && (IsOperatorChar(s[j]) || s[j] == ':')) ++j;
      out.push_back({Token::Type::kOperator, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else {
      Unparsable(s, std::string("unexpected character '") + c + "'");
    }
  }
  return out;
}

bool IsPunct(const Token& t, char c) { return t.type == Token::Type::kPunct && t.text.size() == 1 && t.text[0] == c; }
bool IsWord(const Token& t, std::string_view w) { return t.type == Token::Type::kIdent && t.text == w; }

// Index of the ')' matching the '(' at `open`.
std::size_t MatchingParen(const std::vector<Token>& tokens, std::size_t open, std::string_view text) {
  int depth = 0;
  for (std::size_t i = open; i < tokens.size(); ++i) {
    if (IsPunct(tokens[i], '(')) ++depth;
    if (IsPunct(tokens[i], ')')) {
      if (--depth == 0) return i;
    }
  }
  Unparsable(text, "unbalanced parentheses");
}

enum class AggregateClass { kMergeable, kHolistic, kOrderedList, kStatistic, kBoolOrBit, kNone };

AggregateClass Classify(std::string_view name) {
  static const std::set<std::string_view> kMergeable = {"count", "sum", "min", "max", "avg"};
  static const std::set<std::string_view> kHolistic = {"median", "percentile_cont", "percentile_disc", "mode",
                                                       "rank", "dense_rank", "percent_rank", "cume_dist"};
  static const std::set<std::string_view> kOrderedList = {
      "string_agg", "array_agg", "json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg",
      "xmlagg", "json_agg_strict", "jsonb_agg_strict", "json_arrayagg", "json_objectagg", "range_agg"};
  static const std::set<std::string_view> kStatistic = {
      "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp", "covar_pop",
      "covar_samp", "corr", "regr_avgx", "regr_avgy", "regr_count", "regr_intercept", "regr_r2",
      "regr_slope", "regr_sxx", "regr_sxy", "regr_syy"};
  static const std::set<std::string_view> kBoolOrBit = {"bool_and", "bool_or", "every", "bit_and",
                                                        "bit_or", "bit_xor", "range_intersect_agg"};
  if (kMergeable.contains(name)) return AggregateClass::kMergeable;
  if (kHolistic.contains(name)) return AggregateClass::kHolistic;
  if (kOrderedList.contains(name)) return AggregateClass::kOrderedList;
  if (kStatistic.contains(name)) return AggregateClass::kStatistic;
  if (kBoolOrBit.contains(name)) return AggregateClass::kBoolOrBit;
  return AggregateClass::kNone;
}

std::string HolisticMessage(const std::string& call, const std::string& name) {
  if (name == "median") {
    return call + " cannot be merged from per-shard partials: the median of the shards' medians is not "
                  "the median of all rows. Fetch the values (or per-value counts: GROUP BY the value with "
                  "count(*)) and compute it in one place, or use an approximate quantile sketch.";
  }
  if (name == "mode") {
    return call + " cannot be merged from per-shard partials: the most common value on each shard need "
                  "not be the most common overall. Merge per-value counts instead (GROUP BY the value with "
                  "count(*)) and ORDER BY that count DESC LIMIT 1 after the merge.";
  }
  if (name == "percentile_cont" || name == "percentile_disc") {
    return call + " cannot be merged from per-shard partials: no combination of per-shard percentiles "
                  "gives the percentile of all rows. Fetch per-value counts (GROUP BY the value with "
                  "count(*)) and compute it after the merge, or use an approximate quantile sketch.";
  }
  return call + " cannot be merged from per-shard partials: a row's rank depends on the rows of every "
                "shard. Fetch the rows and compute it in one place.";
}

// A parsed, mergeable aggregate call.
struct ParsedAggregate {
  std::string function;  // count, sum, min, max, avg
  bool count_star = false;
  bool distinct = false;
  std::string argument;  // SQL text
  std::string filter;    // " FILTER (WHERE ...)" or empty
  std::vector<Token> argument_tokens;
};

bool IsShardKeyArgument(const std::vector<Token>& tokens, const std::string& shard_key) {
  // column, table.column or schema.table.column, naming the shard key.
  if (tokens.empty() || tokens.size() % 2 == 0) return false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool want_name = i % 2 == 0;
    if (want_name && tokens[i].type != Token::Type::kIdent && tokens[i].type != Token::Type::kQuotedIdent) {
      return false;
    }
    if (!want_name && !IsPunct(tokens[i], '.')) return false;
  }
  return tokens.back().text == shard_key;
}

ParsedAggregate ParseAggregateCall(std::string_view text, const std::string& shard_key) {
  const std::vector<Token> tokens = Lex(text);
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
        throw UnmergeableQuery(
            call + " cannot be merged exactly: the shards build their lists independently, so the "
                   "element order of a concatenation differs from one server's (an ORDER BY inside the "
                   "aggregate orders each shard's part only). Fetch the rows with an ORDER BY and build "
                   "the list in the application.");
      case AggregateClass::kStatistic:
        throw UnmergeableQuery(
            call + " is not merged by shardkit (it merges count, sum, min, max and avg): select "
                   "count(x), sum(x) and sum(x*x) as separate columns (exact numeric) and compute the "
                   "statistic from the merged values.");
      case AggregateClass::kBoolOrBit:
        throw UnmergeableQuery(call + " is not merged by shardkit (it merges count, sum, min, max and avg): "
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
      throw UnmergeableQuery(call + " is a window function (OVER): it sees every row of every shard, so "
                                    "it cannot be merged from partials; compute it over the merged rows.");
    }
    if (IsWord(tokens[i], "within") && i + 1 < tokens.size() && IsWord(tokens[i + 1], "group")) {
      throw UnmergeableQuery(HolisticMessage(call, "ordered-set"));
    }
  }

  const bool single_call = tokens.size() >= 3 && tokens[0].type == Token::Type::kIdent && IsPunct(tokens[1], '(');
  if (!has_aggregate) {
    if (single_call && Classify(tokens[0].text) == AggregateClass::kNone) {
      throw UnmergeableQuery(call + " is not an aggregate shardkit can merge (count, sum, min, max, avg); "
                                    "if it is not an aggregate at all, declare it as a group key with "
                                    "GroupByExpr.");
    }
    throw UnmergeableQuery(call + " contains no aggregate call: declare group keys with GroupBy or "
                                  "GroupByExpr, aggregates as count(x), sum(x), min(x), max(x) or avg(x).");
  }
  const std::string expression_message =
      call + " puts aggregates inside an expression: the expression's per-shard values do not merge "
             "(sum(a)-sum(b), avg(x)*2 or sum(a)/sum(b) per shard do not add up to the overall value). "
             "Select each aggregate as its own column (e.g. sum(a) and sum(b)) and compute the "
             "expression from the merged row.";
  if (!single_call || Classify(tokens[0].text) != AggregateClass::kMergeable) {
    throw UnmergeableQuery(expression_message);
  }
  const std::size_t close = MatchingParen(tokens, 1, text);
  std::size_t next = close + 1;
  ParsedAggregate out;
  out.function = tokens[0].text;
  if (next < tokens.size() && IsWord(tokens[next], "filter")) {
    if (next + 2 >= tokens.size() || !IsPunct(tokens[next + 1], '(') || !IsWord(tokens[next + 2], "where")) {
      Unparsable(text, "FILTER must be followed by (WHERE ...)");
    }
    const std::size_t filter_close = MatchingParen(tokens, next + 1, text);
    out.filter = " FILTER " + std::string(text.substr(tokens[next + 1].begin,
                                                      tokens[filter_close].end - tokens[next + 1].begin));
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
  int depth = 0;
  for (std::size_t i = 0; i < inner.size(); ++i) {
    if (IsPunct(inner[i], '(') || IsPunct(inner[i], '[')) ++depth;
    if (IsPunct(inner[i], ')') || IsPunct(inner[i], ']')) --depth;
    if (depth == 0 && IsPunct(inner[i], ',')) {
      Unparsable(text, out.function + "() takes one argument");
    }
    if (depth == 0 && IsWord(inner[i], "order") && i + 1 < inner.size() && IsWord(inner[i + 1], "by")) {
      throw UnmergeableQuery(call + " has an ORDER BY inside the aggregate: it would be applied on each "
                                    "shard separately; " + out.function + " does not depend on input order, "
                                    "so drop the ORDER BY.");
    }
    if (inner[i].type == Token::Type::kIdent && i + 1 < inner.size() && IsPunct(inner[i + 1], '(') &&
        Classify(inner[i].text) == AggregateClass::kMergeable) {
      throw UnmergeableQuery(call + " nests aggregate calls, which SQL does not allow; select the inner "
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
    throw UnmergeableQuery(
        call + " cannot be merged from per-shard partials: the same value can be on several shards, "
               "so per-shard DISTINCT results over-count it. Group by the value instead (GroupBy with "
               "count(*)) and aggregate the merged groups, or use an approximate distinct-count sketch "
               "(HyperLogLog). Only the shard key (" + shard_key + ") never spans shards, so " +
               out.function + "(DISTINCT " + shard_key + ") is merged exactly.");
  }
  if (out.distinct && (out.function == "min" || out.function == "max")) out.distinct = false;  // no effect
  return out;
}

// ---------------------------------------------------------------------------
// Merging
// ---------------------------------------------------------------------------

// One shard's rows, whatever they came in.
class RowsView {
 public:
  explicit RowsView(ShardId shard) : shard_(shard) {}
  virtual ~RowsView() = default;
  RowsView(const RowsView&) = delete;
  RowsView& operator=(const RowsView&) = delete;
  [[nodiscard]] ShardId Shard() const noexcept { return shard_; }
  [[nodiscard]] virtual std::size_t Columns() const = 0;
  [[nodiscard]] virtual std::string ColumnName(std::size_t c) const = 0;
  [[nodiscard]] virtual TypeOid ColumnType(std::size_t c) const = 0;
  [[nodiscard]] virtual std::size_t Rows() const = 0;
  [[nodiscard]] virtual std::optional<std::string_view> Field(std::size_t r, std::size_t c) const = 0;

 private:
  ShardId shard_;
};

class PqxxRows final : public RowsView {
 public:
  PqxxRows(ShardId shard, const pqxx::result& r) : RowsView(shard), r_(r) {}
  std::size_t Columns() const override { return r_.columns(); }
  std::string ColumnName(std::size_t c) const override {
    return r_.column_name(static_cast<pqxx::row::size_type>(c));
  }
  TypeOid ColumnType(std::size_t c) const override {
    return r_.column_type(static_cast<pqxx::row::size_type>(c));
  }
  std::size_t Rows() const override { return r_.size(); }
  std::optional<std::string_view> Field(std::size_t r, std::size_t c) const override {
    const auto f = r_[static_cast<pqxx::result::size_type>(r)][static_cast<pqxx::row::size_type>(c)];
    if (f.is_null()) return std::nullopt;
    return std::string_view(f.c_str(), f.size());
  }

 private:
  const pqxx::result& r_;
};

class TextRows final : public RowsView {
 public:
  explicit TextRows(const PartialRows& p) : RowsView(p.shard), p_(p) {
    if (p.column_types.size() != p.column_names.size()) {
      throw UnmergeableQuery("shard " + std::to_string(ToInt(p.shard)) + ": partial rows have " +
                             std::to_string(p.column_names.size()) + " column names but " +
                             std::to_string(p.column_types.size()) + " column types");
    }
    for (const auto& row : p.rows) {
      if (row.size() != p.column_names.size()) {
        throw UnmergeableQuery("shard " + std::to_string(ToInt(p.shard)) + ": a partial row has " +
                               std::to_string(row.size()) + " fields for " +
                               std::to_string(p.column_names.size()) + " columns");
      }
    }
  }
  std::size_t Columns() const override { return p_.column_names.size(); }
  std::string ColumnName(std::size_t c) const override { return p_.column_names[c]; }
  TypeOid ColumnType(std::size_t c) const override { return p_.column_types[c]; }
  std::size_t Rows() const override { return p_.rows.size(); }
  std::optional<std::string_view> Field(std::size_t r, std::size_t c) const override {
    const auto& f = p_.rows[r][c];
    if (!f) return std::nullopt;
    return std::string_view(*f);
  }

 private:
  const PartialRows& p_;
};

using Inputs = std::vector<std::unique_ptr<RowsView>>;

struct BoundColumn {
  const MergeColumn* spec = nullptr;
  TypeOid oid = 0;        // partial's type (kAvg: the SUM partial's)
  TypeOid count_oid = 0;  // kAvg only
  bool typed = false;     // some shard reported the type
  PgTypeInfo info;
  std::string output_type;
};

struct Accumulator {
  Value value;            // key, SUM, MIN, MAX, AVG's sum
  std::int64_t count = 0; // COUNT, AVG's count
};

std::optional<std::size_t> FindColumn(const RowsView& r, const std::string& name) {
  for (std::size_t c = 0; c < r.Columns(); ++c) {
    if (name == r.ColumnName(c)) return c;
  }
  return std::nullopt;
}

std::string ColumnList(const RowsView& r) {
  std::string out;
  for (std::size_t c = 0; c < r.Columns(); ++c) {
    if (c) out += ", ";
    out += r.ColumnName(c);
  }
  return out.empty() ? "none" : out;
}

std::int64_t AddChecked(std::int64_t a, std::int64_t b, const std::string& column) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw Error("merged column \"" + column + "\": bigint out of range (as the server would fail too)");
  }
  return out;
}

Value AddValues(const Value& acc, const Value& v, bool real, const std::string& column) {
  if (v.IsNull()) return acc;
  if (acc.IsNull()) return v;
  switch (v.kind()) {
    case Value::Kind::kInt: return Value::Int(AddChecked(acc.AsInt(), v.AsInt(), column));
    case Value::Kind::kDecimal: return Value::Numeric(acc.AsDecimal() + v.AsDecimal());
    case Value::Kind::kDouble:
      if (real) {
        // float4pl adds in single precision
        return Value::Double(static_cast<double>(static_cast<float>(acc.AsDouble()) + static_cast<float>(v.AsDouble())));
      }
      return Value::Double(acc.AsDouble() + v.AsDouble());
    default:
      throw UnmergeableQuery("merged column \"" + column + "\": cannot add " + std::string(KindName(v.kind())) +
                             " values");
  }
}

bool KeyLess(const std::vector<Value>& a, const std::vector<Value>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool an = a[i].IsNull();
    const bool bn = b[i].IsNull();
    if (an != bn) return an;  // NULL keys first; any consistent order groups them
    if (an) continue;
    const int c = CompareValues(a[i], b[i]);
    if (c != 0) return c < 0;
  }
  return false;
}

struct KeyCompare {
  bool operator()(const std::vector<Value>& a, const std::vector<Value>& b) const { return KeyLess(a, b); }
};

void Bind(const MergePlan& plan, const Inputs& inputs, std::vector<BoundColumn>& bound,
          std::vector<std::vector<std::size_t>>& positions, std::vector<std::vector<std::size_t>>& count_positions) {
  const auto& columns = plan.Columns();
  bound.resize(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) bound[c].spec = &columns[c];
  std::vector<ShardId> first_shard(columns.size(), ShardId{-1});
  positions.assign(inputs.size(), std::vector<std::size_t>(columns.size(), 0));
  count_positions.assign(inputs.size(), std::vector<std::size_t>(columns.size(), 0));
  for (std::size_t s = 0; s < inputs.size(); ++s) {
    const RowsView& r = *inputs[s];
    if (r.Columns() == 0 && r.Rows() == 0) continue;  // no answer rows at all
    const ShardId shard = r.Shard();
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const MergeColumn& col = columns[c];
      auto locate = [&](const std::string& partial) -> std::size_t {
        const auto idx = FindColumn(r, partial);
        if (!idx) {
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned no column \"" + partial +
                                 "\" (needed for merged column \"" + col.name + "\"; its columns: " +
                                 ColumnList(r) + "): the plan's partial names must match the per-shard SELECT");
        }
        return *idx;
      };
      const std::size_t idx = locate(col.partial);
      positions[s][c] = idx;
      const TypeOid oid = r.ColumnType(idx);
      TypeOid count_oid = 0;
      if (col.role == MergeColumn::Role::kAvg) {
        count_positions[s][c] = locate(col.partial_count);
        count_oid = r.ColumnType(count_positions[s][c]);
      }
      if (!bound[c].typed) {
        bound[c].typed = true;
        bound[c].oid = oid;
        bound[c].count_oid = count_oid;
        first_shard[c] = shard;
      } else if (bound[c].oid != oid || bound[c].count_oid != count_oid) {
        throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned column \"" + col.partial + "\" as " +
                               TypeInfoFor(oid).name + ", shard " + std::to_string(ToInt(first_shard[c])) + " as " +
                               TypeInfoFor(bound[c].oid).name +
                               ": the shards' schemas differ; align them before merging");
      }
    }
  }
  // Output types, and what cannot be merged for its type.
  for (auto& b : bound) {
    const MergeColumn& col = *b.spec;
    b.info = TypeInfoFor(b.oid);
    const std::string where = "merged column \"" + col.name + "\" (" + RoleName(col.role) + " of \"" + col.partial + "\")";
    if (!b.typed) {
      // No shard sent column metadata: only COUNT's type is certain.
      b.output_type = col.role == MergeColumn::Role::kCount ? "bigint" : "unknown";
      continue;
    }
    const Value::Kind kind = b.info.kind;
    switch (col.role) {
      case MergeColumn::Role::kGroupKey:
        b.output_type = b.info.name;
        break;
      case MergeColumn::Role::kCount:
        if (kind != Value::Kind::kInt) {
          throw UnmergeableQuery(where + ": a partial count must be an integer, got " + b.info.name);
        }
        b.output_type = "bigint";
        break;
      case MergeColumn::Role::kSum:
        if (kind == Value::Kind::kInt) {
          b.output_type = "bigint";
        } else if (kind == Value::Kind::kDecimal || kind == Value::Kind::kDouble) {
          b.output_type = b.info.name;
        } else {
          throw UnmergeableQuery(where + ": shardkit cannot add " + b.info.name +
                                 " values exactly; sum a numeric expression instead");
        }
        break;
      case MergeColumn::Role::kMin:
      case MergeColumn::Role::kMax:
        if (!b.info.orderable) {
          throw UnmergeableQuery(where + ": shardkit cannot order " + b.info.name +
                                 " values exactly as the server does; cast to an orderable type (text in "
                                 "the C collation, numeric, timestamp without time zone)");
        }
        b.output_type = b.info.name;
        break;
      case MergeColumn::Role::kAvg:
        if (TypeInfoFor(b.count_oid).kind != Value::Kind::kInt) {
          throw UnmergeableQuery(where + ": the partial count \"" + col.partial_count + "\" must be an integer, got " +
                                 TypeInfoFor(b.count_oid).name);
        }
        if (b.oid == kRealOid) {
          throw UnmergeableQuery(where + ": the per-shard SUM of a real column is rounded to real, so the "
                                         "average would not match the server's; write avg(x::double "
                                         "precision), which is what avg(real) computes anyway");
        }
        if (kind == Value::Kind::kInt || kind == Value::Kind::kDecimal) {
          b.output_type = "numeric";
        } else if (kind == Value::Kind::kDouble) {
          b.output_type = "double precision";
        } else {
          throw UnmergeableQuery(where + ": shardkit averages integer, numeric and double precision "
                                         "values, not " + b.info.name);
        }
        break;
    }
  }
}

Value Finalize(const BoundColumn& b, const Accumulator& acc) {
  switch (b.spec->role) {
    case MergeColumn::Role::kCount: return Value::Int(acc.count);
    case MergeColumn::Role::kAvg: {
      if (acc.count == 0) return Value::Null();  // AVG of no values is NULL
      if (acc.value.IsNull()) {
        throw UnmergeableQuery("merged column \"" + b.spec->name + "\": count \"" + b.spec->partial_count +
                               "\" is positive but sum \"" + b.spec->partial +
                               "\" is NULL: they must be SUM(x) and COUNT(x) of the same x");
      }
      switch (acc.value.kind()) {
        case Value::Kind::kInt:
          return Value::Numeric(Decimal::FromInt(acc.value.AsInt()).DivideLikePostgres(Decimal::FromInt(acc.count)));
        case Value::Kind::kDecimal:
          return Value::Numeric(acc.value.AsDecimal().DivideLikePostgres(Decimal::FromInt(acc.count)));
        case Value::Kind::kDouble:
          return Value::Double(acc.value.AsDouble() / static_cast<double>(acc.count));
        default:
          throw UnmergeableQuery("merged column \"" + b.spec->name + "\": cannot average " + b.info.name);
      }
    }
    default: return acc.value;
  }
}

bool HavingHolds(const HavingTerm& term, const Value& v, const BoundColumn& b) {
  if (term.op == CompareOp::kIsNull) return v.IsNull();
  if (term.op == CompareOp::kIsNotNull) return !v.IsNull();
  if (v.IsNull() || term.constant.IsNull()) return false;  // unknown is not true
  if (!b.info.orderable && b.spec->role == MergeColumn::Role::kGroupKey && b.typed) {
    throw UnmergeableQuery("HAVING on \"" + term.column + "\": shardkit cannot compare " + b.info.name +
                           " values exactly as the server does");
  }
  int c = 0;
  try {
    c = CompareValues(v, term.constant);
  } catch (const UnmergeableQuery&) {
    throw;
  } catch (const Error& e) {
    throw UnmergeableQuery("HAVING " + term.column + " " + OpText(term.op) + " " + term.constant.ToString() +
                           ": " + e.what());
  }
  switch (term.op) {
    case CompareOp::kEq: return c == 0;
    case CompareOp::kNe: return c != 0;
    case CompareOp::kLt: return c < 0;
    case CompareOp::kLe: return c <= 0;
    case CompareOp::kGt: return c > 0;
    case CompareOp::kGe: return c >= 0;
    default: return false;
  }
}

std::size_t IndexOf(const MergePlan& plan, const std::string& name) {
  const auto& cols = plan.Columns();
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i].name == name) return i;
  }
  throw UnmergeableQuery("no merged column named \"" + name + "\"");
}

MergedResult MergeInputs(const MergePlan& plan, const Inputs& inputs) {
  plan.Validate();
  const auto& columns = plan.Columns();
  std::vector<BoundColumn> bound;
  std::vector<std::vector<std::size_t>> positions;
  std::vector<std::vector<std::size_t>> count_positions;
  Bind(plan, inputs, bound, positions, count_positions);

  std::vector<std::size_t> key_columns;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].role == MergeColumn::Role::kGroupKey) key_columns.push_back(c);
  }
  const bool scalar = key_columns.empty();

  MergedResult out;
  out.shards = inputs.size();
  std::map<std::vector<Value>, std::size_t, KeyCompare> index;
  std::vector<std::vector<Accumulator>> groups;
  std::vector<std::size_t> last_input;  // per group: the input that last contributed
  if (scalar) groups.emplace_back(columns.size());

  for (std::size_t s = 0; s < inputs.size(); ++s) {
    const RowsView& r = *inputs[s];
    const ShardId shard = r.Shard();
    if (r.Columns() == 0 && r.Rows() == 0) continue;
    if (scalar && r.Rows() > 1) {
      throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned " + std::to_string(r.Rows()) +
                             " rows for a plan without group keys: declare the per-shard GROUP BY columns "
                             "as keys (MergePlan::Key)");
    }
    for (std::size_t row = 0; row < r.Rows(); ++row) {
      ++out.rows_in;
      auto read = [&](std::size_t c, std::size_t pos, TypeOid oid, const std::string& partial) {
        try {
          return ReadValue(r.Field(row, pos), oid);
        } catch (const Error& e) {
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + ", column \"" + partial + "\" (merged \"" +
                                 columns[c].name + "\"): " + e.what());
        }
      };
      std::size_t g = 0;
      if (!scalar) {
        std::vector<Value> key;
        key.reserve(key_columns.size());
        for (const std::size_t c : key_columns) key.push_back(read(c, positions[s][c], bound[c].oid, columns[c].partial));
        auto [it, inserted] = index.try_emplace(std::move(key), groups.size());
        if (inserted) {
          groups.emplace_back(columns.size());
          last_input.push_back(s);
          for (std::size_t k = 0; k < key_columns.size(); ++k) {
            groups.back()[key_columns[k]].value = it->first[k];
          }
        } else if (last_input[it->second] == s) {
          // Inputs are read one after another, so a group seen last in this input came twice from it.
          std::string shown;
          for (const auto& v : it->first) shown += (shown.empty() ? "" : ", ") + v.ToString();
          throw UnmergeableQuery("shard " + std::to_string(ToInt(shard)) + " returned the group (" + shown +
                                 ") twice: the per-shard query must GROUP BY exactly the plan's keys");
        } else {
          last_input[it->second] = s;
        }
        g = it->second;
      }
      auto& acc = groups[g];
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const MergeColumn& col = columns[c];
        if (col.role == MergeColumn::Role::kGroupKey) continue;
        const Value v = read(c, positions[s][c], bound[c].oid, col.partial);
        switch (col.role) {
          case MergeColumn::Role::kCount:
            if (!v.IsNull()) acc[c].count = AddChecked(acc[c].count, v.AsInt(), col.name);
            break;
          case MergeColumn::Role::kSum:
            acc[c].value = AddValues(acc[c].value, v, bound[c].oid == kRealOid, col.name);
            break;
          case MergeColumn::Role::kMin:
          case MergeColumn::Role::kMax:
            if (!v.IsNull()) {
              const bool better = acc[c].value.IsNull() ||
                                  (col.role == MergeColumn::Role::kMin ? CompareValues(v, acc[c].value) < 0
                                                                       : CompareValues(v, acc[c].value) > 0);
              if (better) acc[c].value = v;
            }
            break;
          case MergeColumn::Role::kAvg: {
            acc[c].value = AddValues(acc[c].value, v, false, col.name);
            const Value n = read(c, count_positions[s][c], bound[c].count_oid, col.partial_count);
            if (!n.IsNull()) acc[c].count = AddChecked(acc[c].count, n.AsInt(), col.name);
            break;
          }
          case MergeColumn::Role::kGroupKey:
            break;
        }
      }
    }
  }
  out.groups = groups.size();

  // Groups in key order (std::map order): the tie-break for equal sort keys.
  std::vector<std::size_t> order;
  order.reserve(groups.size());
  if (scalar) {
    order.push_back(0);
  } else {
    for (const auto& [key, g] : index) order.push_back(g);
  }

  // Only the columns HAVING and ORDER BY read are finalized for every group;
  // the others (an AVG's division, say) only for the rows returned.
  std::vector<std::pair<std::size_t, const HavingTerm*>> terms;
  for (const auto& t : plan.HavingTerms()) terms.emplace_back(IndexOf(plan, t.column), &t);
  std::vector<std::pair<std::size_t, const SortKey*>> sort_keys;
  for (const auto& k : plan.SortKeys()) {
    const std::size_t c = IndexOf(plan, k.column);
    if (bound[c].typed && !bound[c].info.orderable) {
      throw UnmergeableQuery("ORDER BY \"" + k.column + "\": shardkit cannot order " + bound[c].info.name +
                             " values exactly as the server does; cast to an orderable type");
    }
    sort_keys.emplace_back(c, &k);
  }
  std::vector<bool> early(columns.size(), false);
  for (const auto& [c, t] : terms) early[c] = true;
  for (const auto& [c, k] : sort_keys) early[c] = true;

  std::vector<std::vector<Value>> rows(order.size(), std::vector<Value>(columns.size()));
  for (std::size_t r = 0; r < order.size(); ++r) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (early[c]) rows[r][c] = Finalize(bound[c], groups[order[r]][c]);
    }
  }

  // HAVING
  std::vector<std::size_t> kept;  // positions in `rows`, in group-key order
  kept.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    bool holds = true;
    for (const auto& [c, t] : terms) {
      if (!HavingHolds(*t, rows[r][c], bound[c])) {
        holds = false;
        break;
      }
    }
    if (holds) kept.push_back(r);
  }

  // ORDER BY, then OFFSET and LIMIT. Equal sort keys keep group-key order
  // (the position breaks ties), so a partial sort of the first
  // offset + limit rows returns what a full stable sort would.
  const auto offset = static_cast<std::size_t>(plan.OffsetCount());
  std::size_t end = kept.size();
  if (plan.LimitCount()) end = std::min(end, offset + static_cast<std::size_t>(*plan.LimitCount()));
  if (!sort_keys.empty() && offset < end) {
    auto less = [&](std::size_t x, std::size_t y) {
      const auto& a = rows[x];
      const auto& b = rows[y];
      for (const auto& [c, k] : sort_keys) {
        const bool an = a[c].IsNull();
        const bool bn = b[c].IsNull();
        if (an && bn) continue;
        if (an != bn) return NullsFirst(*k) ? an : bn;
        int cmp = CompareValues(a[c], b[c]);
        if (k->direction == SortDirection::kDesc) cmp = -cmp;
        if (cmp != 0) return cmp < 0;
      }
      return x < y;
    };
    if (end < kept.size()) {
      std::partial_sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(end), kept.end(), less);
    } else {
      std::sort(kept.begin(), kept.end(), less);
    }
  }
  std::vector<std::size_t> selected;
  for (std::size_t i = offset; i < end; ++i) selected.push_back(kept[i]);

  // Visible columns only.
  std::vector<std::size_t> visible;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!columns[c].hidden) visible.push_back(c);
  }
  for (const std::size_t c : visible) {
    out.column_names.push_back(columns[c].name);
    out.column_types.push_back(bound[c].output_type);
  }
  out.rows.reserve(selected.size());
  for (const std::size_t r : selected) {
    std::vector<Value> shown;
    shown.reserve(visible.size());
    for (const std::size_t c : visible) {
      shown.push_back(early[c] ? std::move(rows[r][c]) : Finalize(bound[c], groups[order[r]][c]));
    }
    out.rows.push_back(std::move(shown));
  }
  out.rows_out = out.rows.size();
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// MergePlan
// ---------------------------------------------------------------------------

MergePlan& MergePlan::Add(MergeColumn column) {
  if (column.name.empty()) column.name = column.partial;
  columns_.push_back(std::move(column));
  return *this;
}

MergePlan& MergePlan::Key(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kGroupKey, std::move(partial), {}, false});
}
MergePlan& MergePlan::Count(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kCount, std::move(partial), {}, false});
}
MergePlan& MergePlan::Sum(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kSum, std::move(partial), {}, false});
}
MergePlan& MergePlan::Min(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kMin, std::move(partial), {}, false});
}
MergePlan& MergePlan::Max(std::string partial, std::string name) {
  return Add({std::move(name), MergeColumn::Role::kMax, std::move(partial), {}, false});
}
MergePlan& MergePlan::Avg(std::string name, std::string partial_sum, std::string partial_count) {
  return Add({std::move(name), MergeColumn::Role::kAvg, std::move(partial_sum), std::move(partial_count), false});
}

MergePlan& MergePlan::Hide(std::string_view name) {
  for (auto& c : columns_) {
    if (c.name == name) {
      c.hidden = true;
      return *this;
    }
  }
  throw UnmergeableQuery("Hide(\"" + std::string(name) + "\"): no such merged column");
}

MergePlan& MergePlan::Having(std::string column, CompareOp op, Value constant) {
  having_.push_back({std::move(column), op, std::move(constant)});
  return *this;
}
MergePlan& MergePlan::OrderBy(std::string column, SortDirection direction, NullsOrder nulls) {
  order_by_.push_back({std::move(column), direction, nulls});
  return *this;
}
MergePlan& MergePlan::Limit(std::int64_t count) {
  limit_ = count;
  return *this;
}
MergePlan& MergePlan::Offset(std::int64_t count) {
  offset_ = count;
  return *this;
}

bool MergePlan::IsScalar() const noexcept {
  return std::none_of(columns_.begin(), columns_.end(),
                      [](const MergeColumn& c) { return c.role == MergeColumn::Role::kGroupKey; });
}

void MergePlan::Validate() const {
  if (columns_.empty()) throw UnmergeableQuery("the merge plan has no columns: declare keys and aggregates");
  std::set<std::string> names;
  bool any_visible = false;
  for (const auto& c : columns_) {
    if (c.name.empty() || c.partial.empty()) throw UnmergeableQuery("a merged column needs a name and a partial column");
    if (!names.insert(c.name).second) {
      throw UnmergeableQuery("two merged columns are named \"" + c.name + "\": give each its own name");
    }
    if (c.role == MergeColumn::Role::kAvg && c.partial_count.empty()) {
      throw UnmergeableQuery("merged column \"" + c.name + "\": AVG needs the partial COUNT column too");
    }
    any_visible = any_visible || !c.hidden;
  }
  if (!any_visible) throw UnmergeableQuery("every merged column is hidden: nothing would be returned");
  for (const auto& t : having_) {
    if (!names.contains(t.column)) {
      throw UnmergeableQuery("HAVING on \"" + t.column + "\": no merged column has that name (hidden "
                             "columns count; declare the aggregate and Hide it)");
    }
    if (t.op != CompareOp::kIsNull && t.op != CompareOp::kIsNotNull && t.constant.IsNull()) {
      throw UnmergeableQuery("HAVING " + t.column + " " + OpText(t.op) +
                             " NULL is never true; use CompareOp::kIsNull / kIsNotNull");
    }
  }
  for (const auto& k : order_by_) {
    if (!names.contains(k.column)) {
      throw UnmergeableQuery("ORDER BY \"" + k.column + "\": no merged column has that name");
    }
  }
  if (limit_ && *limit_ < 0) throw UnmergeableQuery("LIMIT must not be negative");
  if (offset_ < 0) throw UnmergeableQuery("OFFSET must not be negative");
}

std::string MergePlan::Describe() const {
  std::string out;
  if (!shard_sql_.empty()) out += "per shard: " + shard_sql_ + "\n";
  for (const auto& c : columns_) {
    out += c.name + " = ";
    switch (c.role) {
      case MergeColumn::Role::kGroupKey: out += "key " + c.partial; break;
      case MergeColumn::Role::kAvg: out += "SUM(" + c.partial + ") / SUM(" + c.partial_count + ")"; break;
      case MergeColumn::Role::kCount: out += "SUM(" + c.partial + ")"; break;
      default: out += RoleName(c.role) + "(" + c.partial + ")"; break;
    }
    if (c.hidden) out += " [hidden]";
    out += "\n";
  }
  if (!having_.empty()) {
    out += "HAVING";
    for (std::size_t i = 0; i < having_.size(); ++i) {
      out += (i ? " AND " : " ") + having_[i].column + " " + OpText(having_[i].op);
      if (having_[i].op != CompareOp::kIsNull && having_[i].op != CompareOp::kIsNotNull) {
        out += " " + having_[i].constant.ToString();
      }
    }
    out += "\n";
  }
  if (!order_by_.empty()) {
    out += "ORDER BY";
    for (std::size_t i = 0; i < order_by_.size(); ++i) {
      out += (i ? ", " : " ") + order_by_[i].column +
             (order_by_[i].direction == SortDirection::kDesc ? " DESC" : " ASC") +
             (NullsFirst(order_by_[i]) ? " NULLS FIRST" : " NULLS LAST");
    }
    out += "\n";
  }
  if (limit_) out += "LIMIT " + std::to_string(*limit_) + "\n";
  if (offset_) out += "OFFSET " + std::to_string(offset_) + "\n";
  return out;
}

// ---------------------------------------------------------------------------
// AggregateQuery
// ---------------------------------------------------------------------------

AggregateQuery AggregateQuery::From(std::string table, std::string schema) {
  std::string from = schema.empty() ? QuoteIdentifier(table) : QuoteIdentifier(schema) + "." + QuoteIdentifier(table);
  return AggregateQuery(std::move(from));
}

AggregateQuery AggregateQuery::FromSql(std::string from_clause) {
  if (from_clause.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw UnmergeableQuery("empty FROM clause: name a table or a co-located join");
  }
  return AggregateQuery(std::move(from_clause));
}

AggregateQuery& AggregateQuery::Where(std::string condition) {
  where_ = std::move(condition);
  return *this;
}
AggregateQuery& AggregateQuery::ShardKey(std::string column) {
  shard_key_ = std::move(column);
  return *this;
}

AggregateQuery& AggregateQuery::GroupBy(std::string column) {
  Item item;
  item.is_key = true;
  item.expression = QuoteIdentifier(column);
  item.name = std::move(column);
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::GroupByExpr(std::string sql_expression, std::string name) {
  Item item;
  item.is_key = true;
  item.expression = std::move(sql_expression);
  item.name = std::move(name);
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::AddAggregate(Item item) {
  items_.push_back(std::move(item));
  return *this;
}

AggregateQuery& AggregateQuery::Select(std::string_view aggregate_call, std::string name) {
  const ParsedAggregate p = ParseAggregateCall(aggregate_call, shard_key_);
  Item item;
  item.name = std::move(name);
  item.count_star = p.count_star;
  item.distinct = p.distinct;
  item.expression = p.argument;
  item.filter = p.filter;
  if (p.function == "count") item.role = MergeColumn::Role::kCount;
  if (p.function == "sum") item.role = MergeColumn::Role::kSum;
  if (p.function == "min") item.role = MergeColumn::Role::kMin;
  if (p.function == "max") item.role = MergeColumn::Role::kMax;
  if (p.function == "avg") item.role = MergeColumn::Role::kAvg;
  return AddAggregate(std::move(item));
}

AggregateQuery& AggregateQuery::Count(std::string name) { return Select("count(*)", std::move(name)); }
AggregateQuery& AggregateQuery::Count(std::string column, std::string name) {
  return Select("count(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::CountDistinct(std::string column, std::string name) {
  return Select("count(DISTINCT " + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Sum(std::string column, std::string name) {
  return Select("sum(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Min(std::string column, std::string name) {
  return Select("min(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Max(std::string column, std::string name) {
  return Select("max(" + QuoteIdentifier(column) + ")", std::move(name));
}
AggregateQuery& AggregateQuery::Avg(std::string column, std::string name) {
  return Select("avg(" + QuoteIdentifier(column) + ")", std::move(name));
}

AggregateQuery& AggregateQuery::Hide(std::string_view name) {
  for (auto& item : items_) {
    if (item.name == name) {
      item.hidden = true;
      return *this;
    }
  }
  throw UnmergeableQuery("Hide(\"" + std::string(name) + "\"): no such column");
}

AggregateQuery& AggregateQuery::Having(std::string column, CompareOp op, Value constant) {
  having_.push_back({std::move(column), op, std::move(constant)});
  return *this;
}
AggregateQuery& AggregateQuery::OrderBy(std::string column, SortDirection direction, NullsOrder nulls) {
  order_by_.push_back({std::move(column), direction, nulls});
  return *this;
}
AggregateQuery& AggregateQuery::Limit(std::int64_t count) {
  limit_ = count;
  return *this;
}
AggregateQuery& AggregateQuery::Offset(std::int64_t count) {
  offset_ = count;
  return *this;
}

MergePlan AggregateQuery::Plan() const {
  std::string select;
  std::vector<MergeColumn> columns;
  std::size_t keys = 0;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    const Item& item = items_[i];
    const std::string alias = (item.is_key ? "_k" : "_p") + std::to_string(i);
    auto add = [&](const std::string& expr, const std::string& as) {
      if (!select.empty()) select += ", ";
      select += expr + " AS " + QuoteIdentifier(as);
    };
    if (item.is_key) {
      add(item.expression, alias);
      columns.push_back({item.name, MergeColumn::Role::kGroupKey, alias, {}, item.hidden});
      ++keys;
      continue;
    }
    const std::string distinct = item.distinct ? "DISTINCT " : "";
    const std::string arg = distinct + item.expression;
    switch (item.role) {
      case MergeColumn::Role::kCount:
        add(std::string("count(") + (item.count_star ? "*" : arg) + ")" + item.filter, alias);
        break;
      case MergeColumn::Role::kSum: add("sum(" + arg + ")" + item.filter, alias); break;
      case MergeColumn::Role::kMin: add("min(" + arg + ")" + item.filter, alias); break;
      case MergeColumn::Role::kMax: add("max(" + arg + ")" + item.filter, alias); break;
      case MergeColumn::Role::kAvg:
        add("sum(" + arg + ")" + item.filter, alias);
        add("count(" + arg + ")" + item.filter, alias + "_n");
        break;
      case MergeColumn::Role::kGroupKey: break;
    }
    columns.push_back({item.name, item.role, alias, item.role == MergeColumn::Role::kAvg ? alias + "_n" : "",
                       item.hidden});
  }
  std::string sql = "SELECT " + select + " FROM " + from_;
  if (!where_.empty()) sql += " WHERE (" + where_ + ")";
  if (keys > 0) {
    sql += " GROUP BY ";
    std::size_t position = 0;
    std::size_t written = 0;
    for (const Item& item : items_) {
      ++position;
      if (item.role == MergeColumn::Role::kAvg && !item.is_key) ++position;  // AVG takes two columns
      if (!item.is_key) continue;
      sql += (written++ ? ", " : "") + std::to_string(position);
    }
  }
  MergePlan plan(std::move(sql));
  for (auto& c : columns) {
    switch (c.role) {
      case MergeColumn::Role::kGroupKey: plan.Key(c.partial, c.name); break;
      case MergeColumn::Role::kCount: plan.Count(c.partial, c.name); break;
      case MergeColumn::Role::kSum: plan.Sum(c.partial, c.name); break;
      case MergeColumn::Role::kMin: plan.Min(c.partial, c.name); break;
      case MergeColumn::Role::kMax: plan.Max(c.partial, c.name); break;
      case MergeColumn::Role::kAvg: plan.Avg(c.name, c.partial, c.partial_count); break;
    }
    if (c.hidden) plan.Hide(c.name);
  }
  for (const auto& t : having_) plan.Having(t.column, t.op, t.constant);
  for (const auto& k : order_by_) plan.OrderBy(k.column, k.direction, k.nulls);
  if (limit_) plan.Limit(*limit_);
  plan.Offset(offset_);
  plan.Validate();
  return plan;
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

MergedResult Merge(const MergePlan& plan, const std::vector<pqxx::result>& shard_results) {
  Inputs inputs;
  inputs.reserve(shard_results.size());
  for (std::size_t i = 0; i < shard_results.size(); ++i) {
    inputs.push_back(std::make_unique<PqxxRows>(ShardId{static_cast<int>(i)}, shard_results[i]));
  }
  return MergeInputs(plan, inputs);
}

MergedResult Merge(const MergePlan& plan, const std::vector<PartialRows>& shard_rows) {
  Inputs inputs;
  inputs.reserve(shard_rows.size());
  for (const auto& p : shard_rows) inputs.push_back(std::make_unique<TextRows>(p));
  return MergeInputs(plan, inputs);
}

MergedResult Merge(const MergePlan& plan, const ScatterResult& scatter, const MergeOptions& options) {
  std::string missing;
  for (const auto& f : scatter.failures) {
    missing += (missing.empty() ? "" : "; ") + ("shard " + std::to_string(ToInt(f.shard)) + ": " + f.cause);
  }
  if (!scatter.failures.empty() && !options.allow_missing_shards) {
    throw ScatterError("cannot merge: the answer needs every shard's partials, but " + missing +
                       " (retry, or set MergeOptions::allow_missing_shards for an incomplete answer)",
                       scatter.failures);
  }
  Inputs inputs;
  inputs.reserve(scatter.shards.size());
  for (const auto& s : scatter.shards) inputs.push_back(std::make_unique<PqxxRows>(s.shard, s.rows));
  MergedResult out = MergeInputs(plan, inputs);
  if (!scatter.failures.empty()) {
    out.warning = "incomplete answer: merged without " + missing;
  }
  return out;
}

MergedResult ScatterMerge(ScatterGather& scatter, const MergePlan& plan, const SqlParams& params,
                          const ScatterOptions& options, const MergeOptions& merge_options) {
  plan.Validate();
  if (plan.ShardSql().empty()) throw UnmergeableQuery("the merge plan has no per-shard SQL");
  const ScatterResult result = scatter.Run(plan.ShardSql(), params, options);
  return Merge(plan, result, merge_options);
}

void CheckMergeAssumptions(pqxx::connection_base& connection, ShardId shard) {
  pqxx::nontransaction tx{connection};
  const pqxx::result r = tx.exec(
      "SELECT datcollate, current_setting('DateStyle') FROM pg_database WHERE datname = current_database()");
  if (r.size() != 1) throw ShardError(shard, "shard " + std::to_string(ToInt(shard)) + ": cannot read its database's collation");
  const std::string collate = r[0][0].c_str();
  const std::string datestyle = r[0][1].c_str();
  if (collate != "C" && collate != "POSIX") {
    throw ShardError(shard, "shard " + std::to_string(ToInt(shard)) + ": the database's collation is \"" + collate +
                                "\", not C: shardkit orders merged text bytewise, as the C collation does, "
                                "so ORDER BY, MIN and MAX on text would differ from the server's. Create "
                                "the database with LC_COLLATE 'C' (initdb --locale=C, or CREATE DATABASE "
                                "... LC_COLLATE 'C' TEMPLATE template0)");
  }
  if (!datestyle.starts_with("ISO")) {
    throw ShardError(shard, "shard " + std::to_string(ToInt(shard)) + ": DateStyle is \"" + datestyle +
                                "\", not ISO: merged dates and timestamps are ordered by their ISO text. "
                                "Set datestyle = 'ISO, MDY' for the role or database");
  }
}

void CheckMergeAssumptions(BucketShardResolver& resolver) {
  for (ConnectionPool& pool : resolver.AllShards()) {
    auto lease = pool.Acquire();
    CheckMergeAssumptions(*lease, pool.Shard());
  }
}

}  // namespace shardkit
