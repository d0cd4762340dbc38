#include "shardkit/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>
#include <toml.hpp>
#include <vector>

#include "core/dsn_redaction.hpp"
#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

// Every password written in the file's text, in any of the forms RedactDsn
// knows, so that a message quoting it in some other shape (a key, a value, a
// line cut elsewhere) is cleaned too. Very short ones are left to RedactSecrets:
// replacing every "a" in a message would hide the message, not a secret.
std::vector<std::string> PasswordsIn(std::string_view text) {
  // Connection strings, wherever they start on a line: a URI, or the first
  // keyword=value of a key=value string.
  static const std::regex kUri(R"(postgres(?:ql)?://[^\s"']*)", std::regex::icase);
  static const std::regex kKeyValueStart(
      R"((?:^|[\s"'])((?:host|hostaddr|port|dbname|user|password|sslmode|service)\s*=))");
  std::vector<std::string> found;
  const auto keep = [&found](std::string_view dsn, const detail::TextSpans& spans) {
    for (const auto& [begin, end] : spans) {
      std::string secret(dsn.substr(begin, end - begin));
      while (!secret.empty() && (secret.front() == '\'' || secret.front() == '"')) secret.erase(0, 1);
      while (!secret.empty() && (secret.back() == '\'' || secret.back() == '"')) secret.pop_back();
      if (secret.size() >= 4) found.push_back(std::move(secret));
    }
  };
  std::size_t line_begin = 0;
  while (line_begin < text.size()) {
    const std::size_t line_end = std::min(text.find('\n', line_begin), text.size());
    const std::string line(text.substr(line_begin, line_end - line_begin));
    for (std::sregex_iterator it(line.begin(), line.end(), kUri), end; it != end; ++it) {
      const std::string uri = it->str();
      keep(uri, detail::SecretSpansOfUri(uri));
    }
    std::smatch start;
    if (std::regex_search(line, start, kKeyValueStart)) {
      const std::string_view rest = std::string_view(line).substr(static_cast<std::size_t>(start.position(1)));
      keep(rest, detail::SecretSpansOfKeyValue(rest));
    }
    line_begin = line_end + 1;
  }
  // Longest first, so that a password containing another is replaced whole.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return found;
}

std::string Scrub(std::string message, const std::vector<std::string>& secrets) {
  for (const auto& secret : secrets) {
    for (auto at = message.find(secret); at != std::string::npos; at = message.find(secret, at + 3)) {
      message.replace(at, secret.size(), "***");
    }
  }
  return detail::RedactSecrets(std::move(message));
}

// Reads an optional integer key of a table, checking its range.
template <typename Int>
Int IntOr(const toml::value& table, const std::string& table_name, const std::string& key, Int fallback, Int min_value,
          Int max_value) {
  if (!table.contains(key)) return fallback;
  const toml::value& v = table.at(key);
  if (!v.is_integer()) {
    throw ConfigError(table_name + "." + key, "must be an integer");
  }
  const auto n = v.as_integer();
  if (n < min_value || n > max_value) {
    throw ConfigError(table_name + "." + key, fmt::format("{} is out of range ({}..{})", n, min_value, max_value));
  }
  return static_cast<Int>(n);
}

std::string StringAt(const toml::value& table, const std::string& path, const std::string& key) {
  if (!table.contains(key)) throw ConfigError(path + "." + key, "is missing");
  const toml::value& v = table.at(key);
  if (!v.is_string()) throw ConfigError(path + "." + key, "must be a string");
  return v.as_string().str;
}

// "12" or "0-31" -> [first, last]
std::pair<int, int> ParseBucketRange(const std::string& text, const std::string& key) {
  static const std::regex kRange(R"(^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$)");
  std::smatch m;
  if (!std::regex_match(text, m, kRange)) {
    throw ConfigError(key, fmt::format("\"{}\" is not a bucket or a bucket range like \"0-31\"", text));
  }
  // At most 2 digits matter: longer numbers are out of range anyway (and
  // would overflow std::stoi).
  const auto number = [](const std::string& digits) { return digits.size() > 2 ? kBucketCount : std::stoi(digits); };
  const int first = number(m[1].str());
  const int last = m[2].matched ? number(m[2].str()) : first;
  if (first > last || last >= kBucketCount) {
    throw ConfigError(key, fmt::format("bucket range \"{}\" must lie within 0-63, low to high", text));
  }
  return {first, last};
}

BucketDirectory ParseDirectory(const toml::value& directory, int shard_count) {
  const auto version = IntOr<std::int64_t>(directory, "directory", "version", 1, 1, INT64_MAX);
  if (!directory.contains("buckets")) return BucketDirectory::EvenSplit(shard_count, version);
  const toml::value& buckets = directory.at("buckets");
  if (!buckets.is_table()) {
    throw ConfigError("directory.buckets", "must be a table like { \"0-31\" = 0, \"32-63\" = 1 }");
  }
  std::vector<std::pair<BucketId, ShardId>> rows;
  for (const auto& [range, shard_value] : buckets.as_table()) {
    const std::string key = "directory.buckets.\"" + range + "\"";
    if (!shard_value.is_integer()) throw ConfigError(key, "the shard must be an integer");
    const auto shard = shard_value.as_integer();
    if (shard < 0 || shard >= shard_count) {
      throw ConfigError(key, fmt::format("shard {} does not exist: {} shards are configured (0..{})", shard,
                                         shard_count, shard_count - 1));
    }
    const auto [first, last] = ParseBucketRange(range, key);
    for (int b = first; b <= last; ++b) rows.emplace_back(BucketId{b}, ShardId{static_cast<int>(shard)});
  }
  try {
    return BucketDirectory::FromRows(rows, shard_count, version);
  } catch (const DirectoryError& e) {
    throw ConfigError("directory.buckets", e.what());
  }
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A key that is not one of `known` is a typo the program would otherwise
// ignore silently: refused, with its line and the closest known key.
void RequireKnownKeys(const toml::value& table, const std::string& path,
                      std::initializer_list<std::string_view> known) {
  if (!table.is_table()) {
    throw ConfigError(path.empty() ? "(file)" : path,
                      fmt::format("must be a table (line {})", table.location().line()));
  }
  for (const auto& [key, value] : table.as_table()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string_view closest;
    std::size_t best = 3;  // at most two edits away
    for (const auto candidate : known) {
      const std::size_t d = EditDistance(key, candidate);
      if (d < best) {
        best = d;
        closest = candidate;
      }
    }
    std::string names;
    for (const auto candidate : known) names += fmt::format("{}{}", names.empty() ? "" : ", ", candidate);
    const std::string where = path.empty() ? "at the top level" : "in [" + path + "]";
    throw ConfigError(path.empty() ? key : path + "." + key,
                      fmt::format("unknown key (line {}){}; the keys {} are: {}", value.location().line(),
                                  closest.empty() ? "" : fmt::format(": did you mean \"{}\"?", closest), where, names));
  }
}

// shard[i].replicas: an array of connection strings or of tables with
// name and dsn.
std::vector<ReplicaConfig> ParseReplicas(const toml::value& shard, const std::string& path,
                                         const std::string& shard_name) {
  std::vector<ReplicaConfig> replicas;
  if (!shard.contains("replicas")) return replicas;
  const toml::value& list = shard.at("replicas");
  if (!list.is_array()) {
    throw ConfigError(path + ".replicas", "must be an array of connection strings (or of tables with name and dsn)");
  }
  for (std::size_t j = 0; j < list.as_array().size(); ++j) {
    const toml::value& entry = list.as_array()[j];
    const std::string at = fmt::format("{}.replicas[{}]", path, j);
    ReplicaConfig replica;
    replica.name = fmt::format("{}-replica{}", shard_name, j + 1);
    if (entry.is_string()) {
      replica.dsn = Dsn(entry.as_string().str);
    } else if (entry.is_table()) {
      RequireKnownKeys(entry, at, {"name", "dsn", "admin_dsn"});
      if (entry.contains("name")) replica.name = StringAt(entry, at, "name");
      replica.dsn = Dsn(StringAt(entry, at, "dsn"));
      if (entry.contains("admin_dsn")) replica.admin_dsn = Dsn(StringAt(entry, at, "admin_dsn"));
    } else {
      throw ConfigError(at, "must be a connection string or a table with name and dsn");
    }
    if (replica.dsn.empty()) throw ConfigError(at + (entry.is_table() ? ".dsn" : ""), "is empty");
    if (replica.name.empty()) throw ConfigError(at + ".name", "is empty");
    replicas.push_back(std::move(replica));
  }
  return replicas;
}

// Every server of the file once: two shards, or a shard and a replica, on
// one database would count its rows twice or read the wrong server.
void RequireDistinctServers(const std::vector<ShardConfig>& shards) {
  struct Server {
    std::string path;
    const std::string* name;
    const Dsn* dsn;
  };
  std::vector<Server> servers;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    servers.push_back({fmt::format("shard[{}]", i), &shards[i].name, &shards[i].dsn});
    for (std::size_t j = 0; j < shards[i].replicas.size(); ++j) {
      servers.push_back(
          {fmt::format("shard[{}].replicas[{}]", i, j), &shards[i].replicas[j].name, &shards[i].replicas[j].dsn});
    }
  }
  for (std::size_t a = 0; a < servers.size(); ++a) {
    for (std::size_t b = 0; b < a; ++b) {
      if (*servers[a].name == *servers[b].name) {
        throw ConfigError(servers[a].path + ".name",
                          fmt::format("\"{}\" is already the name of {}: every shard and replica needs a name of "
                                      "its own",
                                      *servers[a].name, servers[b].path));
      }
      if (*servers[a].dsn == *servers[b].dsn) {
        throw ConfigError(servers[a].path + ".dsn",
                          fmt::format("is the same connection string as {}'s: each shard and replica is a server "
                                      "(or database) of its own",
                                      servers[b].path));
      }
    }
  }
}

}  // namespace

namespace {

ClusterConfig ParseConfigText(std::string_view toml_text, const std::string& origin) {
  toml::value root;
  try {
    std::istringstream in{std::string(toml_text)};
    root = toml::parse(in, origin);
  } catch (const std::exception& e) {
    throw ConfigError(origin, "is not valid TOML: " + detail::RedactSecrets(e.what()));
  }

  ClusterConfig config;
  config.origin = origin;
  try {
    RequireKnownKeys(root, "", {"shard", "pool", "directory", "reference", "catalog", "sql", "replicas"});
    if (root.contains("replicas")) {
      const toml::value& replicas = root.at("replicas");
      RequireKnownKeys(replicas, "replicas", {"probe_interval_ms", "max_size"});
      config.replica_settings.probe_interval = std::chrono::milliseconds(IntOr<std::int64_t>(
          replicas, "replicas", "probe_interval_ms", config.replica_settings.probe_interval.count(), 10, 60000));
      if (replicas.contains("max_size")) {
        config.replica_settings.max_size = IntOr<int>(replicas, "replicas", "max_size", 1, 1, 10000);
      }
    }
    if (root.contains("pool")) {
      RequireKnownKeys(
          root.at("pool"), "pool",
          {"max_size", "max_waiters", "connect_timeout_ms", "acquire_timeout_ms", "time_zone", "search_path"});
    }
    if (root.contains("directory"))
      RequireKnownKeys(root.at("directory"), "directory", {"source", "version", "buckets"});
    if (root.contains("reference")) RequireKnownKeys(root.at("reference"), "reference", {"dsn"});
    if (root.contains("catalog")) RequireKnownKeys(root.at("catalog"), "catalog", {"dsn"});
    if (root.contains("sql"))
      RequireKnownKeys(root.at("sql"), "sql", {"reference_tables", "max_gather_rows", "max_gather_bytes"});
    if (!root.contains("shard") || !root.at("shard").is_array() || root.at("shard").as_array().empty()) {
      throw ConfigError("shard", "no shards: add one [[shard]] table with name and dsn per shard");
    }
    const auto& shards = root.at("shard").as_array();
    if (shards.size() > static_cast<std::size_t>(kBucketCount)) {
      throw ConfigError("shard", fmt::format("{} shards configured; 64 buckets allow at most 64", shards.size()));
    }
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const std::string path = fmt::format("shard[{}]", i);
      if (!shards[i].is_table()) throw ConfigError(path, "must be a table with name and dsn");
      RequireKnownKeys(shards[i], path, {"name", "dsn", "admin_dsn", "replicas"});
      ShardConfig shard;
      shard.name = shards[i].contains("name") ? StringAt(shards[i], path, "name") : fmt::format("shard{}", i);
      shard.dsn = Dsn(StringAt(shards[i], path, "dsn"));
      if (shard.dsn.empty()) throw ConfigError(path + ".dsn", "is empty");
      if (shards[i].contains("admin_dsn")) {
        shard.admin_dsn = Dsn(StringAt(shards[i], path, "admin_dsn"));
        if (shard.admin_dsn.empty()) throw ConfigError(path + ".admin_dsn", "is empty (omit it to use dsn)");
      }
      for (std::size_t j = 0; j < config.shards.size(); ++j) {
        // Two shards on one database would count its rows twice.
        const auto line = shards[i].location().line();
        if (config.shards[j].name == shard.name) {
          throw ConfigError(path + ".name", fmt::format("\"{}\" (line {}) is already the name of shard[{}]: "
                                                        "every shard needs a name of its own",
                                                        shard.name, line, j));
        }
        if (config.shards[j].dsn == shard.dsn) {
          throw ConfigError(path + ".dsn", fmt::format("(line {}) is the same connection string as shard[{}]'s: "
                                                       "each shard is a database of its own",
                                                       line, j));
        }
      }
      shard.replicas = ParseReplicas(shards[i], path, shard.name);
      config.shards.push_back(std::move(shard));
    }
    RequireDistinctServers(config.shards);

    const toml::value pool = root.contains("pool") ? root.at("pool") : toml::value(toml::table{});
    config.pool.max_size = IntOr<int>(pool, "pool", "max_size", config.pool.max_size, 1, 10000);
    config.pool.max_waiters = IntOr<int>(pool, "pool", "max_waiters", config.pool.max_waiters, 0, 1000000);
    config.pool.connect_timeout = std::chrono::milliseconds(
        IntOr<std::int64_t>(pool, "pool", "connect_timeout_ms", config.pool.connect_timeout.count(), 1, 3600000));
    config.pool.acquire_timeout = std::chrono::milliseconds(
        IntOr<std::int64_t>(pool, "pool", "acquire_timeout_ms", config.pool.acquire_timeout.count(), 0, 3600000));
    if (pool.contains("time_zone")) {
      config.pool.time_zone = StringAt(pool, "pool", "time_zone");
      if (config.pool.time_zone.empty())
        throw ConfigError("pool.time_zone", "is empty: name a time zone such as \"UTC\"");
    }
    if (pool.contains("search_path")) {
      config.pool.search_path = StringAt(pool, "pool", "search_path");
      if (config.pool.search_path.empty()) {
        throw ConfigError("pool.search_path", "is empty: name the schemas, e.g. \"public\"");
      }
    }

    const int shard_count = static_cast<int>(config.shards.size());
    const toml::value directory = root.contains("directory") ? root.at("directory") : toml::value(toml::table{});
    if (directory.contains("source")) {
      const std::string source = StringAt(directory, "directory", "source");
      if (source == "config") {
        config.directory_source = DirectorySource::kConfig;
      } else if (source == "catalog") {
        config.directory_source = DirectorySource::kCatalog;
      } else if (source == "database") {
        throw ConfigError("directory.source",
                          "\"database\" (shard_directory on shard 0) is gone: the directory lives in the catalog "
                          "database now; set source = \"catalog\" and [catalog] dsn");
      } else {
        throw ConfigError("directory.source", fmt::format("\"{}\" is neither \"config\" nor \"catalog\"", source));
      }
    }
    if (config.directory_source == DirectorySource::kCatalog && directory.contains("buckets")) {
      throw ConfigError("directory.buckets",
                        "is given with source = \"catalog\": the catalog's shard_directory is the one placement; "
                        "remove buckets (or use source = \"config\")");
    }
    config.directory = ParseDirectory(directory, shard_count);

    if (root.contains("reference")) {
      config.reference_dsn = Dsn(StringAt(root.at("reference"), "reference", "dsn"));
    }
    if (root.contains("catalog")) {
      const toml::value& catalog = root.at("catalog");
      if (!catalog.is_table()) throw ConfigError("catalog", "must be a table with dsn");
      config.catalog_dsn = Dsn(StringAt(catalog, "catalog", "dsn"));
      if (config.catalog_dsn->empty()) throw ConfigError("catalog.dsn", "is empty");
    }
    if (root.contains("sql") && root.at("sql").contains("reference_tables")) {
      const toml::value& tables = root.at("sql").at("reference_tables");
      if (!tables.is_array()) throw ConfigError("sql.reference_tables", "must be an array of table names");
      for (const toml::value& table : tables.as_array()) {
        if (!table.is_string() || table.as_string().str.empty()) {
          throw ConfigError("sql.reference_tables", "must list table names as strings, like [\"books\"]");
        }
        config.reference_tables.push_back(table.as_string().str);
      }
    }
    if (root.contains("sql")) {
      config.max_gather_rows =
          IntOr<std::int64_t>(root.at("sql"), "sql", "max_gather_rows", config.max_gather_rows, 0, kMaxGatherRowsLimit);
      config.max_gather_bytes = IntOr<std::int64_t>(root.at("sql"), "sql", "max_gather_bytes", config.max_gather_bytes,
                                                    0, kMaxGatherBytesLimit);
    }
    if (config.directory_source == DirectorySource::kCatalog && !config.catalog_dsn) {
      throw ConfigError("catalog.dsn",
                        "is missing: directory.source = \"catalog\" reads the directory from the catalog "
                        "database; add [catalog] dsn = \"...\"");
    }
  } catch (const toml::exception& e) {
    throw ConfigError(origin, detail::RedactSecrets(e.what()));
  }
  return config;
}

}  // namespace

// The one way out of the parser: every message, whatever produced it, has
// the file's passwords removed, and nothing but ConfigError escapes.
ClusterConfig ParseConfig(std::string_view toml_text, std::string origin) {
  try {
    return ParseConfigText(toml_text, origin);
  } catch (const ConfigError& e) {
    const auto secrets = PasswordsIn(toml_text);
    const std::string prefix = "config " + e.key() + ": ";
    std::string message = e.what();
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    throw ConfigError(Scrub(e.key(), secrets), Scrub(std::move(message), secrets));
  } catch (const std::exception& e) {
    throw ConfigError(Scrub(origin, PasswordsIn(toml_text)),
                      Scrub(std::string("cannot be parsed: ") + e.what(), PasswordsIn(toml_text)));
  }
}

int ShardIndexNamed(const ClusterConfig& config, std::string_view name) {
  const auto found =
      std::find_if(config.shards.begin(), config.shards.end(), [&](const ShardConfig& s) { return s.name == name; });
  if (found == config.shards.end()) {
    std::string names;
    for (const auto& s : config.shards) names += (names.empty() ? "" : ", ") + s.name;
    throw ConfigError("shard", fmt::format("{} has no shard named {} (its shards: {})", config.origin, name, names));
  }
  return static_cast<int>(found - config.shards.begin());
}

ClusterConfig LoadConfig(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(path.string(),
                      "cannot be read: point SHARDKIT_CONFIG or --config at the cluster's "
                      "configuration file");
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path.string());
}

std::filesystem::path ResolveConfigPath(const std::optional<std::string>& explicit_path) {
  if (explicit_path && !explicit_path->empty()) return *explicit_path;
  if (const char* env = std::getenv("SHARDKIT_CONFIG"); env != nullptr && *env != '\0') return env;
  return "shardkit.toml";
}

}  // namespace shardkit
