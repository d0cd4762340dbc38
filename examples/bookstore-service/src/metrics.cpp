#include "metrics.hpp"

#include <fmt/format.h>
#include <cmath>

namespace bookstore {
namespace {

// Label values: backslash, double quote and newline are escaped.
std::string Escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return fmt::format("{}", static_cast<long long>(value));
  return fmt::format("{}", value);
}

}  // namespace

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += fmt::format("{}=\"{}\"", labels[i].first, Escape(labels[i].second));
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += Number(value);
  text_ += '\n';
}

void HttpMetrics::Record(std::string_view route, std::string_view method, int status,
                         std::chrono::nanoseconds elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(route), std::string(method), status}];
  Histogram& h = durations_[std::string(route)];
  for (std::size_t i = 0; i < std::size(kBuckets); ++i) {
    if (seconds <= kBuckets[i]) ++h.counts[i];
  }
  ++h.count;
  h.sum += seconds;
}

void HttpMetrics::Write(PrometheusText& out) const {
  std::lock_guard lock(mutex_);
  out.Family("bookstore_http_requests_total", "counter", "HTTP requests answered, by route, method and status.");
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    out.Sample("bookstore_http_requests_total",
               {{"route", route}, {"method", method}, {"code", std::to_string(status)}}, static_cast<double>(count));
  }
  out.Family("bookstore_http_request_duration_seconds", "histogram",
             "Time from a complete request to its response, by route.");
  for (const auto& [route, h] : durations_) {
    for (std::size_t i = 0; i < std::size(kBuckets); ++i) {
      out.Sample("bookstore_http_request_duration_seconds_bucket", {{"route", route}, {"le", Number(kBuckets[i])}},
                 static_cast<double>(h.counts[i]));
    }
    out.Sample("bookstore_http_request_duration_seconds_bucket", {{"route", route}, {"le", "+Inf"}},
               static_cast<double>(h.count));
    out.Sample("bookstore_http_request_duration_seconds_sum", {{"route", route}}, h.sum);
    out.Sample("bookstore_http_request_duration_seconds_count", {{"route", route}}, static_cast<double>(h.count));
  }
}

}  // namespace bookstore
