#include "support/temporary_server.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace shardkit::test {
namespace {

constexpr const char* kBin = "/usr/lib/postgresql/15/bin";

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// PostgreSQL refuses to run as root: run its tools as the postgres user then.
std::string AsPostgres(const std::string& command) {
  if (::geteuid() != 0) return command;
  return "runuser -u postgres -- " + command;
}

}  // namespace

TemporaryServer::TemporaryServer() : port_(FreeLoopbackPort()) {
  directory_ = std::filesystem::temp_directory_path() / fmt::format("shardkit-tmpserver-{}-{}", ::getpid(), port_);
  std::filesystem::create_directories(directory_);
  if (::geteuid() == 0) Run(fmt::format("chown postgres:postgres '{}'", directory_.string()));
  Run(AsPostgres(fmt::format(
      "{}/initdb -D '{}/data' --locale=C --encoding=UTF8 --auth=trust -U postgres --no-sync >'{}/initdb.log' 2>&1",
      kBin, directory_.string(), directory_.string())));
  Start();
  Exec("CREATE ROLE bookstore LOGIN CREATEDB");
  // The sketch extensions of sql/035 are not trusted: the superuser makes
  // them, where installed, as lab/cluster does (template1: the scratch
  // databases made later have them too). `\$` keeps the shell off the quotes.
  for (const char* database : {"template1", "postgres"}) {
    Exec(
        "DO \\$d\\$ DECLARE n text; BEGIN FOR n IN SELECT name FROM pg_available_extensions WHERE name IN "
        "('hll', 'tdigest') LOOP EXECUTE format('CREATE EXTENSION IF NOT EXISTS %I', n); END LOOP; END \\$d\\$",
        database);
  }
}

TemporaryServer::TemporaryServer(const ReplicaOf& of) : port_(FreeLoopbackPort()) {
  directory_ = std::filesystem::temp_directory_path() / fmt::format("shardkit-tmpserver-{}-{}", ::getpid(), port_);
  std::filesystem::create_directories(directory_);
  if (::geteuid() == 0) Run(fmt::format("chown postgres:postgres '{}'", directory_.string()));
  std::string slot = of.name;
  for (char& c : slot) c = c == '-' ? '_' : c;
  Run(
      AsPostgres(fmt::format("{}/pg_basebackup -d 'host=127.0.0.1 port={} user=postgres application_name={}' -D "
                             "'{}/data' --wal-method=stream --checkpoint=fast --no-sync --write-recovery-conf "
                             "--create-slot --slot={} >'{}/basebackup.log' 2>&1",
                             kBin, of.primary->Port(), of.name, directory_.string(), slot, directory_.string())));
  Start();
}

std::unique_ptr<TemporaryServer> TemporaryServer::MakeReplica(const std::string& name) const {
  return std::unique_ptr<TemporaryServer>(new TemporaryServer(ReplicaOf{this, name}));
}

shardkit::Dsn TemporaryServer::AppDsn() const {
  return shardkit::Dsn(fmt::format("host=127.0.0.1 port={} dbname=postgres user=bookstore", port_));
}

void TemporaryServer::Exec(const std::string& sql, const std::string& database) const {
  Run(
      fmt::format("{}/psql -X -q -v ON_ERROR_STOP=1 'host=127.0.0.1 port={} dbname={} user=postgres' -c \"{}\" "
                  ">/dev/null",
                  kBin, port_, database, sql));
}

TemporaryServer::~TemporaryServer() {
  try {
    Stop();
  } catch (const std::exception&) {
  }
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

void TemporaryServer::Start() {
  ClearDeadLock();
  // Already running (a test's tear-down restarts what it stopped).
  if (std::system(AsPostgres(fmt::format("{}/pg_ctl -D '{}/data' status >/dev/null 2>&1", kBin, directory_.string()))
                      .c_str()) == 0) {
    return;
  }
  // hot_standby_feedback: a replica's reads are not cancelled for rows the
  // primary would vacuum away. The socket beside the data directory, not in
  // it: pg_rewind and pg_basebackup copy a data directory's files.
  Run(AsPostgres(
      fmt::format("{}/pg_ctl -D '{}/data' -l '{}/data/server.log' -w -t 30 -o \"-p {} -c listen_addresses=127.0.0.1 "
                  "-c unix_socket_directories='{}' -c fsync=off -c hot_standby_feedback=on -c "
                  "max_prepared_transactions=64\" start >/dev/null",
                  kBin, directory_.string(), directory_.string(), port_, directory_.string())));
}

void TemporaryServer::Kill() {
  // SIGKILL to the postmaster (the first line of postmaster.pid) and its
  // children at once: no shutdown checkpoint, no goodbye to clients, as in a
  // crash (a postmaster that saw a child die first would restart the rest).
  // Root may signal the postgres user's processes; so may that user.
  Run(
      fmt::format("pid=$(head -n 1 '{}/data/postmaster.pid' 2>/dev/null); if [ -n \"$pid\" ]; then "
                  "kids=$(for p in /proc/[0-9]*; do [ \"$(cut -d' ' -f4 $p/stat 2>/dev/null)\" = \"$pid\" ] && "
                  "echo ${{p#/proc/}}; done); kill -KILL $pid $kids; fi; sleep 0.3; true",
                  directory_.string()));
  ClearDeadLock();
}

void TemporaryServer::ClearDeadLock() const {
  // A postmaster killed with SIGKILL stays a zombie where the first process
  // of the machine (a container's) does not reap: pg_ctl and the server
  // itself would count it as running. Its lock files (the data directory's
  // and its socket's, beside the data directory here) go.
  Run(
      fmt::format("d='{}/data'; pid=$(head -n 1 \"$d/postmaster.pid\" 2>/dev/null); "
                  "if [ -n \"$pid\" ]; then state=$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null); "
                  "if [ -z \"$state\" ] || [ \"$state\" = Z ]; then rm -f \"$d/postmaster.pid\" "
                  "'{}'/.s.PGSQL.*.lock; fi; fi; true",
                  directory_.string(), directory_.string()));
}

void TemporaryServer::Stop() {
  ClearDeadLock();
  Run(AsPostgres(
      fmt::format("{}/pg_ctl -D '{}/data' -m fast -w stop >/dev/null 2>&1 || true", kBin, directory_.string())));
}

shardkit::Dsn TemporaryServer::Dsn() const {
  return shardkit::Dsn(fmt::format("host=127.0.0.1 port={} dbname=postgres user=postgres", port_));
}

void TemporaryServer::Run(const std::string& command) const {
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("temporary PostgreSQL server: command failed: " + command + " (see " +
                             directory_.string() + ")");
  }
}

}  // namespace shardkit::test
