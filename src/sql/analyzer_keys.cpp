// The Analyzer's shard key nodes, constants and facts: what pins or joins a node (analyzer.hpp).
#include "sql/analyzer.hpp"

#include <algorithm>

#include "shardkit/core/shard_key_format.hpp"

namespace shardkit::sql::detail {

int Analyzer::NewNode() {
  parent_.push_back(static_cast<int>(parent_.size()));
  pins_.emplace_back();
  return static_cast<int>(parent_.size()) - 1;
}

int Analyzer::Find(int node) {
  while (parent_[static_cast<std::size_t>(node)] != node) {
    parent_[static_cast<std::size_t>(node)] =
        parent_[static_cast<std::size_t>(parent_[static_cast<std::size_t>(node)])];
    node = parent_[static_cast<std::size_t>(node)];
  }
  return node;
}

void Analyzer::Union(int a, int b) {
  a = Find(a);
  b = Find(b);
  if (a == b) return;
  parent_[static_cast<std::size_t>(b)] = a;
  auto& into = pins_[static_cast<std::size_t>(a)];
  for (const KeySource& k : pins_[static_cast<std::size_t>(b)]) {
    if (std::find(into.begin(), into.end(), k) == into.end()) into.push_back(k);
  }
}

void Analyzer::Pin(int node, const KeySource& key) {
  auto& pins = pins_[static_cast<std::size_t>(Find(node))];
  if (std::find(pins.begin(), pins.end(), key) == pins.end()) pins.push_back(key);
}

// ---- constants ----

namespace {

// A TypeName naming an integer type (int, pg_catalog.int8...), whatever its array bounds.
bool IsTypeNamed(const json& type, const std::set<std::string>& names_of_type) {
  const json& names = type.at("names");
  const std::optional<std::string> name = names.empty() ? std::nullopt : StringValue(names.back());
  if (!name || !names_of_type.contains(*name) || names.size() > 2) return false;
  return names.size() == 1 || StringValue(names.front()) == std::optional<std::string>("pg_catalog");
}

bool IsIntegerType(const json& type) {
  static const std::set<std::string> kIntegerTypes = {"int2", "int4", "int8", "smallint", "integer", "bigint", "int"};
  return IsTypeNamed(type, kIntegerTypes);
}

// A cast that keeps a key's value: to an integer type for integer keys, to
// the key's own type (or text, varchar) for the others.
bool CastKeepsKey(const json& type, ShardKeyType key_type) {
  static const std::set<std::string> kUuid = {"uuid"};
  static const std::set<std::string> kText = {"text", "varchar"};
  switch (key_type) {
    case ShardKeyType::kInt4:
    case ShardKeyType::kInt8:
      return IsIntegerType(type);
    case ShardKeyType::kUuid:
      return IsTypeNamed(type, kUuid);
    case ShardKeyType::kText:
      return IsTypeNamed(type, kText);
  }
  return false;
}

}  // namespace

std::optional<KeySource> Analyzer::KeyConstant(const json& node) const {
  const ShardKeyType key_type = catalog_.KeyType();
  const bool integer_key = key_type == ShardKeyType::kInt4 || key_type == ShardKeyType::kInt8;
  if (const json* param = Field(node, "ParamRef"); param != nullptr) {
    const int number = param->value("number", 0);
    if (number < 1) return std::nullopt;
    return KeySource{std::nullopt, number, param->value("location", -1)};
  }
  if (const json* constant = Field(node, "A_Const"); constant != nullptr) {
    const int location = constant->value("location", -1);
    // A quoted literal is read as the key's type, as the server reads it.
    if (const json* text = Field(*constant, "sval"); text != nullptr) {
      std::optional<ShardKey> key = ShardKey::Parse(key_type, text->value("sval", ""));
      if (!key) return std::nullopt;
      return KeySource{std::move(key), 0, location};
    }
    if (!integer_key) return std::nullopt;
    // Beyond int4 the scanner makes an integer a numeric constant.
    if (const json* big = Field(*constant, "fval"); big != nullptr) {
      const std::optional<std::int64_t> value = ParseIntegerText(big->value("fval", ""));
      if (!value || key_type != ShardKeyType::kInt8) return std::nullopt;  // an integer key matches none
      return KeySource{ShardKey::Int8(*value), 0, location};
    }
    if (Field(*constant, "ival") == nullptr) return std::nullopt;
    // The value from the text: the parse tree's JSON drops negative integers.
    std::size_t at = parsed_.TokenAt(location);
    if (at >= parsed_.tokens.size() || parsed_.tokens[at].start != location) return std::nullopt;
    bool negative = false;
    if (parsed_.tokens[at].kind == '-') {
      negative = true;
      ++at;
    }
    if (at >= parsed_.tokens.size() || parsed_.tokens[at].kind != kTokenIconst) return std::nullopt;
    const std::optional<std::int64_t> value = ParseIntegerDigits(parsed_.TokenText(parsed_.tokens[at]), negative);
    if (!value) return std::nullopt;
    if (key_type == ShardKeyType::kInt8) return KeySource{ShardKey::Int8(*value), 0, location};
    if (*value < INT32_MIN || *value > INT32_MAX) return std::nullopt;
    return KeySource{ShardKey::Int4(static_cast<std::int32_t>(*value)), 0, location};
  }
  if (const json* cast = Field(node, "TypeCast"); cast != nullptr) {
    const json& type = cast->at("typeName");
    if (Field(type, "arrayBounds") != nullptr) return std::nullopt;
    if (!CastKeepsKey(type, key_type)) return std::nullopt;
    return KeyConstant(cast->at("arg"));
  }
  return std::nullopt;
}

// ---- facts ----

void Analyzer::Conjuncts(const json& expr, std::vector<const json*>& out) {
  if (const json* boolean = Field(expr, "BoolExpr"); boolean != nullptr && boolean->value("boolop", "") == "AND_EXPR") {
    for (const json& arg : boolean->at("args")) Conjuncts(arg, out);
    return;
  }
  out.push_back(&expr);
}

Side Analyzer::SideOf(const json& expr, Level& level) const {
  Side side;
  if (const json* column = Field(expr, "ColumnRef"); column != nullptr) {
    if (Entry* e = ResolveKey(*column, &level); e != nullptr) {
      side.kind = Side::Kind::kColumn;
      side.entry = e;
    }
    return side;
  }
  if (const std::optional<KeySource> constant = KeyConstant(expr); constant) {
    side.kind = Side::Kind::kConstant;
    side.constant = *constant;
  }
  return side;
}

template <class RoleOf>
void Analyzer::Facts(const json& expr, Level& level, const RoleOf& role_of) {
  std::vector<const json*> conjuncts;
  Conjuncts(expr, conjuncts);
  for (const json* conjunct : conjuncts) {
    const json* op = Field(*conjunct, "A_Expr");
    if (op == nullptr || op->value("kind", "") != "AEXPR_OP") continue;
    const json* name = Field(*op, "name");
    if (name == nullptr || name->size() != 1 || StringValue(name->front()) != std::optional<std::string>("=")) continue;
    const json* lexpr = Field(*op, "lexpr");
    const json* rexpr = Field(*op, "rexpr");
    if (lexpr == nullptr || rexpr == nullptr) continue;
    const Side a = SideOf(*lexpr, level);
    const Side b = SideOf(*rexpr, level);
    Equate(a, b, role_of);
    Equate(b, a, role_of);
  }
}

template <class RoleOf>
void Analyzer::Equate(const Side& a, const Side& b, const RoleOf& role_of) {
  if (b.kind != Side::Kind::kColumn || role_of(b.entry) != Role::kRestricted) return;
  if (a.kind == Side::Kind::kConstant) {
    Pin(b.entry->node, a.constant);
  } else if (a.kind == Side::Kind::kColumn) {
    if (role_of(a.entry) == Role::kRestricted) {
      Union(a.entry->node, b.entry->node);
    } else {
      directed_.emplace_back(a.entry->node, b.entry->node);
    }
  }
}

void Analyzer::WhereFacts(const json& where, Level& level) {
  Facts(where, level, [&](const Entry* e) { return e->level == &level ? Role::kRestricted : Role::kFixed; });
  KeySetFacts(where, level);
}

void Analyzer::KeySetFacts(const json& where, Level& level) {
  std::vector<const json*> conjuncts;
  Conjuncts(where, conjuncts);
  for (const json* conjunct : conjuncts) {
    const json* op = Field(*conjunct, "A_Expr");
    if (op == nullptr) continue;
    const json* lexpr = Field(*op, "lexpr");
    const json* column = lexpr == nullptr ? nullptr : Field(*lexpr, "ColumnRef");
    if (column == nullptr) continue;
    const Entry* e = ResolveKey(*column, &level);
    if (e == nullptr || e->kind != Entry::Kind::kSharded || e->level != &level) continue;
    if (std::optional<KeySet> set = KeySetOf(*op); set) key_sets_.emplace_back(e, std::move(*set));
  }
}

std::optional<KeySet> Analyzer::KeySetOf(const json& op) const {
  const std::string kind = op.value("kind", "");
  const json* name = Field(op, "name");
  if ((kind != "AEXPR_IN" && kind != "AEXPR_OP_ANY") || name == nullptr || name->size() != 1 ||
      StringValue(name->front()) != std::optional<std::string>("=")) {
    return std::nullopt;
  }
  const json* rexpr = Field(op, "rexpr");
  if (rexpr == nullptr) return std::nullopt;
  KeySet set;
  set.location = op.value("location", -1);
  // A NULL, or a NULL cast to an integer type: matches nothing.
  const auto is_null = [](const json& node) {
    const json* inner = &node;
    if (const json* cast = Field(node, "TypeCast"); cast != nullptr) inner = &cast->at("arg");
    const json* constant = Field(*inner, "A_Const");
    return constant != nullptr && constant->value("isnull", false);
  };
  const auto add_elements = [&](const json& items) {
    for (const json& item : items) {
      if (is_null(item)) {
        // A cast of NULL to a type that is not an integer's changes nothing
        // either: NULL = x is NULL whatever x's type.
        continue;
      }
      const std::optional<KeySource> key = KeyConstant(item);
      if (!key) return false;
      set.elements.push_back(*key);
    }
    return true;
  };
  if (kind == "AEXPR_IN") {
    const json* list = Field(*rexpr, "List");
    const json* items = list == nullptr ? nullptr : Field(*list, "items");
    if (items == nullptr || !add_elements(*items)) return std::nullopt;
    return set;
  }
  // = ANY(array): ARRAY[...], $n, a literal '{...}', or casts of those to an integer array type.
  const json* array = rexpr;
  if (const json* cast = Field(*rexpr, "TypeCast"); cast != nullptr) {
    const json& type = cast->at("typeName");
    const json* bounds = Field(type, "arrayBounds");
    if (bounds == nullptr || bounds->size() != 1 || !CastKeepsKey(type, catalog_.KeyType())) return std::nullopt;
    array = &cast->at("arg");
  }
  if (const json* elements = Field(*array, "A_ArrayExpr"); elements != nullptr) {
    const json* items = Field(*elements, "elements");
    if (items != nullptr && !add_elements(*items)) return std::nullopt;
    return set;
  }
  if (const json* param = Field(*array, "ParamRef"); param != nullptr) {
    set.array_param = param->value("number", 0);
    if (set.array_param < 1) return std::nullopt;
    return set;
  }
  if (const json* constant = Field(*array, "A_Const"); constant != nullptr) {
    if (constant->value("isnull", false)) return set;  // = ANY(NULL): nothing
    const json* text = Field(*constant, "sval");
    if (text == nullptr) return std::nullopt;
    set.array_text = text->value("sval", "");
    return set;
  }
  return std::nullopt;
}

void Analyzer::JoinFacts(const FromItem& item, Level& level, const CteScope* ctes) {
  if (item.entry != nullptr) return;
  JoinFacts(*item.left, level, ctes);
  JoinFacts(*item.right, level, ctes);
  const std::vector<Entry*>* restricted = nullptr;
  if (item.join_type == "JOIN_INNER") {
    restricted = &item.entries;
  } else if (item.join_type == "JOIN_LEFT") {
    restricted = &item.right->entries;
  } else if (item.join_type == "JOIN_RIGHT") {
    restricted = &item.left->entries;
  }
  if (item.quals != nullptr) {
    if (restricted != nullptr) {
      Facts(*item.quals, level, [&](const Entry* e) {
        return std::find(restricted->begin(), restricted->end(), e) != restricted->end() ? Role::kRestricted
                                                                                         : Role::kFixed;
      });
    }
    Walk(*item.quals, level, ctes);
  }
  if (item.using_key && restricted != nullptr) {
    const Candidates left = UnqualifiedIn(*item.left);
    const Candidates right = UnqualifiedIn(*item.right);
    if (left.found.size() == 1 && right.found.size() == 1 && left.found[0].node >= 0 && right.found[0].node >= 0) {
      const int l = left.found[0].node;
      const int r = right.found[0].node;
      if (item.join_type == "JOIN_INNER") {
        Union(l, r);
      } else if (item.join_type == "JOIN_LEFT") {
        directed_.emplace_back(l, r);
      } else {
        directed_.emplace_back(r, l);
      }
    }
  }
}

}  // namespace shardkit::sql::detail
