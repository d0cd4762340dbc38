// The migration files: names, headers, the library's compiled-in set and an application's directory (migrate.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "schema/library_migrations.hpp"
#include "schema/migration_statements.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"

namespace shardkit {
namespace {

std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MigrationError(fmt::format("cannot read {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The version and name from NNN_name.sql.
Migration FromFileName(const std::string& file_name) {
  static const std::regex kName(R"(^(\d{3,})_([A-Za-z0-9_]+)\.sql$)");
  std::smatch m;
  if (!std::regex_match(file_name, m, kName)) {
    throw MigrationError(
        fmt::format("{}: a migration file is named NNN_name.sql (NNN: its version, 3 digits or "
                    "more; name: letters, digits, _)",
                    file_name));
  }
  Migration migration;
  try {
    migration.version = std::stoi(m[1].str());
  } catch (const std::exception&) {
    throw MigrationError(fmt::format("{}: version {} is too large", file_name, m[1].str()));
  }
  if (migration.version < 1) throw MigrationError(fmt::format("{}: versions start at 001", file_name));
  migration.name = m[2].str();
  migration.file_name = file_name;
  return migration;
}

// CRLF (a Windows checkout) must not change the checksum.
std::string WithoutCarriageReturns(const std::string& text) {
  std::string normalised;
  normalised.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    normalised.push_back(text[i]);
  }
  return normalised;
}

// The value of a "targets" header line: roles, in the order shard, reference, catalog.
void ParseTargets(const std::string& value, int number, Migration& migration) {
  const std::string& file_name = migration.file_name;
  std::array<bool, 3> seen{};
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = detail::Trim(item);
    ServerRole role{};
    if (item == "shard") {
      role = ServerRole::kShard;
    } else if (item == "reference") {
      role = ServerRole::kReference;
    } else if (item == "catalog") {
      role = ServerRole::kCatalog;
    } else {
      throw MigrationError(
          fmt::format("{} line {}: target \"{}\" is none of shard, reference, catalog", file_name, number, item), {},
          migration.version);
    }
    seen[static_cast<std::size_t>(role)] = true;
  }
  for (const ServerRole role : {ServerRole::kShard, ServerRole::kReference, ServerRole::kCatalog}) {
    if (seen[static_cast<std::size_t>(role)]) migration.targets.push_back(role);
  }
  if (migration.targets.empty()) {
    throw MigrationError(
        fmt::format("{} line {}: targets is empty: name shard, reference and/or catalog", file_name, number), {},
        migration.version);
  }
}

// The header: "-- shardkit-migration: key = value" within lines 1-5.
void ParseHeaders(Migration& migration) {
  const std::string& file_name = migration.file_name;
  static const std::regex kHeader(R"(^--\s*shardkit-migration\s*:\s*([A-Za-z_]+)\s*=\s*(.*?)\s*$)");
  static const std::regex kLooksLikeHeader(R"(shardkit-migration\s*:)");
  std::istringstream lines(migration.sql);
  std::string line;
  bool have_targets = false, have_transaction = false;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::smatch h;
    const bool header = std::regex_match(line, h, kHeader);
    if (!header) {
      if (std::regex_search(line, kLooksLikeHeader)) {
        throw MigrationError(fmt::format("{} line {}: a shardkit-migration header must be a comment of the form "
                                         "\"-- shardkit-migration: key = value\" within lines 1-5",
                                         file_name, number),
                             {}, migration.version);
      }
      continue;
    }
    if (number > 5) {
      throw MigrationError(fmt::format("{} line {}: shardkit-migration headers belong in lines 1-5", file_name, number),
                           {}, migration.version);
    }
    const std::string key = h[1].str();
    const std::string value = h[2].str();
    if (key == "targets") {
      if (have_targets) throw MigrationError(fmt::format("{} line {}: targets given twice", file_name, number));
      have_targets = true;
      ParseTargets(value, number, migration);
    } else if (key == "transaction") {
      if (have_transaction) {
        throw MigrationError(fmt::format("{} line {}: transaction given twice", file_name, number));
      }
      have_transaction = true;
      if (value != "none") {
        throw MigrationError(fmt::format("{} line {}: transaction = \"{}\": the only choice is \"none\" (run "
                                         "statement by statement); without the line the file runs in one "
                                         "transaction",
                                         file_name, number, value),
                             {}, migration.version);
      }
      migration.transactional = false;
    } else {
      throw MigrationError(
          fmt::format("{} line {}: unknown header key \"{}\" (known: targets, transaction)", file_name, number, key),
          {}, migration.version);
    }
  }
  if (!have_targets) {
    throw MigrationError(fmt::format("{}: no targets header: line 1-5 must say where it applies, e.g. "
                                     "\"-- shardkit-migration: targets = shard, reference\"",
                                     file_name),
                         {}, migration.version);
  }
}

// The statements, checked against the transaction the file runs in, and the steps.
void SplitIntoSteps(Migration& migration) {
  const std::string& file_name = migration.file_name;
  const std::vector<std::string> statements = SplitStatements(migration.sql, file_name);
  if (statements.empty()) throw MigrationError(fmt::format("{}: has no statements", file_name), {}, migration.version);
  for (std::size_t i = 0; i < statements.size(); ++i) {
    const std::string keywords = detail::LeadingKeywords(statements[i], 4);
    if (detail::EndsTransaction(keywords)) {
      throw MigrationError(fmt::format("{}: statement {} ({}...) controls the transaction; remove it: the migrator "
                                       "runs each file in one transaction (or, with transaction = none, each "
                                       "statement on its own)",
                                       file_name, i + 1, keywords),
                           {}, migration.version);
    }
    if (migration.transactional) {
      if (const auto what = detail::NeedsNoTransaction(keywords)) {
        throw MigrationError(fmt::format("{}: statement {} ({}) cannot run inside a transaction: add the header "
                                         "line \"-- shardkit-migration: transaction = none\"",
                                         file_name, i + 1, *what),
                             {}, migration.version);
      }
    }
  }
  if (migration.transactional) {
    migration.steps = {migration.sql};
  } else {
    migration.steps = statements;
  }
}

}  // namespace

std::string_view RoleName(ServerRole role) noexcept {
  switch (role) {
    case ServerRole::kShard:
      return "shard";
    case ServerRole::kReference:
      return "reference";
    case ServerRole::kCatalog:
      return "catalog";
  }
  return "?";
}

bool Migration::Targets(ServerRole role) const noexcept {
  return std::find(targets.begin(), targets.end(), role) != targets.end();
}

std::string Migration::TargetList() const {
  std::string out;
  for (const ServerRole role : targets) out += (out.empty() ? "" : ", ") + std::string(RoleName(role));
  return out;
}

Migration ParseMigration(const std::string& file_name, std::string text) {
  Migration migration = FromFileName(file_name);
  migration.sql = WithoutCarriageReturns(text);
  migration.checksum = Sha256Hex(migration.sql);
  ParseHeaders(migration);
  SplitIntoSteps(migration);
  return migration;
}

MigrationSet MigrationSet::FromMigrations(std::vector<Migration> migrations, std::filesystem::path directory) {
  std::sort(migrations.begin(), migrations.end(),
            [](const Migration& a, const Migration& b) { return a.version < b.version; });
  for (std::size_t i = 1; i < migrations.size(); ++i) {
    if (migrations[i].version == migrations[i - 1].version) {
      throw MigrationError(fmt::format("{} and {} have the same version {}: renumber one of them (a version is "
                                       "applied once per server)",
                                       migrations[i - 1].file_name, migrations[i].file_name, migrations[i].version),
                           {}, migrations[i].version);
    }
  }
  MigrationSet set;
  set.migrations_ = std::move(migrations);
  set.directory_ = std::move(directory);
  return set;
}

MigrationSet MigrationSet::Load(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    throw MigrationError(
        fmt::format("{} is not a directory of migration files (NNN_name.sql); give your application's with "
                    "--sql-dir",
                    directory.string()));
  }
  std::vector<Migration> migrations;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".sql") continue;
    migrations.push_back(ParseMigration(entry.path().filename().string(), ReadWholeFile(entry.path())));
  }
  if (migrations.empty()) {
    throw MigrationError(fmt::format("{} holds no migration files (NNN_name.sql)", directory.string()));
  }
  // A copy of the library's schema among the application's would apply it
  // twice (the library's set is applied first, on its own).
  for (const Migration& m : migrations) {
    for (const Migration& own : Library().All()) {
      if (own.checksum != m.checksum) continue;
      throw MigrationError(fmt::format(
          "{}/{} is shardkit's own migration {} ({}): shardkit applies its schema itself, before yours; remove "
          "the library's files from {} and keep only your application's",
          directory.string(), m.file_name, own.file_name, Library().Origin(), directory.string()));
    }
  }
  return FromMigrations(std::move(migrations), std::filesystem::absolute(directory));
}

const MigrationSet& MigrationSet::Library() {
  static const MigrationSet library = [] {
    std::vector<Migration> migrations;
    for (const detail::EmbeddedMigration& file : detail::LibraryMigrationFiles()) {
      migrations.push_back(ParseMigration(std::string(file.file_name), std::string(file.text)));
    }
    MigrationSet set = FromMigrations(std::move(migrations));
    set.name_ = kLibraryMigrations;
    return set;
  }();
  return library;
}

std::string MigrationSet::Origin() const {
  if (name_ == kLibraryMigrations) return "compiled into shardkit";
  return directory_.empty() ? std::string("the application's") : directory_.string();
}

const Migration* MigrationSet::Find(int version) const noexcept {
  const auto it = std::lower_bound(migrations_.begin(), migrations_.end(), version,
                                   [](const Migration& m, int v) { return m.version < v; });
  return it != migrations_.end() && it->version == version ? &*it : nullptr;
}

std::vector<MigrationSet> ClusterMigrations(const std::optional<std::filesystem::path>& application_directory) {
  std::vector<MigrationSet> sets{MigrationSet::Library()};
  if (application_directory) sets.push_back(MigrationSet::Load(*application_directory));
  return sets;
}

}  // namespace shardkit
