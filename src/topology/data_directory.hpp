// A PostgreSQL data directory on this host, and PostgreSQL's programs
// (pg_ctl, pg_rewind, pg_basebackup, pg_controldata) run on it as the user
// who owns it: PostgreSQL refuses to run as root, and files it finds owned
// by another user it cannot read. replica_rebuild.cpp rebuilds a server
// through it.
//
//   detail::DataDirectory dir{"/var/lib/postgresql/15/main", detail::FindPostgresPrograms(std::nullopt)};
//   if (dir.Running()) dir.Run("pg_ctl", {"stop", "-D", dir.Path(), "-m", "fast", "-w"}, log);
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardkit::detail {

// The folder of PostgreSQL's programs: `given` (it must hold pg_ctl), else
// that of pg_rewind found in PATH (with pg_ctl beside it), else
// /usr/lib/postgresql/15/bin. Throws ReplicaRebuildError naming what it
// looked at when none has them.
[[nodiscard]] std::filesystem::path FindPostgresPrograms(const std::optional<std::string>& given);

class DataDirectory {
 public:
  // `path` must be a directory owned by a user other than root; throws
  // ReplicaRebuildError otherwise, or when this process (not root) is not
  // that user.
  DataDirectory(const std::filesystem::path& path, std::filesystem::path programs);

  [[nodiscard]] const std::filesystem::path& Path() const noexcept { return path_; }  // canonical
  [[nodiscard]] const std::filesystem::path& Programs() const noexcept { return programs_; }
  [[nodiscard]] const std::string& Owner() const noexcept { return owner_; }
  [[nodiscard]] bool HasData() const;  // PG_VERSION there
  // A postmaster runs from it (pg_ctl status), once the lock files of one
  // that died (a zombie where nobody reaps it) are gone.
  [[nodiscard]] bool Running() const;
  // pg_controldata's lines as name -> value ("Database system identifier"
  // -> "7312..."). Throws ReplicaRebuildError when it fails.
  [[nodiscard]] std::map<std::string, std::string> ControlData() const;

  // Runs `program` of the programs' folder with `args` as the owner, its
  // output appended to `log`; its exit status (-1: it could not run, or a
  // signal ended it). The program is killed if this process dies first (a
  // shardctl killed mid-copy leaves no pg_basebackup writing behind it).
  // `environment` is added to the program's (a password kept off its
  // command line, which every user may read).
  int Run(const std::string& program, const std::vector<std::string>& args, const std::filesystem::path& log,
          const std::vector<std::pair<std::string, std::string>>& environment = {}) const;

  // Writes `content` to `file` (0600), owned by the owner.
  void WriteFile(const std::filesystem::path& file, const std::string& content) const;
  // Makes `dir` (0700) owned by the owner, if missing.
  void MakeDirectory(const std::filesystem::path& dir) const;
  // Copies `from` to `to` (replacing it), owned by the owner.
  void CopyFile(const std::filesystem::path& from, const std::filesystem::path& to) const;
  // Removes everything in the data directory, keeping the directory itself
  // (its owner and mode).
  void Empty() const;

 private:
  void Own(const std::filesystem::path& file) const;
  void ClearDeadPostmaster() const;

  std::filesystem::path path_;
  std::filesystem::path programs_;
  std::string owner_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace shardkit::detail
