// shardctl route <customer_id>...   -> customer 4242: bucket 44, shard 1
// shardctl route --type bigint 5000000001   -> key 5000000001 (bigint): bucket 9, shard 0
// shardctl my-orders <customer_id>  -> customer 4242: bucket 44, shard 1, 10 orders (0.6 ms)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"

namespace {

shardkit::CustomerId ParseCustomerId(const std::string& text) {
  std::int32_t id = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, id);
  if (ec != std::errc{} || ptr != end) {
    throw CLI::ValidationError(
        "customer_id",
        fmt::format("'{}' is not a customer id (expected an integer from {} to {})", text, INT32_MIN, INT32_MAX));
  }
  return shardkit::CustomerId{id};
}

// A key of another type, read as PostgreSQL reads that type.
shardkit::ShardKey ParseKey(shardkit::ShardKeyType type, const std::string& text) {
  auto key = shardkit::ShardKey::Parse(type, text);
  if (!key) {
    throw CLI::ValidationError("key", fmt::format("'{}' is not a {}", text, shardkit::SqlTypeName(type)));
  }
  return *key;
}

// The SQL of the Bookstore case's "my orders": served by orders_customer_time_idx.
constexpr const char* kMyOrdersSql =
    "SELECT order_id, ordered_at, total FROM orders WHERE customer_id = $1 ORDER BY ordered_at DESC";

// Routing needs only the directory. Without any configuration file (no
// --config, no $SHARDKIT_CONFIG, no ./shardkit.toml) it uses the Bookstore case's
// layout, two shards split evenly, and says so.
shardkit::BucketDirectory RoutingDirectory(const CliContext& context) {
  const auto path = shardkit::ResolveConfigPath(context.config_path);
  if (!context.config_path && !std::filesystem::exists(path) && std::getenv("SHARDKIT_CONFIG") == nullptr) {
    std::cerr << "shardctl: no configuration file found; routing with the default directory "
                 "(2 shards: buckets 0-31 -> shard 0, 32-63 -> shard 1)\n";
    return shardkit::BucketDirectory::EvenSplit(2);
  }
  const auto config = context.LoadConfig();
  if (config.directory_source == shardkit::DirectorySource::kCatalog) return shardkit::LoadCatalogDirectory(config);
  return config.directory;
}

}  // namespace

void AddRouteCommands(CLI::App& app, CliContext& context) {
  auto* route = app.add_subcommand("route", "print the bucket and shard of each customer id (or key of --type)");
  auto ids = std::make_shared<std::vector<std::string>>();
  auto shards = std::make_shared<int>(0);
  auto type_name = std::make_shared<std::string>("integer");
  route->add_option("customer_id", *ids, "one or more customer ids, or keys of --type")->required();
  route->add_option("--shards", *shards, "route with an even split over N shards instead of the configured directory")
      ->check(CLI::Range(1, shardkit::kBucketCount));
  route->add_option("--type", *type_name, "the shard key's type: integer, bigint, uuid or text")
      ->check(CLI::IsMember({"integer", "int4", "bigint", "int8", "uuid", "text"}))
      ->capture_default_str();
  route->final_callback([&context, ids, shards, type_name] {
    const shardkit::ShardKeyType type = *shardkit::ShardKeyTypeOfSql(*type_name);
    std::vector<shardkit::ShardKey> keys;  // all valid, or no output
    for (const auto& text : *ids) {
      keys.push_back(type == shardkit::ShardKeyType::kInt4 ? shardkit::ShardKey(ParseCustomerId(text))
                                                           : ParseKey(type, text));
    }
    const auto directory = *shards > 0 ? shardkit::BucketDirectory::EvenSplit(*shards) : RoutingDirectory(context);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& key : keys) {
      const shardkit::BucketId bucket = key.bucket();
      const shardkit::ShardId shard = directory.ShardOf(bucket);
      if (context.json) {
        nlohmann::json entry{{"bucket", bucket}, {"shard", shard}, {"directory_version", directory.Version()}};
        if (auto customer = key.Customer()) {
          entry["customer_id"] = *customer;
        } else {
          entry["key"] = key.ToString();
          entry["type"] = shardkit::SqlTypeName(type);
        }
        out.push_back(std::move(entry));
      } else if (type == shardkit::ShardKeyType::kInt4) {
        fmt::print("customer {}: bucket {}, shard {}\n", key.ToString(), bucket, shard);
      } else {
        fmt::print("key {} ({}): bucket {}, shard {}\n", key.ToString(), shardkit::SqlTypeName(type), bucket, shard);
      }
    }
    if (context.json) fmt::print("{}\n", out.dump(2));
  });

  auto* my_orders = app.add_subcommand("my-orders", "run the \"my orders\" query on the shard that owns the customer");
  auto customer = std::make_shared<std::string>();
  auto show = std::make_shared<bool>(false);
  my_orders->add_option("customer_id", *customer, "the customer id")->required();
  my_orders->add_flag("--show", *show, "also list the orders");
  my_orders->final_callback([&context, customer, show] {
    const auto id = ParseCustomerId(*customer);
    auto resolver = context.MakeResolver();
    const auto started = std::chrono::steady_clock::now();
    const shardkit::Route where = resolver->Resolve(id);  // the shard printed is the shard asked
    pqxx::result orders;
    {
      auto lease = where.pool.Acquire();
      pqxx::read_transaction tx{*lease};
      orders = tx.exec_params(kMyOrdersSql, shardkit::ToInt(id));
      tx.commit();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    const shardkit::BucketId bucket = where.bucket;
    const shardkit::ShardId shard = where.shard;
    if (context.json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& row : orders) {
        rows.push_back(
            {{"order_id", row[0].as<std::int64_t>()}, {"ordered_at", row[1].c_str()}, {"total", row[2].c_str()}});
      }
      fmt::print("{}\n", nlohmann::json{{"customer_id", id},
                                        {"bucket", bucket},
                                        {"shard", shard},
                                        {"orders", orders.size()},
                                        {"elapsed_ms", ms},
                                        {"rows", rows}}
                             .dump(2));
      return;
    }
    fmt::print("customer {}: bucket {}, shard {}, {} orders ({:.1f} ms)\n", id, bucket, shard, orders.size(), ms);
    if (*show) {
      for (const auto& row : orders) {
        fmt::print("  order {:>20}  {}  {:>10}\n", row[0].c_str(), row[1].c_str(), row[2].c_str());
      }
    }
  });
}
