#include "lab.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/connection>

#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::lab {

bool DemoResult::Ok() const noexcept {
  return std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.ok; });
}

bool DemoResult::Expect(std::string check_name, bool ok, std::string detail) {
  checks.push_back(Check{std::move(check_name), ok, std::move(detail)});
  return ok;
}

Json DemoResult::ToJson() const {
  Json j = figures;
  Json list = Json::array();
  for (const auto& c : checks) list.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
  j["checks"] = std::move(list);
  j["ok"] = Ok();
  return j;
}

const char* DemoTitle(const std::string& demo) {
  if (demo == "routing") return "1. routing: customer -> bucket -> shard -> that shard's pool";
  if (demo == "shard-key") return "2. shard key: hash by customer_id vs range by date";
  if (demo == "ids") return "3. global IDs: identity vs shardkit Snowflake IDs";
  if (demo == "top10") return "4. the wrong top-10: best sellers of the last 30 days";
  if (demo == "category-avg") return "5. exercise: average order amount per category";
  if (demo == "third-shard") return "6. exercise: add a third shard";
  if (demo == "percentiles") return "10. medians, percentiles and distinct counts: exact without shipping the rows";
  if (demo == "workers") return "7. worker sharding: partitions, leases, fencing, hot keys (the worker-sharding case)";
  if (demo == "stats") return "8. cross-shard query statistics of this run";
  if (demo == "rebalance") return "9. exercise: rebalance to one more shard and back, under load";
  if (demo == "replicas")
    return "11. replicas: read-your-writes on replicas, paused replay, a primary killed and failed over";
  if (demo == "load") return "load";
  if (demo == "copy-vs-psql") return "COPY vs psql \\copy";
  return "";
}

Lab::Lab(ClusterConfig config) : config_(std::move(config)) {
  resolver_ = BucketShardResolver::FromConfig(config_);
  scatter_ = std::make_unique<ScatterGather>(*resolver_);
}

Lab::~Lab() = default;

std::string Lab::ShardLabel(ShardId shard) const {
  return fmt::format("shard{}", shard);
}

Dsn Lab::ReferenceDsn() const {
  if (!config_.reference_dsn) {
    throw ConfigError(
        "reference.dsn",
        fmt::format("{} has no [reference] server; the lab checks every answer against it", config_.origin));
  }
  return WithConnectTimeout(*config_.reference_dsn, config_.pool.connect_timeout);
}

pqxx::connection& Lab::Reference() {
  if (!reference_) {
    const Dsn dsn = ReferenceDsn();
    try {
      reference_ = std::make_unique<pqxx::connection>(dsn.Reveal());
    } catch (const pqxx::broken_connection& e) {
      throw Error(fmt::format("reference server ({}) is unreachable: {}; start the lab cluster (lab/cluster start)",
                              dsn, e.what()));
    }
  }
  return *reference_;
}

ScatterResult Lab::Run(const std::string& label, const std::string& sql, const SqlParams& params) {
  ScatterOptions options;
  options.label = label;
  ScatterResult result = scatter_->Run(sql, params, options);
  Remember(label, result);
  return result;
}

void Lab::Remember(const std::string& label, const ScatterResult& result) {
  ScatterRecord r;
  r.label = label;
  r.fanout = result.shards.size() + result.failures.size();
  r.rows = result.TotalRows();
  r.elapsed = result.elapsed;
  r.slowest_shard = result.slowest_shard;
  r.slowest_elapsed = result.slowest_elapsed;
  Remember(std::move(r));
}

void Lab::Remember(ScatterRecord record) {
  std::lock_guard lock(records_mutex_);
  records_.push_back(std::move(record));
}

std::vector<Lab::ScatterRecord> Lab::Records() const {
  std::lock_guard lock(records_mutex_);
  return records_;
}

std::string Ms(std::chrono::microseconds d) {
  return fmt::format("{:.1f}", MsValue(d));
}

double MsValue(std::chrono::microseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string Thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string Percent(double fraction, int decimals) {
  return fmt::format("{:.{}f}%", fraction * 100.0, decimals);
}

TextTable::TextTable(std::vector<Column> columns, Style style) : columns_(std::move(columns)), style_(style) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(const std::string& indent) const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].header.size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto pad = [&](const std::string& s, std::size_t c, bool header) {
    const std::size_t fill = width[c] - s.size();
    // psql centres headers; cells follow the column's alignment.
    if (header && style_ == Style::kPsql) {
      const std::size_t left = fill / 2;
      return std::string(left, ' ') + s + std::string(fill - left, ' ');
    }
    if (columns_[c].align == Align::kRight) return std::string(fill, ' ') + s;
    return s + std::string(fill, ' ');
  };
  std::string out;
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string l = indent;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].note) {
        l += "  " + (header ? std::string() : cells[c]);
      } else if (style_ == Style::kPsql) {
        l += (c == 0 ? " " : " | ") + pad(cells[c], c, header);
      } else {
        l += (c == 0 ? "" : "  ") + pad(cells[c], c, header);
      }
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  std::vector<std::string> headers;
  for (const auto& col : columns_) headers.push_back(col.header);
  line(headers, true);
  if (style_ == Style::kPsql) {
    std::string rule = indent;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (!columns_[c].note) rule += (c == 0 ? "" : "+") + std::string(width[c] + 2, '-');
    }
    out += rule + "\n";
  }
  for (const auto& row : rows_) line(row, false);
  return out;
}

const std::vector<std::string>& DemoNames() {
  static const std::vector<std::string> names{"routing",     "shard-key",   "ids",     "top10", "category-avg",
                                              "percentiles", "third-shard", "workers", "stats"};
  return names;
}

}  // namespace shardkit::lab
