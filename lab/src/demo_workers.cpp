// Demo 7 (the worker-sharding case): worker sharding. Orders enqueue notification jobs in
// their own transaction (shardkit_jobs on the customer's shard); real worker
// processes share the 64 partitions through leases with fencing tokens in
// the catalog. A 5th worker joins (gradual handoff), one is SIGKILLed (its
// partitions are taken over when its leases run out), one is frozen with
// SIGSTOP in the middle of a job past its lease and resumed (its late
// completion is refused by the fence); then a hot customer makes 40% of the
// jobs, pins one partition's worker, and salting spreads it. At the end a
// checker reads every job and every effect: nothing done twice, nothing lost.
// The parts: workers_demo.hpp.
#include <fmt/format.h>

#include <cstdlib>

#include "demos.hpp"
#include "shardkit/errors.hpp"
#include "workers_demo.hpp"

namespace shardkit::lab {
namespace {

std::string DefaultExecutable() {
  if (const char* env = std::getenv("BOOKSTORE_LAB_EXE"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bookstore-lab") : self.string();
}

}  // namespace

DemoResult RunWorkers(Lab& lab) {
  WorkersDemoOptions options;
  return RunWorkers(lab, options);
}

DemoResult RunWorkers(Lab& lab, const WorkersDemoOptions& options) {
  using namespace workers_demo;
  DemoResult r;
  r.name = "workers";
  const WorkerSettings& ws = options.settings;
  const std::string queue_name = ws.queue;
  const Dsn catalog = CatalogDsn(lab.Config());
  const std::string executable = options.executable.empty() ? DefaultExecutable() : options.executable;
  CleanUp(lab, catalog, queue_name, false);

  const OrderIds ids = ClaimOrderIds(catalog, "bookstore-lab workers demo", 1000);
  auto registry = std::make_shared<HotKeyRegistry>(catalog, queue_name, kBucketCount);
  (void)registry->Refresh();
  const JobQueue queue{{.queue = queue_name, .partition_count = kBucketCount}, registry};
  OrderPlacer placer{lab, queue, *ids.ids};

  const std::vector<CustomerId> customers = Customers(lab);
  if (customers.empty()) throw Error("workers demo: no customers on the shards; load the data first (lab/run load)");
  Rng rng(options.seed);

  Fleet fleet{executable, WriteConfigFile(lab.Config(), options.work_dir), ws, options.work_dir, {}, {}};
  Json figures = Json::object();
  Demo d{lab, options, ws, queue_name, catalog, fleet, r, figures};
  try {
    r.text += fmt::format(
        "queue '{}': 64 partitions (a job's partition is its customer's bucket); leases {} ms (stop {} ms early, "
        "renewed every {} ms) in the catalog; \"sending\" a notification takes {} ms\n",
        queue_name, ws.lease.count(), ws.margin.count(), ws.renew.count(), ws.work.count());
    FourShare(d);

    Mark(d, "steady load");
    SteadyLoad load{options, customers, placer};
    r.text += fmt::format(
        "steady load: {:.0f} orders/s, each enqueuing 3 jobs (confirmed, shipped, delivered) in the "
        "order's transaction\n",
        options.orders_per_second);
    (void)WaitUntil([&] { return Done(lab, queue_name) >= 300; }, std::chrono::seconds(30));

    const double handoff_pause_ms = FifthJoins(d);
    const std::string killed = KillOne(d);
    FreezeMidJob(d, placer, rng);
    DrainSteadyLoad(d, load);
    HotCustomer(d, placer, rng, customers, *registry, *ids.ids);
    const Leaving leaving = EveryoneLeaves(d, killed);
    JobsOverTime(d);

    const auto placed = placer.Placed();
    const JobCheck jobs = CheckJobsAndEffects(d, placed, leaving);
    CheckOrdersEqualReference(d, placed);
    TotalsFigures(d, jobs, placed.size(), leaving, handoff_pause_ms);
  } catch (...) {
    fleet.TerminateAll();
    CleanUp(lab, catalog, queue_name, true);
    throw;
  }
  fleet.TerminateAll();
  // The orders go (the other demos count orders); jobs, notifications and
  // leases stay for shardctl workers to show.
  CleanUp(lab, catalog, queue_name, true);
  r.figures = figures;
  return r;
}

}  // namespace shardkit::lab
