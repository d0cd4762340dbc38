// The SQL of exact distributed selection (percentile.hpp): the session's
// temporary table, and each round's statement, built from the query.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/core/value.hpp"
#include "shardkit/queries/merge.hpp"
#include "shardkit/queries/percentile.hpp"

namespace shardkit::detail {

// One column of the temporary table: a value expression, with the
// statistic it serves (percentiles over one expression share a column).
struct PercentileDomain {
  std::string expression;
  bool distinct = false;  // COUNT(DISTINCT): values fetched, not ranked
  TypeOid type = 0;       // known after round 1
  std::string type_name;  // format_type()'s: "numeric", "timestamp without time zone"
};

// Columns of round 1's rows: gk, the keys, then these.
struct FirstRoundColumns {
  int keys = 0;
  [[nodiscard]] int Key(std::size_t k) const noexcept { return 1 + static_cast<int>(k); }
  [[nodiscard]] int Rows() const noexcept { return 1 + keys; }  // the group's rows on the shard (NULL: meta row)
  [[nodiscard]] int Domain() const noexcept { return 2 + keys; }
  [[nodiscard]] int Count() const noexcept { return 3 + keys; }  // non-NULL values, or distinct ones
  [[nodiscard]] int Type() const noexcept { return 4 + keys; }
  [[nodiscard]] int Sample() const noexcept { return 5 + keys; }
};

// Group keys matched across shards by each type's own equality (numeric
// 1.5 = 1.50; NULL first), for types whose ComparisonForm is exact
// (PgTypeInfo::groupable).
struct GroupKeyLess {
  std::vector<TypeOid> types;
  bool operator()(const std::vector<Value>& a, const std::vector<Value>& b) const {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i].IsNull() != b[i].IsNull()) return a[i].IsNull();
      if (a[i].IsNull()) continue;
      const int c = CompareValues(ComparisonForm(a[i], types[i]), ComparisonForm(b[i], types[i]));
      if (c != 0) return c < 0;
    }
    return false;
  }
};

// Non-NULL values of one type, ordered (and so deduplicated) as the server's equality says.
struct TypedValueLess {
  TypeOid type = 0;
  bool operator()(const Value& a, const Value& b) const {
    return CompareValues(ComparisonForm(a, type), ComparisonForm(b, type)) < 0;
  }
};

// A value as the shards printed it: ReadValue, except that numeric's NaN
// and ±Infinity (which Decimal cannot hold) become the double precision
// values that print and order the same way (NaN above every number).
[[nodiscard]] Value ReadResultValue(std::optional<std::string_view> text, TypeOid type);

// The answer's rows (one per group, already complete) as a ResultSet,
// sorted by `order_by` (the type's own order; NULLS as PostgreSQL puts
// them), then OFFSET and LIMIT. Throws UnmergeableQuery for a sort column
// that is unknown or of a type shardkit cannot order as the server does.
[[nodiscard]] ResultSet OrderedResult(std::vector<std::string> names, const std::vector<TypeOid>& types,
                                      std::vector<std::vector<Value>> rows, const std::vector<SortKey>& order_by,
                                      std::optional<std::int64_t> limit, std::int64_t offset);

class PercentileStatements {
 public:
  PercentileStatements(const PercentileQuery& query, std::vector<PercentileDomain> domains);

  // Setup: CREATE TEMP TABLE ... AS SELECT the keys and values WITH NO DATA
  // (through a prepared statement when the query has parameters).
  [[nodiscard]] const std::vector<std::string>& Setup() const noexcept { return setup_; }
  // Round 1: the fill (with the query's parameters), then the read sent in
  // the same round trip: per domain and group a meta row, samples or
  // distinct counts.
  [[nodiscard]] const std::string& Fill() const noexcept { return fill_; }
  [[nodiscard]] const std::string& FirstRound() const noexcept { return first_; }

  // One range of a round, as one shard sees it.
  struct RangeParam {
    std::size_t domain = 0;
    std::optional<std::string> gk;  // the shard's name of the group; nullopt: the shard lacks it
    std::int64_t id = 0;
    std::optional<std::string> lo;  // exclusive bounds; nullopt: none
    std::optional<std::string> hi;
    bool all = false;  // sample rounds: every value inside
  };
  struct CandidateParam {
    std::size_t domain = 0;
    std::int64_t range = 0;
    std::string value;
    std::int64_t id = 0;
  };
  // Rows (cid, lt, le): each candidate's values below it and at or below it
  // inside its range, on this shard.
  [[nodiscard]] std::pair<std::string, SqlParams> CountRound(const std::vector<RangeParam>& ranges,
                                                             const std::vector<CandidateParam>& candidates) const;
  // Rows (rid, v): evenly spaced values inside each range (all of them with `all`).
  [[nodiscard]] std::pair<std::string, SqlParams> SampleRound(const std::vector<RangeParam>& ranges) const;
  // Rows (d, gk, v): every distinct value of the distinct domains.
  [[nodiscard]] std::string DistinctValues() const;

  [[nodiscard]] const std::vector<PercentileDomain>& Domains() const noexcept { return domains_; }
  std::vector<PercentileDomain>& MutableDomains() noexcept { return domains_; }

 private:
  std::vector<PercentileDomain> domains_;
  std::size_t keys_ = 0;
  int samples_ = 64;
  std::vector<std::string> setup_;
  std::string fill_;
  std::string first_;
};

}  // namespace shardkit::detail
