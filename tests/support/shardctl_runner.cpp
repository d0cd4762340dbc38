#include "support/shardctl_runner.hpp"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>

namespace shardkit::test {

std::filesystem::path WriteConfigFile(const ClusterConfig& c, const std::string& stem) {
  static std::atomic<int> serial{0};
  const auto path = std::filesystem::temp_directory_path() / fmt::format("{}_{}_{}.toml", stem, ::getpid(), serial++);
  std::ofstream f{path};
  f << "[directory]\nsource = \"catalog\"\n\n";
  for (const auto& s : c.shards) {
    f << fmt::format("[[shard]]\nname = \"{}\"\ndsn = \"{}\"\n", s.name, s.dsn.Reveal());
    if (!s.admin_dsn.empty()) f << fmt::format("admin_dsn = \"{}\"\n", s.admin_dsn.Reveal());
    f << "replicas = [";
    for (const auto& r : s.replicas) {
      f << fmt::format("{{ name = \"{}\", dsn = \"{}\", admin_dsn = \"{}\" }}, ", r.name, r.dsn.Reveal(),
                       r.AdminDsn().Reveal());
    }
    f << "]\n\n";
  }
  f << fmt::format("[reference]\ndsn = \"{}\"\n\n[catalog]\ndsn = \"{}\"\n", c.reference_dsn->Reveal(),
                   c.catalog_dsn->Reveal());
  return path;
}

ShardctlRun RunShardctl(const std::string& shardctl, const ClusterConfig& config, const std::string& args) {
  const auto path = WriteConfigFile(config, "shardctl_run");
  ShardctlRun r;
  FILE* pipe = ::popen(fmt::format("'{}' --config '{}' {} 2>&1", shardctl, path.string(), args).c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) r.out += buffer.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(path);
  return r;
}

ShardctlKilled RunShardctlKilledAt(const std::string& shardctl, const ClusterConfig& config, const std::string& args,
                                   const std::string& step) {
  const auto path = WriteConfigFile(config, "shardctl_killed");
  const std::string command = fmt::format("exec '{}' --config '{}' {} 2>&1", shardctl, path.string(), args);
  std::array<int, 2> fds{};
  ShardctlKilled k;
  if (::pipe(fds.data()) != 0) return k;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  FILE* out = ::fdopen(fds[0], "r");
  std::array<char, 4096> line{};
  while (std::fgets(line.data(), static_cast<int>(line.size()), out) != nullptr) {
    k.out += line.data();
    if (std::string_view(line.data()).rfind(step + " ", 0) == 0) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(out);
  k.by_signal = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  std::filesystem::remove(path);
  return k;
}

}  // namespace shardkit::test
