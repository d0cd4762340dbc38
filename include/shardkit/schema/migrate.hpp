// shardkit/schema/migrate.hpp — versioned schema migrations on every server.
//
// Two sets of migrations, each an ordered list of files NNN_name.sql with a
// version sequence and a history of its own:
//
//   - the library's own schema (bucket_of, the fences, bucket ownership, the
//     catalog's tables, read tokens, jobs): MigrationSet::Library(), compiled
//     into libshardkit from the repository's sql/, recorded as "shardkit";
//   - the application's (its tables, shardkit_shard_table() calls, indexes):
//     MigrationSet::Load(its folder), recorded as "app".
//
// `shardctl migrate` applies the library's set first, then the application's
// (ClusterMigrations). A header comment in the first five lines of a file
// says where it applies and how:
//
//   -- shardkit-migration: targets = shard, reference     (any of shard, reference, catalog)
//   -- shardkit-migration: transaction = none             (optional: step by step, see below)
//
// Every server (each shard, the reference server, the catalog) records what
// it has in its own table shardkit_migrations: set, version, name, checksum
// (SHA-256 of the file), when, how long, by whom, success. A run holds an
// advisory lock on every server it touches, so two migrators never
// interleave; it applies version after version, each file in one
// transaction per server together with its history row, so no server ever
// gets a migration twice. Files marked `transaction = none` (CREATE INDEX
// CONCURRENTLY...) run statement by statement, the history row counting the
// steps done; a failed step is recorded, INVALID indexes are reported, and
// the next run resumes at the failed step once they are resolved.
//
//   for (const auto& set : shardkit::ClusterMigrations("migrations")) {   // shardkit's, then yours
//     shardkit::Migrator migrator{set, shardkit::MigrationServers(shardkit::AtCurrentPrimaries(config))};
//     shardkit::MigrationStatus status = migrator.Status();  // the server x version matrix
//     shardkit::MigrationReport report = migrator.Apply();   // what is missing, everywhere
//     if (!report.Ok()) ...                                   // a server down, a failed statement
//   }
//
// Refused before anything is applied (MigrationRefused): a file edited after
// it was applied (checksum mismatch), a version applied on a server that no
// file describes, an INVALID index left by a failed concurrent step.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/core/dsn.hpp"

namespace shardkit {

struct ClusterConfig;

// What a server is to the cluster; a migration file's targets name these.
enum class ServerRole { kShard, kReference, kCatalog };
[[nodiscard]] std::string_view RoleName(ServerRole role) noexcept;  // "shard", "reference", "catalog"

// One file of the migration set.
struct Migration {
  int version = 0;                  // NNN of NNN_name.sql
  std::string name;                 // "bookstore_schema"
  std::string file_name;            // "002_bookstore_schema.sql"
  std::string sql;                  // the file's text
  std::string checksum;             // SHA-256 (hex) of the text, CRLF read as LF
  std::vector<ServerRole> targets;  // from the header, in the order shard, reference, catalog
  bool transactional = true;        // false: `transaction = none`
  // The statements run one by one when not transactional; otherwise one
  // step, the whole file.
  std::vector<std::string> steps;

  [[nodiscard]] bool Targets(ServerRole role) const noexcept;
  [[nodiscard]] std::string TargetList() const;  // "shard, reference"
};

// Parses one file (name and text); throws MigrationError naming the file and
// line (a bad name, a missing or malformed header).
[[nodiscard]] Migration ParseMigration(const std::string& file_name, std::string text);

// Splits SQL text into its statements with PostgreSQL 15's own parser
// (libpg_query), so quotes, dollar quotes, comments and BEGIN ATOMIC ... END
// bodies are read as the server reads them. Empty statements (comments
// only) are dropped. A syntax error throws MigrationError naming `source`
// (e.g. the file), the line and column, and PostgreSQL's message.
[[nodiscard]] std::vector<std::string> SplitStatements(std::string_view sql, std::string_view source = "the SQL text");

// SHA-256 of `bytes` as 64 lowercase hex digits.
[[nodiscard]] std::string Sha256Hex(std::string_view bytes);

// The names the two sets are recorded under in shardkit_migrations.
inline constexpr std::string_view kLibraryMigrations = "shardkit";
inline constexpr std::string_view kApplicationMigrations = "app";

// The migrations of one set, in version order.
class MigrationSet {
 public:
  MigrationSet() = default;
  // The application's migrations: every *.sql file of `directory`; other
  // files are ignored. Throws MigrationError for an unreadable or empty
  // directory, a file that does not parse, two files with the same version,
  // or a file of the library's own set (shardkit applies those itself).
  [[nodiscard]] static MigrationSet Load(const std::filesystem::path& directory);
  // Application migrations from already parsed files (tests); same checks.
  [[nodiscard]] static MigrationSet FromMigrations(std::vector<Migration> migrations,
                                                   std::filesystem::path directory = {});
  // The library's own schema, compiled in: applied before any application's.
  [[nodiscard]] static const MigrationSet& Library();

  [[nodiscard]] const std::vector<Migration>& All() const noexcept { return migrations_; }
  [[nodiscard]] const Migration* Find(int version) const noexcept;
  [[nodiscard]] int LatestVersion() const noexcept { return migrations_.empty() ? 0 : migrations_.back().version; }
  [[nodiscard]] const std::filesystem::path& Directory() const noexcept { return directory_; }
  // kLibraryMigrations or kApplicationMigrations: its history's name.
  [[nodiscard]] std::string_view Name() const noexcept { return name_; }
  // For messages: the directory, or "compiled into shardkit".
  [[nodiscard]] std::string Origin() const;

 private:
  std::vector<Migration> migrations_;
  std::filesystem::path directory_;
  std::string_view name_ = kApplicationMigrations;
};

// What a cluster is migrated with, in order: the library's set, then the
// application's from `application_directory` when one is given.
[[nodiscard]] std::vector<MigrationSet> ClusterMigrations(
    const std::optional<std::filesystem::path>& application_directory);

// A database the migrations apply to. Servers of the configuration whose
// connection strings are identical are one server with several roles.
struct MigrationServer {
  std::string name;  // "shard0", "reference", "catalog"
  Dsn dsn;
  std::vector<ServerRole> roles;

  [[nodiscard]] bool Takes(const Migration& migration) const noexcept;  // any role among the targets
  [[nodiscard]] std::string RoleList() const;                           // "shard" or "reference, catalog"
};

// Every shard (named as in the config), the reference server and the catalog
// of a configuration, in that order. After a failover give it
// AtCurrentPrimaries(config) (routing/primaries.hpp), as shardctl does, so
// that the shard's current primary is migrated.
[[nodiscard]] std::vector<MigrationServer> MigrationServers(const ClusterConfig& config);

// A row of a server's shardkit_migrations table (of one set).
struct AppliedMigration {
  int version = 0;
  std::string name;
  std::string checksum;
  bool success = false;
  bool transactional = true;
  int steps_done = 0;
  int steps_total = 0;
  std::string applied_at;  // ISO 8601, UTC
  double duration_ms = 0;
  std::string applied_by;
  std::string error;  // of the failed attempt
};

// An index that PostgreSQL marks invalid: left behind by a failed CREATE
// INDEX CONCURRENTLY (or being built right now).
struct InvalidIndex {
  std::string schema;
  std::string index;
  std::string table;
  bool being_built = false;  // a CREATE INDEX is running on it now
};

// One cell of the server x version matrix.
enum class MigrationState {
  kNotTargeted,  // the file does not apply to this server's roles
  kApplied,
  kPending,           // not applied yet
  kFailed,            // the last attempt failed (steps_done says how far a non-transactional one got)
  kChecksumMismatch,  // applied, but the file has changed since
  kUnreachable,       // the server did not answer
};
[[nodiscard]] std::string_view StateName(MigrationState state) noexcept;  // "applied", "pending", ...

struct ServerMigrationStatus {
  MigrationServer server;
  bool reachable = false;
  std::string error;                      // why not reachable (redacted)
  bool has_history = false;               // shardkit_migrations exists
  std::vector<AppliedMigration> history;  // the set's rows, in version order
  std::vector<InvalidIndex> invalid_indexes;

  [[nodiscard]] const AppliedMigration* Find(int version) const noexcept;
};

// The matrix: every server against every version of a migration set.
class MigrationStatus {
 public:
  MigrationStatus(MigrationSet set, std::vector<ServerMigrationStatus> servers);

  [[nodiscard]] const std::vector<ServerMigrationStatus>& Servers() const noexcept { return servers_; }
  [[nodiscard]] const MigrationSet& Set() const noexcept { return set_; }
  [[nodiscard]] MigrationState State(std::size_t server, int version) const;
  // The highest version V such that every file up to V that targets the
  // server is applied and nothing later is: its schema version. nullopt if
  // unreachable or if its history has gaps (applied 3 but not 2).
  [[nodiscard]] std::optional<int> VersionOf(std::size_t server) const;
  // Versions applied on the server that no file describes (a newer release
  // migrated it, or a file was deleted).
  [[nodiscard]] std::vector<int> UnknownVersions(std::size_t server) const;
  // Applied on some of the servers it targets only.
  [[nodiscard]] bool Partial(int version) const;

  // Every server reachable, at the same version, with nothing failed,
  // mismatched, unknown or INVALID.
  [[nodiscard]] bool AtOneVersion() const;
  // AtOneVersion and that version is the set's latest.
  [[nodiscard]] bool UpToDate() const;
  // Each problem as a sentence naming the server and the version.
  [[nodiscard]] std::vector<std::string> Problems() const;
  // What blocks a run (checksum mismatch, unknown versions, INVALID indexes
  // on a server a run would touch), as sentences that say how to resolve it.
  [[nodiscard]] std::vector<std::string> Blockers() const;

 private:
  MigrationSet set_;
  std::vector<ServerMigrationStatus> servers_;
};

// A progress report while migrating (one per server and version).
struct MigrationEvent {
  enum class Kind { kLocked, kStarted, kApplied, kFailed, kServerLeft };
  Kind kind = Kind::kStarted;
  std::string server;
  int version = 0;
  std::chrono::microseconds elapsed{0};
  std::string message;
};

struct MigratorOptions {
  std::chrono::milliseconds connect_timeout{5000};
  // How long to wait for another migrator's lock on a server before giving
  // up (MigrationError naming the holder).
  std::chrono::milliseconds lock_timeout{30000};
  // Recorded in applied_by; default "<os user>@<host> <program> (pid N)".
  std::string applied_by;
  // Called from the migrating threads (one per server), serialised.
  std::function<void(const MigrationEvent&)> on_event;
};

// What a run did.
struct MigrationReport {
  struct Step {
    std::string server;
    int version = 0;
    bool ok = false;
    std::chrono::microseconds elapsed{0};
    std::string error;  // when !ok
  };
  std::vector<Step> applied;             // attempts, in order per server
  std::vector<std::string> left_behind;  // servers unreachable or lost during the run, with why
  // Per server, the versions a dry run would apply (also filled by a real run).
  std::vector<std::pair<std::string, std::vector<int>>> plan;
  bool dry_run = false;
  bool stopped = false;  // a statement failed: later versions were not started anywhere
  std::chrono::microseconds elapsed{0};

  [[nodiscard]] bool Ok() const noexcept;
  [[nodiscard]] int AppliedCount() const noexcept;
};

class Migrator {
 public:
  Migrator(MigrationSet set, std::vector<MigrationServer> servers, MigratorOptions options = {});

  [[nodiscard]] const MigrationSet& Set() const noexcept { return set_; }
  [[nodiscard]] const std::vector<MigrationServer>& Servers() const noexcept { return servers_; }

  // Reads every server's history and INVALID indexes (in parallel); an
  // unreachable server is marked so, never thrown.
  [[nodiscard]] MigrationStatus Status() const;

  // Applies every missing migration up to `to_version` (default: all) on
  // every server it targets. Locks each reachable server first (waits up to
  // lock_timeout, then MigrationError naming the holder), re-reads the
  // history under the locks and refuses (MigrationRefused) on any blocker.
  // Then version by version, all servers in parallel: a server that cannot
  // be reached, or is lost, is left behind while the others go on; a
  // statement that fails stops the run after that version (no server starts
  // a later one). With dry_run nothing is locked or applied: the report's
  // plan says what would be.
  MigrationReport Apply(std::optional<int> to_version = {}, bool dry_run = false);

  // Throws MigrationError unless the named server is reachable and has every
  // migration that targets it: a new shard must pass this before it
  // receives buckets, and a move refuses shards whose schemas differ.
  void RequireUpToDate(const std::string& server_name) const;

 private:
  MigrationSet set_;
  std::vector<MigrationServer> servers_;
  MigratorOptions options_;
};

}  // namespace shardkit
