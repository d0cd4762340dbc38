#include "shardkit/config.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <toml.hpp>

#include "shardkit/errors.hpp"

namespace shardkit {
namespace {

bool IsUri(std::string_view dsn) {
  return dsn.starts_with("postgresql://") || dsn.starts_with("postgres://");
}

// A parser's message may quote the offending line of the file, connection
// strings and their passwords included: hide them as RedactDsn does.
std::string RedactSecrets(std::string text) {
  static const std::regex kUserInfo(R"((postgres(?:ql)?://[^:/@?\s]*):[^@/?\s]*@)");
  text = std::regex_replace(text, kUserInfo, "$1:***@");
  static const std::regex kKeyValue(R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&"]+))", std::regex::icase);
  return std::regex_replace(text, kKeyValue, "$1***");
}

// Reads an optional integer key of a table, checking its range.
template <typename Int>
Int IntOr(const toml::value& table, const std::string& table_name, const std::string& key, Int fallback,
          Int min_value, Int max_value) {
  if (!table.contains(key)) return fallback;
  const toml::value& v = table.at(key);
  if (!v.is_integer()) {
    throw ConfigError(table_name + "." + key, "must be an integer");
  }
  const auto n = v.as_integer();
  if (n < min_value || n > max_value) {
    throw ConfigError(table_name + "." + key,
                      fmt::format("{} is out of range ({}..{})", n, min_value, max_value));
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
  const int first = std::stoi(m[1].str());
  const int last = m[2].matched ? std::stoi(m[2].str()) : first;
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

}  // namespace

ClusterConfig ParseConfig(std::string_view toml_text, std::string origin) {
  toml::value root;
  try {
    std::istringstream in{std::string(toml_text)};
    root = toml::parse(in, origin);
  } catch (const std::exception& e) {
    throw ConfigError(origin, "is not valid TOML: " + RedactSecrets(e.what()));
  }

  ClusterConfig config;
  config.origin = origin;
  try {
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
      ShardConfig shard;
      shard.name = shards[i].contains("name") ? StringAt(shards[i], path, "name") : fmt::format("shard{}", i);
      shard.dsn = StringAt(shards[i], path, "dsn");
      if (shard.dsn.empty()) throw ConfigError(path + ".dsn", "is empty");
      config.shards.push_back(std::move(shard));
    }

    const toml::value pool = root.contains("pool") ? root.at("pool") : toml::value(toml::table{});
    config.pool.max_size = IntOr<int>(pool, "pool", "max_size", config.pool.max_size, 1, 10000);
    config.pool.max_waiters = IntOr<int>(pool, "pool", "max_waiters", config.pool.max_waiters, 0, 1000000);
    config.pool.connect_timeout = std::chrono::milliseconds(
        IntOr<std::int64_t>(pool, "pool", "connect_timeout_ms", config.pool.connect_timeout.count(), 1, 3600000));
    config.pool.acquire_timeout = std::chrono::milliseconds(
        IntOr<std::int64_t>(pool, "pool", "acquire_timeout_ms", config.pool.acquire_timeout.count(), 0, 3600000));
    if (pool.contains("time_zone")) {
      config.pool.time_zone = StringAt(pool, "pool", "time_zone");
      if (config.pool.time_zone.empty()) throw ConfigError("pool.time_zone", "is empty: name a time zone such as \"UTC\"");
    }

    const int shard_count = static_cast<int>(config.shards.size());
    const toml::value directory =
        root.contains("directory") ? root.at("directory") : toml::value(toml::table{});
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
      config.reference_dsn = StringAt(root.at("reference"), "reference", "dsn");
    }
    if (root.contains("catalog")) {
      const toml::value& catalog = root.at("catalog");
      if (!catalog.is_table()) throw ConfigError("catalog", "must be a table with dsn");
      config.catalog_dsn = StringAt(catalog, "catalog", "dsn");
      if (config.catalog_dsn->empty()) throw ConfigError("catalog.dsn", "is empty");
    }
    if (config.directory_source == DirectorySource::kCatalog && !config.catalog_dsn) {
      throw ConfigError("catalog.dsn",
                        "is missing: directory.source = \"catalog\" reads the directory from the catalog "
                        "database; add [catalog] dsn = \"...\"");
    }
  } catch (const toml::exception& e) {
    throw ConfigError(origin, RedactSecrets(e.what()));
  }
  return config;
}

ClusterConfig LoadConfig(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(path.string(), "cannot be read: point SHARDKIT_CONFIG or --config at the cluster's "
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

std::string RedactDsn(std::string_view dsn) {
  std::string text(dsn);
  if (IsUri(text)) {
    // postgresql://user:secret@host -> postgresql://user:***@host
    static const std::regex kUserInfo(R"(^(postgres(?:ql)?://[^:/@?]*):[^@/?]*@)");
    text = std::regex_replace(text, kUserInfo, "$1:***@");
    static const std::regex kQuery(R"(([?&]password=)[^&]*)", std::regex::icase);
    return std::regex_replace(text, kQuery, "$1***");
  }
  // key=value form: password=secret or password='with spaces \' quotes'
  static const std::regex kKeyValue(R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+))", std::regex::icase);
  return std::regex_replace(text, kKeyValue, "$1***");
}

std::string WithConnectTimeout(std::string_view dsn, std::chrono::milliseconds timeout) {
  std::string text(dsn);
  if (text.find("connect_timeout") != std::string::npos) return text;
  // libpq takes whole seconds and treats anything below 2 as 2.
  const auto seconds = std::max<long long>(2, (timeout.count() + 999) / 1000);
  if (IsUri(text)) {
    return text + (text.find('?') == std::string::npos ? "?" : "&") + fmt::format("connect_timeout={}", seconds);
  }
  return text + fmt::format(" connect_timeout={}", seconds);
}

}  // namespace shardkit
