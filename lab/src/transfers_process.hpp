// transfers_process.hpp — a coordinator of the bank as a real process
// (`bookstore-lab transfers ...`, transfers.hpp): started, its lines read
// as they come, killed with SIGKILL at the step it stopped at.
//
//   CoordinatorProcess c{exe, {"transfers", "--config", path, "--stop-at", "decided"}};
//   if (c.WaitForLine("stopped ", deadline)) c.Kill();
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace shardkit::lab {

class CoordinatorProcess {
 public:
  // Starts `executable` with `args` (argv[1...]); throws shardkit::Error if
  // it cannot. The child dies with this process.
  CoordinatorProcess(const std::string& executable, const std::vector<std::string>& args);
  ~CoordinatorProcess();  // SIGKILL if it still runs
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  [[nodiscard]] pid_t Pid() const noexcept { return pid_; }
  // The first line starting with `prefix`, waiting for it until the
  // deadline or the end of its output (nullopt).
  std::optional<std::string> WaitForLine(const std::string& prefix, std::chrono::steady_clock::time_point deadline);
  [[nodiscard]] std::vector<std::string> Lines() const;
  void Kill();  // SIGKILL and reap
  // Waits for it to end; its exit status (128 + signal if killed).
  int Wait();

 private:
  void ReadLines(int fd);

  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
  bool ended_ = false;
  std::thread reader_;
};

// The bookstore-lab binary: $BOOKSTORE_LAB_EXE, else this process's own.
[[nodiscard]] std::string LabExecutable();

}  // namespace shardkit::lab
