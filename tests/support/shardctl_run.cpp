#include "support/shardctl_run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace shardkit::test {

ShardctlRun RunShardctl(const std::string& shardctl, const std::vector<std::string>& args) {
  const auto err_path = std::filesystem::temp_directory_path() / fmt::format("shardctl_run_{}.err", ::getpid());
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> text{shardctl};
  text.insert(text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, shardctl.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " + shardctl);
  }
  ShardctlRun run;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = ::read(fds[0], buffer.data(), buffer.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    run.out.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ostringstream err;
  err << std::ifstream(err_path).rdbuf();
  run.err = err.str();
  std::filesystem::remove(err_path);
  return run;
}

std::filesystem::path WriteShardctlConfig(const ClusterConfig& config, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("{}_{}.toml", name, ::getpid());
  std::ofstream out(path);
  out << "[directory]\nsource = \"catalog\"\n";
  if (config.catalog_dsn) out << "[catalog]\ndsn = \"" << config.catalog_dsn->Reveal() << "\"\n";
  for (const ShardConfig& shard : config.shards) {
    out << "[[shard]]\nname = \"" << shard.name << "\"\ndsn = \"" << shard.dsn.Reveal() << "\"\n";
    if (!shard.admin_dsn.empty()) out << "admin_dsn = \"" << shard.admin_dsn.Reveal() << "\"\n";
  }
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path;
}

}  // namespace shardkit::test
