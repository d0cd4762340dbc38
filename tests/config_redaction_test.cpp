// No password in any message: a few hundred mutated configuration files
// (truncations, stray and missing quotes, wrong types, shuffled lines), all
// carrying one known password in every connection-string form shardkit
// accepts, go through ParseConfig and through `shardctl`; the password must
// appear in no exception text, no redacted DSN and no byte shardctl prints.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "shardkit/config.hpp"
#include "shardkit/core/shard_key.hpp"
#include "shardkit/errors.hpp"

extern char** environ;

namespace {

// Distinctive enough never to occur by accident in a message.
constexpr const char* kPassword = "hunter2-Zq8";

// Every place a password can sit: key=value (bare and single-quoted), URI
// user info, URI query parameter, the reference and catalog-like servers.
std::string BaseConfig() {
  std::ostringstream out;
  out << "# cluster\n"
      << "[pool]\n"
      << "max_size = 4\n"
      << "max_waiters = 16\n"
      << "connect_timeout_ms = 2000\n"
      << "acquire_timeout_ms = 500\n"
      << "\n"
      << "[directory]\n"
      << "source = \"config\"\n"
      << "version = 3\n"
      << "buckets = { \"0-20\" = 0, \"21-41\" = 1, \"42-63\" = 2 }\n"
      << "\n"
      << "[[shard]]\n"
      << "name = \"shard0\"\n"
      << "dsn = \"host=127.0.0.1 port=1 dbname=bookstore user=bookstore password=" << kPassword
      << " connect_timeout=2\"\n"
      << "\n"
      << "[[shard]]\n"
      << "name = \"shard1\"\n"
      << "dsn = \"host=127.0.0.1 port=2 dbname=bookstore user=bookstore password = '" << kPassword << "'\"\n"
      << "\n"
      << "[[shard]]\n"
      << "name = 'shard2'\n"
      << "dsn = 'postgresql://bookstore:" << kPassword << "@127.0.0.1:3/bookstore?sslmode=disable'\n"
      << "\n"
      << "[reference]\n"
      << "dsn = \"postgresql://127.0.0.1:4/bookstore?user=bookstore&password=" << kPassword << "\"\n";
  return out.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

// Lines that carry the password.
std::vector<std::size_t> SecretLines(const std::vector<std::string>& lines) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(kPassword) != std::string::npos) at.push_back(i);
  }
  return at;
}

// The mutated files, each named by what was done to it. Deterministic.
std::vector<std::pair<std::string, std::string>> MutatedConfigs() {
  const std::string base = BaseConfig();
  const auto base_lines = Lines(base);
  const auto secret_lines = SecretLines(base_lines);
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("unchanged", base);

  // Truncated everywhere around the secrets (mid-string, mid-password) and
  // at spread-out offsets elsewhere.
  for (std::size_t at = base.find(kPassword); at != std::string::npos; at = base.find(kPassword, at + 1)) {
    for (std::size_t extra = std::strlen(kPassword); extra <= std::strlen(kPassword) + 40; extra += 3) {
      if (at + extra <= base.size())
        out.emplace_back("truncated at " + std::to_string(at + extra), base.substr(0, at + extra));
    }
  }
  for (std::size_t at = 0; at < base.size(); at += 17)
    out.emplace_back("truncated at " + std::to_string(at), base.substr(0, at));

  // Quotes: the closing quote of every secret line removed, doubled,
  // swapped for the other kind; a stray quote before and after the password.
  for (std::size_t i : secret_lines) {
    auto edit = [&](const std::string& what, auto&& change) {
      auto lines = base_lines;
      change(lines[i]);
      out.emplace_back(what + " on line " + std::to_string(i + 1), Join(lines));
    };
    edit("unterminated string", [](std::string& l) { l.pop_back(); });
    edit("unterminated string with a trailing space", [](std::string& l) { l.back() = ' '; });
    edit("opening quote removed", [](std::string& l) { l.erase(l.find_first_of("\"'"), 1); });
    edit("both quotes removed", [](std::string& l) {
      l.erase(l.find_first_of("\"'"), 1);
      l.pop_back();
    });
    edit("closing quote doubled", [](std::string& l) { l += l.back(); });
    edit("quote kinds mixed", [](std::string& l) { l.back() = l.back() == '"' ? '\'' : '"'; });
    edit("stray quote before the password", [](std::string& l) { l.insert(l.find(kPassword), "\""); });
    edit("stray quote after the password",
         [](std::string& l) { l.insert(l.find(kPassword) + std::strlen(kPassword), "\""); });
    edit("stray backslash after the password",
         [](std::string& l) { l.insert(l.find(kPassword) + std::strlen(kPassword), "\\"); });
    edit("bad escape before the password", [](std::string& l) { l.insert(l.find(kPassword), "\\q"); });
    edit("control character in the string", [](std::string& l) { l.insert(l.find(kPassword), "\x01"); });
    edit("key without =", [](std::string& l) { l.erase(l.find('='), 1); });
    edit("value as a table", [](std::string& l) {
      const auto eq = l.find('=');
      l = l.substr(0, eq + 1) + " { inner = " + l.substr(eq + 1) + " }";
    });
    edit("value as an array", [](std::string& l) {
      const auto eq = l.find('=');
      l = l.substr(0, eq + 1) + " [" + l.substr(eq + 1) + ", 5]";
    });
    edit("value as an unclosed array", [](std::string& l) {
      const auto eq = l.find('=');
      l = l.substr(0, eq + 1) + " [" + l.substr(eq + 1);
    });
    edit("renamed to name", [](std::string& l) { l.replace(0, 3, "name"); });
    edit("renamed to source", [](std::string& l) { l.replace(0, 3, "source"); });
    edit("renamed to max_size", [](std::string& l) { l.replace(0, 3, "max_size"); });
    edit("line doubled", [](std::string& l) { l += "\n" + l; });
    edit("written as a table header", [](std::string& l) { l = "[" + l + "]"; });
    edit("written as a bucket range",
         [](std::string& l) { l = "buckets = { " + l.substr(l.find('=') + 1) + " = 0 }"; });
    edit("CRLF line end", [](std::string& l) { l += "\r"; });
    edit("NUL in the line", [](std::string& l) { l.insert(l.find(kPassword), std::string(1, '\0')); });
    edit("as a multi-line string", [](std::string& l) {
      const auto eq = l.find('=');
      l = l.substr(0, eq + 1) + " \"\"\"" + l.substr(eq + 2, l.size() - eq - 3) + "\n";
    });
  }

  // Wrong types and structure elsewhere, with the secrets intact.
  const std::vector<std::pair<std::string, std::string>> replacements = {
      {"max_size = 4", "max_size = \"4\""},
      {"max_size = 4", "max_size = -1"},
      {"max_size = 4", "max_size = 99999999999999999999"},
      {"version = 3", "version = 0"},
      {"version = 3", "version = 3.5"},
      {"source = \"config\"", "source = \"elsewhere\""},
      {"source = \"config\"", "source = 7"},
      {"\"0-20\" = 0", "\"0-20\" = 9"},
      {"\"0-20\" = 0", "\"0-99\" = 0"},
      {"\"0-20\" = 0", "\"99999999999999-3\" = 0"},
      {"\"0-20\" = 0", "\"x\" = 0"},
      {"\"0-20\" = 0", "\"0-20\" = \"0\""},
      {"\"42-63\" = 2", "\"42-62\" = 2"},
      {"buckets = {", "buckets = ["},
      {"[[shard]]", "[shard]"},
      {"[[shard]]", "[[shard]"},
      {"[reference]", "[[reference]]"},
      {"[reference]", "reference = 5\n[reference]"},
      {"name = \"shard1\"", "name = 1"},
      {"[directory]", "[pool]"},
      {"# cluster", "shard = 3"},
  };
  for (const auto& [from, to] : replacements) {
    std::string text = base;
    const auto at = text.find(from);
    if (at == std::string::npos) continue;
    text.replace(at, from.size(), to);
    out.emplace_back("replaced '" + from + "' with '" + to + "'", text);
  }

  // Random damage: characters deleted, quotes and brackets inserted, lines
  // swapped or dropped.
  std::mt19937 rng(20260410);
  const std::string specials = "\"'[]{}=\\#,\n";
  for (int n = 0; n < 160; ++n) {
    auto lines = base_lines;
    std::string what;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const auto i = rng() % lines.size();
      switch (rng() % 5) {
        case 0:
          if (!lines[i].empty()) lines[i].erase(rng() % lines[i].size(), 1);
          what += "deleted a character; ";
          break;
        case 1:
          lines[i].insert(lines[i].empty() ? 0 : rng() % lines[i].size(), 1, specials[rng() % specials.size()]);
          what += "inserted a special character; ";
          break;
        case 2:
          std::swap(lines[i], lines[rng() % lines.size()]);
          what += "swapped two lines; ";
          break;
        case 3:
          lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
          what += "dropped a line; ";
          break;
        default: {
          const auto j = secret_lines[rng() % secret_lines.size()];
          if (j < lines.size() && !lines[j].empty()) lines[j].resize(rng() % lines[j].size());
          what += "cut a line; ";
          break;
        }
      }
    }
    out.emplace_back("random #" + std::to_string(n) + ": " + what, Join(lines));
  }
  return out;
}

bool Leaks(const std::string& text) {
  return text.find(kPassword) != std::string::npos;
}

TEST(ConfigRedaction, NoMessageOfAMutatedFileHoldsThePassword) {
  const auto configs = MutatedConfigs();
  ASSERT_GE(configs.size(), 300U);
  int rejected = 0;
  for (const auto& [what, text] : configs) {
    SCOPED_TRACE(what);
    try {
      const auto config = shardkit::ParseConfig(text, "mutated.toml");
      for (const auto& shard : config.shards) {
        EXPECT_FALSE(Leaks(shard.dsn.Redacted())) << shard.name << ": " << shard.dsn;
        EXPECT_FALSE(Leaks(shard.AdminDsn().Redacted())) << shard.name << ": " << shard.AdminDsn();
      }
      if (config.reference_dsn) {
        EXPECT_FALSE(Leaks(config.reference_dsn->Redacted())) << *config.reference_dsn;
      }
      if (config.catalog_dsn) {
        EXPECT_FALSE(Leaks(config.catalog_dsn->Redacted())) << *config.catalog_dsn;
      }
    } catch (const shardkit::ConfigError& e) {
      ++rejected;
      EXPECT_FALSE(Leaks(e.what())) << e.what();
      EXPECT_FALSE(Leaks(e.key())) << e.key();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a shardkit::ConfigError: " << e.what();
    }
  }
  // The mutations must mostly break the file, or they test nothing.
  EXPECT_GE(rejected, static_cast<int>(configs.size()) / 2);
}

TEST(ConfigRedaction, TheUnterminatedStringOfTheIssueIsRedacted) {
  // The reported case: an unterminated string on a dsn line makes the TOML
  // parser quote that line.
  const std::string text = std::string("[[shard]]\ndsn = \"host=db port=5432 user=app password=") + kPassword + "\n";
  try {
    (void)shardkit::ParseConfig(text, "shardkit.toml");
    FAIL() << "parsed an unterminated string";
  } catch (const shardkit::ConfigError& e) {
    const std::string message = e.what();
    EXPECT_FALSE(Leaks(message)) << message;
    EXPECT_NE(message.find("password=***"), std::string::npos) << message;  // the excerpt stays useful
    EXPECT_NE(message.find("shardkit.toml"), std::string::npos) << message;
  }
}

TEST(ConfigRedaction, RedactDsnKeepsOnlyPublicValues) {
  using shardkit::RedactDsn;
  // A misspelt or unknown keyword's value may be the password: hidden.
  EXPECT_EQ(RedactDsn("host=h pasword=s3cret user=u"), "host=h pasword=*** user=u");
  EXPECT_EQ(RedactDsn("host=h sslpassword=s3cret sslmode=verify-full"), "host=h sslpassword=*** sslmode=verify-full");
  EXPECT_EQ(RedactDsn("host=h password= 's3 cret' port=5"), "host=h password= *** port=5");
  // Text that does not parse is hidden to the end.
  EXPECT_EQ(RedactDsn("host=h s3cret port=5"), "host=h ***");
  EXPECT_EQ(RedactDsn("host=h password='s3cret port=5"), "host=h password=***");
  // A dbname can be a whole connection string (libpq expands it).
  EXPECT_EQ(RedactDsn("dbname='host=h password=s3cret'"), "dbname=***");
  EXPECT_EQ(RedactDsn("dbname=bookstore"), "dbname=bookstore");
  EXPECT_EQ(RedactDsn("postgresql://bob:s3cret@h/db?sslmode=require&passw0rd=s3cret&application_name=x"),
            "postgresql://bob:***@h/db?sslmode=require&passw0rd=***&application_name=x");
  EXPECT_EQ(RedactDsn("postgresql://h1:5432,h2:5433/db?user=bob"), "postgresql://h1:5432,h2:5433/db?user=bob");
  EXPECT_EQ(RedactDsn("postgres://bob:p%40ss@h/db"), "postgres://bob:***@h/db");
  // Messages (libpq's, a server's) pass through RedactDsn too: only what
  // looks like a password in them is hidden.
  EXPECT_EQ(RedactDsn("could not connect to server: Connection refused"),
            "could not connect to server: Connection refused");
  EXPECT_EQ(RedactDsn("FATAL:  password authentication failed for user \"bob\""),
            "FATAL:  password authentication failed for user \"bob\"");
  EXPECT_EQ(RedactDsn("invalid connection string \"host=h password=s3cret\""),
            "invalid connection string \"host=h password=***\"");
  EXPECT_EQ(RedactDsn("connecting to postgresql://bob:s3cret@h/db failed"),
            "connecting to postgresql://bob:***@h/db failed");
}

// A shardctl process whose stdout and stderr both go to one pipe.
struct Shardctl {
  pid_t pid = 0;
  int output_fd = -1;
};

Shardctl StartShardctl(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> argv_text{SHARDCTL_PATH};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  Shardctl process;
  const int rc = ::posix_spawn(&process.pid, SHARDCTL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw std::runtime_error("cannot start " SHARDCTL_PATH);
  }
  process.output_fd = pipe_fds[0];
  return process;
}

// Everything it wrote, and its exit status.
std::pair<std::string, int> Finish(const Shardctl& process) {
  std::string output;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = ::read(process.output_fd, buffer.data(), buffer.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(process.output_fd);
  int status = 0;
  ::waitpid(process.pid, &status, 0);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

TEST(ConfigRedaction, ShardctlPrintsNoPasswordForAnyMutatedFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("config_redaction_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto configs = MutatedConfigs();
  std::set<int> exit_codes;
  constexpr std::size_t kAtOnce = 8;  // processes in flight (their output is small: no pipe fills)
  for (std::size_t first = 0; first < configs.size(); first += kAtOnce) {
    std::vector<std::pair<std::size_t, Shardctl>> running;
    for (std::size_t i = first; i < std::min(configs.size(), first + kAtOnce); ++i) {
      const auto path = dir / ("mutated" + std::to_string(i) + ".toml");
      {
        std::ofstream out(path, std::ios::binary);
        out << configs[i].second;
      }
      // route reads the whole file but connects to nothing; every other
      // file also with --json, whose errors take the same path.
      std::vector<std::string> args{"--config", path.string(), "route", "4242", "77777"};
      if (i % 2 == 1) args.insert(args.begin(), "--json");
      running.emplace_back(i, StartShardctl(args));
    }
    for (const auto& [i, process] : running) {
      SCOPED_TRACE(configs[i].first);
      const auto [output, code] = Finish(process);
      exit_codes.insert(code);
      EXPECT_FALSE(Leaks(output)) << output;
      EXPECT_TRUE(code == 0 || code == 1 || code == 2) << "exit " << code << ": " << output;
    }
  }
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(exit_codes.contains(2));  // configuration errors were printed, and checked
}

// A typo in the configuration is bad usage: exit 2, naming the key, its
// line and the key meant.
TEST(ConfigRedaction, ShardctlExitsTwoNamingAnUnknownKey) {
  const auto path = std::filesystem::temp_directory_path() / ("unknown_key_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << "[pool]\nmax_size = 4\nmax_sise = 4\n\n[[shard]]\ndsn = \"host=h password=" << kPassword << "\"\n";
  }
  const auto [output, code] = Finish(StartShardctl({"--config", path.string(), "route", "4242"}));
  std::filesystem::remove(path);
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("config pool.max_sise: unknown key (line 3): did you mean \"max_size\"?"), std::string::npos)
      << output;
  EXPECT_FALSE(Leaks(output)) << output;
}

// route --type: a key of another type, bucketed by that type's rule.
TEST(ShardctlRoute, RoutesAKeyOfAnyTypeByItsRule) {
  const auto [output, code] =
      Finish(StartShardctl({"route", "--shards", "2", "--type", "bigint", "5000000001", "4242"}));
  EXPECT_EQ(code, 0) << output;
  const shardkit::BucketId big = shardkit::BucketOfInt8(5'000'000'001);
  EXPECT_NE(output.find(fmt::format("key 5000000001 (bigint): bucket {}, shard {}", shardkit::ToInt(big),
                                    shardkit::ToInt(big) / 32)),
            std::string::npos)
      << output;
  // Inside int32 a bigint buckets as the integer does.
  EXPECT_NE(output.find("key 4242 (bigint): bucket 44, shard 1"), std::string::npos) << output;
  const auto [bad, bad_code] = Finish(StartShardctl({"route", "--shards", "2", "--type", "uuid", "nope"}));
  EXPECT_EQ(bad_code, 2) << bad;
  EXPECT_NE(bad.find("'nope' is not a uuid"), std::string::npos) << bad;
}

}  // namespace
