// The server x version matrix of a migration set (migrate.hpp: MigrationStatus).
#include "shardkit/schema/migrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "core/sql_text.hpp"
#include "schema/migrate_internal.hpp"

namespace shardkit {
namespace {

using detail::DescribeIndex;
using detail::VersionText;

// For messages that show SQL to run: plain lower-case names as they are,
// anything else in double quotes.
std::string QuoteIdent(const std::string& name) {
  const bool plain = !name.empty() && (std::islower(static_cast<unsigned char>(name[0])) != 0 || name[0] == '_') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::islower(static_cast<unsigned char>(c)) != 0 ||
                              std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_';
                     });
  if (plain) return name;
  return detail::QuoteIdentifier(name);
}

}  // namespace

std::string_view StateName(MigrationState state) noexcept {
  switch (state) {
    case MigrationState::kNotTargeted:
      return "-";
    case MigrationState::kApplied:
      return "applied";
    case MigrationState::kPending:
      return "pending";
    case MigrationState::kFailed:
      return "failed";
    case MigrationState::kChecksumMismatch:
      return "checksum mismatch";
    case MigrationState::kUnreachable:
      return "unreachable";
  }
  return "?";
}

const AppliedMigration* ServerMigrationStatus::Find(int version) const noexcept {
  for (const auto& a : history) {
    if (a.version == version) return &a;
  }
  return nullptr;
}

MigrationStatus::MigrationStatus(MigrationSet set, std::vector<ServerMigrationStatus> servers)
    : set_(std::move(set)), servers_(std::move(servers)) {}

MigrationState MigrationStatus::State(std::size_t server, int version) const {
  const ServerMigrationStatus& s = servers_.at(server);
  const Migration* m = set_.Find(version);
  if (m == nullptr || !s.server.Takes(*m)) return MigrationState::kNotTargeted;
  if (!s.reachable) return MigrationState::kUnreachable;
  const AppliedMigration* a = s.Find(version);
  if (a == nullptr) return MigrationState::kPending;
  const bool same = a->checksum == m->checksum;
  if (a->success) return same ? MigrationState::kApplied : MigrationState::kChecksumMismatch;
  // A failed transactional attempt left nothing behind; a failed step by step
  // one did, up to steps_done: then the file must not have changed.
  if (!a->transactional && a->steps_done > 0 && !same) return MigrationState::kChecksumMismatch;
  return MigrationState::kFailed;
}

std::optional<int> MigrationStatus::VersionOf(std::size_t server) const {
  if (!servers_.at(server).reachable) return std::nullopt;
  int version = 0;
  bool complete = true;
  for (const Migration& m : set_.All()) {
    const MigrationState state = State(server, m.version);
    if (complete) {
      if (state == MigrationState::kNotTargeted || state == MigrationState::kApplied) {
        version = m.version;
      } else {
        complete = false;
      }
    } else if (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) {
      return std::nullopt;  // a gap: something later is applied
    }
  }
  return version;
}

std::vector<int> MigrationStatus::UnknownVersions(std::size_t server) const {
  std::vector<int> unknown;
  for (const auto& a : servers_.at(server).history) {
    if (set_.Find(a.version) == nullptr && (a.success || a.steps_done > 0)) unknown.push_back(a.version);
  }
  return unknown;
}

bool MigrationStatus::Partial(int version) const {
  bool some = false, missing = false;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const MigrationState state = State(s, version);
    if (state == MigrationState::kNotTargeted) continue;
    if (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) {
      some = true;
    } else {
      missing = true;
    }
  }
  return some && missing;
}

bool MigrationStatus::AtOneVersion() const {
  std::optional<int> common;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const auto version = VersionOf(s);
    if (!version || (common && *common != *version)) return false;
    common = version;
    if (!UnknownVersions(s).empty()) return false;
    for (const auto& index : servers_[s].invalid_indexes) {
      if (!index.being_built) return false;
    }
    for (const Migration& m : set_.All()) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kFailed || state == MigrationState::kChecksumMismatch) return false;
    }
  }
  return true;
}

bool MigrationStatus::UpToDate() const {
  if (!AtOneVersion()) return false;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    if (VersionOf(s) != set_.LatestVersion()) return false;
  }
  return true;
}

std::vector<std::string> MigrationStatus::Blockers() const {
  std::vector<std::string> out;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const ServerMigrationStatus& server = servers_[s];
    if (!server.reachable) continue;
    for (const Migration& m : set_.All()) {
      if (State(s, m.version) != MigrationState::kChecksumMismatch) continue;
      const AppliedMigration* a = server.Find(m.version);
      out.push_back(fmt::format(
          "{}: {} changed after it was applied (applied checksum {}, the file's is now {}): restore the file as "
          "it was applied and put the change into a new migration file; applied files are never re-run",
          server.server.name, m.file_name, a->checksum.substr(0, 12), m.checksum.substr(0, 12)));
    }
    for (const int version : UnknownVersions(s)) {
      const AppliedMigration* a = server.Find(version);
      out.push_back(
          fmt::format("{}: version {} ({}) is applied there but no file in {} describes it: migrate with "
                      "the migration files of the release that applied it",
                      server.server.name, VersionText(version), a->name, set_.Origin()));
    }
    for (const auto& index : server.invalid_indexes) {
      if (index.being_built) continue;
      out.push_back(
          fmt::format("{}: INVALID index {} (left by a failed CREATE INDEX CONCURRENTLY): drop it with "
                      "DROP INDEX CONCURRENTLY {}.{}, remove the cause, then run the migration again",
                      server.server.name, DescribeIndex(index), QuoteIdent(index.schema), QuoteIdent(index.index)));
    }
  }
  return out;
}

std::vector<std::string> MigrationStatus::Problems() const {
  std::vector<std::string> out;
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const ServerMigrationStatus& server = servers_[s];
    const std::string& name = server.server.name;
    if (!server.reachable) {
      out.push_back(fmt::format("{}: unreachable ({})", name, server.error));
      continue;
    }
    std::vector<std::string> pending;
    for (const Migration& m : set_.All()) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kPending) pending.push_back(VersionText(m.version));
      if (state == MigrationState::kFailed) {
        const AppliedMigration* a = server.Find(m.version);
        out.push_back(a->transactional ? fmt::format("{}: {} failed at {} (nothing of it applied): {}", name,
                                                     m.file_name, a->applied_at, a->error)
                                       : fmt::format("{}: {} failed at step {} of {} at {} (steps 1-{} applied): {}",
                                                     name, m.file_name, a->steps_done + 1, a->steps_total,
                                                     a->applied_at, a->steps_done, a->error));
      }
    }
    if (!pending.empty()) {
      std::string list;
      for (const auto& v : pending) list += (list.empty() ? "" : ", ") + v;
      const auto version = VersionOf(s);
      out.push_back(
          fmt::format("{}: {} pending: {}{}", name,
                      pending.size() == 1 ? "1 migration" : fmt::format("{} migrations", pending.size()), list,
                      version ? fmt::format(" (at version {})", VersionText(*version)) : std::string(" (with gaps)")));
    }
  }
  for (const Migration& m : set_.All()) {
    if (!Partial(m.version)) continue;
    std::string have, lack;
    for (std::size_t s = 0; s < servers_.size(); ++s) {
      const MigrationState state = State(s, m.version);
      if (state == MigrationState::kNotTargeted) continue;
      std::string& list =
          (state == MigrationState::kApplied || state == MigrationState::kChecksumMismatch) ? have : lack;
      list += (list.empty() ? "" : ", ") + servers_[s].server.name;
    }
    out.push_back(fmt::format("{} is applied on some servers only: on {}, not on {}", m.file_name, have, lack));
  }
  for (auto& blocker : Blockers()) out.push_back(std::move(blocker));
  return out;
}

}  // namespace shardkit
