// A small blocking HTTP/1.1 client on Boost.Beast, with a timeout on every
// request and one kept-alive connection (reopened when the server closed
// it). Used by the load generator and the service's tests. Not thread-safe:
// one client per thread.
//
//   bookstore::HttpClient client{"127.0.0.1", 8080};
//   auto reply = client.Get("/health");
//   if (reply.status == 200) ...
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace bookstore {

struct HttpReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names in lower case
  [[nodiscard]] std::string Header(const std::string& lower_case_name) const;
};

class HttpClient {
 public:
  HttpClient(std::string host, unsigned short port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Throws std::runtime_error when the server cannot be reached, closes the
  // connection without answering, or the timeout passes.
  // `headers`: more request headers (e.g. a Shardkit-Token).
  HttpReply Request(const std::string& method, const std::string& target, const std::string& body = {},
                    const std::string& content_type = "application/json",
                    const std::map<std::string, std::string>& headers = {});
  HttpReply Get(const std::string& target) { return Request("GET", target); }
  HttpReply Post(const std::string& target, const std::string& json) { return Request("POST", target, json); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bookstore
