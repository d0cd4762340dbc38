#include "support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include <shardkit/errors.hpp>
#include <shardkit/routing/directory.hpp>
#include <shardkit/routing/ownership.hpp>
#include <shardkit/schema/migrate.hpp>

extern char** environ;

namespace bookstore::test {
namespace {

void Exec(const shardkit::Dsn& dsn, const std::string& sql) {
  // Separate statements: CREATE/DROP DATABASE run outside a transaction block.
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  tx.exec(sql);
}

std::string TomlString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string BucketArray(const std::vector<shardkit::BucketId>& buckets) {
  std::string text = "{";
  for (std::size_t i = 0; i < buckets.size(); ++i) text += (i ? "," : "") + std::to_string(shardkit::ToInt(buckets[i]));
  return text + "}";
}

std::string NowIso() {
  pqxx::connection c{LoadClusterConfig().shards.front().dsn.Reveal()};
  pqxx::nontransaction tx{c};
  return tx.exec1("SELECT to_json(date_trunc('second', now())) #>> '{}'")[0].as<std::string>();
}

// The data set: the rows of the buckets in $1 ("{0,1,...}"); $2 is the anchor.
struct SeedStatement {
  const char* sql;
  int parameters;  // $1 only, or $1 and $2
};
constexpr SeedStatement kSeed[] = {
    {"INSERT INTO books (book_id, title, category, price) "
     "SELECT b, 'Book ' || b, (ARRAY['art','crime','fantasy','history','science','travel'])[1 + b % 6], "
     "       (4 + (b * 37) % 40) + 0.99 "
     "FROM generate_series(1, 60) AS b "
     "WHERE $1::text IS NOT NULL",
     1},
    {"INSERT INTO customers (customer_id, bucket, name, email) "
     "SELECT c, bucket_of(c), 'Customer ' || c, 'customer' || c || '@example.com' "
     "FROM generate_series(1, 300) AS c WHERE bucket_of(c) = ANY($1::smallint[])",
     1},
    // Customers 1..299 (300 has no orders); order o was placed o % 60 days
    // and 12 hours before the anchor.
    {"INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
     "SELECT c, bucket_of(c), o, $2::timestamptz - make_interval(days => o % 60) - interval '12 hours', 'placed', 0 "
     "FROM generate_series(1, 1200) AS o, LATERAL (SELECT 1 + (o * 7) % 299 AS c) AS pick "
     "WHERE bucket_of(c) = ANY($1::smallint[])",
     2},
    {"INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
     "SELECT o.customer_id, o.bucket, o.order_id, l, bk.book_id, 1 + (o.order_id + l) % 4, bk.price "
     "FROM orders o CROSS JOIN LATERAL generate_series(1, 1 + (o.order_id % 3)::int) AS l "
     "JOIN books bk ON bk.book_id = 1 + ((o.order_id * o.order_id + l * 31) % 60) "
     "WHERE $1::text IS NOT NULL",
     1},
    {"UPDATE orders o SET total = s.total FROM ("
     "  SELECT customer_id, order_id, sum(quantity * unit_price) AS total FROM order_items GROUP BY 1, 2) s "
     "WHERE s.customer_id = o.customer_id AND s.order_id = o.order_id AND $1::text IS NOT NULL",
     1},
};

}  // namespace

shardkit::ClusterConfig LoadClusterConfig() {
  const char* path = std::getenv("SHARDKIT_CONFIG");
  if (path == nullptr || *path == '\0') {
    throw std::runtime_error(
        "SHARDKIT_CONFIG is not set: start the local cluster (lab/cluster start) and "
        "export SHARDKIT_CONFIG=$PWD/.cluster/shardkit.toml (scripts/test does)");
  }
  auto config = shardkit::LoadConfig(path);
  if (!config.reference_dsn) throw std::runtime_error(std::string(path) + " has no [reference] server");
  return config;
}

shardkit::Dsn WithDatabase(const shardkit::Dsn& dsn, const std::string& database) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(dsn.Reveal().c_str(), &error);
  if (options == nullptr) {
    const std::string message = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    throw std::runtime_error("cannot parse " + dsn.Redacted() + ": " + message);
  }
  std::string out;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    const std::string keyword = o->keyword;
    if (keyword != "dbname" && o->val == nullptr) continue;
    std::string value = keyword == "dbname" ? database : o->val;
    std::string quoted;
    for (const char c : value) {
      if (c == '\\' || c == '\'') quoted += '\\';
      quoted += c;
    }
    out += (out.empty() ? "" : " ") + keyword + "='" + quoted + "'";
  }
  PQconninfoFree(options);
  return shardkit::Dsn(std::move(out));
}

unsigned short ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);  // never listened on: connecting is refused
  return ntohs(address.sin_port);
}

ScratchBookstore::ScratchBookstore(const std::string& prefix) : base_(LoadClusterConfig()) {
  database_ = prefix + "_" + std::to_string(::getpid());
  dir_ = std::filesystem::temp_directory_path() / database_;
  std::filesystem::create_directories(dir_);
  config_ = base_;
  config_.directory = shardkit::BucketDirectory::EvenSplit(static_cast<int>(base_.shards.size()));

  // Empty databases: one per shard, one on the reference server, and a
  // catalog (on the catalog's instance, else the reference server's).
  std::vector<shardkit::Dsn*> dsns;
  for (auto& shard : config_.shards) dsns.push_back(&shard.dsn);
  dsns.push_back(&*config_.reference_dsn);
  config_.catalog_dsn = base_.catalog_dsn.value_or(*base_.reference_dsn);
  dsns.push_back(&*config_.catalog_dsn);
  for (std::size_t i = 0; i < dsns.size(); ++i) {
    const std::string name = i + 1 == dsns.size() ? database_ + "_catalog" : database_;
    Exec(*dsns[i], "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    Exec(*dsns[i], "CREATE DATABASE " + name);
    *dsns[i] = WithDatabase(*dsns[i], name);
  }
  // Bucket moves use the superuser's connection to the same databases;
  // the shards' replicas (if any) copy them.
  for (auto& shard : config_.shards) {
    if (!shard.admin_dsn.empty()) shard.admin_dsn = WithDatabase(shard.admin_dsn, database_);
    for (auto& replica : shard.replicas) {
      replica.dsn = WithDatabase(replica.dsn, database_);
    }
  }
  // The schema as `shardctl migrate --sql-dir sql` applies it: shardkit's
  // own migrations, then the Bookstore's (this example's sql/).
  for (const shardkit::MigrationSet& set : shardkit::ClusterMigrations(BOOKSTORE_SQL_DIR)) {
    shardkit::Migrator migrator(set, shardkit::MigrationServers(config_));
    const shardkit::MigrationReport report = migrator.Apply();
    if (report.Ok()) continue;
    std::string why;
    for (const auto& left : report.left_behind) why += "; " + left;
    for (const auto& step : report.applied) {
      if (!step.ok) why += "; " + step.server + " version " + std::to_string(step.version) + ": " + step.error;
    }
    throw std::runtime_error("migrating " + database_ + " (" + std::string(set.Name()) + ") failed" + why);
  }
  // The directory lives in the catalog, as on a real cluster.
  {
    pqxx::connection catalog{config_.catalog_dsn->Reveal()};
    shardkit::StoreDirectory(catalog, config_.directory);
  }
  config_.directory_source = shardkit::DirectorySource::kCatalog;

  const std::string anchor = NowIso();
  const auto seed = [&](const shardkit::Dsn& dsn, const std::string& owned) {
    pqxx::connection c{dsn.Reveal()};
    pqxx::work tx{c};
    for (const auto& [sql, parameters] : kSeed) {
      if (parameters == 2) {
        tx.exec_params(sql, owned, anchor);
      } else {
        tx.exec_params(sql, owned);
      }
    }
    tx.commit();
  };
  for (std::size_t s = 0; s < config_.shards.size(); ++s) {
    seed(config_.shards[s].dsn, BucketArray(config_.directory.BucketsOf(shardkit::ShardId{static_cast<int>(s)})));
  }
  std::vector<shardkit::BucketId> all;
  for (shardkit::BucketId b : shardkit::AllBuckets()) all.push_back(b);
  seed(*config_.reference_dsn, BucketArray(all));
  // Each shard owns its buckets (the fence), as lab/cluster start does, so
  // that buckets can move.
  (void)shardkit::EnrollShards(config_);
}

ScratchBookstore::~ScratchBookstore() {
  std::vector<std::pair<shardkit::Dsn, std::string>> databases;
  for (const auto& shard : base_.shards) databases.emplace_back(shard.dsn, database_);
  databases.emplace_back(*base_.reference_dsn, database_);
  databases.emplace_back(base_.catalog_dsn.value_or(*base_.reference_dsn), database_ + "_catalog");
  for (const auto& [dsn, name] : databases) {
    try {
      Exec(dsn, "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    } catch (const std::exception&) {
      // The next run drops it.
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

const shardkit::Dsn& ScratchBookstore::ShardDsn(int shard) const {
  return config_.shards.at(static_cast<std::size_t>(shard)).dsn;
}

std::filesystem::path ScratchBookstore::WriteConfig(const std::string& file_name,
                                                    std::optional<std::pair<int, std::string>> replace_dsn) const {
  std::ostringstream out;
  out << "# written by the bookstore-service tests\n"
      << "[pool]\nmax_size = 4\nmax_waiters = 64\nconnect_timeout_ms = 2000\nacquire_timeout_ms = 2000\n\n";
  for (std::size_t s = 0; s < config_.shards.size(); ++s) {
    std::string dsn = config_.shards[s].dsn.Reveal();
    if (replace_dsn && replace_dsn->first == static_cast<int>(s)) dsn = replace_dsn->second;
    out << "[[shard]]\nname = " << TomlString(config_.shards[s].name) << "\ndsn = " << TomlString(dsn) << "\n";
    if (!config_.shards[s].replicas.empty()) {
      out << "replicas = [";
      for (const auto& replica : config_.shards[s].replicas) out << TomlString(replica.dsn.Reveal()) << ", ";
      out << "]\n";
    }
    out << "\n";
  }
  out << "[reference]\ndsn = " << TomlString(config_.reference_dsn->Reveal()) << "\n\n"
      << "[catalog]\ndsn = " << TomlString(config_.catalog_dsn->Reveal()) << "\n\n"
      << "[directory]\nsource = \"catalog\"\n";
  const auto path = dir_ / file_name;
  std::ofstream(path) << out.str();
  return path;
}

int ScratchBookstore::CustomerOn(int shard, int nth) const {
  for (int c = 1; c < kCustomers; ++c) {
    if (config_.directory.ShardFor(shardkit::CustomerId{c}) == shardkit::ShardId{shard} && nth-- == 0) return c;
  }
  throw std::runtime_error("no such customer on shard " + std::to_string(shard));
}

void ScratchBookstore::MirrorToReference(int customer_id, std::int64_t order_id) const {
  const auto shard = config_.directory.ShardFor(shardkit::CustomerId{customer_id});
  pqxx::connection from{ShardDsn(shardkit::ToInt(shard)).Reveal()};
  pqxx::connection to{ReferenceDsn().Reveal()};
  pqxx::read_transaction read{from};
  pqxx::work write{to};
  const auto order = read.exec_params1(
      "SELECT bucket, ordered_at::text, status, total::text FROM orders WHERE customer_id = $1 AND order_id = $2",
      customer_id, order_id);
  write.exec_params(
      "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
      "VALUES ($1, $2, $3, $4::timestamptz, $5, $6::numeric)",
      customer_id, order[0].as<int>(), order_id, order[1].as<std::string>(), order[2].as<std::string>(),
      order[3].as<std::string>());
  for (const auto& item : read.exec_params("SELECT line_no, book_id, quantity, unit_price::text FROM order_items "
                                           "WHERE customer_id = $1 AND order_id = $2",
                                           customer_id, order_id)) {
    write.exec_params(
        "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7::numeric)",
        customer_id, order[0].as<int>(), order_id, item[0].as<int>(), item[1].as<std::int64_t>(), item[2].as<int>(),
        item[3].as<std::string>());
  }
  write.commit();
}

Process::Process(std::vector<std::string> argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " + argv[0]);
  }
  reader_ = std::thread([this, fd = fds[0]] {
    std::array<char, 4096> buffer{};
    while (true) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex_);
      if (n <= 0) {
        eof_ = true;
        changed_.notify_all();
        break;
      }
      output_.append(buffer.data(), static_cast<std::size_t>(n));
      changed_.notify_all();
    }
    ::close(fd);
  });
}

Process::~Process() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    (void)WaitForExit(std::chrono::seconds(10));
  }
  if (reader_.joinable()) reader_.join();
}

bool Process::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return output_.find(text) != std::string::npos || eof_; }) &&
         output_.find(text) != std::string::npos;
}

std::string Process::Output() const {
  std::lock_guard lock(mutex_);
  return output_;
}

void Process::Signal(int signal_number) const {
  ::kill(pid_, signal_number);
}

std::optional<int> Process::WaitForExit(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Everything it wrote is read before its status is reported.
      std::unique_lock lock(mutex_);
      changed_.wait_until(lock, std::max(deadline, std::chrono::steady_clock::now() + 5s), [&] { return eof_; });
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Exit is noticed through the pipe's end of file, else re-checked soon.
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 20ms, [&] { return eof_; });
  }
}

Service::Service(const std::filesystem::path& config, std::vector<std::string> extra_args)
    : process_([&] {
        std::vector<std::string> argv{BOOKSTORE_SERVICE_PATH, "--config", config.string(), "--listen", "127.0.0.1:0"};
        argv.insert(argv.end(), extra_args.begin(), extra_args.end());
        return argv;
      }()) {
  if (!process_.WaitForOutput("listening on http://", 60s)) {
    throw std::runtime_error("bookstore-service did not start:\n" + process_.Output());
  }
  static const std::regex kListening(R"(listening on http://127\.0\.0\.1:(\d+))");
  std::smatch m;
  const std::string output = process_.Output();
  if (!std::regex_search(output, m, kListening)) throw std::runtime_error("no port in: " + output);
  port_ = static_cast<unsigned short>(std::stoi(m[1].str()));
}

}  // namespace bookstore::test
