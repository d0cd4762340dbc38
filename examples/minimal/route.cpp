// route <customer_id>... [--config FILE] — print each customer's bucket and
// shard, from the cluster's directory or, without a configuration, the even
// split over two shards. A consumer of the installed package: it includes
// <shardkit/...> and links shardkit::shardkit (or shardkit::shardkit_shared),
// nothing else.
#include <charconv>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <shardkit/cluster.hpp>
#include <shardkit/config.hpp>
#include <shardkit/errors.hpp>
#include <shardkit/routing/directory.hpp>

int main(int argc, char** argv) {
  std::optional<std::string> config_path;
  std::vector<shardkit::CustomerId> customers;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
      continue;
    }
    std::int32_t id = 0;
    const auto [end, error] = std::from_chars(arg.data(), arg.data() + arg.size(), id);
    if (error != std::errc{} || end != arg.data() + arg.size()) {
      std::cerr << "route: '" << arg << "' is not a customer id\nusage: route <customer_id>... [--config FILE]\n";
      return 2;
    }
    customers.push_back(shardkit::CustomerId{id});
  }
  try {
    // With a configuration, the cluster's current directory (the file's,
    // or the catalog's: Open reads it there); without, the even split.
    if (config_path) {
      const auto cluster = shardkit::Cluster::Open(shardkit::LoadConfig(*config_path));
      for (shardkit::CustomerId customer : customers) {
        const shardkit::Route route = cluster->Route(customer);
        std::cout << "customer " << customer << ": bucket " << route.bucket << ", shard " << route.shard << "\n";
      }
      return 0;
    }
    const auto directory = shardkit::BucketDirectory::EvenSplit(2);
    for (shardkit::CustomerId customer : customers) {
      std::cout << "customer " << customer << ": bucket " << shardkit::BucketOf(customer) << ", shard "
                << directory.ShardFor(customer) << "\n";
    }
  } catch (const shardkit::Error& e) {
    std::cerr << "route: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
