#include "pool/pooled_connection.hpp"

#include <poll.h>

#include <pqxx/except>
#include <utility>

#include "pg/libpq_handle.hpp"

namespace shardkit::detail {

namespace {
// The policy object is built inside the libpqxx connection's constructor and
// cannot be handed arguments, so the slot and the open handle travel through
// these variables.
thread_local PGconn** constructing_slot = nullptr;
thread_local PGconn* preconnected = nullptr;
}  // namespace

HandleTrackingConnect::HandleTrackingConnect(const std::string& options)
    : pqxx::connect_direct(options), slot_(constructing_slot) {}

HandleTrackingConnect::handle HandleTrackingConnect::do_startconnect(handle orig) {
  if (orig != nullptr) return orig;
  handle h = std::exchange(preconnected, nullptr);
  if (h == nullptr) {
    throw pqxx::broken_connection(
        "this pooled connection is closed; the pool opens new connections, it never "
        "reconnects one");
  }
  if (slot_ != nullptr) *slot_ = h;
  return h;
}

HandleTrackingConnect::handle HandleTrackingConnect::do_dropconnect(handle orig) noexcept {
  if (slot_ != nullptr) *slot_ = nullptr;
  return pqxx::connect_direct::do_dropconnect(orig);
}

HandleTrackingConnect::handle HandleTrackingConnect::do_disconnect(handle orig) noexcept {
  if (slot_ != nullptr) *slot_ = nullptr;
  return pqxx::connect_direct::do_disconnect(orig);
}

PooledConnection::PooledConnection(UniquePGconn open) {
  // The cancel handle is built here, on the thread that owns the connection
  // now: PQgetCancel reads the PGconn, which only its owner may do.
  if (PGcancel* c = PQgetCancel(open.get()); c != nullptr) {
    cancel = std::shared_ptr<const ConnectionPool::CancelHandle>(new ConnectionPool::CancelHandle(c));
  }
  constructing_slot = handle.get();
  preconnected = open.release();
  try {
    connection = std::make_unique<TrackedConnection>(std::string());
  } catch (...) {
    constructing_slot = nullptr;
    if (preconnected != nullptr) PQfinish(std::exchange(preconnected, nullptr));
    throw;
  }
  constructing_slot = nullptr;
  if (preconnected != nullptr) PQfinish(std::exchange(preconnected, nullptr));  // not taken: cannot happen
    // The pool, not libpqxx, decides what happens to a broken connection: no
    // silent reconnect. Deprecated in libpqxx 6.4 only because 7.x drops
    // reactivation altogether.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  connection->inhibit_reactivation(true);
#pragma GCC diagnostic pop
  PublishHandle(*connection, handle.get());
}

PooledConnection::~PooledConnection() {
  if (watch_id != 0) {
    if (auto* watcher = HangupWatcher::Instance()) watcher->Unwatch(watch_id);
  }
  if (connection) ForgetHandle(*connection);
  connection.reset();
}

bool PooledConnection::WatchForHangup(HangupWatcher::Callback callback, void* context) noexcept {
  auto* watcher = HangupWatcher::Instance();
  if (watcher == nullptr || *handle == nullptr) return false;
  watch_id = watcher->Watch(PQsocket(*handle), callback, context);
  return watch_id != 0;
}

PooledConnection::State PooledConnection::CurrentState() const noexcept {
  PGconn* h = *handle;
  if (h == nullptr || !connection->is_open() || PQstatus(h) != CONNECTION_OK) return State::kBroken;
  switch (PQtransactionStatus(h)) {
    case PQTRANS_IDLE:
      return State::kIdle;
    case PQTRANS_INTRANS:
    case PQTRANS_INERROR:
    case PQTRANS_ACTIVE:
      return State::kInTransaction;
    default:
      return State::kBroken;
  }
}

bool PooledConnection::Reports(const std::vector<PinnedSetting>& settings) const noexcept {
  PGconn* h = *handle;
  if (h == nullptr) return false;
  for (const auto& s : settings) {
    const char* value = PQparameterStatus(h, s.name.c_str());
    if (value == nullptr) return false;
    if (s.value != value && !SameSettingValue(s.value, value)) return false;
  }
  return true;
}

bool PooledConnection::LooksAliveWhileIdle() const noexcept {
  if (CurrentState() != State::kIdle || PeerClosed()) return false;
  pollfd fd{};
  fd.fd = PQsocket(*handle);
  fd.events = POLLIN;
  if (fd.fd < 0) return false;
  const int ready = ::poll(&fd, 1, 0);
  return ready == 0;  // nothing to read, no hang-up
}

}  // namespace shardkit::detail
