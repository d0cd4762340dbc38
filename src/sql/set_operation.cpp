#include "sql/set_operation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "core/sql_text.hpp"
#include "shardkit/errors.hpp"
#include "sql/extent.hpp"
#include "sql/router.hpp"
#include "sql/sql_error_text.hpp"

namespace shardkit::sql {
namespace {

using json = nlohmann::json;

struct ArmText {
  std::string text;
  std::vector<int> params;
  // Where the arm's bytes come from: (offset in the arm, offset in the statement) at each edit.
  std::vector<std::pair<int, int>> anchors;
  [[nodiscard]] int StatementOffset(int arm_offset) const {
    auto it =
        std::upper_bound(anchors.begin(), anchors.end(), std::make_pair(arm_offset, std::numeric_limits<int>::max()));
    if (it != anchors.begin()) --it;
    return it->second + (arm_offset - it->first);
  }
};

// The arm's tokens, its parameters numbered from $1 in order of appearance.
ArmText Renumber(const ParsedStatement& parsed, TokenRange range) {
  ArmText arm;
  std::map<int, int> numbers;  // statement's -> arm's
  const auto begin = static_cast<std::size_t>(parsed.tokens[range.begin].start);
  std::size_t at = begin;
  arm.anchors.emplace_back(0, static_cast<int>(begin));
  for (std::size_t t = range.begin; t < range.end; ++t) {
    const Token& token = parsed.tokens[t];
    if (token.kind != shardkit::detail::kPgParam) continue;
    const int number = std::stoi(std::string(parsed.TokenText(token).substr(1)));
    auto [it, added] = numbers.emplace(number, static_cast<int>(numbers.size()) + 1);
    if (added) arm.params.push_back(number);
    arm.text += parsed.text.substr(at, static_cast<std::size_t>(token.start) - at);
    arm.text += fmt::format("${}", it->second);
    at = static_cast<std::size_t>(token.end);
    arm.anchors.emplace_back(static_cast<int>(arm.text.size()), static_cast<int>(at));
  }
  const auto end = static_cast<std::size_t>(parsed.tokens[range.end - 1].end);
  arm.text += parsed.text.substr(at, end - at);
  return arm;
}

class SetOperationPlanner {
 public:
  SetOperationPlanner(const ParsedStatement& parsed, const SqlCatalog& catalog) : parsed_(parsed), catalog_(catalog) {}

  SetOperationPlan Run() {
    const json& top = parsed_.tree.at("SelectStmt");
    if (const json* with = Find(top, "withClause"); with != nullptr) {
      Refuse(with->value("location", -1), "WITH over a set operation across shards",
             "each arm would need the CTE's rows, which are each shard's own",
             "inline the CTE into the arms, or pin customer_id in every arm");
    }
    plan_.union_all_only = true;
    plan_.combination = Combine(top, true);
    if (Find(top, "sortClause") != nullptr || Find(top, "limitCount") != nullptr ||
        Find(top, "limitOffset") != nullptr) {
      plan_.union_all_only = false;
      plan_.tail = Tail();
    }
    return std::move(plan_);
  }

 private:
  static const json* Find(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }

  [[noreturn]] void Refuse(int location, const std::string& construct, const std::string& reason,
                           const std::string& advice) const {
    throw Refusal(parsed_.text, location, construct, reason, advice);
  }

  std::string Combine(const json& select, bool top) {
    const std::string op = select.value("op", "SETOP_NONE");
    if (op == "SETOP_NONE") return Arm(select);
    if (const json* locking = Find(select, "lockingClause"); locking != nullptr) {
      Refuse(-1, "FOR UPDATE / FOR SHARE on a set operation", "locking is not supported across shards",
             "lock each customer's rows in a statement pinned to that customer");
    }
    if (!top && (Find(select, "sortClause") != nullptr || Find(select, "limitCount") != nullptr ||
                 Find(select, "limitOffset") != nullptr || Find(select, "withClause") != nullptr)) {
      Refuse(-1, "a set operation with its own ORDER BY, LIMIT or WITH inside another",
             "only the outermost set operation's ORDER BY and LIMIT are combined across shards",
             "move the ORDER BY and LIMIT to the end of the statement, or run the inner set operation on its own");
    }
    const bool all = select.value("all", false);
    const char* word = op == "SETOP_UNION" ? "UNION" : op == "SETOP_INTERSECT" ? "INTERSECT" : "EXCEPT";
    if (op != "SETOP_UNION" || !all) plan_.union_all_only = false;
    const std::string left = Combine(select.at("larg"), false);
    const std::string right = Combine(select.at("rarg"), false);
    return fmt::format("({}) {}{} ({})", left, word, all ? " ALL" : "", right);
  }

  std::string Arm(const json& select) {
    const json node = json{{"SelectStmt", select}};
    const std::optional<TokenRange> range = SelectExtent(parsed_, node);
    if (!range) {
      Refuse(-1, "an arm of the set operation", "its text could not be told apart from the rest of the statement",
             "write each arm as a plain SELECT");
    }
    last_arm_end_ = range->end;
    ArmText text = Renumber(parsed_, *range);
    SetOperationArm arm;
    arm.text = text.text;
    arm.params = text.params;
    try {
      // An arm that neither routes nor merges: the whole statement is gathered instead.
      arm.plan = PlanStatement(arm.text, catalog_, Gathering::kNever);
    } catch (const SqlError& e) {
      if (e.kind() != SqlError::Kind::kRefused) throw;
      const int at = e.position() > 0 ? text.StatementOffset(ByteOffset(arm.text, e.position())) : -1;
      Refuse(at, e.construct(), fmt::format("{} (in arm {} of the set operation)", e.reason(), plan_.arms.size() + 1),
             e.advice());
    }
    plan_.arms.push_back(std::move(arm));
    const std::size_t index = plan_.arms.size();
    return index == 1 ? std::string(SetOperationPlan::kFirstArm) : fmt::format("SELECT * FROM _m{}", index);
  }

  // The outermost ORDER BY / LIMIT / OFFSET / FETCH: after the last arm and its closing parentheses.
  std::string Tail() const {
    std::size_t t = last_arm_end_;
    while (t < parsed_.tokens.size() && parsed_.tokens[t].kind == ')') ++t;
    std::size_t end = parsed_.tokens.size();
    while (end > t && parsed_.tokens[end - 1].kind == ';') --end;
    const std::string first = t < end ? shardkit::detail::Upper(parsed_.TokenText(parsed_.tokens[t])) : "";
    if (first != "ORDER" && first != "LIMIT" && first != "OFFSET" && first != "FETCH") {
      Refuse(t < parsed_.tokens.size() ? parsed_.tokens[t].start : -1, "the end of the set operation",
             "its ORDER BY or LIMIT could not be told apart from the last arm",
             "write the ORDER BY and LIMIT after the last arm, outside its parentheses");
    }
    return RangeText(parsed_, TokenRange{t, end});
  }

  const ParsedStatement& parsed_;
  const SqlCatalog& catalog_;
  SetOperationPlan plan_;
  std::size_t last_arm_end_ = 0;
};

}  // namespace

bool IsSetOperation(const ParsedStatement& parsed) {
  const auto it = parsed.tree.find("SelectStmt");
  return it != parsed.tree.end() && it->value("op", "SETOP_NONE") != "SETOP_NONE";
}

SetOperationPlan PlanSetOperation(const ParsedStatement& parsed, const SqlCatalog& catalog) {
  return SetOperationPlanner(parsed, catalog).Run();
}

std::string SetOperationPlan::Describe() const {
  std::string arms_text;
  for (std::size_t i = 0; i < arms.size(); ++i) {
    const SqlPlan& plan = *arms[i].plan;
    const char* where = plan.kind == SqlPlanInfo::Kind::kRouted     ? "routed to its customer's shard"
                        : plan.kind == SqlPlanInfo::Kind::kAnyShard ? "on any shard"
                                                                    : "over every shard";
    arms_text += fmt::format("{}arm {} {}", i == 0 ? "" : ", ", i + 1, where);
  }
  std::string combined = combination;
  if (const auto at = combined.find(kFirstArm); at != std::string::npos) {
    combined.replace(at, std::string_view(kFirstArm).size(), "SELECT * FROM _m1");
  }
  return fmt::format("set operation over {} arms ({}); then on one shard: {}{}{}", arms.size(), arms_text, combined,
                     tail.empty() ? "" : " ", tail);
}

}  // namespace shardkit::sql
