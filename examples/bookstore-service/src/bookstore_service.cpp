#include "bookstore_service.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/host_name.hpp>
#include <charconv>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <set>
#include <shardkit/errors.hpp>
#include <shardkit/pg/server_error.hpp>
#include <shardkit/queries/merge.hpp>
#include <shardkit/routing/read_token.hpp>
#include <shardkit/sql/sql_options.hpp>
#include <shardkit/sql/sql_result.hpp>
#include <string_view>
#include <vector>

#include "errors.hpp"

namespace bookstore {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using shardkit::CustomerId;
using shardkit::ShardId;
using shardkit::ToInt;

constexpr int kMaxItems = 100;
constexpr int kMaxQuantity = 1000;
constexpr int kMaxTopBooks = 100;  // the largest k of /reports/top-books
// Read-your-writes across requests: a POST answers with the read token of
// its write (shardkit/routing/read_token.hpp); the client sends it back on
// its next requests, whose reads on replicas then see its writes.
constexpr const char* kTokenHeader = "Shardkit-Token";  // Beast takes its own string_view, not std::string_view

// The request's Shardkit-Token (empty without one); 400 for one that is
// not a token.
shardkit::ReadToken RequestToken(const HttpRequest& request) {
  const auto text = request[kTokenHeader];
  if (text.empty()) return {};
  try {
    return shardkit::ReadToken::Parse(std::string_view(text.data(), text.size()));
  } catch (const shardkit::ReadTokenError& e) {
    throw ApiError(400, fmt::format("the {} header: {}", kTokenHeader, e.what()),
                   {{"field", std::string(kTokenHeader)}});
  }
}

HttpResponse Json(int status, const json& body) {
  HttpResponse response{static_cast<http::status>(status), 11};
  response.set(http::field::content_type, "application/json");
  response.body() = body.dump() + "\n";
  return response;
}

// ---------------------------------------------------------------- requests

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      const int hi = i + 2 < text.size() ? HexValue(text[i + 1]) : -1;
      const int lo = hi >= 0 ? HexValue(text[i + 2]) : -1;
      if (lo < 0) throw ApiError(400, fmt::format("bad percent-encoding in '{}'", text));
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (plus_is_space && text[i] == '+') {
      out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

template <class Int>
std::optional<Int> ParseInt(std::string_view text) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// UTC, ISO 8601 with milliseconds: the instant every shard filters on.
std::string IsoTimestamp(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, ms % 1000);
}

std::string ArrayLiteral(const std::vector<std::int64_t>& values) {
  std::string text = "{";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i > 0 ? "," : "") + std::to_string(values[i]);
  return text + "}";
}

// Runs `work` on one shard, turning libpqxx's exceptions into shardkit's
// (shardkit/pg/server_error.hpp), with the SQLSTATE as a field, so that
// AnswerFor() maps them to a status. `shard` and `name` are read when an
// error is caught: work may change them (a routed transaction that
// followed its bucket to another shard).
template <class Work>
auto OnShard(const ShardId& shard, const std::string& name, Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (...) {
    shardkit::RethrowAsShardError(shard, name);
  }
}

// A value the server printed for an integer column (NULL or anything else:
// the statement and the code disagree, a bug).
template <class Int>
Int IntOf(const std::optional<std::string>& text, const char* column) {
  const auto value = text ? ParseInt<Int>(*text) : std::nullopt;
  if (!value) throw std::runtime_error(fmt::format("{} is not an integer: {}", column, text.value_or("NULL")));
  return *value;
}

}  // namespace

struct BookstoreService::Target {
  std::string path;
  std::map<std::string, std::string> query;

  explicit Target(std::string_view target) {
    const auto q = target.find('?');
    path = PercentDecode(target.substr(0, q), false);
    if (q == std::string_view::npos) return;
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
      const auto amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      const auto eq = pair.find('=');
      std::string key = PercentDecode(pair.substr(0, eq), true);
      std::string value = eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), true);
      if (!key.empty()) query[std::move(key)] = std::move(value);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    }
  }

  void AllowOnly(std::initializer_list<std::string_view> names) const {
    for (const auto& [key, value] : query) {
      if (std::find(names.begin(), names.end(), key) == names.end()) {
        std::string allowed;
        for (auto n : names) allowed += (allowed.empty() ? "" : ", ") + std::string(n);
        throw ApiError(400, fmt::format("unknown query parameter '{}' (this endpoint takes: {})", key,
                                        allowed.empty() ? "none" : allowed));
      }
    }
  }

  [[nodiscard]] int Int(const std::string& name, int fallback, int min, int max) const {
    const auto it = query.find(name);
    if (it == query.end()) return fallback;
    const auto value = ParseInt<int>(it->second);
    if (!value || *value < min || *value > max) {
      throw ApiError(400, fmt::format("{}={} is not an integer from {} to {}", name, it->second, min, max),
                     {{"parameter", name}});
    }
    return *value;
  }
};

BookstoreService::BookstoreService(shardkit::ClusterConfig config, ServiceOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (options_.lease_owner.empty()) {
    options_.lease_owner = fmt::format("bookstore-service {}:{}", boost::asio::ip::host_name(), ::getpid());
  }
  // The service's schema: books is a reference table (every shard holds the
  // copy orders are priced from), which plain SQL reads on any one shard.
  // Declared here whatever the file's [sql] reference_tables says.
  if (std::find(config_.reference_tables.begin(), config_.reference_tables.end(), "books") ==
      config_.reference_tables.end()) {
    config_.reference_tables.emplace_back("books");
  }
  cluster_ = shardkit::Cluster::Open(config_);
  for (const shardkit::ShardStats& shard : cluster_->Stats().shards) shard_names_.push_back(shard.name);
  ids_ = std::make_unique<OrderIds>(LeaseDatabaseDsn(config_), options_.lease_owner);
}

BookstoreService::~BookstoreService() {
  Shutdown();
}

void BookstoreService::SetConnectionSource(std::function<HttpConnectionCounts()> source) {
  connections_ = std::move(source);
}

std::string BookstoreService::ShardName(ShardId shard) const {
  const auto index = static_cast<std::size_t>(ToInt(shard));
  return index < shard_names_.size() ? shard_names_[index] : fmt::format("shard{}", shard);
}

std::string BookstoreService::Shutdown() {
  if (shut_down_) return "already shut down";
  shut_down_ = true;
  const int worker = ids_->Release();
  // No request runs any more: every lease is back, so closing the idle
  // connections closes them all.
  std::string pools;
  const shardkit::ClusterStats before = cluster_->Stats();
  cluster_->CloseIdleConnections();
  for (const shardkit::ShardStats& shard : before.shards) {
    pools += fmt::format("{}{} closed {} connection{}{}", pools.empty() ? "" : ", ", shard.name, shard.pool.idle,
                         shard.pool.idle == 1 ? "" : "s",
                         shard.pool.in_use > 0 ? fmt::format(" ({} still in use)", shard.pool.in_use) : "");
  }
  return fmt::format("worker id {} released; pools drained: {}", worker, pools);
}

HttpResponse BookstoreService::Handle(const HttpRequest& request) {
  const auto start = Clock::now();
  std::string route = "unknown";
  HttpResponse response;
  try {
    response = Dispatch(request, route);
  } catch (const std::exception& e) {
    const ErrorAnswer answer = AnswerFor(e, [this](ShardId s) { return ShardName(s); });
    response = Json(answer.status, answer.body);
    if (answer.retry_after_seconds) response.set(http::field::retry_after, std::to_string(*answer.retry_after_seconds));
    if (answer.status == 405 && answer.body.contains("allow")) {
      response.set(http::field::allow, answer.body["allow"].get<std::string>());
    }
  }
  http_metrics_.Record(route, std::string_view(request.method_string().data(), request.method_string().size()),
                       static_cast<int>(response.result_int()), Clock::now() - start);
  return response;
}

HttpResponse BookstoreService::Dispatch(const HttpRequest& request, std::string& route) {
  const Target target(std::string_view(request.target().data(), request.target().size()));
  std::vector<std::string_view> parts;
  for (std::string_view rest = target.path; !rest.empty();) {
    const auto slash = rest.find('/');
    if (slash != 0) parts.push_back(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  const auto method = request.method();
  // route: the path's template, for metrics; allowed: its method.
  auto require = [&](http::verb allowed, const char* name) {
    route = name;
    if (method != allowed) {
      throw ApiError(405,
                     fmt::format("{} does not take {}; use {}", name,
                                 std::string_view(request.method_string().data(), request.method_string().size()),
                                 std::string_view(http::to_string(allowed).data(), http::to_string(allowed).size())),
                     {{"allow", std::string(http::to_string(allowed))}});
    }
  };
  if (parts.size() == 3 && parts[0] == "customers" && parts[2] == "orders") {
    require(http::verb::get, "/customers/{id}/orders");
    return CustomerOrders(request, target, std::string(parts[1]));
  }
  if (parts.size() == 1 && parts[0] == "orders") {
    require(http::verb::post, "/orders");
    return PostOrder(request, target);
  }
  if (parts.size() == 2 && parts[0] == "reports" && parts[1] == "top-books") {
    require(http::verb::get, "/reports/top-books");
    return TopBooks(target);
  }
  if (parts.size() == 2 && parts[0] == "reports" && parts[1] == "category-avg") {
    require(http::verb::get, "/reports/category-avg");
    return CategoryAvg(target);
  }
  if (parts.size() == 1 && parts[0] == "health") {
    require(http::verb::get, "/health");
    return Health(target);
  }
  if (parts.size() == 1 && parts[0] == "metrics") {
    require(http::verb::get, "/metrics");
    return Metrics(target);
  }
  throw ApiError(404, fmt::format("no such resource: {} (endpoints: GET /customers/{{id}}/orders, POST /orders, "
                                  "GET /reports/top-books, GET /reports/category-avg, GET /health, GET /metrics)",
                                  target.path));
}

// ------------------------------------------------------------ the endpoints

HttpResponse BookstoreService::CustomerOrders(const HttpRequest& request, const Target& target,
                                              const std::string& id_text) {
  target.AllowOnly({"limit"});
  const auto id = ParseInt<std::int32_t>(id_text);
  if (!id) {
    throw ApiError(400,
                   fmt::format("'{}' is not a customer id (an integer from {} to {})", id_text, INT32_MIN, INT32_MAX));
  }
  const int limit = target.Int("limit", 20, 1, 500);
  const CustomerId customer{*id};
  shardkit::SqlOptions options;
  options.deadline = Clock::now() + options_.request_timeout;
  options.label = "customer orders";
  // On a replica close enough behind that has replayed the client's own
  // writes (the token of its earlier requests), else on the primary.
  options.read.preference = shardkit::ReadPreference::kReplicaPreferred;
  options.read.max_lag = options_.replica_max_lag;
  options.read.after = RequestToken(request);
  // The directory's answer before the statement, for messages; the plan
  // says where it ran (a bucket move in between: the new owner).
  const shardkit::Route route = cluster_->Route(customer);
  ShardId shard = route.shard;
  std::int64_t directory_version = route.directory_version;
  std::string shard_name = ShardName(shard);
  // One routed statement (customer_id = $1): the customer's newest orders
  // with their items, one row per item, in one snapshot. One row of NULLs:
  // a customer without orders; no row at all: no such customer.
  const shardkit::SqlResult result = OnShard(shard, shard_name, [&] {
    return cluster_->Execute(
        "SELECT o.order_id, to_json(o.ordered_at) #>> '{}' AS ordered_at, o.status, o.total::text AS total, "
        "i.line_no, i.book_id, i.quantity, i.unit_price::text AS unit_price "
        "FROM customers c LEFT JOIN LATERAL ("
        "  SELECT order_id, ordered_at, status, total FROM orders"
        "  WHERE customer_id = c.customer_id ORDER BY ordered_at DESC, order_id DESC LIMIT $2) o ON true "
        "LEFT JOIN order_items i ON i.customer_id = c.customer_id AND i.order_id = o.order_id "
        "WHERE c.customer_id = $1 "
        "ORDER BY o.ordered_at DESC, o.order_id DESC, i.line_no",
        {std::to_string(*id), std::to_string(limit)}, options);
  });
  if (result.plan.shard != shard) {
    // The bucket moved: the statement followed it; name the shard it ran on.
    shard = result.plan.shard;
    directory_version = cluster_->Route(customer).directory_version;
    shard_name = ShardName(shard);
  }
  if (result.rows.empty()) {
    throw ApiError(404, fmt::format("customer {} does not exist (bucket {}, shard {} ({}))", customer, route.bucket,
                                    shard, shard_name));
  }
  json orders = json::array();
  for (const auto& row : result.rows) {
    if (!row[0]) continue;
    if (orders.empty() || orders.back()["order_id"] != *row[0]) {
      orders.push_back({{"order_id", *row[0]},
                        {"ordered_at", row[1].value_or("")},
                        {"status", row[2].value_or("")},
                        {"total", row[3].value_or("")},
                        {"items", json::array()}});
    }
    if (!row[4]) continue;  // an order without items
    orders.back()["items"].push_back({{"line_no", IntOf<int>(row[4], "line_no")},
                                      {"book_id", IntOf<std::int64_t>(row[5], "book_id")},
                                      {"quantity", IntOf<int>(row[6], "quantity")},
                                      {"unit_price", row[7].value_or("")}});
  }
  HttpResponse response = Json(200, {{"customer_id", ToInt(customer)},
                                     {"bucket", ToInt(route.bucket)},
                                     {"shard", ToInt(shard)},
                                     {"shard_name", shard_name},
                                     {"directory_version", directory_version},
                                     {"on_replica", result.from_replicas > 0},
                                     {"orders", std::move(orders)}});
  // The client's token, for its next request.
  if (!options.read.after.Empty()) response.set(kTokenHeader, options.read.after.ToString());
  return response;
}

HttpResponse BookstoreService::PostOrder(const HttpRequest& request, const Target& target) {
  target.AllowOnly({});
  if (const auto type = request[http::field::content_type]; !type.empty() && type.substr(0, 16) != "application/json") {
    throw ApiError(
        415, fmt::format("the body must be application/json, not {}", std::string_view(type.data(), type.size())));
  }
  json body;
  try {
    body = json::parse(request.body());
  } catch (const json::parse_error& e) {
    throw ApiError(400, fmt::format("the body is not JSON: {}", e.what()));
  }
  if (!body.is_object())
    throw ApiError(400, "the body must be a JSON object: {\"customer_id\": ..., \"items\": [...]}");
  for (const auto& [key, value] : body.items()) {
    if (key != "customer_id" && key != "items") {
      throw ApiError(400, fmt::format("unknown field '{}' (an order has customer_id and items)", key));
    }
  }
  const auto& customer_field = body.contains("customer_id") ? body["customer_id"] : json();
  if (!customer_field.is_number_integer() || customer_field.get<std::int64_t>() < INT32_MIN ||
      customer_field.get<std::int64_t>() > INT32_MAX) {
    throw ApiError(400, "customer_id must be an integer from -2147483648 to 2147483647", {{"field", "customer_id"}});
  }
  const CustomerId customer{static_cast<std::int32_t>(customer_field.get<std::int64_t>())};
  const auto& items_field = body.contains("items") ? body["items"] : json();
  if (!items_field.is_array() || items_field.empty() || items_field.size() > kMaxItems) {
    throw ApiError(400,
                   fmt::format("items must be an array of 1 to {} {{\"book_id\", \"quantity\"}} objects", kMaxItems),
                   {{"field", "items"}});
  }
  std::vector<std::int64_t> books;
  std::vector<std::int64_t> quantities;
  for (std::size_t i = 0; i < items_field.size(); ++i) {
    const auto& item = items_field[i];
    const std::string where = fmt::format("items[{}]", i);
    if (!item.is_object() || item.size() != 2 || !item.contains("book_id") || !item.contains("quantity")) {
      throw ApiError(400, where + " must be {\"book_id\": <id>, \"quantity\": <count>}", {{"field", where}});
    }
    if (!item["book_id"].is_number_integer() || item["book_id"].get<std::int64_t>() <= 0) {
      throw ApiError(400, where + ".book_id must be a positive integer", {{"field", where + ".book_id"}});
    }
    if (!item["quantity"].is_number_integer() || item["quantity"].get<std::int64_t>() < 1 ||
        item["quantity"].get<std::int64_t>() > kMaxQuantity) {
      throw ApiError(400, fmt::format("{}.quantity must be an integer from 1 to {}", where, kMaxQuantity),
                     {{"field", where + ".quantity"}});
    }
    books.push_back(item["book_id"].get<std::int64_t>());
    quantities.push_back(item["quantity"].get<std::int64_t>());
  }

  const auto deadline = Clock::now() + options_.request_timeout;
  // Issued before a connection is held; an id that ends up unused is harmless.
  const std::int64_t order_id = ids_->Next();

  // Where the transaction runs: the customer's shard now; a bucket move
  // between two attempts sends it to the new owner (the fence refused the
  // earlier attempt before it wrote anything).
  shardkit::RoutedContext at{};
  at.shard = cluster_->Route(customer).shard;
  std::string shard_name = ShardName(at.shard);
  json lines = json::array();
  std::string ordered_at;
  std::string total;
  shardkit::RoutedOptions routing;
  routing.deadline = deadline;
  routing.label = "place order";
  // The client's earlier writes, to which this one is added.
  shardkit::ReadToken token = RequestToken(request);
  shardkit::RoutedOutcome outcome;
  OnShard(at.shard, shard_name, [&] {
    cluster_->Run(
        customer,
        [&](pqxx::transaction_base& tx, const shardkit::RoutedContext& attempt) {
          at = attempt;
          shard_name = ShardName(at.shard);
          lines = json::array();
          if (tx.exec_params("SELECT 1 FROM customers WHERE customer_id = $1 FOR KEY SHARE", customer).empty()) {
            throw ApiError(422,
                           fmt::format("customer {} does not exist (bucket {}, shard {} ({})); nothing was stored",
                                       customer, at.bucket, at.shard, shard_name),
                           {{"field", "customer_id"}});
          }
          ordered_at = tx.exec_params1(
                             "INSERT INTO orders (customer_id, bucket, order_id, ordered_at, status, total) "
                             "VALUES ($1, $2, $3, now(), 'placed', 0) RETURNING to_json(ordered_at) #>> '{}'",
                             customer, ToInt(at.bucket), order_id)[0]
                           .as<std::string>();
          // Prices come from the shard's copy of books (a reference table).
          const pqxx::result inserted = tx.exec_params(
              "INSERT INTO order_items (customer_id, bucket, order_id, line_no, book_id, quantity, unit_price) "
              "SELECT $1, $2, $3, item.line_no, b.book_id, item.quantity, b.price "
              "FROM unnest($4::bigint[], $5::integer[]) WITH ORDINALITY AS item(book_id, quantity, line_no) "
              "JOIN books b ON b.book_id = item.book_id "
              "RETURNING line_no, book_id, quantity, unit_price::text",
              customer, ToInt(at.bucket), order_id, ArrayLiteral(books), ArrayLiteral(quantities));
          if (inserted.size() != books.size()) {
            std::set<std::int64_t> known;
            for (const auto& row : inserted) known.insert(row[1].as<std::int64_t>());
            json unknown = json::array();
            std::string list;
            for (const std::int64_t b : std::set<std::int64_t>(books.begin(), books.end())) {
              if (known.contains(b)) continue;
              unknown.push_back(b);
              list += (list.empty() ? "" : ", ") + std::to_string(b);
            }
            // Throwing rolls the order back with its items.
            throw ApiError(422, fmt::format("no such book: {}; nothing was stored", list),
                           {{"unknown_books", unknown}});
          }
          total = tx.exec_params1(
                        "UPDATE orders SET total = (SELECT sum(quantity * unit_price) FROM order_items "
                        "  WHERE customer_id = $1 AND order_id = $2) "
                        "WHERE customer_id = $1 AND order_id = $2 RETURNING total::text",
                        customer, order_id)[0]
                      .as<std::string>();
          std::vector<std::pair<int, json>> sorted;
          for (const auto& row : inserted) {
            sorted.emplace_back(row[0].as<int>(), json{{"line_no", row[0].as<int>()},
                                                       {"book_id", row[1].as<std::int64_t>()},
                                                       {"quantity", row[2].as<int>()},
                                                       {"unit_price", row[3].as<std::string>()}});
          }
          std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          for (auto& [line, item] : sorted) lines.push_back(std::move(item));
        },
        routing, &outcome);
  });
  token.Combine(outcome.token);
  HttpResponse response = Json(201, {{"order_id", std::to_string(order_id)},
                                     {"customer_id", ToInt(customer)},
                                     {"bucket", ToInt(at.bucket)},
                                     {"shard", ToInt(at.shard)},
                                     {"shard_name", shard_name},
                                     {"directory_version", at.directory_version},
                                     {"ordered_at", ordered_at},
                                     {"status", "placed"},
                                     {"total", total},
                                     {"items", std::move(lines)}});
  response.set(http::field::location, fmt::format("/customers/{}/orders", customer));
  // Read-your-writes: the client sends it back with its next requests, so
  // that reads on replicas see this order.
  response.set(kTokenHeader, token.ToString());
  return response;
}

HttpResponse BookstoreService::TopBooks(const Target& target) {
  target.AllowOnly({"days", "k"});
  const int days = target.Int("days", 30, 1, 3650);
  const int k = target.Int("k", 10, 1, kMaxTopBooks);
  const auto deadline = Clock::now() + options_.request_timeout;
  // One instant for every shard.
  const std::string since = IsoTimestamp(std::chrono::system_clock::now() - std::chrono::hours(24) * days);

  shardkit::SqlOptions options;
  options.deadline = deadline;
  options.label = "top-books";
  // Plain SQL over every shard: each shard sends its per-book sums, merged
  // into the unsharded answer, ordered and cut after the merge. A merged
  // LIMIT is part of the plan, so the statement asks for the most k can be
  // (one cached plan) and the first k rows are kept: the same books.
  static const std::string kTopBooks = fmt::format(
      "SELECT i.book_id, sum(i.quantity) AS quantity FROM order_items i "
      "JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
      "WHERE o.ordered_at >= $1::timestamptz "
      "GROUP BY i.book_id ORDER BY quantity DESC, i.book_id LIMIT {}",
      kMaxTopBooks);
  const auto start = Clock::now();
  const shardkit::SqlResult top = cluster_->Execute(kTopBooks, {since}, options);
  const auto elapsed = Clock::now() - start;
  std::vector<std::pair<std::int64_t, std::int64_t>> items;  // (book, quantity), best first
  for (const auto& row : top.rows) {
    if (items.size() == static_cast<std::size_t>(k)) break;
    items.emplace_back(IntOf<std::int64_t>(row[0], "book_id"), IntOf<std::int64_t>(row[1], "quantity"));
  }

  // Titles from the books reference table: any one shard answers.
  std::map<std::int64_t, std::pair<std::string, std::string>> titles;
  if (!items.empty()) {
    std::vector<std::int64_t> ids;
    for (const auto& [book, quantity] : items) ids.push_back(book);
    shardkit::SqlOptions one;
    one.deadline = deadline;
    one.label = "top-books titles";
    const shardkit::SqlResult books = cluster_->Execute(
        "SELECT book_id, title, category FROM books WHERE book_id = ANY($1::bigint[])", {ArrayLiteral(ids)}, one);
    for (const auto& row : books.rows) {
      titles[IntOf<std::int64_t>(row[0], "book_id")] = {row[1].value_or(""), row[2].value_or("")};
    }
  }
  json ranked = json::array();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto [book, quantity] = items[i];
    const auto it = titles.find(book);
    ranked.push_back({{"rank", i + 1},
                      {"book_id", book},
                      {"title", it == titles.end() ? json() : json(it->second.first)},
                      {"category", it == titles.end() ? json() : json(it->second.second)},
                      {"quantity", quantity}});
  }
  // One phase: the scatter and its merge, inside Execute; its rows are the
  // partial rows the shards sent (one per book per shard).
  json phases = json::array();
  phases.push_back(
      {{"name", "scatter + merge"},
       {"rows", top.rows_received},
       {"shards_asked", top.plan.shard_count},
       {"elapsed_ms",
        static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count()) / 1000.0}});
  return Json(200, {{"days", days},
                    {"since", since},
                    {"k", k},
                    {"method", "plain SQL, merged (exact)"},
                    {"exact", true},  // every shard's sums merged: the unsharded answer
                    {"books", std::move(ranked)},
                    {"rows_transferred", top.rows_received},
                    {"phases", std::move(phases)},
                    {"warnings", json::array()}});
}

HttpResponse BookstoreService::CategoryAvg(const Target& target) {
  target.AllowOnly({"days"});
  const int days = target.Int("days", 30, 1, 3650);
  const auto deadline = Clock::now() + options_.request_timeout;
  const std::string since = IsoTimestamp(std::chrono::system_clock::now() - std::chrono::hours(24) * days);
  // What each order spent per category: complete on its shard (an order and
  // its items live together). AVG does not merge; its SUM and COUNT do.
  // A merge plan, not plain SQL: Cluster::Execute refuses the average of a
  // per-order derived table (a subquery over sharded tables in a statement
  // over every shard), and without it the average would be an expression
  // over aggregates or a COUNT(DISTINCT) off the shard key, refused too.
  // Here the shards' partial SUM and COUNT are named and merged exactly.
  shardkit::MergePlan plan{
      "SELECT category, sum(amount) AS amount_sum, count(amount) AS amount_count FROM ("
      "  SELECT b.category, sum(i.quantity * i.unit_price) AS amount"
      "  FROM order_items i"
      "  JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id"
      "  JOIN books b ON b.book_id = i.book_id"
      "  WHERE o.ordered_at >= $1::timestamptz"
      "  GROUP BY i.customer_id, i.order_id, b.category) per_order "
      "GROUP BY category"};
  plan.Key("category")
      .Count("amount_count", "orders")
      .Avg("amount_sum", "amount_count", "avg_amount")
      .OrderBy("category");
  shardkit::ScatterOptions options;
  options.deadline = deadline;
  options.label = "category-avg";
  const shardkit::MergedResult merged = cluster_->Merge(plan, {since}, options);
  const auto category = *merged.ColumnIndex("category");
  const auto orders = *merged.ColumnIndex("orders");
  const auto avg = *merged.ColumnIndex("avg_amount");
  json rows = json::array();
  for (const auto& row : merged.rows) {
    rows.push_back(
        {{"category", row[category].AsText()}, {"orders", row[orders].AsInt()}, {"avg_amount", row[avg].ToString()}});
  }
  return Json(200, {{"days", days},
                    {"since", since},
                    {"categories", std::move(rows)},
                    {"shards", merged.shards},
                    {"partial_rows", merged.rows_in}});
}

HttpResponse BookstoreService::Health(const Target& target) {
  target.AllowOnly({});
  shardkit::ScatterOptions options;
  options.deadline = Clock::now() + options_.health_timeout;
  options.allow_partial = true;
  options.label = "health";
  std::vector<shardkit::ScatterError::Failure> failures;
  std::map<ShardId, double> answered_ms;
  try {
    const auto result = cluster_->Scatter("SELECT 1", {}, options);
    failures = result.failures;
    for (const auto& s : result.shards) answered_ms[s.shard] = static_cast<double>(s.elapsed.count()) / 1000.0;
  } catch (const shardkit::ScatterError& e) {
    failures = e.failures();  // no shard answered
  }
  json shards = json::array();
  std::string unreachable;
  const shardkit::ClusterStats stats = cluster_->Stats();
  for (const shardkit::ShardStats& at : stats.shards) {
    const ShardId shard = at.shard;
    json one = {{"shard", ToInt(shard)},
                {"name", at.name},
                {"buckets", at.buckets},
                {"pool", {{"in_use", at.pool.in_use}, {"idle", at.pool.idle}, {"max_size", at.pool.max_size}}}};
    if (const auto it = answered_ms.find(shard); it != answered_ms.end()) {
      one["reachable"] = true;
      one["elapsed_ms"] = it->second;
    } else {
      one["reachable"] = false;
      for (const auto& f : failures) {
        if (f.shard != shard) continue;
        one["error"] = f.cause;
        if (!f.sqlstate.empty()) one["sqlstate"] = f.sqlstate;
      }
      unreachable += fmt::format("{}shard {} ({})", unreachable.empty() ? "" : ", ", shard, ShardName(shard));
    }
    shards.push_back(std::move(one));
  }
  const bool ids_ok = ids_->Valid();
  json body = {{"status", unreachable.empty() && ids_ok ? "ok" : "unavailable"},
               {"directory_version", stats.directory_version},
               {"shards", std::move(shards)},
               {"order_ids",
                {{"worker_id", ids_->WorkerId()}, {"lease_valid", ids_ok}, {"lease_database", ids_->RedactedDsn()}}}};
  if (!unreachable.empty() || !ids_ok) {
    body["error"] = !unreachable.empty() ? fmt::format("unreachable: {}", unreachable)
                                         : "the worker-id lease for order ids is not valid";
    HttpResponse response = Json(503, body);
    response.set(http::field::retry_after, "1");
    return response;
  }
  return Json(200, body);
}

HttpResponse BookstoreService::Metrics(const Target& target) {
  target.AllowOnly({});
  PrometheusText out;
  // One reading of every counter, so the families agree with each other.
  const shardkit::ClusterStats stats = cluster_->Stats();
  const int shard_count = static_cast<int>(stats.shards.size());
  auto labels = [this](ShardId s, Labels more = {}) {
    Labels l{{"shard", std::to_string(ToInt(s))}, {"name", ShardName(s)}};
    l.insert(l.end(), more.begin(), more.end());
    return l;
  };
  std::vector<shardkit::PoolStats> pools;
  for (const shardkit::ShardStats& shard : stats.shards) pools.push_back(shard.pool);
  const auto pool_counter = [&](const char* name, const char* help, auto field) {
    out.Family(name, "counter", help);
    for (ShardId s : shardkit::FirstShards(shard_count)) {
      out.Sample(name, labels(s), static_cast<double>(field(pools[static_cast<std::size_t>(ToInt(s))])));
    }
  };
  out.Family("shardkit_pool_connections", "gauge", "Connections of each shard's pool, by state.");
  for (ShardId s : shardkit::FirstShards(shard_count)) {
    const auto& p = pools[static_cast<std::size_t>(ToInt(s))];
    out.Sample("shardkit_pool_connections", labels(s, {{"state", "in_use"}}), p.in_use);
    out.Sample("shardkit_pool_connections", labels(s, {{"state", "idle"}}), p.idle);
    out.Sample("shardkit_pool_connections", labels(s, {{"state", "connecting"}}), p.connecting);
  }
  out.Family("shardkit_pool_max_connections", "gauge", "Each pool's connection bound.");
  for (ShardId s : shardkit::FirstShards(shard_count)) {
    out.Sample("shardkit_pool_max_connections", labels(s), pools[static_cast<std::size_t>(ToInt(s))].max_size);
  }
  out.Family("shardkit_pool_waiting", "gauge", "Callers waiting for a connection.");
  for (ShardId s : shardkit::FirstShards(shard_count)) {
    out.Sample("shardkit_pool_waiting", labels(s), pools[static_cast<std::size_t>(ToInt(s))].waiting);
  }
  pool_counter("shardkit_pool_acquired_total", "Leases handed out.", [](const auto& p) { return p.acquired; });
  pool_counter("shardkit_pool_waited_total", "Leases that had to wait.", [](const auto& p) { return p.waited; });
  pool_counter("shardkit_pool_timeouts_total", "Acquires that hit their deadline.",
               [](const auto& p) { return p.timeouts; });
  pool_counter("shardkit_pool_rejected_total", "Acquires refused: waiter bound reached.",
               [](const auto& p) { return p.rejected; });
  pool_counter("shardkit_pool_connects_total", "Connections opened.", [](const auto& p) { return p.connects; });
  pool_counter("shardkit_pool_connect_failures_total", "Connection attempts that failed.",
               [](const auto& p) { return p.connect_failures; });
  pool_counter("shardkit_pool_broken_total", "Connections dropped because they were broken.",
               [](const auto& p) { return p.broken; });
  out.Family("shardkit_pool_acquire_wait_seconds", "summary", "Wait for a connection over recent acquisitions.");
  for (ShardId s : shardkit::FirstShards(shard_count)) {
    const auto& p = pools[static_cast<std::size_t>(ToInt(s))];
    out.Sample("shardkit_pool_acquire_wait_seconds", labels(s, {{"quantile", "0.5"}}),
               static_cast<double>(p.acquire_wait_p50.count()) / 1e6);
    out.Sample("shardkit_pool_acquire_wait_seconds", labels(s, {{"quantile", "0.99"}}),
               static_cast<double>(p.acquire_wait_p99.count()) / 1e6);
    out.Sample("shardkit_pool_acquire_wait_seconds", labels(s, {{"quantile", "1"}}),
               static_cast<double>(p.acquire_wait_max.count()) / 1e6);
  }

  const shardkit::ScatterStats& scatter = stats.scatters;
  const auto scatter_counter = [&](const char* name, const char* help, std::uint64_t value) {
    out.Family(name, "counter", help);
    out.Sample(name, static_cast<double>(value));
  };
  out.Family("shardkit_scatter_calls_total", "counter", "Scatter calls, by fan-out.");
  out.Sample("shardkit_scatter_calls_total", {{"fanout", "cross_shard"}}, static_cast<double>(scatter.scatters));
  out.Sample("shardkit_scatter_calls_total", {{"fanout", "single_shard"}}, static_cast<double>(scatter.single_shard));
  scatter_counter("shardkit_scatter_shard_requests_total", "Statements sent to shards by scatters.",
                  scatter.shard_requests);
  scatter_counter("shardkit_scatter_failed_total", "Scatters that failed.", scatter.failed);
  scatter_counter("shardkit_scatter_partial_total", "Scatters answered with shards missing.", scatter.partial);
  scatter_counter("shardkit_scatter_shard_failures_total", "Shards that failed or missed a deadline.",
                  scatter.shard_failures);
  scatter_counter("shardkit_scatter_rows_total", "Rows received by scatters.", scatter.rows);
  scatter_counter("shardkit_scatter_bytes_total", "Payload bytes received by scatters.", scatter.bytes);
  out.Family("shardkit_scatter_slowest_shard_seconds_total", "counter",
             "Sum over scatters of the slowest shard's time.");
  out.Sample("shardkit_scatter_slowest_shard_seconds_total", static_cast<double>(scatter.total_slowest.count()) / 1e6);
  out.Family("shardkit_scatter_max_fanout", "gauge", "Largest fan-out of any scatter.");
  out.Sample("shardkit_scatter_max_fanout", static_cast<double>(scatter.max_fanout));

  out.Family("shardkit_directory_version", "gauge", "Version of the bucket directory in use.");
  out.Sample("shardkit_directory_version", static_cast<double>(stats.directory_version));
  out.Family("shardkit_directory_buckets", "gauge", "Buckets each shard holds.");
  for (const shardkit::ShardStats& shard : stats.shards) {
    out.Sample("shardkit_directory_buckets", labels(shard.shard), static_cast<double>(shard.buckets));
  }

  out.Family("bookstore_order_ids_worker_id", "gauge", "Snowflake worker id leased for order ids.");
  out.Sample("bookstore_order_ids_worker_id", ids_->WorkerId());
  out.Family("bookstore_order_ids_lease_valid", "gauge", "1 while the worker-id lease allows issuing ids.");
  out.Sample("bookstore_order_ids_lease_valid", ids_->Valid() ? 1 : 0);

  http_metrics_.Write(out);
  if (connections_) {
    const auto c = connections_();
    out.Family("bookstore_http_connections", "gauge", "Open HTTP connections, by state.");
    out.Sample("bookstore_http_connections", {{"state", "idle"}}, c.idle);
    out.Sample("bookstore_http_connections", {{"state", "reading"}}, c.reading);
    out.Sample("bookstore_http_connections", {{"state", "handling"}}, c.handling);
    out.Sample("bookstore_http_connections", {{"state", "writing"}}, c.writing);
    out.Family("bookstore_http_connections_accepted_total", "counter", "HTTP connections accepted.");
    out.Sample("bookstore_http_connections_accepted_total", static_cast<double>(c.accepted));
    out.Family("bookstore_http_connections_refused_total", "counter", "HTTP connections refused (too many).");
    out.Sample("bookstore_http_connections_refused_total", static_cast<double>(c.refused));
  }
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  response.body() = out.Text();
  return response;
}

}  // namespace bookstore
