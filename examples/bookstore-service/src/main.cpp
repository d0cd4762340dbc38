// bookstore-service — the Bookstore's HTTP/JSON service on a shardkit
// cluster (see bookstore_service.hpp for the endpoints).
//
//   bookstore-service --config .cluster/shardkit.toml --listen 127.0.0.1:8080
//
// The configuration is shardkit's file: --config, else $SHARDKIT_CONFIG,
// else ./shardkit.toml. SIGINT or SIGTERM shuts down gracefully: no new
// connections, requests in progress finish (up to --drain-timeout-ms), the
// worker-id lease is released and the pools' connections are closed; a
// second signal stops waiting. Exit status: 0 after a clean shutdown, 1 when
// it cannot start (configuration, lease, address), 2 bad usage.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <shardkit/config.hpp>
#include <shardkit/errors.hpp>

#include "bookstore_service.hpp"
#include "http_server.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bookstore-service: the Bookstore's HTTP/JSON API on a shardkit cluster"};
  std::optional<std::string> config_path;
  std::string listen = "127.0.0.1:8080";
  int workers = 8;
  int max_connections = 256;
  int request_timeout_ms = 5000;
  int drain_timeout_ms = 10000;
  int replica_max_lag_ms = 1000;
  app.add_option("--config", config_path,
                 "shardkit configuration file (default: $SHARDKIT_CONFIG, else ./shardkit.toml)");
  app.add_option("--listen", listen, "address:port to serve on; port 0 picks a free one")->capture_default_str();
  app.add_option("--workers", workers, "threads running requests")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--max-connections", max_connections, "open connections served at once")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--request-timeout-ms", request_timeout_ms, "deadline of every request")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", drain_timeout_ms, "on shutdown, how long requests in progress may finish")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--replica-max-lag-ms", replica_max_lag_ms,
                 "a customer's orders are read on a replica at most this far behind its primary (with replicas)")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto colon = listen.rfind(':');
  unsigned long port = 0;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no port");
    port = std::stoul(listen.substr(colon + 1));
    if (port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    std::cerr << "bookstore-service: --listen " << listen << " is not address:port (e.g. 127.0.0.1:8080)\n";
    return 2;
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  // Line-buffered: whoever started us reads the "listening" line at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const auto path = shardkit::ResolveConfigPath(config_path);
    bookstore::ServiceOptions options;
    options.request_timeout = std::chrono::milliseconds(request_timeout_ms);
    options.replica_max_lag = std::chrono::milliseconds(replica_max_lag_ms);
    bookstore::BookstoreService service(shardkit::LoadConfig(path), options);

    bookstore::HttpServerOptions server_options;
    server_options.address = host;
    server_options.port = static_cast<unsigned short>(port);
    server_options.workers = workers;
    server_options.max_connections = max_connections;
    bookstore::HttpServer server(server_options,
                                 [&service](const bookstore::HttpRequest& request) { return service.Handle(request); });
    service.SetConnectionSource([&server] { return server.Connections(); });
    const auto endpoint = server.Listen();
    server.OnSignal([&server, drain_timeout_ms](int signal_number) {
      std::printf("bookstore-service: %s: shutting down (draining up to %d ms; a second signal stops waiting)\n",
                  signal_number == SIGINT ? "SIGINT" : "SIGTERM", drain_timeout_ms);
      server.Shutdown(std::chrono::milliseconds(drain_timeout_ms));
    });
    const auto& config = service.Config();
    std::printf(
        "bookstore-service: listening on http://%s:%u (%zu shards, directory version %lld, order ids from "
        "worker %d, config %s)\n",
        endpoint.address().to_string().c_str(), static_cast<unsigned>(endpoint.port()), config.shards.size(),
        static_cast<long long>(config.directory.Version()), service.WorkerId(), path.c_str());
    server.Run();
    const auto connections = server.Connections();
    std::printf("bookstore-service: HTTP drained (%llu connections served)\n",
                static_cast<unsigned long long>(connections.accepted));
    std::printf("bookstore-service: %s\n", service.Shutdown().c_str());
    std::printf("bookstore-service: stopped\n");
    return 0;
  } catch (const shardkit::Error& e) {
    std::cerr << "bookstore-service: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bookstore-service: cannot start: " << e.what() << "\n";
    return 1;
  }
}
