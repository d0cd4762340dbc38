// invoices-service — a multi-tenant invoicing service on a shardkit cluster
// sharded by tenant_id bigint: HTTP/JSON (invoices.hpp has the endpoints),
// one Cluster, plain SQL.
//
//   shardctl --config shardkit.toml --sql-dir examples/invoices-service/sql init
//   invoices-service --config shardkit.toml --listen 127.0.0.1:8090
//
// Each connection carries one request (Connection: close) and is served by
// one of --workers threads. SIGINT or SIGTERM: stop accepting, finish the
// requests in progress, close the pools, exit 0. Exit 1: cannot start
// (configuration, catalog, address); 2: bad usage.
#include <sys/socket.h>
#include <sys/time.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <shardkit/config.hpp>
#include <shardkit/errors.hpp>

#include "invoices.hpp"

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// A client that connects and sends nothing must not hold a worker forever.
void SetReceiveTimeout(tcp::socket& socket, int seconds) {
  timeval timeout{};
  timeout.tv_sec = seconds;
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
}

void Serve(shardkit::Cluster& cluster, tcp::socket& socket) {
  SetReceiveTimeout(socket, 10);
  boost::beast::error_code ec;
  boost::beast::flat_buffer buffer;
  http::request<http::string_body> request;
  http::read(socket, buffer, request, ec);
  if (ec) return;
  const std::string target(request.target());
  const std::string method(request.method_string());
  const auto reply = invoices::Handle(cluster, method, target.substr(0, target.find('?')), request.body());
  http::response<http::string_body> response{static_cast<http::status>(reply.status), request.version()};
  response.set(http::field::content_type, "application/json");
  response.keep_alive(false);
  response.body() = reply.body + "\n";
  response.prepare_payload();
  http::write(socket, response, ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"invoices-service: a multi-tenant invoicing API on a shardkit cluster (tenant_id bigint)"};
  std::optional<std::string> config_path;
  std::string address = "127.0.0.1";
  unsigned short port = 8090;
  int workers = 8;
  app.add_option("--config", config_path, "shardkit configuration (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_option("--address", address, "address to serve on")->capture_default_str();
  app.add_option("--port", port, "port to serve on; 0 picks a free one")->capture_default_str();
  app.add_option("--workers", workers, "threads serving requests")->check(CLI::Range(1, 256))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Line-buffered: whoever started us reads the "listening" line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const auto path = shardkit::ResolveConfigPath(config_path);
    const auto cluster = shardkit::Cluster::Open(shardkit::LoadConfig(path));

    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address(address), port));
    asio::thread_pool pool(static_cast<std::size_t>(workers));
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
      std::printf("invoices-service: shutting down\n");
      acceptor.close();
    });
    std::function<void()> accept = [&] {
      acceptor.async_accept([&](const boost::system::error_code& ec, tcp::socket socket) {
        if (ec) return;  // closed by the signal
        auto shared = std::make_shared<tcp::socket>(std::move(socket));
        asio::post(pool, [&cluster, shared] { Serve(*cluster, *shared); });
        accept();
      });
    };
    accept();
    std::printf("invoices-service: listening on http://%s:%u (%d shards, config %s)\n",
                acceptor.local_endpoint().address().to_string().c_str(),
                static_cast<unsigned>(acceptor.local_endpoint().port()), cluster->ShardCount(), path.c_str());
    io.run();
    pool.join();  // the requests in progress finish
    cluster->CloseIdleConnections();
    std::printf("invoices-service: stopped\n");
    return 0;
  } catch (const shardkit::Error& e) {
    std::cerr << "invoices-service: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "invoices-service: cannot start: " << e.what() << "\n";
    return 1;
  }
}
