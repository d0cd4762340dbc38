#include "load.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>
#include <tuple>

#include "shardkit/core/dsn_format.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/resharding/copy.hpp"

extern char** environ;

namespace shardkit::lab {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kLabMetaDdl = "CREATE TABLE IF NOT EXISTS lab_meta (key text PRIMARY KEY, value text NOT NULL)";
// Children first; one statement so the order does not matter to TRUNCATE.
constexpr const char* kTruncate = "TRUNCATE order_items, orders, customers, books";
constexpr std::int64_t kProgressStep = 4096;
// Secondary indexes of the loaded tables (not the primary keys or other
// constraints), read from the catalog so that the schema in sql/ stays the
// only place that defines them: dropped before the COPY and built again
// after it, inside the same transaction, which is faster than maintaining
// them row by row.
constexpr const char* kSecondaryIndexes =
    "SELECT quote_ident(n.nspname) || '.' || quote_ident(ic.relname), pg_get_indexdef(i.indexrelid) "
    "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
    "JOIN pg_namespace n ON n.oid = t.relnamespace "
    "WHERE t.oid = ANY (ARRAY['books'::regclass, 'customers'::regclass, 'orders'::regclass, "
    "'order_items'::regclass]) "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) "
    "ORDER BY 1";

std::string ScaleText(double scale) {
  return fmt::format("{}", scale);
}

// An order's status follows from its age at the lab date.
const char* StatusOf(UnixSeconds ordered_at) {
  const UnixSeconds age = kLabNow - ordered_at;
  if (age < 3 * 86400) return "placed";
  if (age < 10 * 86400) return "shipped";
  return "delivered";
}

// ------------------------------------------------------------- progress

class Progress {
 public:
  Progress(ProgressMode mode, std::vector<std::string> servers, std::vector<std::int64_t> totals)
      : mode_(Resolve(mode)),
        servers_(std::move(servers)),
        totals_(std::move(totals)),
        done_(servers_.size()),
        phase_(servers_.size()) {
    for (auto& p : phase_) p.store(nullptr);
    for (auto t : totals_) total_ += t;
    start_ = Clock::now();
    if (mode_ != ProgressMode::kNone) thread_ = std::thread([this] { Loop(); });
  }
  ~Progress() { Stop(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(std::size_t server, std::int64_t rows) { done_[server].fetch_add(rows, std::memory_order_relaxed); }
  // What a server does after its rows are sent ("indexes", "ANALYZE", "done").
  void Phase(std::size_t server, const char* phase) {
    phase_[server].store(phase, std::memory_order_relaxed);
    if (mode_ == ProgressMode::kLines) Note(fmt::format("{}: {}", servers_[server], phase));
  }

  void Note(const std::string& message) {
    if (mode_ == ProgressMode::kLines) {
      std::lock_guard lock(mutex_);
      fmt::print(stderr, "load: {}\n", message);
    }
  }

  void Stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (mode_ == ProgressMode::kBar) {
      Draw();
      fmt::print(stderr, "\n");
    }
  }

 private:
  static ProgressMode Resolve(ProgressMode mode) {
    if (mode != ProgressMode::kAuto) return mode;
    return ::isatty(STDERR_FILENO) ? ProgressMode::kBar : ProgressMode::kLines;
  }

  std::int64_t Done() const {
    std::int64_t sum = 0;
    for (const auto& d : done_) sum += d.load(std::memory_order_relaxed);
    return sum;
  }

  std::string Figures() const {
    const std::int64_t done = Done();
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    std::string left = "--";
    if (rate > 0 && done < total_) {
      left = fmt::format("{:.0f} s left", static_cast<double>(total_ - done) / rate);
    } else if (done >= total_) {
      left = fmt::format("{:.1f} s", seconds);
    }
    return fmt::format("{}/{} rows  {} rows/s  {}", Thousands(done), Thousands(total_),
                       Thousands(static_cast<std::int64_t>(rate)), left);
  }

  void Draw() {
    const std::int64_t done = Done();
    const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string per_server;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (const char* phase = phase_[i].load(std::memory_order_relaxed); phase != nullptr) {
        per_server += fmt::format(" {} {}", servers_[i], phase);
        continue;
      }
      const double f = totals_[i] > 0 ? static_cast<double>(done_[i].load()) / static_cast<double>(totals_[i]) : 1.0;
      per_server += fmt::format(" {} {:.0f}%", servers_[i], f * 100);
    }
    fmt::print(stderr, "\rloading [{}{}] {:3.0f}%  {} |{}\x1b[K", std::string(static_cast<std::size_t>(filled), '#'),
               std::string(static_cast<std::size_t>(kWidth - filled), '.'), fraction * 100, Figures(), per_server);
    std::fflush(stderr);
  }

  void Loop() {
    int last_decile = 0;
    std::unique_lock lock(mutex_);
    while (!stopped_) {
      wake_.wait_for(lock, std::chrono::milliseconds(mode_ == ProgressMode::kBar ? 200 : 500));
      if (stopped_) break;
      if (mode_ == ProgressMode::kBar) {
        Draw();
      } else {
        const int decile = total_ > 0 ? static_cast<int>(Done() * 10 / total_) : 10;
        if (decile > last_decile && decile < 10) {
          last_decile = decile;
          fmt::print(stderr, "load: {}% {}\n", decile * 10, Figures());
        }
      }
    }
  }

  ProgressMode mode_;
  std::vector<std::string> servers_;
  std::vector<std::int64_t> totals_;
  std::int64_t total_ = 0;
  std::vector<std::atomic<std::int64_t>> done_;
  std::vector<std::atomic<const char*>> phase_;
  Clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopped_ = false;
  std::thread thread_;
};

// ------------------------------------------------------------- rows

// Which rows go to one server: indexes into the dataset's vectors.
struct ServerRows {
  std::string name;
  std::vector<std::uint32_t> customers;
  std::vector<std::uint32_t> orders;
  std::int64_t items = 0;
  [[nodiscard]] std::int64_t Total(const Dataset& data) const {
    return static_cast<std::int64_t>(data.books.size() + customers.size() + orders.size()) + items;
  }
};

// Counts rows into the progress every kProgressStep rows.
class Counter {
 public:
  Counter(Progress& progress, std::size_t server) : progress_(progress), server_(server) {}
  ~Counter() { Flush(); }
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;
  void Tick() {
    if (++pending_ == kProgressStep) Flush();
  }
  void Flush() {
    if (pending_ > 0) progress_.Add(server_, pending_);
    pending_ = 0;
  }

 private:
  Progress& progress_;
  std::size_t server_;
  std::int64_t pending_ = 0;
};

// COPY through shardkit::CopyWriter: fields formatted straight into the
// COPY buffer, in the table's column order (examples/bookstore-service/sql/002_bookstore_schema.sql).
// The generated text (titles) needs no escaping, but goes through the
// escaping Field() like any text.
void CopyBooks(pqxx::transaction_base& tx, const Dataset& data, Counter& counter) {
  CopyWriter out{tx, "books"};
  const auto& categories = Categories();
  for (const auto& b : data.books) {
    out.Row(b.book_id, b.title, categories[static_cast<std::size_t>(b.category)], CopyFixed{b.price_cents, 2});
    counter.Tick();
  }
  out.Complete();
}

// "Customer 42" and "customer42@example.com" without a std::string each.
template <std::size_t N>
std::string_view Compose(char (&buffer)[N], std::string_view prefix, CustomerId id, std::string_view suffix) {
  char* p = std::copy(prefix.begin(), prefix.end(), buffer);
  p = std::to_chars(p, buffer + N, ToInt(id)).ptr;
  p = std::copy(suffix.begin(), suffix.end(), p);
  return {buffer, static_cast<std::size_t>(p - buffer)};
}

void CopyCustomers(pqxx::transaction_base& tx, const Dataset& data, const std::vector<std::uint32_t>& rows,
                   Counter& counter) {
  CopyWriter out{tx, "customers"};
  char name[32];
  char email[48];
  for (auto i : rows) {
    const Customer& c = data.customers[i];
    out.Row(c.customer_id, c.bucket, Compose(name, "Customer ", c.customer_id, ""),
            Compose(email, "customer", c.customer_id, "@example.com"), CopyTimestamp(c.created_at));
    counter.Tick();
  }
  out.Complete();
}

std::string OrderLine(const Order& o) {
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", o.customer_id, o.bucket, o.order_id, FormatTimestamp(o.ordered_at),
                     StatusOf(o.ordered_at), FormatCents(o.total_cents));
}

void CopyOrders(pqxx::transaction_base& tx, const Dataset& data, const std::vector<std::uint32_t>& rows,
                Counter& counter, const std::string& table = "orders") {
  CopyWriter out{tx, table};
  for (auto i : rows) {
    const Order& o = data.orders[i];
    out.Row(o.customer_id, o.bucket, o.order_id, CopyTimestamp(o.ordered_at), std::string_view(StatusOf(o.ordered_at)),
            CopyFixed{o.total_cents, 2});
    counter.Tick();
  }
  out.Complete();
}

void CopyItems(pqxx::transaction_base& tx, const Dataset& data, const std::vector<std::uint32_t>& rows,
               Counter& counter) {
  CopyWriter out{tx, "order_items"};
  for (auto i : rows) {
    const Order& o = data.orders[i];
    for (std::uint32_t k = 0; k < o.item_count; ++k) {
      const OrderItem& item = data.items[o.first_item + k];
      out.Row(o.customer_id, o.bucket, o.order_id, static_cast<int>(k + 1), item.book_id, item.quantity,
              CopyFixed{item.unit_price_cents, 2});
      counter.Tick();
    }
  }
  out.Complete();
}

std::string NewLoadId() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return fmt::format("{}-{}", std::chrono::duration_cast<std::chrono::milliseconds>(now).count(), ::getpid());
}

std::string WallClockNow() {
  const auto now = std::chrono::system_clock::now();
  return FormatTimestamp(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
}

ServerLoad LoadServer(pqxx::connection_base& connection, const Dataset& data, const ServerRows& rows,
                      const std::string& load_id, Progress& progress, std::size_t server_index) {
  ServerLoad result;
  result.server = rows.name;
  const auto start = Clock::now();
  {
    Counter counter(progress, server_index);
    pqxx::work tx{connection, "bookstore lab load"};
    tx.exec0(kLabMetaDdl);
    tx.exec0(kTruncate);
    // COPY into fenced tables: the fence's per-row check and the visibility
    // policies are off inside this transaction only; the end checks that
    // every row belongs to a bucket this shard owns (sql/010).
    tx.exec("SELECT shardkit_bulk_load_begin()");
    tx.exec0("SET LOCAL maintenance_work_mem = '256MB'");
    std::vector<std::string> index_definitions;
    for (const auto& row : tx.exec(kSecondaryIndexes)) {
      tx.exec0("DROP INDEX " + row[0].as<std::string>());
      index_definitions.push_back(row[1].as<std::string>());
    }
    CopyBooks(tx, data, counter);
    CopyCustomers(tx, data, rows.customers, counter);
    CopyOrders(tx, data, rows.orders, counter);
    CopyItems(tx, data, rows.orders, counter);
    counter.Flush();
    progress.Phase(server_index, "indexes");
    const auto index_start = Clock::now();
    for (const auto& definition : index_definitions) tx.exec0(definition);
    result.index_time = Micros(Clock::now() - index_start);
    tx.exec("SELECT shardkit_bulk_load_end()");
    tx.exec0("DELETE FROM lab_meta");
    const std::vector<std::pair<std::string, std::string>> meta{
        {"scale", ScaleText(data.params.scale)},
        {"seed", std::to_string(data.params.seed)},
        {"generator", std::to_string(kGeneratorVersion)},
        {"load_id", load_id},
        {"loaded_at", WallClockNow()},
        {"lab_now", FormatTimestamp(kLabNow)},
    };
    for (const auto& [key, value] : meta) {
      tx.exec_params0("INSERT INTO lab_meta (key, value) VALUES ($1, $2)", key, value);
    }
    progress.Phase(server_index, "commit");
    tx.commit();
  }
  result.copy_time = Micros(Clock::now() - start);
  progress.Phase(server_index, "ANALYZE");
  const auto analyze_start = Clock::now();
  {
    pqxx::nontransaction tx{connection};
    // VACUUM too: it sets the visibility map, so the reports' probes of
    // order_items (examples/bookstore-service/sql/030) are index-only scans from the start.
    tx.exec0("VACUUM (ANALYZE) books, customers, orders, order_items");
  }
  result.analyze_time = Micros(Clock::now() - analyze_start);
  progress.Phase(server_index, "done");
  result.books = static_cast<std::int64_t>(data.books.size());
  result.customers = static_cast<std::int64_t>(rows.customers.size());
  result.orders = static_cast<std::int64_t>(rows.orders.size());
  result.order_items = rows.items;
  return result;
}

std::optional<LabMeta> ReadMeta(pqxx::connection_base& connection) {
  pqxx::nontransaction tx{connection};
  if (tx.exec1("SELECT to_regclass('lab_meta') IS NULL")[0].as<bool>()) return std::nullopt;
  const pqxx::result rows = tx.exec("SELECT key, value FROM lab_meta");
  if (rows.empty()) return std::nullopt;
  LabMeta meta;
  for (const auto& row : rows) {
    const auto key = row[0].as<std::string>();
    const auto value = row[1].as<std::string>();
    if (key == "scale") meta.scale = std::stod(value);
    if (key == "seed") meta.seed = std::stoull(value);
    if (key == "generator") meta.generator = std::stoi(value);
    if (key == "load_id") meta.load_id = value;
    if (key == "loaded_at") meta.loaded_at = value;
  }
  return meta;
}

// Runs argv (argv[0] looked up in PATH) and waits; returns the exit status.
int RunProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0) {
    throw Error(
        fmt::format("cannot run {}: {}; install postgresql-client-15 (scripts/bootstrap)", args[0], std::strerror(rc)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(fmt::format("waiting for {} failed: {}", args[0], std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::int64_t LoadReport::Rows() const noexcept {
  std::int64_t n = 0;
  for (const auto& s : servers) n += s.Rows();
  return n;
}

double LoadReport::RowsPerSecond() const noexcept {
  const double seconds = static_cast<double>(load_time.count()) / 1e6;
  return seconds > 0 ? static_cast<double>(Rows()) / seconds : 0;
}

LoadReport LoadDataset(Lab& lab, const Dataset& data, const LoadOptions& options) {
  const int shards = lab.ShardCount();
  std::vector<ServerRows> rows(static_cast<std::size_t>(shards) + 1);
  for (int s = 0; s < shards; ++s) rows[static_cast<std::size_t>(s)].name = lab.ShardLabel(ShardId{s});
  ServerRows& reference = rows.back();
  reference.name = "reference";
  const BucketShardResolver& resolver = lab.Resolver();
  for (std::uint32_t i = 0; i < data.customers.size(); ++i) {
    rows[static_cast<std::size_t>(resolver.ShardFor(data.customers[i].customer_id))].customers.push_back(i);
    reference.customers.push_back(i);
  }
  for (std::uint32_t i = 0; i < data.orders.size(); ++i) {
    const Order& o = data.orders[i];
    ServerRows& shard = rows[static_cast<std::size_t>(resolver.ShardFor(o.customer_id))];
    shard.orders.push_back(i);
    shard.items += o.item_count;
    reference.orders.push_back(i);
    reference.items += o.item_count;
  }

  LoadReport report;
  report.params = data.params;
  report.load_id = NewLoadId();
  std::vector<std::string> names;
  std::vector<std::int64_t> totals;
  for (const auto& r : rows) {
    names.push_back(r.name);
    totals.push_back(r.Total(data));
  }

  // Connections first, so an unreachable server fails before any work.
  std::vector<ConnectionPool::Lease> leases;
  for (int s = 0; s < shards; ++s) {
    leases.push_back(resolver.Pool(ShardId{s}).Acquire(Clock::now() + std::chrono::seconds(10)));
  }
  pqxx::connection& reference_connection = lab.Reference();

  Progress progress(options.progress, names, totals);
  std::vector<ServerLoad> results(rows.size());
  std::vector<std::exception_ptr> errors(rows.size());
  const auto start = Clock::now();
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      pqxx::connection_base& connection =
          i < static_cast<std::size_t>(shards) ? leases[i].Connection() : reference_connection;
      threads.emplace_back([&, i, conn = &connection] {
        try {
          results[i] = LoadServer(*conn, data, rows[i], report.load_id, progress, i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  report.load_time = Micros(Clock::now() - start);
  progress.Stop();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      throw Error(
          fmt::format("loading {} failed: {} (its previous data is unchanged; the other servers may hold "
                      "the new load, so the next run loads again)",
                      rows[i].name, e.what()));
    }
  }
  report.servers = std::move(results);
  return report;
}

std::vector<std::optional<LabMeta>> ReadLabMeta(Lab& lab) {
  std::vector<std::optional<LabMeta>> metas;
  for (int s = 0; s < lab.ShardCount(); ++s) {
    auto lease = lab.Resolver().Pool(ShardId{s}).Acquire(Clock::now() + std::chrono::seconds(5));
    metas.push_back(ReadMeta(lease.Connection()));
  }
  metas.push_back(ReadMeta(lab.Reference()));
  return metas;
}

bool IsLoaded(Lab& lab, const DatasetParams& params, std::string* why) {
  const auto metas = ReadLabMeta(lab);
  auto say = [&](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const std::string server = i + 1 == metas.size() ? "reference" : lab.ShardLabel(static_cast<ShardId>(i));
    if (!metas[i]) return say(fmt::format("{} holds no lab data", server));
    const LabMeta& m = *metas[i];
    if (ScaleText(m.scale) != ScaleText(params.scale) || m.seed != params.seed) {
      return say(fmt::format("{} holds scale {} seed {}, not scale {} seed {}", server, ScaleText(m.scale), m.seed,
                             ScaleText(params.scale), params.seed));
    }
    if (m.generator != kGeneratorVersion) {
      return say(fmt::format("{} holds data of generator version {}, not {}", server, m.generator, kGeneratorVersion));
    }
    if (m.load_id != metas[0]->load_id) {
      return say(fmt::format("{} and shard0 hold different loads (an interrupted load?)", server));
    }
  }
  if (why != nullptr) {
    *why = fmt::format("scale {} seed {} loaded at {}", ScaleText(params.scale), params.seed, metas[0]->loaded_at);
  }
  return true;
}

LoadReport GenerateAndLoad(Lab& lab, const DatasetParams& params, const LoadOptions& options) {
  const auto start = Clock::now();
  const Dataset data = GenerateDataset(params);
  const auto generated = Micros(Clock::now() - start);
  LoadReport report = LoadDataset(lab, data, options);
  report.generate_time = generated;
  return report;
}

std::optional<LoadReport> EnsureLoaded(Lab& lab, const DatasetParams& params, const LoadOptions& options,
                                       std::string* status) {
  std::string why;
  if (IsLoaded(lab, params, &why)) {
    if (status != nullptr) *status = "data already loaded: " + why;
    return std::nullopt;
  }
  if (status != nullptr) *status = "loading: " + why;
  return GenerateAndLoad(lab, params, options);
}

DemoResult DescribeLoad(const LoadReport& report) {
  DemoResult r;
  r.name = "load";
  TextTable table({{"server", TextTable::Align::kLeft},
                   {"books"},
                   {"customers"},
                   {"orders"},
                   {"order_items"},
                   {"rows"},
                   {"load ms"},
                   {"rows/s"},
                   {"of which indexes ms"},
                   {"ANALYZE ms"}});
  Json servers = Json::array();
  for (const auto& s : report.servers) {
    const double seconds = static_cast<double>(s.copy_time.count()) / 1e6;
    const auto rate = static_cast<std::int64_t>(seconds > 0 ? static_cast<double>(s.Rows()) / seconds : 0);
    table.AddRow({s.server, Thousands(s.books), Thousands(s.customers), Thousands(s.orders), Thousands(s.order_items),
                  Thousands(s.Rows()), Ms(s.copy_time), Thousands(rate), Ms(s.index_time), Ms(s.analyze_time)});
    servers.push_back({{"server", s.server},
                       {"books", s.books},
                       {"customers", s.customers},
                       {"orders", s.orders},
                       {"order_items", s.order_items},
                       {"rows", s.Rows()},
                       {"copy_ms", MsValue(s.copy_time)},
                       {"rows_per_s", rate},
                       {"index_ms", MsValue(s.index_time)},
                       {"analyze_ms", MsValue(s.analyze_time)}});
  }
  r.text = fmt::format("load: scale {}, seed {}, lab date {} (generated in {} ms)\n", ScaleText(report.params.scale),
                       report.params.seed, FormatTimestamp(kLabNow), Ms(report.generate_time));
  r.text += table.Render();
  r.text += fmt::format(
      "{} rows on {} servers in {} ms: {} rows/s (servers in parallel, one thread each; TRUNCATE, "
      "COPY via shardkit::CopyWriter and index rebuild in one transaction per server)\n",
      Thousands(report.Rows()), report.servers.size(), Ms(report.load_time),
      Thousands(static_cast<std::int64_t>(report.RowsPerSecond())));
  r.figures = {{"scale", report.params.scale},
               {"seed", report.params.seed},
               {"load_id", report.load_id},
               {"generate_ms", MsValue(report.generate_time)},
               {"load_ms", MsValue(report.load_time)},
               {"rows", report.Rows()},
               {"rows_per_s", report.RowsPerSecond()},
               {"servers", servers}};
  // The shards' rows must add up to the reference's.
  std::int64_t shard_customers = 0, shard_orders = 0, shard_items = 0;
  for (std::size_t i = 0; i + 1 < report.servers.size(); ++i) {
    shard_customers += report.servers[i].customers;
    shard_orders += report.servers[i].orders;
    shard_items += report.servers[i].order_items;
  }
  if (!report.servers.empty()) {
    const ServerLoad& ref = report.servers.back();
    r.Expect("load.shards_add_up",
             shard_customers == ref.customers && shard_orders == ref.orders && shard_items == ref.order_items,
             fmt::format("customers {}/{}, orders {}/{}, order_items {}/{}", shard_customers, ref.customers,
                         shard_orders, ref.orders, shard_items, ref.order_items));
  }
  return r;
}

double CopyComparison::LabRowsPerSecond() const noexcept {
  return lab_copy.count() > 0 ? static_cast<double>(rows) * 1e6 / static_cast<double>(lab_copy.count()) : 0;
}

double CopyComparison::PsqlRowsPerSecond() const noexcept {
  const auto net = psql_copy - psql_baseline;
  return net.count() > 0 ? static_cast<double>(rows) * 1e6 / static_cast<double>(net.count()) : 0;
}

CopyComparison CompareWithPsql(Lab& lab, const Dataset& data, const std::filesystem::path& work_dir) {
  CopyComparison c;
  c.rows = static_cast<std::int64_t>(data.orders.size());
  std::filesystem::create_directories(work_dir);
  const auto file = std::filesystem::absolute(work_dir / "orders.copy");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    std::string buffer;
    for (const auto& o : data.orders) {
      buffer += OrderLine(o);
      if (buffer.size() > (1 << 20)) {
        out << buffer;
        buffer.clear();
      }
    }
    out << buffer;
    if (!out) throw Error(fmt::format("cannot write {}", file.string()));
  }
  // A plain table shaped like orders (defaults and CHECKs, no indexes), so
  // both sides measure the COPY itself rather than index maintenance;
  // created and rolled back in each side's own transaction.
  constexpr const char* kProbe = "CREATE TABLE lab_copy_probe (LIKE orders INCLUDING DEFAULTS INCLUDING CONSTRAINTS)";

  // The lab's way: CopyWriter into the same kind of table, in a transaction
  // that is rolled back.
  {
    pqxx::connection& ref = lab.Reference();
    pqxx::work tx{ref};
    tx.exec0(kProbe);
    std::vector<std::uint32_t> all(data.orders.size());
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    Progress quiet(ProgressMode::kNone, {"reference"}, {c.rows});
    Counter counter(quiet, 0);
    const auto start = Clock::now();
    CopyOrders(tx, data, all, counter, "lab_copy_probe");
    c.lab_copy = Micros(Clock::now() - start);
    tx.abort();
  }

  // psql's way, the same statement and rows; the baseline is the same psql
  // session without the \copy (start-up, connection, CREATE).
  const Dsn dsn = lab.ReferenceDsn();
  auto timed = [&](bool with_copy) {
    std::vector<std::string> args{"psql", "-X",    "-q", "-v",  "ON_ERROR_STOP=1", "-d", dsn.Reveal(),
                                  "-c",   "BEGIN", "-c", kProbe};
    if (with_copy) args.insert(args.end(), {"-c", fmt::format("\\copy lab_copy_probe FROM '{}'", file.string())});
    args.insert(args.end(), {"-c", "ROLLBACK"});
    const auto start = Clock::now();
    if (const int rc = RunProcess(args); rc != 0) {
      throw Error(fmt::format("psql exited with status {} against the reference server ({})", rc, dsn));
    }
    return Micros(Clock::now() - start);
  };
  c.psql_baseline = timed(false);
  c.psql_copy = timed(true);
  c.psql_baseline = std::min(c.psql_baseline, timed(false));
  std::error_code ignored;
  std::filesystem::remove(file, ignored);  // ~70 MB at scale 1; written again on every comparison
  return c;
}

DemoResult DescribeCopyComparison(const CopyComparison& c) {
  DemoResult r;
  r.name = "copy-vs-psql";
  const double ratio = c.PsqlRowsPerSecond() > 0 ? c.LabRowsPerSecond() / c.PsqlRowsPerSecond() : 0;
  r.text = fmt::format(
      "COPY of the same {} orders rows into an index-less copy of the orders table (reference server, rolled back):\n"
      "  shardkit CopyWriter: {} ms, {} rows/s\n"
      "  psql \\copy:          {} ms, {} rows/s (psql run {} ms minus {} ms start-up without the \\copy)\n"
      "  ratio lab/psql:      {:.2f}\n",
      Thousands(c.rows), Ms(c.lab_copy), Thousands(static_cast<std::int64_t>(c.LabRowsPerSecond())),
      Ms(c.psql_copy - c.psql_baseline), Thousands(static_cast<std::int64_t>(c.PsqlRowsPerSecond())), Ms(c.psql_copy),
      Ms(c.psql_baseline), ratio);
  r.figures = {{"rows", c.rows},
               {"lab_copy_ms", MsValue(c.lab_copy)},
               {"lab_rows_per_s", c.LabRowsPerSecond()},
               {"psql_ms", MsValue(c.psql_copy)},
               {"psql_baseline_ms", MsValue(c.psql_baseline)},
               {"psql_rows_per_s", c.PsqlRowsPerSecond()},
               {"ratio_lab_to_psql", ratio}};
  return r;
}

}  // namespace shardkit::lab
