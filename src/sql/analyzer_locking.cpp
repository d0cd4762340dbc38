// The Analyzer's locking clauses on reference tables (analyzer.hpp): a
// reference table is a copy on every shard, so FOR UPDATE/SHARE on its rows
// locks one shard's copy only, and transactions on the other shards do not
// wait for it. Such a clause is refused even when the statement is pinned
// to one customer.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/sql_text.hpp"
#include "sql/analyzer.hpp"

namespace shardkit::sql::detail {

namespace {

// "FOR UPDATE OF b NOWAIT", as the clause reads.
std::string ClauseText(const json& clause) {
  const std::string strength = clause.value("strength", "");
  std::string out = strength == "LCS_FORKEYSHARE"      ? "FOR KEY SHARE"
                    : strength == "LCS_FORSHARE"       ? "FOR SHARE"
                    : strength == "LCS_FORNOKEYUPDATE" ? "FOR NO KEY UPDATE"
                                                       : "FOR UPDATE";
  if (const json* rels = Field(clause, "lockedRels"); rels != nullptr) {
    std::vector<std::string> names;
    for (const json& rel : *rels) {
      if (const json* range = Field(rel, "RangeVar"); range != nullptr) names.push_back(range->value("relname", ""));
    }
    out += fmt::format(" OF {}", fmt::join(names, ", "));
  }
  const std::string wait = clause.value("waitPolicy", "");
  if (wait == "LockWaitSkip") out += " SKIP LOCKED";
  if (wait == "LockWaitError") out += " NOWAIT";
  return out;
}

// The largest and smallest byte offsets located in a tree.
void LocationBounds(const json& node, int& low, int& high) {
  if (node.is_array()) {
    for (const json& element : node) LocationBounds(element, low, high);
    return;
  }
  if (!node.is_object()) return;
  for (const auto& [key, value] : node.items()) {
    if (key == "location" && value.is_number_integer()) {
      const int at = value.get<int>();
      if (at < 0) continue;
      low = low < 0 ? at : std::min(low, at);
      high = std::max(high, at);
    } else {
      LocationBounds(value, low, high);
    }
  }
}

}  // namespace

void Analyzer::CheckLockedReferences(const json& select, const CteScope* ctes) {
  const json* locking = Field(select, "lockingClause");
  const json* from = Field(select, "fromClause");
  if (locking == nullptr || from == nullptr || locked_reference_) return;
  for (std::size_t index = 0; index < locking->size(); ++index) {
    const json& clause = (*locking)[index].at("LockingClause");
    const json* hit = nullptr;
    const json* of_rel = nullptr;
    if (const json* rels = Field(clause, "lockedRels"); rels != nullptr) {
      for (const json& rel : *rels) {
        const json* range = Field(rel, "RangeVar");
        if (range == nullptr) continue;
        for (const json& item : *from) {
          if (const json* named = FromItemNamed(item, range->value("relname", "")); named != nullptr) {
            hit = LockedReferenceIn(*named, ctes);
            break;
          }
        }
        if (hit != nullptr) {
          of_rel = range;
          break;
        }
      }
    } else {
      for (const json& item : *from) {
        if ((hit = LockedReferenceIn(item, ctes)) != nullptr) break;
      }
    }
    if (hit == nullptr) continue;
    LockedReference locked;
    locked.location = LockingClauseLocation(select, index, of_rel);
    locked.clause = ClauseText(clause);
    const std::optional<std::string> schema = SchemaOf(*hit);
    locked.table = (schema ? *schema + "." : std::string()) + hit->value("relname", "");
    // A sharded table of the same level, for the advice.
    std::vector<const json*> items;
    for (const json& item : *from) items.push_back(&item);
    while (!items.empty() && locked.sharded_alias.empty()) {
      const json& item = *items.back();
      items.pop_back();
      if (const json* join = Field(item, "JoinExpr"); join != nullptr) {
        items.push_back(&join->at("rarg"));
        items.push_back(&join->at("larg"));
      } else if (const json* range = Field(item, "RangeVar"); range != nullptr) {
        const std::string relname = range->value("relname", "");
        const bool cte = !SchemaOf(*range) && ctes != nullptr && ctes->Has(relname);
        if (!cte && catalog_.FindSharded(SchemaOf(*range), relname) != nullptr) {
          const std::string alias = AliasOf(*range);
          locked.sharded_alias = alias.empty() ? relname : alias;
        }
      }
    }
    locked_reference_ = std::move(locked);
    return;
  }
}

const json* Analyzer::LockedReferenceIn(const json& from_item, const CteScope* ctes) const {
  if (const json* range = Field(from_item, "RangeVar"); range != nullptr) {
    const std::optional<std::string> schema = SchemaOf(*range);
    const std::string relname = range->value("relname", "");
    // A WITH query's rows are not locked by a clause outside it.
    if (!schema && ctes != nullptr && ctes->Has(relname)) return nullptr;
    return catalog_.FindReference(schema, relname) != nullptr ? range : nullptr;
  }
  if (const json* join = Field(from_item, "JoinExpr"); join != nullptr) {
    if (const json* hit = LockedReferenceIn(join->at("larg"), ctes); hit != nullptr) return hit;
    return LockedReferenceIn(join->at("rarg"), ctes);
  }
  if (const json* sub = Field(from_item, "RangeSubselect"); sub != nullptr) {
    if (const json* select = Field(sub->at("subquery"), "SelectStmt"); select != nullptr) {
      return LockedReferenceInSelect(*select, ctes);
    }
  }
  return nullptr;  // functions lock nothing
}

const json* Analyzer::LockedReferenceInSelect(const json& select, const CteScope* ctes) const {
  if (select.value("op", "SETOP_NONE") != "SETOP_NONE") {
    if (const json* hit = LockedReferenceInSelect(select.at("larg"), ctes); hit != nullptr) return hit;
    return LockedReferenceInSelect(select.at("rarg"), ctes);
  }
  // The subquery's own WITH names hide tables of the same names.
  CteScope scope;
  scope.parent = ctes;
  if (const json* with = Field(select, "withClause"); with != nullptr) {
    if (const json* list = Field(*with, "ctes"); list != nullptr) {
      for (const json& cte : *list) scope.names.insert(cte.at("CommonTableExpr").value("ctename", ""));
    }
  }
  const json* from = Field(select, "fromClause");
  if (from == nullptr) return nullptr;
  for (const json& item : *from) {
    if (const json* hit = LockedReferenceIn(item, &scope); hit != nullptr) return hit;
  }
  return nullptr;
}

const json* Analyzer::FromItemNamed(const json& from_item, const std::string& name) {
  if (const json* join = Field(from_item, "JoinExpr"); join != nullptr) {
    if (const json* named = FromItemNamed(join->at("larg"), name); named != nullptr) return named;
    return FromItemNamed(join->at("rarg"), name);
  }
  const std::string type = from_item.begin().key();
  const json& item = from_item.begin().value();
  const std::string alias = AliasOf(item);
  if (type == "RangeVar") return (alias.empty() ? item.value("relname", "") : alias) == name ? &from_item : nullptr;
  if (type == "RangeSubselect") return alias == name ? &from_item : nullptr;
  return nullptr;
}

int Analyzer::LockingClauseLocation(const json& select, std::size_t index, const json* of_rel) const {
  const auto& tokens = parsed_.tokens;
  const auto is_lock = [&](std::size_t i) {
    if (i + 1 >= tokens.size() || shardkit::detail::Upper(parsed_.TokenText(tokens[i])) != "FOR") return false;
    const std::string next = shardkit::detail::Upper(parsed_.TokenText(tokens[i + 1]));
    return next == "UPDATE" || next == "SHARE" || next == "NO" || next == "KEY";
  };
  if (of_rel != nullptr) {
    // The last FOR before the name it locks.
    const int at = of_rel->value("location", -1);
    int found = -1;
    for (std::size_t i = 0; i < tokens.size() && tokens[i].start < at; ++i) {
      if (is_lock(i)) found = tokens[i].start;
    }
    if (found >= 0) return found;
    return LockingLocation();
  }
  // The clauses follow the SELECT's body, at its parenthesis depth or
  // outside it (`(SELECT ...) FOR UPDATE`); those of subqueries are deeper.
  json body = select;
  body.erase("lockingClause");
  int low = -1;
  int high = -1;
  LocationBounds(body, low, high);
  if (low < 0) return LockingLocation();
  int depth = 0;
  int select_depth = 0;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].start == low || (tokens[i].start < low && i + 1 < tokens.size() && tokens[i + 1].start > low)) {
      select_depth = depth;
    }
    if (tokens[i].kind == '(') ++depth;
    if (tokens[i].kind == ')') --depth;
    if (tokens[i].start <= high || depth > select_depth || !is_lock(i)) continue;
    if (seen++ == index) return tokens[i].start;
  }
  return LockingLocation();
}

}  // namespace shardkit::sql::detail
