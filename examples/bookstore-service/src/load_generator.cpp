#include "load_generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cmath>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "http_client.hpp"

namespace bookstore {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  std::string endpoint;
  int status = 0;
  std::int64_t micros = 0;
};

LatencySummary Summarize(std::vector<std::int64_t> micros, const std::vector<int>& statuses) {
  LatencySummary s;
  s.count = micros.size();
  for (int status : statuses) {
    ++s.statuses[status];
    if (status == 0 || status >= 500) ++s.errors;
  }
  if (micros.empty()) return s;
  std::sort(micros.begin(), micros.end());
  const auto at = [&micros](double q) {
    const auto index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(micros.size()))) - 1;
    return micros[std::min(index, micros.size() - 1)];
  };
  s.p50_us = at(0.50);
  s.p90_us = at(0.90);
  s.p99_us = at(0.99);
  s.max_us = micros.back();
  double total = 0;
  for (auto m : micros) total += static_cast<double>(m);
  s.mean_us = total / static_cast<double>(micros.size());
  return s;
}

double ToMs(std::int64_t micros) {
  return static_cast<double>(micros) / 1000.0;
}
std::string Ms(std::int64_t micros) {
  return fmt::format("{:.1f}", ToMs(micros));
}

nlohmann::json LatencyJson(const LatencySummary& s) {
  nlohmann::json statuses = nlohmann::json::object();
  for (const auto& [status, count] : s.statuses) statuses[std::to_string(status)] = count;
  return {{"count", s.count},         {"errors", s.errors},           {"statuses", statuses},
          {"p50_ms", ToMs(s.p50_us)}, {"p90_ms", ToMs(s.p90_us)},     {"p99_ms", ToMs(s.p99_us)},
          {"max_ms", ToMs(s.max_us)}, {"mean_ms", s.mean_us / 1000.0}};
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver{io};
  boost::system::error_code ec;
  const auto results = resolver.resolve(host, "0", ec);
  if (ec || results.empty()) return false;
  for (const auto& entry : results) {
    if (!entry.endpoint().address().is_loopback()) return false;
  }
  return true;
}

double LoadSummary::RequestsPerSecond() const {
  return elapsed.count() > 0 ? static_cast<double>(requests) * 1e6 / static_cast<double>(elapsed.count()) : 0.0;
}

std::string LoadSummary::Text() const {
  std::string text = fmt::format("{} requests in {:.2f} s ({:.0f}/s), {} errors{}\n", requests,
                                 static_cast<double>(elapsed.count()) / 1e6, RequestsPerSecond(), errors,
                                 stopped_by_time ? " (stopped by the time bound)" : "");
  text += fmt::format("{:<28} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}  statuses\n", "endpoint", "count", "errors", "p50 ms",
                      "p90 ms", "p99 ms", "max ms");
  const auto row = [&text](const std::string& name, const LatencySummary& s) {
    std::string statuses;
    for (const auto& [status, count] : s.statuses) {
      statuses +=
          fmt::format("{}{}:{}", statuses.empty() ? "" : " ", status == 0 ? "none" : std::to_string(status), count);
    }
    text += fmt::format("{:<28} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}  {}\n", name, s.count, s.errors, Ms(s.p50_us),
                        Ms(s.p90_us), Ms(s.p99_us), Ms(s.max_us), statuses);
  };
  for (const auto& [name, s] : endpoints) row(name, s);
  row("all", overall);
  for (const auto& e : first_errors) text += "error: " + e + "\n";
  return text;
}

nlohmann::json LoadSummary::Json() const {
  nlohmann::json by_endpoint = nlohmann::json::object();
  for (const auto& [name, s] : endpoints) by_endpoint[name] = LatencyJson(s);
  return {{"requests", requests},
          {"errors", errors},
          {"elapsed_s", static_cast<double>(elapsed.count()) / 1e6},
          {"requests_per_second", RequestsPerSecond()},
          {"stopped_by_time", stopped_by_time},
          {"overall", LatencyJson(overall)},
          {"endpoints", by_endpoint},
          {"first_errors", first_errors}};
}

LoadSummary RunLoad(const LoadOptions& options) {
  if (options.max_requests < 1 || options.max_requests > 1'000'000) {
    throw std::invalid_argument("max_requests must be from 1 to 1,000,000");
  }
  if (options.max_duration < std::chrono::milliseconds(1) || options.max_duration > std::chrono::minutes(10)) {
    throw std::invalid_argument("max_duration must be from 1 ms to 10 minutes");
  }
  if (options.concurrency < 1 || options.concurrency > 64)
    throw std::invalid_argument("concurrency must be from 1 to 64");
  if (options.first_customer > options.last_customer || options.first_book > options.last_book ||
      options.first_book < 1) {
    throw std::invalid_argument("empty customer or book range");
  }
  const int weight_total =
      options.mix.customer_orders + options.mix.post_order + options.mix.top_books + options.mix.category_avg;
  if (options.mix.customer_orders < 0 || options.mix.post_order < 0 || options.mix.top_books < 0 ||
      options.mix.category_avg < 0 || weight_total <= 0) {
    throw std::invalid_argument("the mix needs non-negative weights, at least one positive");
  }
  if (!IsLoopbackHost(options.host)) {
    throw std::invalid_argument(
        fmt::format("{} is not a loopback address: the load generator only drives a service "
                    "on this machine (127.0.0.1, ::1, localhost)",
                    options.host));
  }

  std::atomic<std::uint64_t> issued{0};
  const auto start = Clock::now();
  const auto stop_at = start + options.max_duration;
  std::atomic<bool> stopped_by_time{false};
  std::mutex mutex;
  std::vector<Sample> samples;
  std::vector<std::string> first_errors;

  const auto client_thread = [&](int index) {
    HttpClient client(options.host, options.port, options.request_timeout);
    std::mt19937_64 rng(options.seed * 1000003ULL + static_cast<std::uint64_t>(index));
    std::uniform_int_distribution<std::int32_t> customer(options.first_customer, options.last_customer);
    std::uniform_int_distribution<std::int64_t> book(options.first_book, options.last_book);
    std::uniform_int_distribution<int> pick(1, weight_total);
    std::uniform_int_distribution<int> lines(1, 3);
    std::uniform_int_distribution<int> quantity(1, 3);
    std::vector<Sample> mine;
    while (true) {
      if (Clock::now() >= stop_at) {
        stopped_by_time = true;
        break;
      }
      if (issued.fetch_add(1) >= options.max_requests) break;
      int p = pick(rng);
      std::string endpoint;
      std::string method = "GET";
      std::string target;
      std::string body;
      if ((p -= options.mix.customer_orders) <= 0) {
        endpoint = "GET /customers/{id}/orders";
        target = fmt::format("/customers/{}/orders?limit=10", customer(rng));
      } else if ((p -= options.mix.post_order) <= 0) {
        endpoint = "POST /orders";
        method = "POST";
        target = "/orders";
        nlohmann::json items = nlohmann::json::array();
        for (int n = lines(rng); n > 0; --n) items.push_back({{"book_id", book(rng)}, {"quantity", quantity(rng)}});
        body = nlohmann::json{{"customer_id", customer(rng)}, {"items", items}}.dump();
      } else if ((p -= options.mix.top_books) <= 0) {
        endpoint = "GET /reports/top-books";
        target = "/reports/top-books?days=30";
      } else {
        endpoint = "GET /reports/category-avg";
        target = "/reports/category-avg?days=30";
      }
      const auto begin = Clock::now();
      Sample sample{endpoint, 0, 0};
      std::string error;
      try {
        const auto reply = client.Request(method, target, body);
        sample.status = reply.status;
        if (reply.status >= 500) error = fmt::format("{} {}: {} {}", method, target, reply.status, reply.body);
      } catch (const std::exception& e) {
        error = e.what();
      }
      sample.micros = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - begin).count();
      mine.push_back(std::move(sample));
      if (!error.empty()) {
        std::lock_guard lock(mutex);
        if (first_errors.size() < 5) first_errors.push_back(std::move(error));
      }
    }
    std::lock_guard lock(mutex);
    samples.insert(samples.end(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < options.concurrency; ++i) threads.emplace_back(client_thread, i);
  for (auto& t : threads) t.join();

  LoadSummary summary;
  summary.elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  summary.stopped_by_time = stopped_by_time && samples.size() < options.max_requests;
  summary.requests = samples.size();
  summary.first_errors = std::move(first_errors);
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<int>>> by_endpoint;
  std::vector<std::int64_t> all_micros;
  std::vector<int> all_statuses;
  for (const auto& s : samples) {
    by_endpoint[s.endpoint].first.push_back(s.micros);
    by_endpoint[s.endpoint].second.push_back(s.status);
    all_micros.push_back(s.micros);
    all_statuses.push_back(s.status);
  }
  for (auto& [name, data] : by_endpoint) summary.endpoints[name] = Summarize(std::move(data.first), data.second);
  summary.overall = Summarize(std::move(all_micros), all_statuses);
  summary.errors = summary.overall.errors;
  return summary;
}

}  // namespace bookstore
