#include "sql/extent.hpp"

#include <algorithm>
#include <string>

#include "core/sql_text.hpp"

namespace shardkit::sql {
namespace {

using json = nlohmann::json;

// How far past a node's located tokens its text may reach: closing
// parentheses, `IS NOT NULL`, `DESC NULLS LAST`, a type's second word.
constexpr std::size_t kMaxTrailingTokens = 12;
constexpr std::size_t kMaxLeadingTokens = 8;

void CollectLocations(const json& node, int& first, int& last) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == "location" && it.value().is_number_integer()) {
        const int at = it.value().get<int>();
        if (at >= 0) {
          first = first < 0 ? at : std::min(first, at);
          last = std::max(last, at);
        }
      } else {
        CollectLocations(it.value(), first, last);
      }
    }
  } else if (node.is_array()) {
    for (const json& item : node) CollectLocations(item, first, last);
  }
}

bool IsChar(const ParsedStatement& parsed, std::size_t t, char c) {
  return t < parsed.tokens.size() && parsed.tokens[t].kind == static_cast<unsigned char>(c);
}

// Parentheses and brackets close inside the range, none before it opens.
bool Balanced(const ParsedStatement& parsed, TokenRange range) {
  int depth = 0;
  for (std::size_t t = range.begin; t < range.end; ++t) {
    if (IsChar(parsed, t, '(') || IsChar(parsed, t, '[')) ++depth;
    if ((IsChar(parsed, t, ')') || IsChar(parsed, t, ']')) && --depth < 0) return false;
  }
  return depth == 0;
}

// The first range around the node's located tokens, opening up to
// `leading` tokens earlier (begin_ok says where it may start), that `same`
// accepts.
template <class BeginOk, class Same>
std::optional<TokenRange> Search(const ParsedStatement& parsed, const json& node, std::size_t leading,
                                 const BeginOk& begin_ok, const Same& same) {
  int first = -1;
  int last = -1;
  CollectLocations(node, first, last);
  if (first < 0 || parsed.tokens.empty()) return std::nullopt;
  const std::size_t first_token = parsed.TokenAt(first);
  const std::size_t last_token = parsed.TokenAt(last);
  if (first_token >= parsed.tokens.size() || last_token >= parsed.tokens.size()) return std::nullopt;
  for (std::size_t back = 0; back <= leading && back <= first_token; ++back) {
    const std::size_t begin = first_token - back;
    if (!begin_ok(begin, back)) continue;
    const std::size_t limit = std::min(parsed.tokens.size(), last_token + 1 + kMaxTrailingTokens);
    for (std::size_t end = last_token + 1; end <= limit; ++end) {
      const TokenRange range{begin, end};
      if (Balanced(parsed, range) && same(RangeText(parsed, range))) return range;
    }
  }
  return std::nullopt;
}

}  // namespace

json WithoutLocations(const json& node) {
  if (node.is_object()) {
    json out = json::object();
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() != "location") out[it.key()] = WithoutLocations(it.value());
    }
    return out;
  }
  if (node.is_array()) {
    json out = json::array();
    for (const json& item : node) out.push_back(WithoutLocations(item));
    return out;
  }
  return node;
}

std::string RangeText(const ParsedStatement& parsed, TokenRange range) {
  if (range.begin >= range.end || range.end > parsed.tokens.size()) return {};
  const auto from = static_cast<std::size_t>(parsed.tokens[range.begin].start);
  const auto to = static_cast<std::size_t>(parsed.tokens[range.end - 1].end);
  return parsed.text.substr(from, to - from);
}

std::optional<TokenRange> ExpressionExtent(const ParsedStatement& parsed, const json& node) {
  const json want = WithoutLocations(node);
  // Only opening parentheses may come before an expression's first located token.
  const auto begin_ok = [&](std::size_t begin, std::size_t back) { return back == 0 || IsChar(parsed, begin, '('); };
  const auto same = [&](const std::string& text) {
    const std::optional<json> tree = TryParseTree("SELECT " + text);
    if (!tree || !tree->contains("SelectStmt")) return false;
    const json& select = tree->at("SelectStmt");
    for (auto it = select.begin(); it != select.end(); ++it) {
      if (it.key() != "targetList" && it.key() != "limitOption" && it.key() != "op") return false;
    }
    const json& targets = select.at("targetList");
    if (targets.size() != 1) return false;
    const json& target = targets.front().at("ResTarget");
    return target.size() == 2 && target.contains("val") && WithoutLocations(target.at("val")) == want;
  };
  return Search(parsed, node, 4, begin_ok, same);
}

std::optional<TokenRange> SelectExtent(const ParsedStatement& parsed, const json& select) {
  const json want = WithoutLocations(select);
  const auto begin_ok = [&](std::size_t begin, std::size_t /*back*/) {
    const std::string word = shardkit::detail::Upper(parsed.TokenText(parsed.tokens[begin]));
    return word == "SELECT" || word == "VALUES" || word == "TABLE" || word == "WITH";
  };
  const auto same = [&](const std::string& text) {
    const std::optional<json> tree = TryParseTree(text);
    return tree && WithoutLocations(*tree) == want;
  };
  return Search(parsed, select, kMaxLeadingTokens, begin_ok, same);
}

}  // namespace shardkit::sql
