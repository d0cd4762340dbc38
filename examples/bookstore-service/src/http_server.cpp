#include "http_server.hpp"

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <csignal>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>

namespace bookstore {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

enum class State : int { kIdle, kReading, kHandling, kWriting, kClosed };

HttpResponse JsonError(http::status status, const std::string& message, unsigned version = 11) {
  HttpResponse response{status, version};
  response.set(http::field::content_type, "application/json");
  response.body() = nlohmann::json{{"error", message}, {"status", static_cast<int>(status)}}.dump() + "\n";
  return response;
}

}  // namespace

class Session;

struct HttpServer::Impl {
  Impl(HttpServerOptions o, Handler h)
      : options(std::move(o)), handler(std::move(h)), workers(static_cast<std::size_t>(std::max(1, options.workers))) {}

  void Accept();
  void Drain(std::chrono::milliseconds drain_timeout);  // on the I/O thread
  void CloseAll();                                      // on the I/O thread
  void Remove(Session* session);                        // on the I/O thread

  HttpServerOptions options;
  Handler handler;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::thread_pool workers;
  asio::steady_timer drain_timer{io};
  std::optional<asio::signal_set> signals;
  std::function<void(int)> on_signal;
  std::atomic<bool> draining{false};

  mutable std::mutex mutex;  // guards what follows: read by Connections() on any thread
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::uint64_t accepted = 0;
  std::uint64_t refused = 0;
};

// One connection. Everything but the handler runs on the I/O thread; the
// server outlives every session (its io_context and workers hold them).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server) : stream_(std::move(socket)), server_(server) {}

  void Start() { WaitForRequest(); }

  // Refuses the connection (over max_connections): 503, then close.
  void Refuse() {
    Write(JsonError(http::status::service_unavailable, "too many connections: the service serves " +
                                                           std::to_string(server_.options.max_connections) +
                                                           " at once; retry shortly"),
          false);
  }

  // Shutdown began: an idle connection closes now unless the next request
  // has begun to arrive; any other finishes its request first.
  void OnDrain() {
    if (state_ != State::kIdle) return;
    beast::error_code ec;
    if (stream_.socket().available(ec) > 0 && !ec) return;
    Close();
  }

  void Close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
    server_.Remove(this);
  }

  [[nodiscard]] State CurrentState() const noexcept { return state_.load(); }

 private:
  void WaitForRequest() {
    state_ = State::kIdle;
    if (buffer_.size() > 0) {
      ReadRequest();
      return;
    }
    // Wait for the first bytes on our own, so that an idle connection is
    // told apart from one whose request is arriving (see OnDrain).
    stream_.expires_after(server_.options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec || self->state_ == State::kClosed) {
        self->Close();
        return;
      }
      self->buffer_.commit(n);
      self->ReadRequest();
    });
  }

  void ReadRequest() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(server_.options.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec == http::error::body_limit) {
      Write(JsonError(http::status::payload_too_large,
                      "the request body is larger than " + std::to_string(server_.options.max_body_bytes) + " bytes"),
            false);
      return;
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof) {
      Close();
      return;
    }
    if (ec) {
      Write(JsonError(http::status::bad_request, "malformed HTTP request: " + ec.message()), false);
      return;
    }
    state_ = State::kHandling;
    stream_.expires_never();
    auto request = std::make_shared<HttpRequest>(parser_->release());
    parser_.reset();
    asio::post(server_.workers, [self = shared_from_this(), request] {
      HttpResponse response;
      try {
        response = self->server_.handler(*request);
      } catch (const std::exception& e) {
        response = JsonError(http::status::internal_server_error, std::string("internal error: ") + e.what(),
                             request->version());
      }
      response.version(request->version());
      const bool keep_alive = request->keep_alive();
      asio::post(self->server_.io, [self, response = std::move(response), keep_alive]() mutable {
        self->Write(std::move(response), keep_alive);
      });
    });
  }

  void Write(HttpResponse response, bool keep_alive) {
    if (state_ == State::kClosed) return;  // closed at the drain deadline meanwhile
    state_ = State::kWriting;
    response_ = std::move(response);
    response_.keep_alive(keep_alive && !server_.draining.load());
    response_.prepare_payload();
    stream_.expires_after(server_.options.read_timeout);
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || self->state_ == State::kClosed) {
        self->Close();
        return;
      }
      if (!self->response_.keep_alive()) {
        self->LingerAndClose();
        return;
      }
      self->WaitForRequest();
    });
  }

  // After a response with "Connection: close": stop sending, then read and
  // drop what the client still sends (the rest of a refused body) until it
  // closes, for a second at most. Closing at once with unread data would
  // reset the connection, and the client could lose the response.
  void LingerAndClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) {
      Close();
      return;
    }
    stream_.expires_after(std::chrono::seconds(1));
    Discard();
  }

  void Discard() {
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || self->state_ == State::kClosed) {
        self->Close();
        return;
      }
      self->Discard();
    });
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpResponse response_;
  std::array<char, 4096> discard_{};
  std::atomic<State> state_{State::kIdle};
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept([self = this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;  // shutting down
    if (!ec) {
      auto session = std::make_shared<Session>(std::move(socket), *self);
      bool refuse = false;
      {
        std::lock_guard lock(self->mutex);
        refuse = self->sessions.size() >= static_cast<std::size_t>(std::max(1, self->options.max_connections));
        ++(refuse ? self->refused : self->accepted);
        self->sessions.emplace(session.get(), session);
      }
      if (refuse) {
        session->Refuse();
      } else {
        session->Start();
      }
    }
    self->Accept();
  });
}

void HttpServer::Impl::Drain(std::chrono::milliseconds drain_timeout) {
  if (draining.exchange(true)) return;
  beast::error_code ec;
  acceptor.close(ec);  // new connections are refused from here on
  drain_timer.expires_after(drain_timeout);
  drain_timer.async_wait([self = this](beast::error_code wait_ec) {
    if (!wait_ec) self->CloseAll();
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mutex);
    for (auto& [raw, weak] : sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->OnDrain();
  bool empty = false;
  {
    std::lock_guard lock(mutex);
    empty = sessions.empty();
  }
  if (empty) io.stop();
}

void HttpServer::Impl::CloseAll() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mutex);
    for (auto& [raw, weak] : sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->Close();
  io.stop();
}

void HttpServer::Impl::Remove(Session* session) {
  bool done = false;
  {
    std::lock_guard lock(mutex);
    sessions.erase(session);
    done = draining.load() && sessions.empty();
  }
  if (done) io.stop();
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() {
  impl_->io.stop();
  impl_->workers.join();
}

boost::asio::ip::tcp::endpoint HttpServer::Listen() {
  const tcp::endpoint endpoint{asio::ip::make_address(impl_->options.address), impl_->options.port};
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen(asio::socket_base::max_listen_connections);
  return impl_->acceptor.local_endpoint();
}

void HttpServer::OnSignal(std::function<void(int)> callback) {
  impl_->on_signal = std::move(callback);
  impl_->signals.emplace(impl_->io, SIGINT, SIGTERM);
  struct Waiter {
    Impl* impl;
    void operator()(const beast::error_code& ec, int signal_number) const {
      if (ec) return;
      if (impl->draining.load()) {
        impl->CloseAll();  // a second signal: stop waiting for anyone
        return;
      }
      if (impl->on_signal) impl->on_signal(signal_number);
      impl->signals->async_wait(*this);
    }
  };
  impl_->signals->async_wait(Waiter{impl_.get()});
}

void HttpServer::Run() {
  impl_->Accept();
  impl_->io.run();
  // Handlers still running (their connection was closed at the drain
  // deadline) finish before the server goes.
  impl_->workers.join();
}

void HttpServer::Shutdown(std::chrono::milliseconds drain_timeout) {
  asio::post(impl_->io, [impl = impl_.get(), drain_timeout] { impl->Drain(drain_timeout); });
}

HttpConnectionCounts HttpServer::Connections() const {
  HttpConnectionCounts counts;
  std::lock_guard lock(impl_->mutex);
  counts.accepted = impl_->accepted;
  counts.refused = impl_->refused;
  for (const auto& [raw, weak] : impl_->sessions) {
    const auto session = weak.lock();
    if (!session) continue;
    switch (session->CurrentState()) {
      case State::kIdle:
        ++counts.idle;
        break;
      case State::kReading:
        ++counts.reading;
        break;
      case State::kHandling:
        ++counts.handling;
        break;
      case State::kWriting:
        ++counts.writing;
        break;
      case State::kClosed:
        break;
    }
  }
  return counts;
}

bool HttpServer::Draining() const noexcept {
  return impl_->draining.load();
}

}  // namespace bookstore
