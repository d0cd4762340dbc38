// A bank coordinator process and its lines (transfers_process.hpp).
#include "transfers_process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "shardkit/errors.hpp"

namespace shardkit::lab {

CoordinatorProcess::CoordinatorProcess(const std::string& executable, const std::vector<std::string>& args) {
  std::vector<std::string> all{executable};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(all.size() + 1);
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(fmt::format("cannot start {}: fork: {}", executable, std::strerror(errno)));
  }
  if (pid_ == 0) {
    // The child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  reader_ = std::thread([this, fd = fds[0]] { ReadLines(fd); });
}

CoordinatorProcess::~CoordinatorProcess() {
  Kill();
  if (reader_.joinable()) reader_.join();
}

void CoordinatorProcess::ReadLines(int fd) {
  FILE* in = ::fdopen(fd, "r");
  if (in != nullptr) {
    char* line = nullptr;
    std::size_t capacity = 0;
    ssize_t n = 0;
    while ((n = ::getline(&line, &capacity, in)) > 0) {
      std::string text(line, static_cast<std::size_t>(n));
      if (!text.empty() && text.back() == '\n') text.pop_back();
      const std::lock_guard lock(mutex_);
      lines_.push_back(std::move(text));
      changed_.notify_all();
    }
    std::free(line);
    std::fclose(in);
  } else {
    ::close(fd);
  }
  const std::lock_guard lock(mutex_);
  ended_ = true;
  changed_.notify_all();
}

std::optional<std::string> CoordinatorProcess::WaitForLine(const std::string& prefix,
                                                           std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  std::size_t seen = 0;
  for (;;) {
    for (; seen < lines_.size(); ++seen) {
      if (lines_[seen].rfind(prefix, 0) == 0) return lines_[seen];
    }
    if (ended_) return std::nullopt;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && seen == lines_.size()) return std::nullopt;
  }
}

std::vector<std::string> CoordinatorProcess::Lines() const {
  const std::lock_guard lock(mutex_);
  return lines_;
}

void CoordinatorProcess::Kill() {
  if (pid_ <= 0 || exit_status_) return;
  ::kill(pid_, SIGKILL);
  (void)Wait();
}

int CoordinatorProcess::Wait() {
  if (exit_status_) return *exit_status_;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return *exit_status_;
}

std::string LabExecutable() {
  if (const char* env = std::getenv("BOOKSTORE_LAB_EXE"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bookstore-lab") : self.string();
}

}  // namespace shardkit::lab
