// A small HTTP/1.1 server on Boost.Beast for a service whose handlers block
// (libpqxx is blocking): one I/O thread reads and writes every connection
// asynchronously; handlers run on a fixed pool of worker threads, so a slow
// database call never stalls reading or accepting.
//
//   bookstore::HttpServer server{{.address = "127.0.0.1", .port = 0}, handler};
//   auto endpoint = server.Listen();             // the port, when 0 was asked for
//   std::thread stopper([&] { ...; server.Shutdown(10s); });
//   server.Run();                                // returns once every connection is gone
//
// Shutdown is graceful: the listening socket closes (new connections are
// refused), idle keep-alive connections are closed, requests already being
// received or handled finish and are answered with "Connection: close"; after
// the drain timeout whatever is left is closed.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace bookstore {

class Session;

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  unsigned short port = 8080;  // 0: any free port (Listen() tells which)
  int workers = 8;             // threads running handlers
  int max_connections = 256;   // beyond: 503 and close
  std::size_t max_body_bytes = 64 * 1024;
  std::chrono::milliseconds read_timeout{30'000};  // a started request must arrive within this
  std::chrono::milliseconds idle_timeout{60'000};  // a keep-alive connection may wait this long
};

// Connections by what they are doing, for /metrics and for tests.
struct HttpConnectionCounts {
  int idle = 0;      // waiting for the next request
  int reading = 0;   // a request is arriving
  int handling = 0;  // a worker runs the handler
  int writing = 0;   // the response is being sent
  std::uint64_t accepted = 0;
  std::uint64_t refused = 0;  // over max_connections
};

class HttpServer {
 public:
  // Runs on a worker thread; may block. An exception becomes a 500.
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens. Throws boost::system::system_error.
  boost::asio::ip::tcp::endpoint Listen();
  // Serves until Shutdown() has drained every connection. Call once.
  void Run();
  // Thread-safe and idempotent; returns at once (Run() returns when done).
  void Shutdown(std::chrono::milliseconds drain_timeout);
  // Registers a callback run (on the I/O thread) for SIGINT and SIGTERM;
  // a second signal closes every connection at once.
  void OnSignal(std::function<void(int)> callback);

  [[nodiscard]] HttpConnectionCounts Connections() const;
  [[nodiscard]] bool Draining() const noexcept;

 private:
  friend class Session;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bookstore
