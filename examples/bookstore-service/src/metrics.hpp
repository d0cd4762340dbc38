// Prometheus text exposition (format 0.0.4) for the service's /metrics:
// a writer that keeps HELP/TYPE lines and label escaping right, and the
// HTTP request counters and latency histograms the service records.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace bookstore {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // Starts a metric family: # HELP and # TYPE (counter, gauge, histogram, summary).
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value);
  void Sample(std::string_view name, double value) { Sample(name, {}, value); }
  [[nodiscard]] const std::string& Text() const noexcept { return text_; }

 private:
  std::string text_;
};

// Thread-safe.
class HttpMetrics {
 public:
  void Record(std::string_view route, std::string_view method, int status, std::chrono::nanoseconds elapsed);
  void Write(PrometheusText& out) const;

 private:
  static constexpr double kBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  struct Histogram {
    std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(std::size(kBuckets), 0);
    std::uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> durations_;
};

}  // namespace bookstore
