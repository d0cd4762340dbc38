// shardctl leases [--ttl-ms N | --off] [--json]: the primaries' leases
// (shardkit/routing/primary_leases.hpp): with no option, whether they are
// on and each shard's primary's lease; --ttl-ms turns them on (or changes
// the time to live) and installs the check on every primary; --off turns
// them off, drops the check and releases every primary's lease. Exit 1 when
// a primary cannot be reached or changed, or does not check leases.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shardkit/config.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/routing/primary_leases.hpp"

namespace {

using std::chrono::milliseconds;

void Show(const shardkit::ClusterConfig& config, bool json) {
  const auto ttl = shardkit::LeaseTtl(config);
  const auto states = shardkit::ListPrimaryLeases(config);
  bool unreachable = false;
  if (json) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : states) {
      shards.push_back({{"shard", s.shard},
                        {"primary", s.server},
                        {"reachable", s.reachable},
                        {"enforced", s.enforced},
                        {"in_force", s.in_force},
                        {"remaining_ms", s.remaining.count()},
                        {"error", s.error}});
      unreachable = unreachable || !s.error.empty();
    }
    fmt::print("{}\n",
               nlohmann::json{{"on", ttl.has_value()}, {"ttl_ms", ttl ? ttl->count() : 0}, {"shards", shards}}.dump(2));
  } else {
    if (ttl) {
      fmt::print("leases on: time to live {} ms, renewed every {} ms by every router that reads the catalog\n",
                 ttl->count(), ttl->count() / 4);
    } else {
      fmt::print(
          "leases off: a primary deposed while unreachable commits the writes of routers that do not follow "
          "the catalog (shardctl leases --ttl-ms 10000 turns them on)\n");
    }
    for (const auto& s : states) {
      std::string what;
      if (!s.error.empty()) {
        what = "unreachable or not migrated: " + s.error;
        unreachable = true;
      } else if (ttl && !s.enforced) {
        what = "does not check leases (a shard added since they were turned on: run shardctl leases --ttl-ms again)";
        unreachable = true;
      } else if (!s.in_force) {
        what = "no lease in force (writes admitted without one)";
      } else if (s.remaining.count() > 0) {
        what = fmt::format("lease runs out in {} ms", s.remaining.count());
      } else {
        what = fmt::format("lease ran out {} ms ago: it refuses shardkit's writes", -s.remaining.count());
      }
      fmt::print("  {:<12} primary {:<20} {}\n", s.shard, s.server, what);
    }
  }
  if (unreachable) throw shardkit::Error("a shard's primary could not be asked, or does not check leases (see above)");
}

}  // namespace

void AddLeasesCommand(CLI::App& app, CliContext& context) {
  auto* leases = app.add_subcommand(
      "leases",
      "show, turn on or off the primaries' leases (a deposed primary commits no write once its lease ran out)");
  auto ttl_ms = std::make_shared<std::int64_t>(0);
  auto off = std::make_shared<bool>(false);
  auto* ttl_option =
      leases->add_option("--ttl-ms", *ttl_ms, "turn leases on with this time to live (100 to 600000; 10000 is usual)")
          ->check(CLI::Range(std::int64_t{100}, std::int64_t{600000}));
  leases->add_flag("--off", *off, "turn leases off and release every primary's lease")->excludes(ttl_option);
  leases->callback([&context, ttl_ms, off, ttl_option] {
    const shardkit::ClusterConfig config = context.LoadConfig();
    if (ttl_option->count() > 0) {
      shardkit::SetLeaseTtl(config, milliseconds(*ttl_ms));
    } else if (*off) {
      shardkit::SetLeaseTtl(config, std::nullopt);
    }
    Show(config, context.json);
  });
}
