// worker_process.hpp — the Bookstore's outbox worker as a real process, for
// the `workers` demo (the worker-sharding case).
//
// The child is `bookstore-lab worker --config FILE --name w1 ...`: it joins
// the outbox queue's worker group (shardkit::PartitionLeases), works off the
// jobs of its partitions (shardkit::JobWorker) — "sending" a notification
// takes --work-ms, then, inside the fenced completion, it logs the
// notification and moves the order's tracking status forward, guarded by
// the job's sequence number — and reports on stdout, one JSON object a
// line: {"event":"stats",...} every 200 ms, {"event":"refused",...} for
// every completion the fence refused, {"event":"final",...} after SIGTERM
// (it finishes its in-flight jobs and releases its partitions first).
//
// The parent side, WorkerProcess, starts one (fork + exec), reads its lines,
// signals it (SIGKILL, SIGSTOP, SIGCONT, SIGTERM) and reads a small status
// block the child keeps in a shared file mapping — readable while the child
// is stopped, so the demo can freeze a worker in the middle of a job.
//
//   WorkerProcess w{exe, config_file, "w1", settings, work_dir};
//   w.Signal(SIGSTOP); if (w.Status().phase == WorkerPhase::kProcessing) ...
//   w.Terminate(2s);
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lab.hpp"
#include "shardkit/config.hpp"

namespace shardkit::lab {

inline constexpr const char* kOutboxQueue = "bookstore-outbox";

// The lease and work timings shared by the demo's workers (short, so the
// demo takes seconds: a real fleet uses shardkit's defaults, 30 s leases).
struct WorkerSettings {
  std::string queue = kOutboxQueue;
  std::chrono::milliseconds lease{2000};
  std::chrono::milliseconds margin{600};
  std::chrono::milliseconds renew{400};
  std::chrono::milliseconds claim{50};
  std::chrono::milliseconds handoff_pause{100};
  std::chrono::milliseconds work{2};  // "sending" one notification
  int batch = 16;
};

// The catalog ([catalog] dsn): the worker partition leases and hot keys.
[[nodiscard]] Dsn CatalogDsn(const ClusterConfig& config);

// Writes `config` as a TOML file the children can load (mode 0600: it holds
// passwords), with the shards' replicas if asked (a child that must follow
// a failover). Returns its path.
[[nodiscard]] std::filesystem::path WriteConfigFile(const ClusterConfig& config, const std::filesystem::path& dir,
                                                    bool with_replicas = false);

// `bookstore-lab worker ...` (argv[0] is "worker"). Returns the exit status.
int WorkerMain(int argc, char** argv);

enum class WorkerPhase : std::int64_t { kStarting = 0, kIdle = 1, kProcessing = 2, kLeaving = 3 };

struct WorkerStatus {
  WorkerPhase phase = WorkerPhase::kStarting;
  std::int64_t job_id = 0;
  int partition = -1;
  std::int64_t fence = 0;
};

class WorkerProcess {
 public:
  // Starts the child; throws shardkit::Error if it cannot.
  WorkerProcess(const std::string& executable, const std::filesystem::path& config_file, std::string name,
                const WorkerSettings& settings, const std::filesystem::path& work_dir);
  ~WorkerProcess();  // SIGKILL if it still runs
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  [[nodiscard]] pid_t Pid() const noexcept { return pid_; }
  [[nodiscard]] const std::string& Name() const noexcept { return name_; }
  void Signal(int signal) const;
  // SIGTERM, then wait up to `grace` for it to leave, else SIGKILL. Returns
  // the exit status (128 + signal if killed).
  int Terminate(std::chrono::milliseconds grace);
  void Kill();  // SIGKILL and reap
  [[nodiscard]] bool Running();

  [[nodiscard]] WorkerStatus Status() const;
  // Events it printed so far, of one type ("stats", "refused", "final", "error").
  [[nodiscard]] std::vector<Json> Events(const std::string& type) const;
  [[nodiscard]] std::optional<Json> Last(const std::string& type) const;
  // Waits until `done` holds for its events (or the deadline); true if it did.
  bool WaitFor(const std::function<bool(const std::vector<Json>&)>& done,
               std::chrono::steady_clock::time_point deadline);

 private:
  void Reap(int options);
  void ReadLines(int fd);

  std::string name_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::filesystem::path status_file_;
  void* status_map_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<Json> events_;
  std::thread reader_;
};

}  // namespace shardkit::lab
