// bookstore-load — drive a Bookstore service on this machine with a bounded
// mix of requests and print a latency summary.
//
//   bookstore-load --port 8080 --requests 2000 --duration-s 30 --concurrency 4
//   bookstore-load --port 8080 --json            # the summary as JSON (for scripts and demos)
//
// Bounded in count and in time (whichever ends first), loopback only. Exit
// status: 0 no errors, 1 some requests failed (no answer or a 5xx), 2 bad
// usage (including a host that is not loopback).
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "load_generator.hpp"

namespace {

template <class Int>
void ParseRange(const std::string& text, Int& first, Int& last, const char* what) {
  const auto dash = text.find('-', 1);
  try {
    first = static_cast<Int>(std::stoll(text.substr(0, dash)));
    last = dash == std::string::npos ? first : static_cast<Int>(std::stoll(text.substr(dash + 1)));
  } catch (const std::exception&) {
    throw CLI::ValidationError(what, "'" + text + "' is not a range like 1-1000");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bookstore-load: a bounded loopback load on the Bookstore service, with a latency summary"};
  bookstore::LoadOptions options;
  double duration_s = 10;
  std::string customers = "1-1000";
  std::string books = "1-500";
  std::vector<int> mix{options.mix.customer_orders, options.mix.post_order, options.mix.top_books,
                       options.mix.category_avg};
  bool json = false;
  app.add_option("--host", options.host, "the service's host (loopback only)")->capture_default_str();
  app.add_option("--port", options.port, "the service's port")->required();
  app.add_option("--requests", options.max_requests, "at most this many requests")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--duration-s", duration_s, "at most this many seconds")
      ->check(CLI::Range(0.001, 600.0))
      ->capture_default_str();
  app.add_option("--concurrency", options.concurrency, "client threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--customers", customers, "customer ids to use, A-B")->capture_default_str();
  app.add_option("--books", books, "book ids to order, A-B")->capture_default_str();
  app.add_option("--mix", mix, "weights: customer orders, post order, top books, category avg")
      ->expected(4)
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seed", options.seed, "random seed")->capture_default_str();
  app.add_flag("--json", json, "print the summary as JSON");
  try {
    app.parse(argc, argv);
    ParseRange(customers, options.first_customer, options.last_customer, "--customers");
    ParseRange(books, options.first_book, options.last_book, "--books");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  options.max_duration = std::chrono::milliseconds(static_cast<long long>(duration_s * 1000));
  options.mix = {mix[0], mix[1], mix[2], mix[3]};
  try {
    const auto summary = bookstore::RunLoad(options);
    if (json) {
      std::cout << summary.Json().dump(2) << "\n";
    } else {
      std::cout << summary.Text();
    }
    return summary.errors == 0 ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::cerr << "bookstore-load: " << e.what() << "\n";
    return 2;
  }
}
