#include "topology/data_directory.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "shardkit/errors.hpp"

namespace shardkit::detail {
namespace fs = std::filesystem;

namespace {

bool HasPrograms(const fs::path& dir) {
  for (const char* program : {"pg_ctl", "pg_rewind", "pg_basebackup", "pg_controldata"}) {
    if (::access((dir / program).c_str(), X_OK) != 0) return false;
  }
  return true;
}

}  // namespace

fs::path FindPostgresPrograms(const std::optional<std::string>& given) {
  if (given) {
    if (!HasPrograms(*given)) {
      throw ReplicaRebuildError(
          fmt::format("{} lacks PostgreSQL's pg_ctl, pg_rewind, pg_basebackup or "
                      "pg_controldata: give the folder that has them (--pg-bin)",
                      *given));
    }
    return *given;
  }
  std::vector<std::string> looked;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream parts{path};
    for (std::string dir; std::getline(parts, dir, ':');) {
      if (dir.empty() || ::access((fs::path(dir) / "pg_rewind").c_str(), X_OK) != 0) continue;
      if (HasPrograms(dir)) return dir;
      looked.push_back(dir);
    }
  }
  fs::path debian = "/usr/lib/postgresql/15/bin";
  if (HasPrograms(debian)) return debian;
  looked.push_back(debian.string());
  throw ReplicaRebuildError(
      fmt::format("PostgreSQL's programs (pg_ctl, pg_rewind, pg_basebackup, pg_controldata) "
                  "are not in PATH nor in {}: install them (postgresql-15), or give their "
                  "folder with --pg-bin",
                  fmt::join(looked, ", ")));
}

DataDirectory::DataDirectory(const fs::path& path, fs::path programs) : programs_(std::move(programs)) {
  std::error_code error;
  path_ = fs::canonical(path, error);
  struct stat info {};
  if (error || ::stat(path_.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw ReplicaRebuildError(fmt::format("{} is not a directory{}", path.string(),
                                          error ? fmt::format(" ({})", error.message()) : std::string()));
  }
  uid_ = info.st_uid;
  gid_ = info.st_gid;
  if (uid_ == 0) {
    throw ReplicaRebuildError(
        fmt::format("{} is owned by root: PostgreSQL's data directories belong to the user "
                    "that runs the server (postgres)",
                    path_.string()));
  }
  if (::geteuid() != 0 && ::geteuid() != uid_) {
    throw ReplicaRebuildError(
        fmt::format("{} belongs to user id {}: run this as that user (or as root)", path_.string(), uid_));
  }
  const passwd* user = ::getpwuid(uid_);
  owner_ = user != nullptr ? user->pw_name : std::to_string(uid_);
}

bool DataDirectory::HasData() const {
  return fs::exists(path_ / "PG_VERSION");
}

void DataDirectory::ClearDeadPostmaster() const {
  // postmaster.pid: its pid, data directory, start time, port, socket directory, ...
  std::ifstream in{path_ / "postmaster.pid"};
  std::vector<std::string> lines;
  for (std::string line; lines.size() < 5 && std::getline(in, line);) lines.push_back(line);
  if (lines.empty() || lines[0].empty()) return;
  std::ifstream stat{"/proc/" + lines[0] + "/stat"};
  std::string pid, command, state;
  if (stat >> pid >> command >> state && state != "Z") return;  // alive
  // Killed (SIGKILL) and not reaped, or gone: its lock files would make
  // pg_ctl, and the server itself, count it as running.
  std::error_code ignored;
  fs::remove(path_ / "postmaster.pid", ignored);
  if (lines.size() >= 5 && !lines[4].empty()) {
    const fs::path lock = fs::path(lines[4]) / (".s.PGSQL." + lines[3] + ".lock");
    std::ifstream owner{lock};
    std::string holder;
    if (owner >> holder && holder == lines[0]) fs::remove(lock, ignored);
  }
}

bool DataDirectory::Running() const {
  ClearDeadPostmaster();
  return Run("pg_ctl", {"status", "-D", path_.string()}, "/dev/null") == 0;
}

std::map<std::string, std::string> DataDirectory::ControlData() const {
  char name[] = "/tmp/shardkit-controldata-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) throw ReplicaRebuildError("cannot make a temporary file for pg_controldata's output");
  ::close(fd);
  Own(name);
  const int status = Run("pg_controldata", {path_.string()}, name);
  std::map<std::string, std::string> fields;
  std::string text;
  {
    std::ifstream in{name};
    for (std::string line; std::getline(in, line);) {
      text += line + "\n";
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::size_t value = line.find_first_not_of(' ', colon + 1);
      fields[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
    }
  }
  ::unlink(name);
  if (status != 0) {
    throw ReplicaRebuildError(fmt::format("pg_controldata {} failed: {}", path_.string(), text));
  }
  return fields;
}

int DataDirectory::Run(const std::string& program, const std::vector<std::string>& args, const fs::path& log,
                       const std::vector<std::pair<std::string, std::string>>& environment) const {
  const std::string exe = (programs_ / program).string();
  std::vector<std::string> argv_text{exe};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  const pid_t parent = ::getpid();
  const passwd* user = ::getpwuid(uid_);
  const std::string home = user != nullptr ? user->pw_dir : "/";
  // argv built before the fork: the child of a threaded process should not
  // allocate.
  std::vector<char*> argv;
  argv.reserve(argv_text.size() + 1);
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // The child: the owner's identity, then a SIGKILL when we die (set
    // after the change of user, which would clear it).
    if (::geteuid() == 0) {
      if (::initgroups(owner_.c_str(), gid_) != 0 || ::setgid(gid_) != 0 || ::setuid(uid_) != 0) ::_exit(126);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(125);
    if (::chdir("/") != 0) ::_exit(126);
    ::setenv("HOME", home.c_str(), 1);
    for (const auto& [name, value] : environment) ::setenv(name.c_str(), value.c_str(), 1);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in < 0 || out < 0) ::_exit(126);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void DataDirectory::Own(const fs::path& file) const {
  if (::geteuid() == 0 && ::lchown(file.c_str(), uid_, gid_) != 0) {
    throw ReplicaRebuildError(fmt::format("cannot give {} to user {}", file.string(), owner_));
  }
}

void DataDirectory::WriteFile(const fs::path& file, const std::string& content) const {
  const fs::path temporary = file.string() + ".shardkit-new";
  {
    std::ofstream out{temporary, std::ios::trunc};
    out << content;
    if (!out.flush()) throw ReplicaRebuildError(fmt::format("cannot write {}", temporary.string()));
  }
  fs::permissions(temporary, fs::perms::owner_read | fs::perms::owner_write);
  Own(temporary);
  fs::rename(temporary, file);  // whole or not at all
}

void DataDirectory::MakeDirectory(const fs::path& dir) const {
  if (fs::is_directory(dir)) return;
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_all);
  Own(dir);
}

void DataDirectory::CopyFile(const fs::path& from, const fs::path& to) const {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write);
  Own(to);
}

void DataDirectory::Empty() const {
  for (const auto& entry : fs::directory_iterator(path_)) fs::remove_all(entry.path());
}

}  // namespace shardkit::detail
