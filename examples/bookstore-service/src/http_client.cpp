#include "http_client.hpp"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <optional>
#include <stdexcept>

namespace bookstore {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::string HttpReply::Header(const std::string& lower_case_name) const {
  const auto it = headers.find(lower_case_name);
  return it == headers.end() ? std::string() : it->second;
}

// Asynchronous operations run to completion on a private io_context: that is
// how Beast's tcp_stream applies a timeout to a blocking call.
struct HttpClient::Impl {
  std::string host;
  unsigned short port;
  std::chrono::milliseconds timeout;
  asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  void Run() {
    io.restart();
    io.run();
  }

  void Connect() {
    stream.emplace(io);
    buffer.clear();
    tcp::resolver resolver{io};
    beast::error_code ec;
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) throw std::runtime_error("cannot resolve " + host + ": " + ec.message());
    stream->expires_after(timeout);
    stream->async_connect(endpoints, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
    Run();
    if (ec) {
      stream.reset();
      throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message());
    }
  }

  // One exchange on the current connection; false if it was closed before
  // anything came back (a kept-alive connection the server let go).
  bool Exchange(const http::request<http::string_body>& request, http::response<http::string_body>& response,
                bool& may_retry) {
    beast::error_code ec;
    stream->expires_after(timeout);
    http::async_write(*stream, request, [&ec](beast::error_code e, std::size_t) { ec = e; });
    Run();
    if (!ec) {
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      http::async_read(*stream, buffer, parser, [&ec](beast::error_code e, std::size_t) { ec = e; });
      Run();
      if (!ec) {
        response = parser.release();
        return true;
      }
    }
    stream.reset();
    if (may_retry && (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
                      ec == asio::error::broken_pipe || ec == asio::error::eof)) {
      may_retry = false;
      return false;  // retry once on a fresh connection
    }
    throw std::runtime_error(request.method_string().to_string() + " " + request.target().to_string() + ": " +
                             (ec == beast::error::timeout ? "no answer within the timeout" : ec.message()));
  }
};

HttpClient::HttpClient(std::string host, unsigned short port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->timeout = timeout;
}

HttpClient::~HttpClient() = default;

HttpReply HttpClient::Request(const std::string& method, const std::string& target, const std::string& body,
                              const std::string& content_type, const std::map<std::string, std::string>& headers) {
  http::request<http::string_body> request{http::string_to_verb(method), target, 11};
  if (request.method() == http::verb::unknown) request.method_string(method);
  request.set(http::field::host, impl_->host + ":" + std::to_string(impl_->port));
  request.set(http::field::user_agent, "bookstore-client");
  for (const auto& [name, value] : headers) request.set(name, value);
  if (!body.empty()) {
    request.set(http::field::content_type, content_type);
    request.body() = body;
  }
  request.keep_alive(true);
  request.prepare_payload();

  http::response<http::string_body> response;
  // A kept-alive connection the server let go is retried once on a fresh
  // one, for GET only: a POST that was received may not be sent twice.
  const bool connected = impl_->stream.has_value();
  bool may_retry = connected && request.method() == http::verb::get;
  if (!connected) impl_->Connect();
  if (!impl_->Exchange(request, response, may_retry)) {
    impl_->Connect();
    impl_->Exchange(request, response, may_retry);
  }
  HttpReply reply;
  reply.status = static_cast<int>(response.result_int());
  reply.body = std::move(response.body());
  for (const auto& field : response) reply.headers[Lower(field.name_string().to_string())] = field.value().to_string();
  if (!response.keep_alive()) impl_->stream.reset();
  return reply;
}

}  // namespace bookstore
