// The outbox worker process and its parent-side handle (worker_process.hpp).
#include "worker_process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/routing/resolver.hpp"
#include "shardkit/workers/hot_keys.hpp"
#include "shardkit/workers/job_queue.hpp"
#include "shardkit/workers/partition_lease.hpp"

namespace shardkit::lab {

namespace {

using Clock = std::chrono::steady_clock;

// The status block in the shared file mapping. Lock-free atomics work
// across processes.
struct SharedStatus {
  std::atomic<std::int64_t> phase;
  std::atomic<std::int64_t> job_id;
  std::atomic<std::int64_t> partition;
  std::atomic<std::int64_t> fence;
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
constexpr std::size_t kStatusBytes = 4096;
static_assert(sizeof(SharedStatus) <= kStatusBytes);

void* MapStatus(const std::filesystem::path& path, bool create) {
  const int fd = ::open(path.c_str(), create ? (O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC) : (O_RDWR | O_CLOEXEC), 0600);
  if (fd < 0) throw Error(fmt::format("worker status file {}: {}", path.string(), std::strerror(errno)));
  if (create && ::ftruncate(fd, static_cast<off_t>(kStatusBytes)) != 0) {
    ::close(fd);
    throw Error(fmt::format("worker status file {}: {}", path.string(), std::strerror(errno)));
  }
  void* map = ::mmap(nullptr, kStatusBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    throw Error(fmt::format("worker status file {}: mmap: {}", path.string(), std::strerror(errno)));
  return map;
}

std::string TomlString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// One JSON line on stdout; several threads print.
std::mutex g_print_mutex;
void PrintLine(const Json& j) {
  std::lock_guard lock(g_print_mutex);
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// The notification's text and the tracking status a job kind moves to.
const char* StatusOfKind(const std::string& kind) {
  if (kind == "order_confirmed") return "confirmed";
  if (kind == "order_shipped") return "shipped";
  if (kind == "order_delivered") return "delivered";
  return nullptr;
}

}  // namespace

Dsn CatalogDsn(const ClusterConfig& config) {
  if (!config.catalog_dsn) {
    throw ConfigError("catalog.dsn", fmt::format("{} has no [catalog], the database of the worker partition leases "
                                                 "and hot keys (lab/cluster start writes one)",
                                                 config.origin));
  }
  return WithConnectTimeout(*config.catalog_dsn, config.pool.connect_timeout);
}

std::filesystem::path WriteConfigFile(const ClusterConfig& config, const std::filesystem::path& dir,
                                      bool with_replicas) {
  std::filesystem::create_directories(dir);
  std::string path_template = (dir / "workers-config-XXXXXX.toml").string();
  const int fd = ::mkstemps(path_template.data(), 5);
  if (fd < 0) throw Error(fmt::format("cannot create a config file in {}: {}", dir.string(), std::strerror(errno)));
  ::close(fd);  // mkstemps made it 0600
  std::ofstream out(path_template, std::ios::trunc);
  out << "# Written by the lab's workers demo for its worker processes; removed afterwards.\n\n[pool]\n";
  out << "max_size = " << config.pool.max_size << "\nmax_waiters = " << config.pool.max_waiters
      << "\nconnect_timeout_ms = " << config.pool.connect_timeout.count()
      << "\nacquire_timeout_ms = " << config.pool.acquire_timeout.count() << "\n\n[directory]\n";
  if (config.directory_source == DirectorySource::kCatalog) {
    out << "source = \"catalog\"\n";
  } else {
    out << "source = \"config\"\nversion = " << config.directory.Version() << "\nbuckets = { ";
    for (const BucketId b : AllBuckets()) {
      out << (ToInt(b) > 0 ? ", " : "") << "\"" << b << "\" = " << config.directory.ShardOf(b);
    }
    out << " }\n";
  }
  if (config.catalog_dsn) out << "\n[catalog]\ndsn = " << TomlString(config.catalog_dsn->Reveal()) << "\n";
  for (const auto& shard : config.shards) {
    out << "\n[[shard]]\nname = " << TomlString(shard.name) << "\ndsn = " << TomlString(shard.dsn.Reveal()) << "\n";
    if (!with_replicas || shard.replicas.empty()) continue;
    out << "replicas = [\n";
    for (const auto& replica : shard.replicas) {
      out << "  { name = " << TomlString(replica.name) << ", dsn = " << TomlString(replica.dsn.Reveal());
      if (!replica.admin_dsn.empty()) out << ", admin_dsn = " << TomlString(replica.admin_dsn.Reveal());
      out << " },\n";
    }
    out << "]\n";
  }
  if (config.reference_dsn) out << "\n[reference]\ndsn = " << TomlString(config.reference_dsn->Reveal()) << "\n";
  out.close();
  if (!out) throw Error(fmt::format("cannot write {}", path_template));
  return path_template;
}

// ------------------------------------------------------------ the child

int WorkerMain(int argc, char** argv) {
  CLI::App app{"bookstore-lab worker: one outbox worker process of the workers demo"};
  std::string config_path, name, status_path;
  WorkerSettings s;
  long long lease = s.lease.count(), margin = s.margin.count(), renew = s.renew.count(), claim = s.claim.count(),
            pause = s.handoff_pause.count(), work = s.work.count();
  app.add_option("--config", config_path, "cluster configuration")->required();
  app.add_option("--name", name, "the worker's name (its lease owner)")->required();
  app.add_option("--status-file", status_path, "shared status block");
  app.add_option("--queue", s.queue, "job queue / worker group");
  app.add_option("--lease-ms", lease);
  app.add_option("--margin-ms", margin);
  app.add_option("--renew-ms", renew);
  app.add_option("--claim-ms", claim);
  app.add_option("--handoff-pause-ms", pause);
  app.add_option("--work-ms", work, "time to \"send\" one notification");
  app.add_option("--batch", s.batch);
  CLI11_PARSE(app, argc, argv);

  // SIGTERM and SIGINT are taken by sigwait below, in this thread only.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  SharedStatus* status = nullptr;
  try {
    if (!status_path.empty()) status = static_cast<SharedStatus*>(MapStatus(status_path, false));
    const ClusterConfig config = LoadConfig(config_path);
    auto resolver = BucketShardResolver::FromConfig(config);
    const Dsn catalog = CatalogDsn(config);
    auto registry = std::make_shared<HotKeyRegistry>(catalog, s.queue, kBucketCount);
    (void)registry->RefreshIfOlder(std::chrono::milliseconds(0));
    const JobQueue queue{{.queue = s.queue, .partition_count = kBucketCount}, registry};

    PartitionLeaseOptions lo;
    lo.group = s.queue;
    lo.owner = name;
    lo.lease_duration = std::chrono::milliseconds(lease);
    lo.safety_margin = std::chrono::milliseconds(margin);
    lo.renew_interval = std::chrono::milliseconds(renew);
    lo.claim_interval = std::chrono::milliseconds(claim);
    lo.handoff_pause = std::chrono::milliseconds(pause);
    auto leases = PartitionLeases::Join(catalog, lo);

    JobWorkerOptions wo;
    wo.batch_size = s.batch;
    wo.idle_poll_min = std::chrono::milliseconds(2);
    wo.idle_poll_max = std::chrono::milliseconds(20);
    wo.sweep_interval = std::chrono::milliseconds(250);
    wo.hot_keys_refresh = std::chrono::milliseconds(100);
    wo.retry_backoff = std::chrono::milliseconds(100);
    JobWorker worker{*resolver, leases, queue, wo};
    worker.OnRefused([&](const Job& job) {
      PrintLine({{"event", "refused"},
                 {"worker", name},
                 {"job_id", job.job_id},
                 {"customer_id", job.customer_id},
                 {"partition", job.partition},
                 {"fence", job.fence}});
    });

    std::atomic<std::int64_t> guard_skips{0};
    const auto work_time = std::chrono::milliseconds(work);
    JobHandler handler;
    handler.process = [&](const Job& job, const JobContext&) {
      if (status != nullptr) {
        status->job_id.store(job.job_id);
        status->partition.store(job.partition);
        status->fence.store(job.fence);
        status->phase.store(static_cast<std::int64_t>(WorkerPhase::kProcessing));
      }
      std::this_thread::sleep_for(work_time);  // the mail server
      if (status != nullptr) status->phase.store(static_cast<std::int64_t>(WorkerPhase::kIdle));
    };
    handler.apply = [&](const Job& job, pqxx::transaction_base& tx) {
      tx.exec_params(
          "INSERT INTO notification_log (customer_id, bucket, notification_id, fence, order_id, kind, sent_by) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7)",
          job.customer_id, job.bucket, job.job_id, job.fence, job.stream_key.value_or(0), job.kind, name);
      if (const char* next = StatusOfKind(job.kind); next != nullptr && job.stream_key) {
        // Only forward: a late, older status is ignored (the worker-sharding case's guard).
        const pqxx::result r = tx.exec_params(
            "UPDATE order_tracking SET status = $3, status_seq = $4, updated_at = clock_timestamp() "
            "WHERE customer_id = $1 AND order_id = $2 AND status_seq < $4",
            job.customer_id, *job.stream_key, next, job.seq);
        if (r.affected_rows() == 0) guard_skips += 1;
      }
    };

    auto snapshot = [&](const char* event) {
      Json j = {{"event", event}, {"worker", name}, {"pid", static_cast<long>(::getpid())}};
      std::uint64_t completed = 0, refused = 0, abandoned = 0, adopted = 0, failed = 0;
      Json per_partition = Json::object();
      for (const auto& m : worker.Stats()) {
        completed += m.completed;
        refused += m.refused;
        abandoned += m.abandoned;
        adopted += m.adopted;
        failed += m.failed;
        if (m.completed > 0) per_partition[std::to_string(m.partition)] = m.completed;
      }
      std::vector<int> held;
      for (const auto& h : leases->Held()) held.push_back(h.partition);
      const auto ls = leases->Stats();
      j["held"] = held;
      j["share"] = ls.share;
      j["live_workers"] = ls.live_workers;
      j["completed"] = completed;
      j["refused"] = refused;
      j["abandoned"] = abandoned;
      j["adopted"] = adopted;
      j["failed"] = failed;
      j["guard_skips"] = guard_skips.load();
      j["partitions_lost"] = ls.lost;
      j["partitions_released"] = ls.released;
      j["max_handoff_gap_ms"] = static_cast<double>(ls.max_handoff_gap.count()) / 1000.0;
      j["completed_per_partition"] = per_partition;
      if (ls.last_error) j["last_lease_error"] = *ls.last_error;
      return j;
    };

    std::jthread runner([&](std::stop_token stop) { worker.Run(stop, handler); });
    std::jthread reporter([&](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      while (!stop.stop_requested()) {
        PrintLine(snapshot("stats"));
        std::unique_lock lock(m);
        cv.wait_for(lock, stop, std::chrono::milliseconds(200), [] { return false; });
      }
    });
    if (status != nullptr) status->phase.store(static_cast<std::int64_t>(WorkerPhase::kIdle));

    int signal = 0;
    sigwait(&stop_signals, &signal);
    // Graceful: no new jobs, in-flight ones finish, partitions are released.
    if (status != nullptr) status->phase.store(static_cast<std::int64_t>(WorkerPhase::kLeaving));
    runner.request_stop();
    runner.join();
    try {
      leases->Leave(Clock::now() + std::chrono::seconds(3));
    } catch (const std::exception& e) {
      PrintLine({{"event", "error"}, {"worker", name}, {"error", e.what()}});
    }
    reporter.request_stop();
    reporter.join();
    PrintLine(snapshot("final"));
    return 0;
  } catch (const std::exception& e) {
    PrintLine({{"event", "error"}, {"worker", name}, {"error", e.what()}});
    std::fprintf(stderr, "bookstore-lab worker %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}

// ----------------------------------------------------------- the parent

WorkerProcess::WorkerProcess(const std::string& executable, const std::filesystem::path& config_file, std::string name,
                             const WorkerSettings& s, const std::filesystem::path& work_dir)
    : name_(std::move(name)) {
  status_file_ = work_dir / fmt::format("worker-{}-{}.status", name_, ::getpid());
  status_map_ = MapStatus(status_file_, true);
  std::vector<std::string> args{executable,
                                "worker",
                                "--config",
                                config_file.string(),
                                "--name",
                                name_,
                                "--status-file",
                                status_file_.string(),
                                "--queue",
                                s.queue,
                                "--lease-ms",
                                std::to_string(s.lease.count()),
                                "--margin-ms",
                                std::to_string(s.margin.count()),
                                "--renew-ms",
                                std::to_string(s.renew.count()),
                                "--claim-ms",
                                std::to_string(s.claim.count()),
                                "--handoff-pause-ms",
                                std::to_string(s.handoff_pause.count()),
                                "--work-ms",
                                std::to_string(s.work.count()),
                                "--batch",
                                std::to_string(s.batch)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(fmt::format("cannot start worker {}: fork: {}", name_, std::strerror(errno)));
  }
  if (pid_ == 0) {
    // The child: only async-signal-safe calls until exec. It dies with the
    // lab, so no worker outlives a crashed demo.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  reader_ = std::thread([this, fd = fds[0]] { ReadLines(fd); });
}

WorkerProcess::~WorkerProcess() {
  try {
    Kill();
  } catch (...) {
  }
  if (reader_.joinable()) reader_.join();
  if (status_map_ != nullptr) ::munmap(status_map_, kStatusBytes);
  std::error_code ignored;
  std::filesystem::remove(status_file_, ignored);
}

void WorkerProcess::ReadLines(int fd) {
  FILE* in = ::fdopen(fd, "r");
  if (in == nullptr) {
    ::close(fd);
    return;
  }
  char* line = nullptr;
  std::size_t capacity = 0;
  while (::getline(&line, &capacity, in) > 0) {
    Json j;
    try {
      j = Json::parse(line);
    } catch (const std::exception&) {
      j = {{"event", "text"}, {"line", line}};
    }
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(j));
  }
  std::free(line);
  std::fclose(in);
}

void WorkerProcess::Signal(int signal) const {
  if (pid_ > 0 && !exit_status_) ::kill(pid_, signal);
}

void WorkerProcess::Reap(int options) {
  if (pid_ <= 0 || exit_status_) return;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, options);
  if (r == pid_) {
    if (WIFEXITED(status)) exit_status_ = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit_status_ = 128 + WTERMSIG(status);
  }
}

bool WorkerProcess::Running() {
  Reap(WNOHANG);
  return pid_ > 0 && !exit_status_;
}

void WorkerProcess::Kill() {
  if (!Running()) return;
  ::kill(pid_, SIGKILL);
  Reap(0);
}

int WorkerProcess::Terminate(std::chrono::milliseconds grace) {
  if (Running()) {
    ::kill(pid_, SIGCONT);  // a stopped process would not see SIGTERM
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + grace;
    while (Running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (Running()) Kill();
  }
  if (reader_.joinable()) reader_.join();
  return exit_status_.value_or(-1);
}

WorkerStatus WorkerProcess::Status() const {
  const auto* shared = static_cast<const SharedStatus*>(status_map_);
  WorkerStatus s;
  s.phase = static_cast<WorkerPhase>(shared->phase.load());
  s.job_id = shared->job_id.load();
  s.partition = static_cast<int>(shared->partition.load());
  s.fence = shared->fence.load();
  return s;
}

std::vector<Json> WorkerProcess::Events(const std::string& type) const {
  std::lock_guard lock(mutex_);
  std::vector<Json> out;
  for (const auto& e : events_) {
    if (e.value("event", "") == type) out.push_back(e);
  }
  return out;
}

std::optional<Json> WorkerProcess::Last(const std::string& type) const {
  std::lock_guard lock(mutex_);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->value("event", "") == type) return *it;
  }
  return std::nullopt;
}

bool WorkerProcess::WaitFor(const std::function<bool(const std::vector<Json>&)>& done, Clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (done(events_)) return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace shardkit::lab
