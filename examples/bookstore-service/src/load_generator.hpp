// A bounded load generator for the Bookstore service: a few client threads
// on loopback send a mix of requests for at most N requests and at most T
// seconds, and report how long they took. Meant for demos (a bucket move
// under load) and smoke tests, never for pointing at someone else's server:
// it refuses any address that is not loopback.
//
//   bookstore::LoadOptions options;
//   options.port = 8080;
//   options.max_requests = 2000;
//   auto summary = bookstore::RunLoad(options);
//   std::cout << summary.Text();        // or summary.Json()
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bookstore {

struct LoadMix {             // relative weights
  int customer_orders = 70;  // GET /customers/{id}/orders
  int post_order = 20;       // POST /orders
  int top_books = 5;         // GET /reports/top-books
  int category_avg = 5;      // GET /reports/category-avg
};

struct LoadOptions {
  std::string host = "127.0.0.1";  // loopback only
  unsigned short port = 8080;
  std::uint64_t max_requests = 1000;               // 1 .. 1,000,000
  std::chrono::milliseconds max_duration{10'000};  // 1 ms .. 10 min
  int concurrency = 4;                             // client threads, 1 .. 64
  std::int32_t first_customer = 1;                 // customers drawn from [first, last]
  std::int32_t last_customer = 1000;
  std::int64_t first_book = 1;  // books ordered, from [first, last]
  std::int64_t last_book = 500;
  LoadMix mix;
  std::uint64_t seed = 1;
  std::chrono::milliseconds request_timeout{10'000};
};

// Microseconds of one kind of request.
struct LatencySummary {
  std::uint64_t count = 0;
  std::uint64_t errors = 0;               // no answer, or a 5xx (a 4xx is the service refusing a request)
  std::map<int, std::uint64_t> statuses;  // 0: no answer (transport failure)
  std::int64_t p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  double mean_us = 0;
};

struct LoadSummary {
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  std::chrono::microseconds elapsed{0};
  bool stopped_by_time = false;  // the duration bound ended it, not the request bound
  LatencySummary overall;
  std::map<std::string, LatencySummary> endpoints;  // by endpoint name
  std::vector<std::string> first_errors;            // a few, for the reader
  [[nodiscard]] double RequestsPerSecond() const;
  [[nodiscard]] std::string Text() const;
  [[nodiscard]] nlohmann::json Json() const;
};

// Throws std::invalid_argument for options out of bounds or a host that is
// not loopback (checked before anything is sent).
[[nodiscard]] LoadSummary RunLoad(const LoadOptions& options);

// Whether `host` names only loopback addresses (127.0.0.0/8, ::1,
// localhost), as resolved here.
[[nodiscard]] bool IsLoopbackHost(const std::string& host);

}  // namespace bookstore
