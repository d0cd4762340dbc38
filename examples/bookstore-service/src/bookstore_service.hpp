// The Bookstore service: HTTP/JSON endpoints over a sharded Bookstore, built
// on shardkit's public API only.
//
//   GET  /customers/{id}/orders[?limit=20]  the customer's newest orders with their items: one routed
//                                           statement (customer_id = $1) through Cluster::Execute
//   POST /orders                            {"customer_id": 4242, "items": [{"book_id": 17, "quantity": 2}]}
//                                           one routed transaction (Cluster::Run) on the customer's shard
//   GET  /reports/top-books[?days=30&k=10]  exact best sellers over every shard: plain SQL through
//                                           Cluster::Execute, merged (GROUP BY, ORDER BY, LIMIT)
//   GET  /reports/category-avg[?days=30]    average order amount per category: a merge plan's SUM and
//                                           COUNT (Execute refuses the per-order subquery it needs)
//   GET  /health                            each shard's reachability; 503 naming any that is not
//   GET  /metrics                           Prometheus text: pools, scatters, directory, HTTP
//
// Handle() is thread-safe and blocks on the database; run it on worker
// threads (HttpServer does).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <shardkit/cluster.hpp>
#include <shardkit/config.hpp>

#include "http_server.hpp"
#include "metrics.hpp"
#include "order_ids.hpp"

namespace bookstore {

struct ServiceOptions {
  // Every request's deadline: pool acquisition, statements and scatters.
  std::chrono::milliseconds request_timeout{5'000};
  std::chrono::milliseconds health_timeout{1'000};
  std::string lease_owner;  // written to the lease table (default bookstore-service <host>:<pid>)
  // A customer's orders are read on a replica of its shard when one is at
  // most this far behind (and has replayed the request's Shardkit-Token),
  // else on the primary. Without replicas in the configuration: the primary.
  std::chrono::milliseconds replica_max_lag{1'000};
};

class BookstoreService {
 public:
  // Opens the pools (lazily connecting), claims a worker id for order ids.
  // Throws shardkit::Error (configuration, lease).
  BookstoreService(shardkit::ClusterConfig config, ServiceOptions options);
  ~BookstoreService();
  BookstoreService(const BookstoreService&) = delete;
  BookstoreService& operator=(const BookstoreService&) = delete;

  [[nodiscard]] HttpResponse Handle(const HttpRequest& request);

  // For /metrics: the HTTP server's connection counts.
  void SetConnectionSource(std::function<HttpConnectionCounts()> source);

  // After the HTTP server drained: releases the worker id and closes the
  // pools' connections. Returns what it did, for the log. Idempotent.
  std::string Shutdown();

  [[nodiscard]] int WorkerId() const { return ids_->WorkerId(); }
  [[nodiscard]] const shardkit::ClusterConfig& Config() const noexcept { return config_; }

 private:
  struct Target;
  HttpResponse Dispatch(const HttpRequest& request, std::string& route);
  HttpResponse CustomerOrders(const HttpRequest& request, const Target& target, const std::string& id_text);
  HttpResponse PostOrder(const HttpRequest& request, const Target& target);
  HttpResponse TopBooks(const Target& target);
  HttpResponse CategoryAvg(const Target& target);
  HttpResponse Health(const Target& target);
  HttpResponse Metrics(const Target& target);
  [[nodiscard]] std::string ShardName(shardkit::ShardId shard) const;

  shardkit::ClusterConfig config_;
  ServiceOptions options_;
  // The pools, the directory (following the catalog's through moves:
  // writes refused by a shard's fence go to the new owner, reports refused
  // for a stale directory run again), routed transactions and scatters.
  std::unique_ptr<shardkit::Cluster> cluster_;
  std::vector<std::string> shard_names_;  // by shard, from the configuration
  std::unique_ptr<OrderIds> ids_;
  HttpMetrics http_metrics_;
  std::function<HttpConnectionCounts()> connections_;
  bool shut_down_ = false;
};

}  // namespace bookstore
