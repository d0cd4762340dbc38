// lab.hpp — the Bookstore lab's context, its checks and its output helpers.
//
// The lab is a Bookstore service built on shardkit's public API: a resolver
// with one pool per shard, a ScatterGather for cross-shard queries, and, as
// the ground truth, a connection to the unsharded reference server. Every
// demo returns a DemoResult: the text it prints, its figures as JSON, and
// its checks against the reference.
//
//   shardkit::lab::Lab lab{shardkit::LoadConfig(path)};
//   auto routing = shardkit::lab::RunRouting(lab);
//   std::cout << routing.text;  if (!routing.Ok()) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <pqxx/connection>
#include <string>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/queries/scatter.hpp"
#include "shardkit/routing/resolver.hpp"

namespace shardkit::lab {

using Json = nlohmann::ordered_json;

// One verified claim: "exact top-10 equals the reference's GROUP BY".
struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
};

struct DemoResult {
  std::string name;
  std::string text;               // what the demo prints
  Json figures = Json::object();  // every figure, for --json
  std::vector<Check> checks;
  [[nodiscard]] bool Ok() const noexcept;
  // Records a check; returns `ok` so callers can branch on it.
  bool Expect(std::string check_name, bool ok, std::string detail);
  [[nodiscard]] Json ToJson() const;
};

class Lab {
 public:
  // Builds the pools (connections are opened lazily) and the scatter.
  explicit Lab(ClusterConfig config);
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  [[nodiscard]] const ClusterConfig& Config() const noexcept { return config_; }
  [[nodiscard]] BucketShardResolver& Resolver() const noexcept { return *resolver_; }
  [[nodiscard]] ScatterGather& Scatter() const noexcept { return *scatter_; }
  [[nodiscard]] int ShardCount() const noexcept { return resolver_->ShardCount(); }
  [[nodiscard]] std::string ShardLabel(ShardId shard) const;  // "shard0"

  // The unsharded reference server (own connection, opened on first use).
  // Throws shardkit::Error if the config has no [reference].
  [[nodiscard]] pqxx::connection& Reference();
  [[nodiscard]] Dsn ReferenceDsn() const;

  // A scatter through the lab's ScatterGather, remembered for the stats demo.
  [[nodiscard]] ScatterResult Run(const std::string& label, const std::string& sql, const SqlParams& params = {});
  void Remember(const std::string& label, const ScatterResult& result);

  struct ScatterRecord {
    std::string label;
    std::size_t fanout = 0;
    std::size_t rows = 0;
    std::chrono::microseconds elapsed{0};
    std::optional<ShardId> slowest_shard;
    std::chrono::microseconds slowest_elapsed{0};
  };
  // For scatters run inside the library (e.g. a top-k's phases).
  void Remember(ScatterRecord record);
  [[nodiscard]] std::vector<ScatterRecord> Records() const;

 private:
  ClusterConfig config_;
  std::unique_ptr<BucketShardResolver> resolver_;
  std::unique_ptr<ScatterGather> scatter_;
  std::unique_ptr<pqxx::connection> reference_;
  mutable std::mutex records_mutex_;
  std::vector<ScatterRecord> records_;
};

// ---------------------------------------------------------------- output

// Milliseconds with one decimal: "80.4".
[[nodiscard]] std::string Ms(std::chrono::microseconds d);
[[nodiscard]] double MsValue(std::chrono::microseconds d);
// The middle value (the mean of the two middle ones); 0 for none.
[[nodiscard]] double Median(std::vector<double> values);
template <class Duration>
[[nodiscard]] std::chrono::microseconds Micros(Duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d);
}
// 1234567 -> "1,234,567"
[[nodiscard]] std::string Thousands(std::int64_t n);
[[nodiscard]] std::string Percent(double fraction, int decimals = 1);

// A table of aligned columns. Psql style draws " a | b " with a dashed rule,
// as psql prints (the Bookstore case's shard table); plain style separates by spaces.
class TextTable {
 public:
  enum class Align { kLeft, kRight };
  enum class Style { kPsql, kPlain };
  struct Column {
    std::string header;
    Align align = Align::kRight;
    // A note after the table's last column, outside its frame ("<- hot").
    bool note = false;
  };
  explicit TextTable(std::vector<Column> columns, Style style = Style::kPsql);
  void AddRow(std::vector<std::string> cells);
  [[nodiscard]] std::string Render(const std::string& indent = "") const;

 private:
  std::vector<Column> columns_;
  Style style_;
  std::vector<std::vector<std::string>> rows_;
};

// The lab's demos, in the order `all` runs them.
[[nodiscard]] const std::vector<std::string>& DemoNames();
// A demo's heading: "4. the wrong top-10: best sellers of the last 30 days"
// ("" for an unknown name).
[[nodiscard]] const char* DemoTitle(const std::string& demo);

}  // namespace shardkit::lab
