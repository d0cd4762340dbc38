// The Bookstore service over real HTTP: the service runs as a process on a
// free loopback port against scratch databases on the local cluster, and
// every answer that comes from the shards is compared with the unsharded
// reference server.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <shardkit/ids/snowflake.hpp>
#include <shardkit/resharding/move.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../src/http_client.hpp"
#include "../src/order_ids.hpp"
#include "support.hpp"

namespace bookstore::test {
namespace {

using nlohmann::json;

json Body(const HttpReply& reply) {
  try {
    return json::parse(reply.body);
  } catch (const json::parse_error& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << reply.body;
    return json();
  }
}

// Waits until `condition` holds; false at the deadline.
template <class Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);  // polling a condition, not synchronising by sleeping
  }
  return true;
}

// One value of a metric line such as name{a="b"} 3.
std::optional<double> MetricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

std::int64_t CountOn(const shardkit::Dsn& dsn, const std::string& sql) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::nontransaction tx{c};
  return tx.exec1(sql)[0].as<std::int64_t>();
}

// One service over one scratch database for the tests that share them;
// orders they create are mirrored to the reference server.
class BookstoreServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    bookstore_ = std::make_unique<ScratchBookstore>("bookstore_service_test");
    service_ = std::make_unique<Service>(bookstore_->WriteConfig("shardkit.toml"));
  }
  static void TearDownTestSuite() {
    service_.reset();
    bookstore_.reset();
  }
  static HttpClient Client() { return HttpClient("127.0.0.1", service_->Port()); }

  static std::unique_ptr<ScratchBookstore> bookstore_;
  static std::unique_ptr<Service> service_;
};
std::unique_ptr<ScratchBookstore> BookstoreServiceTest::bookstore_;
std::unique_ptr<Service> BookstoreServiceTest::service_;

TEST_F(BookstoreServiceTest, HealthReportsEveryShardReachable) {
  auto client = Client();
  const auto reply = client.Get("/health");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = Body(reply);
  EXPECT_EQ(body["status"], "ok");
  ASSERT_EQ(body["shards"].size(), static_cast<std::size_t>(bookstore_->ShardCount()));
  int buckets = 0;
  for (const auto& shard : body["shards"]) {
    EXPECT_TRUE(shard["reachable"].get<bool>()) << shard.dump();
    buckets += shard["buckets"].get<int>();
  }
  EXPECT_EQ(buckets, 64);
  EXPECT_TRUE(body["order_ids"]["lease_valid"].get<bool>());
}

TEST_F(BookstoreServiceTest, CustomerOrdersEqualTheReferenceServer) {
  auto client = Client();
  pqxx::connection reference{bookstore_->ReferenceDsn().Reveal()};
  for (int shard = 0; shard < bookstore_->ShardCount(); ++shard) {
    for (int nth : {0, 5}) {
      const int customer = bookstore_->CustomerOn(shard, nth);
      SCOPED_TRACE("customer " + std::to_string(customer));
      const auto reply = client.Get("/customers/" + std::to_string(customer) + "/orders?limit=500");
      ASSERT_EQ(reply.status, 200) << reply.body;
      const json body = Body(reply);
      EXPECT_EQ(body["shard"], shard);
      EXPECT_EQ(body["bucket"], shardkit::ToInt(shardkit::BucketOf(shardkit::CustomerId{customer})));

      pqxx::read_transaction tx{reference};
      const auto orders = tx.exec_params(
          "SELECT order_id::text, to_json(ordered_at) #>> '{}', status, total::text FROM orders "
          "WHERE customer_id = $1 ORDER BY ordered_at DESC, order_id DESC",
          customer);
      ASSERT_GT(orders.size(), 0U);
      ASSERT_EQ(body["orders"].size(), orders.size());
      for (std::size_t i = 0; i < orders.size(); ++i) {
        const auto& got = body["orders"][i];
        EXPECT_EQ(got["order_id"], orders[i][0].as<std::string>());
        EXPECT_EQ(got["ordered_at"], orders[i][1].as<std::string>());
        EXPECT_EQ(got["status"], orders[i][2].as<std::string>());
        EXPECT_EQ(got["total"], orders[i][3].as<std::string>());
        const auto items = tx.exec_params(
            "SELECT line_no, book_id, quantity, unit_price::text FROM order_items "
            "WHERE customer_id = $1 AND order_id = $2::bigint ORDER BY line_no",
            customer, orders[i][0].as<std::string>());
        ASSERT_EQ(got["items"].size(), items.size());
        for (std::size_t j = 0; j < items.size(); ++j) {
          EXPECT_EQ(got["items"][j]["line_no"], items[j][0].as<int>());
          EXPECT_EQ(got["items"][j]["book_id"], items[j][1].as<std::int64_t>());
          EXPECT_EQ(got["items"][j]["quantity"], items[j][2].as<int>());
          EXPECT_EQ(got["items"][j]["unit_price"], items[j][3].as<std::string>());
        }
      }
    }
  }
  // limit, newest first.
  const int customer = bookstore_->CustomerOn(0);
  const json two = Body(client.Get("/customers/" + std::to_string(customer) + "/orders?limit=2"));
  EXPECT_EQ(two["orders"].size(), 2U);
  // A customer without orders, and one that does not exist.
  const auto none = client.Get("/customers/300/orders");
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_TRUE(Body(none)["orders"].empty());
  const auto missing = client.Get("/customers/77777/orders");
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_NE(Body(missing)["error"].get<std::string>().find("customer 77777 does not exist"), std::string::npos);
}

TEST_F(BookstoreServiceTest, PostOrderStoresTheOrderAndItsItemsOnTheOwningShard) {
  auto client = Client();
  const int customer = bookstore_->CustomerOn(1, 3);
  const int other = 0;
  const auto reply =
      client.Post("/orders", json{{"customer_id", customer},
                                  {"items", {{{"book_id", 7}, {"quantity", 2}}, {{"book_id", 12}, {"quantity", 1}}}}}
                                 .dump());
  ASSERT_EQ(reply.status, 201) << reply.body;
  const json body = Body(reply);
  EXPECT_EQ(body["shard"], 1);
  EXPECT_EQ(reply.Header("location"), "/customers/" + std::to_string(customer) + "/orders");
  const std::int64_t order_id = std::stoll(body["order_id"].get<std::string>());

  // A Snowflake of the orders column's layout, from the leased worker id.
  const auto parts = shardkit::DecodeSnowflake(order_id, kOrderIdEpochUnixMs);
  const json health = Body(client.Get("/health"));
  EXPECT_EQ(parts.worker_id, health["order_ids"]["worker_id"].get<int>());
  EXPECT_EQ(
      CountOn(bookstore_->CatalogDsn(),
              "SELECT count(*) FROM shardkit_worker_ids WHERE id_space = 'bookstore-lab-orders' AND worker_id = " +
                  std::to_string(parts.worker_id) + " AND owner LIKE 'bookstore-service %'"),
      1);

  // Stored on the customer's shard, order and items, with the total the
  // items add up to; nowhere else.
  pqxx::connection shard{bookstore_->ShardDsn(1).Reveal()};
  pqxx::read_transaction tx{shard};
  const auto order = tx.exec_params1(
      "SELECT o.total::text, (SELECT sum(quantity * unit_price)::text FROM order_items i "
      "  WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id), "
      "(SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id), "
      "(SELECT price * 2 + (SELECT price FROM books WHERE book_id = 12) FROM books WHERE book_id = 7)::text "
      "FROM orders o WHERE o.customer_id = $1 AND o.order_id = $2",
      customer, order_id);
  EXPECT_EQ(order[0].as<std::string>(), body["total"]);
  EXPECT_EQ(order[0].as<std::string>(), order[1].as<std::string>());
  EXPECT_EQ(order[2].as<int>(), 2);
  EXPECT_EQ(order[3].as<std::string>(), body["total"]);
  EXPECT_EQ(
      CountOn(bookstore_->ShardDsn(other), "SELECT count(*) FROM orders WHERE order_id = " + std::to_string(order_id)),
      0);
  bookstore_->MirrorToReference(customer, order_id);

  // And the customer's orders show it first, read with the order's token
  // (without it a replica may serve the read before it replays the order).
  const json orders = Body(client.Request("GET", "/customers/" + std::to_string(customer) + "/orders?limit=1", "",
                                          "application/json", {{"Shardkit-Token", reply.Header("shardkit-token")}}));
  ASSERT_EQ(orders["orders"].size(), 1U);
  EXPECT_EQ(orders["orders"][0]["order_id"], body["order_id"]);
  EXPECT_EQ(orders["orders"][0]["items"].size(), 2U);
}

// Read-your-writes across requests: the order's token comes back in a
// header; a read that sends it sees the order, from a replica once it has
// replayed it (with replicas in the configuration), else from the primary.
TEST_F(BookstoreServiceTest, AnOrdersTokenMakesTheNextReadsSeeIt) {
  auto client = Client();
  const int customer = bookstore_->CustomerOn(0, 5);
  const auto reply =
      client.Post("/orders", json{{"customer_id", customer}, {"items", {{{"book_id", 3}, {"quantity", 1}}}}}.dump());
  ASSERT_EQ(reply.status, 201) << reply.body;
  const std::string token = reply.Header("shardkit-token");
  ASSERT_TRUE(token.starts_with("v2_0.")) << token;  // shard 0's WAL position and transaction
  const std::string order_id = Body(reply)["order_id"];
  bookstore_->MirrorToReference(customer, std::stoll(order_id));
  const std::string path = "/customers/" + std::to_string(customer) + "/orders?limit=1";
  bool on_replica = false;
  const bool has_replicas = !bookstore_->Config().shards[0].replicas.empty();
  EXPECT_TRUE(WaitFor([&] {
    const auto read = client.Request("GET", path, "", "application/json", {{"Shardkit-Token", token}});
    EXPECT_EQ(read.status, 200) << read.body;
    const json orders = Body(read);
    // Never without the order, wherever it was read.
    EXPECT_EQ(orders["orders"][0]["order_id"], order_id) << read.body;
    EXPECT_EQ(read.Header("shardkit-token"), token);
    on_replica = orders["on_replica"].get<bool>();
    return on_replica || !has_replicas;
  }));
  EXPECT_EQ(on_replica, has_replicas);
  // A header that is not a token: refused, naming it.
  const auto bad = client.Request("GET", path, "", "application/json", {{"Shardkit-Token", "v1_zz"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(Body(bad)["error"].get<std::string>().find("Shardkit-Token"), std::string::npos) << bad.body;
}

TEST_F(BookstoreServiceTest, PostOrderWithAnUnknownBookStoresNothing) {
  auto client = Client();
  const int customer = bookstore_->CustomerOn(0, 4);
  const std::string count_sql = "SELECT count(*) FROM orders WHERE customer_id = " + std::to_string(customer);
  const auto before = CountOn(bookstore_->ShardDsn(0), count_sql);
  // The order row is inserted first, then the items: the unknown book is
  // found only then, and the whole transaction rolls back.
  const auto reply = client.Post(
      "/orders", json{{"customer_id", customer},
                      {"items", {{{"book_id", 3}, {"quantity", 1}}, {{"book_id", 999999}, {"quantity", 1}}}}}
                     .dump());
  ASSERT_EQ(reply.status, 422) << reply.body;
  const json body = Body(reply);
  EXPECT_EQ(body["unknown_books"], json::array({999999}));
  EXPECT_NE(body["error"].get<std::string>().find("nothing was stored"), std::string::npos);
  EXPECT_EQ(CountOn(bookstore_->ShardDsn(0), count_sql), before);
  // A customer that does not exist: 422 as well, nothing stored.
  const auto ghost = client.Post("/orders", R"({"customer_id": 77777, "items": [{"book_id": 1, "quantity": 1}]})");
  EXPECT_EQ(ghost.status, 422) << ghost.body;
  EXPECT_EQ(CountOn(bookstore_->ShardDsn(
                        shardkit::ToInt(bookstore_->Config().directory.ShardFor(shardkit::CustomerId{77777}))),
                    "SELECT count(*) FROM orders WHERE customer_id = 77777"),
            0);
}

TEST_F(BookstoreServiceTest, ConcurrentOrdersGetDistinctIds) {
  constexpr int kThreads = 4;
  constexpr int kEach = 10;
  std::mutex mutex;
  std::vector<std::pair<int, std::int64_t>> placed;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = Client();
      for (int i = 0; i < kEach; ++i) {
        const int customer = 1 + (t * kEach + i) * 7 % 299;
        const auto reply = client.Post(
            "/orders", json{{"customer_id", customer}, {"items", {{{"book_id", 1 + i}, {"quantity", 1 + t}}}}}.dump());
        std::lock_guard lock(mutex);
        if (reply.status != 201) {
          failures.push_back(reply.body);
        } else {
          placed.emplace_back(customer, std::stoll(json::parse(reply.body)["order_id"].get<std::string>()));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(failures.empty()) << failures.front();
  std::set<std::int64_t> ids;
  for (const auto& [customer, id] : placed) ids.insert(id);
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kThreads * kEach));
  for (const auto& [customer, id] : placed) bookstore_->MirrorToReference(customer, id);
}

TEST_F(BookstoreServiceTest, BadRequestsGetA4xxWithAJsonError) {
  auto client = Client();
  struct Case {
    std::string method, target, body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"GET", "/customers/abc/orders", "", 400, "not a customer id"},
      {"GET", "/customers/2147483648/orders", "", 400, "not a customer id"},
      {"GET", "/customers/12/orders?limit=0", "", 400, "limit=0"},
      {"GET", "/customers/12/orders?limit=x", "", 400, "limit=x"},
      {"GET", "/customers/12/orders?sort=asc", "", 400, "unknown query parameter 'sort'"},
      {"GET", "/customers/%zz/orders", "", 400, "percent-encoding"},
      {"GET", "/reports/top-books?days=0", "", 400, "days=0"},
      {"GET", "/reports/top-books?days=abc", "", 400, "days=abc"},
      {"GET", "/reports/top-books?k=1000", "", 400, "k=1000"},
      {"GET", "/reports/category-avg?days=99999", "", 400, "days=99999"},
      {"GET", "/nowhere", "", 404, "no such resource"},
      {"DELETE", "/orders", "", 405, "use POST"},
      {"POST", "/health", "", 405, "use GET"},
      {"POST", "/orders", "{not json", 400, "not JSON"},
      {"POST", "/orders", "[1, 2]", 400, "JSON object"},
      {"POST", "/orders", R"({"items": [{"book_id": 1, "quantity": 1}]})", 400, "customer_id"},
      {"POST", "/orders", R"({"customer_id": "12", "items": [{"book_id": 1, "quantity": 1}]})", 400, "customer_id"},
      {"POST", "/orders", R"({"customer_id": 12, "items": []})", 400, "items"},
      {"POST", "/orders", R"({"customer_id": 12, "items": [{"book_id": 1}]})", 400, "items[0]"},
      {"POST", "/orders", R"({"customer_id": 12, "items": [{"book_id": 1, "quantity": 0}]})", 400, "quantity"},
      {"POST", "/orders", R"({"customer_id": 12, "items": [{"book_id": -1, "quantity": 1}]})", 400, "book_id"},
      {"POST", "/orders", R"({"customer_id": 12, "items": [{"book_id": 1, "quantity": 1}], "x": 1})", 400,
       "unknown field 'x'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.method + " " + c.target + " " + c.body);
    const auto reply = client.Request(c.method, c.target, c.body);
    EXPECT_EQ(reply.status, c.status) << reply.body;
    EXPECT_EQ(reply.Header("content-type"), "application/json");
    const json body = Body(reply);
    ASSERT_TRUE(body.contains("error")) << reply.body;
    EXPECT_EQ(body["status"], c.status);
    EXPECT_NE(body["error"].get<std::string>().find(c.says), std::string::npos) << body["error"];
    if (c.status == 405) {
      EXPECT_FALSE(reply.Header("allow").empty());
    }
  }
  // Wrong content type, and a body over the limit.
  EXPECT_EQ(client.Request("POST", "/orders", "customer_id=12", "application/x-www-form-urlencoded").status, 415);
  const auto huge = client.Post("/orders", std::string(200 * 1024, ' '));
  EXPECT_EQ(huge.status, 413) << huge.body;
  EXPECT_FALSE(Body(huge)["error"].get<std::string>().empty());
}

// The reference server's answer to the same question at the same instant.
json ReferenceTopBooks(const shardkit::Dsn& dsn, const std::string& since, int k) {
  pqxx::connection c{dsn.Reveal()};
  pqxx::read_transaction tx{c};
  json books = json::array();
  for (const auto& row : tx.exec_params(
           "SELECT i.book_id, sum(i.quantity) AS total FROM order_items i "
           "JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id "
           "WHERE o.ordered_at >= $1::timestamptz GROUP BY i.book_id ORDER BY total DESC, i.book_id LIMIT $2",
           since, k)) {
    books.push_back({row[0].as<std::int64_t>(), row[1].as<std::int64_t>()});
  }
  return books;
}

// The plain SQL statement over every shard (merged, cut to k after the
// merge) against the reference server's GROUP BY, titles and categories
// against its books; k = 100 asks for more books than there are.
TEST_F(BookstoreServiceTest, TopBooksEqualTheReferenceServer) {
  auto client = Client();
  pqxx::connection reference{bookstore_->ReferenceDsn().Reveal()};
  std::map<std::int64_t, std::pair<std::string, std::string>> books;
  {
    pqxx::read_transaction tx{reference};
    for (const auto& row : tx.exec("SELECT book_id, title, category FROM books")) {
      books[row[0].as<std::int64_t>()] = {row[1].as<std::string>(), row[2].as<std::string>()};
    }
  }
  ASSERT_EQ(books.size(), static_cast<std::size_t>(kBooks));
  for (const auto& [days, k] :
       std::vector<std::pair<int, int>>{{30, 10}, {7, 5}, {3650, 20}, {1, 3}, {3650, 100}, {30, 1}}) {
    SCOPED_TRACE("days " + std::to_string(days) + ", k " + std::to_string(k));
    const auto reply = client.Get("/reports/top-books?days=" + std::to_string(days) + "&k=" + std::to_string(k));
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json body = Body(reply);
    EXPECT_TRUE(body["exact"].get<bool>());
    EXPECT_EQ(body["k"], k);
    json got = json::array();
    std::size_t rank = 0;
    for (const auto& b : body["books"]) {
      got.push_back({b["book_id"], b["quantity"]});
      EXPECT_EQ(b["rank"], ++rank);
      const auto it = books.find(b["book_id"].get<std::int64_t>());
      ASSERT_NE(it, books.end()) << b.dump();
      EXPECT_EQ(b["title"], it->second.first);
      EXPECT_EQ(b["title"], "Book " + std::to_string(b["book_id"].get<std::int64_t>()));
      EXPECT_EQ(b["category"], it->second.second);
    }
    const json expected = ReferenceTopBooks(bookstore_->ReferenceDsn(), body["since"].get<std::string>(), k);
    EXPECT_FALSE(expected.empty());
    EXPECT_EQ(got, expected);
    EXPECT_FALSE(body["phases"].empty());
  }
}

TEST_F(BookstoreServiceTest, CategoryAveragesEqualTheReferenceServer) {
  auto client = Client();
  for (int days : {30, 3650}) {
    const auto reply = client.Get("/reports/category-avg?days=" + std::to_string(days));
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json body = Body(reply);
    pqxx::connection c{bookstore_->ReferenceDsn().Reveal()};
    pqxx::read_transaction tx{c};
    json expected = json::array();
    for (const auto& row : tx.exec_params(
             "SELECT category, count(*), avg(amount)::text FROM ("
             "  SELECT b.category, sum(i.quantity * i.unit_price) AS amount FROM order_items i"
             "  JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id"
             "  JOIN books b ON b.book_id = i.book_id WHERE o.ordered_at >= $1::timestamptz"
             "  GROUP BY i.customer_id, i.order_id, b.category) per_order GROUP BY category ORDER BY category",
             body["since"].get<std::string>())) {
      expected.push_back({{"category", row[0].as<std::string>()},
                          {"orders", row[1].as<std::int64_t>()},
                          {"avg_amount", row[2].as<std::string>()}});
    }
    EXPECT_EQ(expected.size(), 6U);
    EXPECT_EQ(body["categories"], expected) << "days " << days;
  }
}

TEST_F(BookstoreServiceTest, MetricsAreValidPrometheusText) {
  auto client = Client();
  (void)client.Get("/customers/1/orders");
  (void)client.Get("/reports/top-books");
  const auto reply = client.Get("/metrics");
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.Header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  static const std::regex kSample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?([0-9.e+-]+|\+Inf|NaN)$)");
  static const std::regex kComment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::istringstream in(reply.body);
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(std::regex_match(line, kSample) || std::regex_match(line, kComment)) << line;
    samples += line.starts_with("#") ? 0 : 1;
  }
  EXPECT_GT(samples, 40);
  for (int shard = 0; shard < bookstore_->ShardCount(); ++shard) {
    const std::string labels = "{shard=\"" + std::to_string(shard) + "\",name=\"shard" + std::to_string(shard) + "\"}";
    EXPECT_GE(MetricValue(reply.body, "shardkit_pool_acquired_total" + labels).value_or(-1), 1) << labels;
    EXPECT_EQ(MetricValue(reply.body, "shardkit_directory_buckets" + labels).value_or(-1),
              64 / bookstore_->ShardCount());
  }
  EXPECT_EQ(MetricValue(reply.body, "shardkit_directory_version").value_or(-1), 1);
  EXPECT_GE(MetricValue(reply.body, "shardkit_scatter_calls_total{fanout=\"cross_shard\"}").value_or(-1), 3);
  EXPECT_GE(MetricValue(reply.body,
                        "bookstore_http_requests_total{route=\"/customers/{id}/orders\",method=\"GET\",code=\"200\"}")
                .value_or(-1),
            1);
  EXPECT_EQ(MetricValue(reply.body, "bookstore_order_ids_lease_valid").value_or(-1), 1);
  // Counters count: one more request of a route shows.
  const auto before =
      MetricValue(reply.body, "bookstore_http_request_duration_seconds_count{route=\"/reports/top-books\"}")
          .value_or(-1);
  (void)client.Get("/reports/top-books");
  const auto after = MetricValue(client.Get("/metrics").body,
                                 "bookstore_http_request_duration_seconds_count{route=\"/reports/top-books\"}");
  EXPECT_EQ(after.value_or(-1), before + 1);
}

// The reports follow a bucket move: called in a loop while a bucket moves
// to the other shard and back, every answer is a 200 with the same rows.
TEST_F(BookstoreServiceTest, ReportsAnswerThroughABucketMove) {
  auto first = Client();
  const std::string avg_before = Body(first.Get("/reports/category-avg?days=3650"))["categories"].dump();
  const std::string top_before = Body(first.Get("/reports/top-books?days=3650&k=10"))["books"].dump();
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::string> problems;
  std::thread reports([&] {
    auto client = Client();
    while (!stop.load() && problems.size() < 5) {
      const auto avg = client.Get("/reports/category-avg?days=3650");
      const auto top = client.Get("/reports/top-books?days=3650&k=10");
      if (avg.status != 200 || top.status != 200) {
        problems.push_back(std::to_string(avg.status) + " " + avg.body + " / " + std::to_string(top.status) + " " +
                           top.body);
      } else if (Body(avg)["categories"].dump() != avg_before || Body(top)["books"].dump() != top_before) {
        problems.push_back("another answer: " + avg.body + " / " + top.body);
      }
      ++answered;
    }
  });
  shardkit::MoveOptions quick;
  quick.cleanup_grace = 0ms;
  shardkit::BucketMover mover{bookstore_->Config(), quick};
  const shardkit::BucketId bucket{5};
  (void)mover.Move(bucket, shardkit::ShardId{1});
  const int after_first = answered.load();
  (void)mover.Move(bucket, shardkit::ShardId{0});  // back: the other tests expect the even split
  EXPECT_TRUE(WaitFor([&] { return answered.load() >= after_first + 5; }));
  stop = true;
  reports.join();
  EXPECT_EQ(problems, std::vector<std::string>{});
  EXPECT_GT(answered.load(), 5);
}

// ----------------------------------------------- services of their own

TEST(BookstoreServiceFailures, AnUnreachableShardAnswers503NamingIt) {
  ScratchBookstore bookstore("bookstore_service_down");
  const int down = bookstore.ShardCount() - 1;
  const auto config = bookstore.WriteConfig(
      "down.toml", std::make_pair(down, "host=127.0.0.1 port=" + std::to_string(ClosedPort()) +
                                            " dbname=bookstore user=bookstore connect_timeout=2"));
  Service service(config);
  HttpClient client("127.0.0.1", service.Port());
  const std::string name = "shard" + std::to_string(down);

  const auto check_503 = [&](const HttpReply& reply) {
    EXPECT_EQ(reply.status, 503) << reply.body;
    EXPECT_EQ(reply.Header("retry-after"), "1");
    const json body = Body(reply);
    EXPECT_EQ(body["shard"], down) << reply.body;
    EXPECT_EQ(body["shard_name"], name) << reply.body;
    EXPECT_NE(body["error"].get<std::string>().find("shard " + std::to_string(down)), std::string::npos) << reply.body;
  };
  const int on_down = bookstore.CustomerOn(down);
  SCOPED_TRACE("customer " + std::to_string(on_down));
  check_503(client.Get("/customers/" + std::to_string(on_down) + "/orders"));
  EXPECT_EQ(Body(client.Get("/customers/" + std::to_string(on_down) + "/orders"))["sqlstate"], "08006");
  check_503(
      client.Post("/orders", json{{"customer_id", on_down}, {"items", {{{"book_id", 1}, {"quantity", 1}}}}}.dump()));
  const auto top = client.Get("/reports/top-books");
  check_503(top);
  EXPECT_EQ(Body(top)["failed_shards"][0]["sqlstate"], "08006");
  check_503(client.Get("/reports/category-avg"));
  // The healthy shard still serves its customers.
  EXPECT_EQ(client.Get("/customers/" + std::to_string(bookstore.CustomerOn(0)) + "/orders").status, 200);
  const auto health = client.Get("/health");
  EXPECT_EQ(health.status, 503);
  const json body = Body(health);
  EXPECT_NE(body["error"].get<std::string>().find(name), std::string::npos);
  EXPECT_TRUE(body["shards"][0]["reachable"].get<bool>());
  EXPECT_FALSE(body["shards"][down]["reachable"].get<bool>());
  EXPECT_EQ(body["shards"][down]["sqlstate"], "08006");
}

TEST(BookstoreServiceFailures, ShutdownFinishesRequestsInProgressAndReleasesTheLease) {
  ScratchBookstore bookstore("bookstore_service_stop");
  Service service(bookstore.WriteConfig("shardkit.toml"));
  const auto port = service.Port();
  HttpClient client("127.0.0.1", port);
  const int worker = Body(client.Get("/health"))["order_ids"]["worker_id"].get<int>();
  const std::string lease_sql =
      "SELECT count(*) FROM shardkit_worker_ids WHERE id_space = 'bookstore-lab-orders' "
      "AND worker_id = " +
      std::to_string(worker) + " AND owner IS NOT NULL";
  EXPECT_EQ(CountOn(bookstore.CatalogDsn(), lease_sql), 1);

  // A request that has begun to arrive: headers not yet complete.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket in_progress{io};
  in_progress.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  boost::asio::write(in_progress, boost::asio::buffer(std::string("GET /health HTTP/1.1\r\nHost: test\r\n")));
  const auto reading = [&] {
    return MetricValue(client.Get("/metrics").body, "bookstore_http_connections{state=\"reading\"}").value_or(0) >= 1;
  };
  ASSERT_TRUE(WaitFor(reading));
  // An idle kept-alive connection (the client's) is closed by the shutdown.

  service.Proc().Signal(SIGTERM);
  ASSERT_TRUE(service.Proc().WaitForOutput("shutting down", 10s)) << service.Proc().Output();
  // New connections are refused from now on.
  const auto refused = [&] {
    boost::asio::ip::tcp::socket probe{io};
    boost::system::error_code ec;
    probe.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
    return ec == boost::asio::error::connection_refused;
  };
  ASSERT_TRUE(WaitFor(refused)) << service.Proc().Output();
  EXPECT_FALSE(service.Proc().WaitForExit(0ms).has_value()) << "exited with a request in progress";

  // The request in progress completes and is answered, with Connection: close.
  boost::asio::write(in_progress, boost::asio::buffer(std::string("\r\n")));
  std::string response;
  boost::system::error_code ec;
  boost::asio::read(in_progress, boost::asio::dynamic_buffer(response), ec);  // until the server closes
  EXPECT_EQ(ec, boost::asio::error::eof);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;

  const auto status = service.Proc().WaitForExit(20s);
  ASSERT_TRUE(status.has_value()) << service.Proc().Output();
  EXPECT_EQ(*status, 0) << service.Proc().Output();
  const std::string output = service.Proc().Output();
  EXPECT_NE(output.find("worker id " + std::to_string(worker) + " released"), std::string::npos) << output;
  EXPECT_NE(output.find("pools drained"), std::string::npos) << output;
  // The lease row is released (not merely left to expire).
  EXPECT_EQ(CountOn(bookstore.CatalogDsn(), lease_sql), 0);
  // No connection of the service is left on any server.
  for (int s = 0; s < bookstore.ShardCount(); ++s) {
    EXPECT_TRUE(WaitFor([&] {
      return CountOn(bookstore.ShardDsn(s),
                     "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> "
                     "pg_backend_pid()") == 0;
    })) << "shard "
        << s;
  }
}

TEST(BookstoreServiceFailures, ABadConfigurationStopsTheServiceWithTheKeyNamed) {
  const auto path = std::filesystem::temp_directory_path() / ("bookstore_bad_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[pool]\nmax_size = 0\n[[shard]]\ndsn = \"host=127.0.0.1 password=s3cret-Hx\"\n";
  Process process({BOOKSTORE_SERVICE_PATH, "--config", path.string(), "--listen", "127.0.0.1:0"});
  const auto status = process.WaitForExit(30s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  EXPECT_NE(process.Output().find("pool.max_size"), std::string::npos) << process.Output();
  EXPECT_EQ(process.Output().find("s3cret-Hx"), std::string::npos) << process.Output();

  // Without a catalog there is nowhere to lease order-id worker ids from.
  std::ofstream(path) << "[[shard]]\ndsn = \"host=127.0.0.1 port=" << ClosedPort() << " password=s3cret-Hx\"\n";
  Process no_catalog({BOOKSTORE_SERVICE_PATH, "--config", path.string(), "--listen", "127.0.0.1:0"});
  const auto no_catalog_status = no_catalog.WaitForExit(30s);
  std::filesystem::remove(path);
  ASSERT_TRUE(no_catalog_status.has_value());
  EXPECT_EQ(*no_catalog_status, 1);
  EXPECT_NE(no_catalog.Output().find("catalog.dsn"), std::string::npos) << no_catalog.Output();
  EXPECT_EQ(no_catalog.Output().find("s3cret-Hx"), std::string::npos) << no_catalog.Output();
}

TEST(BookstoreLoad, ABoundedLoadIsAnsweredAndSummarised) {
  ScratchBookstore bookstore("bookstore_service_load");
  Service service(bookstore.WriteConfig("shardkit.toml"));
  Process load({BOOKSTORE_LOAD_PATH, "--port", std::to_string(service.Port()), "--requests", "300", "--duration-s",
                "120", "--concurrency", "4", "--customers", "1-299", "--books", "1-60", "--json"});
  const auto status = load.WaitForExit(180s);
  ASSERT_TRUE(status.has_value()) << load.Output();
  EXPECT_EQ(*status, 0) << load.Output();
  const json summary = json::parse(load.Output());
  EXPECT_EQ(summary["requests"], 300);
  EXPECT_EQ(summary["errors"], 0);
  EXPECT_FALSE(summary["stopped_by_time"].get<bool>());
  std::uint64_t counted = 0;
  for (const auto& [name, endpoint] : summary["endpoints"].items()) {
    counted += endpoint["count"].get<std::uint64_t>();
    EXPECT_GE(endpoint["p99_ms"].get<double>(), endpoint["p50_ms"].get<double>()) << name;
    EXPECT_GE(endpoint["max_ms"].get<double>(), endpoint["p99_ms"].get<double>()) << name;
  }
  EXPECT_EQ(counted, 300U);
  EXPECT_TRUE(summary["endpoints"].contains("POST /orders"));
  // Every order it placed is on its customer's shard.
  std::int64_t stored = 0;
  for (int s = 0; s < bookstore.ShardCount(); ++s) {
    stored += CountOn(bookstore.ShardDsn(s), "SELECT count(*) FROM orders WHERE order_id > 1200");
  }
  EXPECT_EQ(stored, summary["endpoints"]["POST /orders"]["statuses"]["201"].get<std::int64_t>());

  // Bounded in time as well, and loopback only.
  Process timed({BOOKSTORE_LOAD_PATH, "--port", std::to_string(service.Port()), "--requests", "1000000", "--duration-s",
                 "0.5", "--mix", "1,0,0,0", "--customers", "1-299", "--json"});
  ASSERT_TRUE(timed.WaitForExit(60s).has_value());
  EXPECT_TRUE(json::parse(timed.Output())["stopped_by_time"].get<bool>()) << timed.Output();
  Process remote({BOOKSTORE_LOAD_PATH, "--host", "192.0.2.1", "--port", "80", "--requests", "1"});
  EXPECT_EQ(remote.WaitForExit(30s), 2);
  EXPECT_NE(remote.Output().find("not a loopback address"), std::string::npos) << remote.Output();
}

}  // namespace
}  // namespace bookstore::test
