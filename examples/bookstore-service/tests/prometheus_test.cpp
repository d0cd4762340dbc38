// The service's /metrics scraped by a real Prometheus (Debian's prometheus,
// on loopback, every second) while bookstore-load runs: the pool, scatter,
// directory and HTTP series are in Prometheus's HTTP API, the counters
// grew under the load, and a bucket moved meanwhile shows in the directory
// series. Skipped, saying why, only if prometheus is not
// installed (scripts/bootstrap installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <shardkit/resharding/move.hpp>

#include "http_client.hpp"
#include "support.hpp"

namespace bookstore::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::optional<fs::path> OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs{path != nullptr ? path : "/usr/bin:/bin"};
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return fs::path(dir) / program;
  }
  return std::nullopt;
}

std::string UrlEncode(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Prometheus on a free loopback port scraping 127.0.0.1:`target` every
// second, in a scratch directory; stopped and removed by the destructor.
class Prometheus {
 public:
  Prometheus(const fs::path& binary, unsigned short target)
      : dir_(fs::temp_directory_path() / ("prometheus_test_" + std::to_string(::getpid()))), port_(ClosedPort()) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream{dir_ / "prometheus.yml"} << "global:\n"
                                              "  scrape_interval: 1s\n"
                                              "  scrape_timeout: 900ms\n"
                                              "scrape_configs:\n"
                                              "  - job_name: bookstore\n"
                                              "    static_configs:\n"
                                              "      - targets: ['127.0.0.1:"
                                           << target << "']\n";
    process_ = std::make_unique<Process>(
        std::vector<std::string>{binary.string(), "--config.file=" + (dir_ / "prometheus.yml").string(),
                                 "--storage.tsdb.path=" + (dir_ / "data").string(),
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"});
  }
  ~Prometheus() {
    process_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  Prometheus(const Prometheus&) = delete;
  Prometheus& operator=(const Prometheus&) = delete;

  bool WaitReady(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        HttpClient client{"127.0.0.1", port_, 2s};
        if (client.Get("/-/ready").status == 200) return true;
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }
  // The instant vector of a PromQL query.
  json Query(const std::string& promql) {
    HttpClient client{"127.0.0.1", port_, 10s};
    const auto reply = client.Get("/api/v1/query?query=" + UrlEncode(promql));
    if (reply.status != 200) throw std::runtime_error(promql + ": HTTP " + std::to_string(reply.status) + reply.body);
    const json body = json::parse(reply.body);
    return body["data"]["result"];
  }
  // The query's single value (sum(...) and the like); nullopt for no series.
  std::optional<double> Value(const std::string& promql) {
    const json result = Query(promql);
    if (result.empty()) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  }
  bool WaitFor(const std::string& promql, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (const auto v = Value(promql); v && *v > 0) return true;
      std::this_thread::sleep_for(250ms);
    }
    return false;
  }
  [[nodiscard]] std::string Output() const { return process_->Output(); }

 private:
  fs::path dir_;
  unsigned short port_;
  std::unique_ptr<Process> process_;
};

TEST(Prometheus, ScrapesThePoolScatterDirectoryAndHttpSeriesUnderLoad) {
  const auto binary = OnPath("prometheus");
  if (!binary) {
    GTEST_SKIP() << "prometheus is not installed (Debian's prometheus; scripts/bootstrap installs it)";
  }
  ScratchBookstore db{"prometheus_test"};
  Service service{db.WriteConfig("prometheus_test.toml")};
  Prometheus prometheus{*binary, service.Port()};
  ASSERT_TRUE(prometheus.WaitReady(30s)) << prometheus.Output();
  ASSERT_TRUE(prometheus.WaitFor("up{job=\"bookstore\"}", 20s)) << "the service was never scraped\n"
                                                                << prometheus.Output();
  const double requests_before = prometheus.Value("sum(bookstore_http_requests_total)").value_or(0);

  Process load({BOOKSTORE_LOAD_PATH, "--port", std::to_string(service.Port()), "--requests", "100000", "--duration-s",
                "4", "--concurrency", "4", "--customers", "1-299", "--books", "1-60", "--json"});
  // A bucket moves to the other shard and back while the load runs: the
  // directory series change (the service follows the catalog).
  shardkit::MoveOptions quick;
  quick.cleanup_grace = 0ms;
  shardkit::BucketMover mover{db.Config(), quick};
  const shardkit::BucketId bucket{5};
  (void)mover.Move(bucket, shardkit::ShardId{1});
  EXPECT_TRUE(prometheus.WaitFor("changes(shardkit_directory_version[1m])", 10s)) << prometheus.Output();
  EXPECT_TRUE(
      prometheus.WaitFor("max_over_time(shardkit_directory_buckets{shard=\"1\"}[1m]) - "
                         "min_over_time(shardkit_directory_buckets{shard=\"1\"}[1m])",
                         10s));
  (void)mover.Move(bucket, shardkit::ShardId{0});  // back: the even split
  const auto status = load.WaitForExit(60s);
  ASSERT_TRUE(status.has_value()) << load.Output();
  ASSERT_EQ(*status, 0) << load.Output();
  // A scrape after the load.
  ASSERT_TRUE(prometheus.WaitFor("sum(bookstore_http_requests_total) - " + std::to_string(requests_before), 10s));
  std::this_thread::sleep_for(1200ms);

  // Present: every family the dashboard reads.
  for (const char* series :
       {"shardkit_pool_connections", "shardkit_pool_acquired_total", "shardkit_pool_acquire_wait_seconds",
        "shardkit_pool_timeouts_total", "shardkit_scatter_calls_total", "shardkit_scatter_failed_total",
        "shardkit_scatter_shard_failures_total", "shardkit_directory_version", "shardkit_directory_buckets",
        "bookstore_http_requests_total", "bookstore_http_request_duration_seconds_bucket"}) {
    EXPECT_FALSE(prometheus.Query(series).empty()) << series;
  }
  // One pool per shard, the directory's 64 buckets.
  EXPECT_EQ(prometheus.Query("shardkit_pool_acquired_total").size(), static_cast<std::size_t>(db.ShardCount()));
  EXPECT_EQ(prometheus.Value("sum(shardkit_directory_buckets)"), 64.0);
  EXPECT_GE(prometheus.Value("shardkit_directory_version").value_or(0), 1.0);
  // Changing under the load: the counters grew within the last minute, on every shard's pool.
  for (const char* grew :
       {"min(increase(shardkit_pool_acquired_total[1m]))", "sum(increase(shardkit_scatter_calls_total[1m]))",
        "sum(increase(shardkit_scatter_calls_total{fanout=\"cross_shard\"}[1m]))",
        "sum(increase(bookstore_http_requests_total[1m]))",
        "sum(increase(bookstore_http_request_duration_seconds_count[1m]))"}) {
    EXPECT_GT(prometheus.Value(grew).value_or(0), 0) << grew;
  }
  // The dashboard's queries (README) answer.
  for (const char* panel :
       {"histogram_quantile(0.99, sum by (le, route) (rate(bookstore_http_request_duration_seconds_bucket[1m])))",
        "max by (shard) (shardkit_pool_acquire_wait_seconds{quantile=\"0.99\"})",
        "sum(rate(shardkit_scatter_failed_total[1m])) / sum(rate(shardkit_scatter_calls_total[1m]))"}) {
    EXPECT_FALSE(prometheus.Query(panel).empty()) << panel;
  }
}

}  // namespace
}  // namespace bookstore::test
