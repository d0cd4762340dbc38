// The migration files: names, headers, checksums, statements (migrate.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "core/sha256.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/schema/migrate.hpp"

#ifndef SHARDKIT_INSTALL_SQL_DIR
#define SHARDKIT_INSTALL_SQL_DIR ""
#endif

namespace shardkit {
namespace {

// ------------------------------------------------------ SQL scanning

bool IsIdentStart(char c) noexcept { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool IsIdentChar(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$';
}

std::string Upper(std::string_view word) {
  std::string out(word);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The statement without leading whitespace and comments, upper-cased words
// separated by single spaces: enough to recognise "CREATE INDEX CONCURRENTLY".
std::string Keywords(std::string_view statement, std::size_t max_words) {
  std::string out;
  std::size_t i = 0, words = 0;
  while (i < statement.size() && words < max_words) {
    const char c = statement[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '-' && i + 1 < statement.size() && statement[i + 1] == '-') {
      while (i < statement.size() && statement[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < statement.size() && statement[i + 1] == '*') {
      const auto end = statement.find("*/", i + 2);
      i = end == std::string_view::npos ? statement.size() : end + 2;
    } else if (IsIdentStart(c)) {
      const std::size_t start = i;
      while (i < statement.size() && IsIdentChar(statement[i])) ++i;
      out += (out.empty() ? "" : " ") + Upper(statement.substr(start, i - start));
      ++words;
    } else {
      break;  // a quote, a parenthesis...: the keywords are over
    }
  }
  return out;
}

// Anything but whitespace and comments?
bool HasCode(std::string_view statement) {
  std::size_t i = 0;
  while (i < statement.size()) {
    const char c = statement[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (c == '-' && i + 1 < statement.size() && statement[i + 1] == '-') {
      while (i < statement.size() && statement[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < statement.size() && statement[i + 1] == '*') {
      const auto end = statement.find("*/", i + 2);
      i = end == std::string_view::npos ? statement.size() : end + 2;
    } else {
      return true;
    }
  }
  return false;
}

bool StartsWithWords(const std::string& keywords, std::string_view prefix) {
  return keywords == prefix || (keywords.starts_with(prefix) && keywords.size() > prefix.size() &&
                                keywords[prefix.size()] == ' ');
}

// Statements that PostgreSQL refuses inside a transaction block, and those
// that would end the migrator's transaction.
std::optional<std::string> NeedsNoTransaction(const std::string& keywords) {
  static const std::vector<std::string_view> kOutside{
      "CREATE INDEX CONCURRENTLY", "CREATE UNIQUE INDEX CONCURRENTLY", "DROP INDEX CONCURRENTLY",
      "VACUUM",                    "CREATE DATABASE",                  "DROP DATABASE",
      "ALTER SYSTEM",              "CREATE TABLESPACE",                "DROP TABLESPACE",
      "CREATE SUBSCRIPTION",       "REINDEX DATABASE",                 "REINDEX SYSTEM"};
  for (const auto prefix : kOutside) {
    if (StartsWithWords(keywords, prefix)) return std::string(prefix);
  }
  if (StartsWithWords(keywords, "REINDEX") && keywords.find("CONCURRENTLY") != std::string::npos) {
    return std::string("REINDEX CONCURRENTLY");
  }
  return std::nullopt;
}

bool EndsTransaction(const std::string& keywords) {
  for (const std::string_view prefix : {"BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "END", "ABORT",
                                        "SAVEPOINT", "RELEASE", "PREPARE TRANSACTION"}) {
    if (StartsWithWords(keywords, prefix)) return true;
  }
  return false;
}

std::string Trim(std::string_view text) {
  std::size_t first = 0, last = text.size();
  while (first < last && std::isspace(static_cast<unsigned char>(text[first])) != 0) ++first;
  while (last > first && std::isspace(static_cast<unsigned char>(text[last - 1])) != 0) --last;
  return std::string(text.substr(first, last - first));
}

std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MigrationError(fmt::format("cannot read {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<std::string> SplitStatements(std::string_view sql) {
  std::vector<std::string> statements;
  std::size_t start = 0;
  std::size_t i = 0;
  int atomic_depth = 0;  // inside BEGIN ATOMIC ... END (CASE ... END nests)
  std::string previous_word;
  auto flush = [&](std::size_t end) {
    std::string statement = Trim(sql.substr(start, end - start));
    if (HasCode(statement)) statements.push_back(std::move(statement));
    start = end + 1;
  };
  while (i < sql.size()) {
    const char c = sql[i];
    const char next = i + 1 < sql.size() ? sql[i + 1] : '\0';
    if (c == '-' && next == '-') {
      while (i < sql.size() && sql[i] != '\n') ++i;
    } else if (c == '/' && next == '*') {
      int depth = 1;
      i += 2;
      while (i < sql.size() && depth > 0) {
        if (sql[i] == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
          ++depth;
          i += 2;
        } else if (sql[i] == '*' && i + 1 < sql.size() && sql[i + 1] == '/') {
          --depth;
          i += 2;
        } else {
          ++i;
        }
      }
    } else if (c == '\'') {
      // E'...' allows backslash escapes; standard strings double the quote.
      const bool escapes = i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && (i < 2 || !IsIdentChar(sql[i - 2]));
      ++i;
      while (i < sql.size()) {
        if (escapes && sql[i] == '\\') {
          i += 2;
        } else if (sql[i] == '\'') {
          if (i + 1 < sql.size() && sql[i + 1] == '\'') {
            i += 2;
          } else {
            ++i;
            break;
          }
        } else {
          ++i;
        }
      }
    } else if (c == '"') {
      ++i;
      while (i < sql.size()) {
        if (sql[i] == '"') {
          if (i + 1 < sql.size() && sql[i + 1] == '"') {
            i += 2;
          } else {
            ++i;
            break;
          }
        } else {
          ++i;
        }
      }
    } else if (c == '$' && (i == 0 || !IsIdentChar(sql[i - 1])) && (next == '$' || IsIdentStart(next))) {
      std::size_t j = i + 1;
      while (j < sql.size() && sql[j] != '$' && (std::isalnum(static_cast<unsigned char>(sql[j])) != 0 || sql[j] == '_')) ++j;
      if (j < sql.size() && sql[j] == '$') {
        const std::string_view tag = sql.substr(i, j - i + 1);
        const auto end = sql.find(tag, j + 1);
        i = end == std::string_view::npos ? sql.size() : end + tag.size();
      } else {
        i = j;  // not a dollar quote after all ($1 inside an identifier, say)
      }
    } else if (IsIdentStart(c) && (i == 0 || !IsIdentChar(sql[i - 1]))) {
      const std::size_t word_start = i;
      while (i < sql.size() && IsIdentChar(sql[i])) ++i;
      const std::string word = Upper(sql.substr(word_start, i - word_start));
      if (word == "ATOMIC" && previous_word == "BEGIN") {
        ++atomic_depth;
      } else if (atomic_depth > 0 && word == "CASE") {
        ++atomic_depth;
      } else if (atomic_depth > 0 && word == "END") {
        --atomic_depth;
      }
      previous_word = word;
    } else if (c == ';' && atomic_depth == 0) {
      flush(i);
      ++i;
      previous_word.clear();
    } else {
      ++i;
    }
  }
  if (start < sql.size()) flush(sql.size());
  return statements;
}

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
  static const std::regex kName(R"(^(\d{3,})_([A-Za-z0-9_]+)\.sql$)");
  std::smatch m;
  if (!std::regex_match(file_name, m, kName)) {
    throw MigrationError(fmt::format("{}: a migration file is named NNN_name.sql (NNN: its version, 3 digits or "
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

  // CRLF (a Windows checkout) must not change the checksum.
  std::string normalised;
  normalised.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    normalised.push_back(text[i]);
  }
  migration.sql = std::move(normalised);
  migration.checksum = Sha256Hex(migration.sql);

  // The header: "-- shardkit-migration: key = value" within lines 1-5.
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
      throw MigrationError(
          fmt::format("{} line {}: shardkit-migration headers belong in lines 1-5", file_name, number), {},
          migration.version);
    }
    const std::string key = h[1].str();
    const std::string value = h[2].str();
    if (key == "targets") {
      if (have_targets) throw MigrationError(fmt::format("{} line {}: targets given twice", file_name, number));
      have_targets = true;
      std::array<bool, 3> seen{};
      std::stringstream items(value);
      std::string item;
      while (std::getline(items, item, ',')) {
        item = Trim(item);
        ServerRole role{};
        if (item == "shard") {
          role = ServerRole::kShard;
        } else if (item == "reference") {
          role = ServerRole::kReference;
        } else if (item == "catalog") {
          role = ServerRole::kCatalog;
        } else {
          throw MigrationError(fmt::format("{} line {}: target \"{}\" is none of shard, reference, catalog",
                                           file_name, number, item),
                               {}, migration.version);
        }
        seen[static_cast<std::size_t>(role)] = true;
      }
      for (const ServerRole role : {ServerRole::kShard, ServerRole::kReference, ServerRole::kCatalog}) {
        if (seen[static_cast<std::size_t>(role)]) migration.targets.push_back(role);
      }
      if (migration.targets.empty()) {
        throw MigrationError(fmt::format("{} line {}: targets is empty: name shard, reference and/or catalog",
                                         file_name, number),
                             {}, migration.version);
      }
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
      throw MigrationError(fmt::format("{} line {}: unknown header key \"{}\" (known: targets, transaction)",
                                       file_name, number, key),
                           {}, migration.version);
    }
  }
  if (!have_targets) {
    throw MigrationError(fmt::format("{}: no targets header: line 1-5 must say where it applies, e.g. "
                                     "\"-- shardkit-migration: targets = shard, reference\"",
                                     file_name),
                         {}, migration.version);
  }

  const std::vector<std::string> statements = SplitStatements(migration.sql);
  if (statements.empty()) throw MigrationError(fmt::format("{}: has no statements", file_name), {}, migration.version);
  for (std::size_t i = 0; i < statements.size(); ++i) {
    const std::string keywords = Keywords(statements[i], 4);
    if (EndsTransaction(keywords)) {
      throw MigrationError(fmt::format("{}: statement {} ({}...) controls the transaction; remove it: the migrator "
                                       "runs each file in one transaction (or, with transaction = none, each "
                                       "statement on its own)",
                                       file_name, i + 1, keywords),
                           {}, migration.version);
    }
    if (migration.transactional) {
      if (const auto what = NeedsNoTransaction(keywords)) {
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
    throw MigrationError(fmt::format("{} is not a directory of migration files (NNN_name.sql); give the right one "
                                     "with --sql-dir",
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
  return FromMigrations(std::move(migrations), std::filesystem::absolute(directory));
}

const Migration* MigrationSet::Find(int version) const noexcept {
  const auto it = std::lower_bound(migrations_.begin(), migrations_.end(), version,
                                   [](const Migration& m, int v) { return m.version < v; });
  return it != migrations_.end() && it->version == version ? &*it : nullptr;
}

SqlDirectory FindSqlDirectory(const std::optional<std::string>& explicit_directory) {
  if (explicit_directory && !explicit_directory->empty()) return {*explicit_directory, "--sql-dir"};
  std::error_code error;
  // <prefix>/bin/program -> <prefix>/share/shardkit/sql
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto installed = exe.parent_path().parent_path() / "share" / "shardkit" / "sql";
    if (std::filesystem::is_directory(installed, error)) {
      return {installed, "installed next to " + exe.parent_path().string()};
    }
  }
  const std::filesystem::path configured = SHARDKIT_INSTALL_SQL_DIR;
  if (!configured.empty() && std::filesystem::is_directory(configured, error)) {
    return {configured, "installed"};
  }
  return {"sql", "./sql: no installed share/shardkit/sql found"};
}

}  // namespace shardkit
