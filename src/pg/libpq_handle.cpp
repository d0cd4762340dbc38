// detail::LibpqHandle: the handles the pool's connection policy publishes,
// and libpqxx's own route to a transaction's handle.
#include "pg/libpq_handle.hpp"

#include <mutex>
#include <pqxx/connection_base>
#include <pqxx/largeobject>
#include <shared_mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>

namespace shardkit::detail {
namespace {

static_assert(std::is_same_v<pqxx::internal::pq::PGconn, PGconn>, "libpqxx's PGconn is libpq's");

// Read by every pipelined statement, written when the pool opens or closes a
// connection.
struct Published {
  std::shared_mutex mutex;
  std::unordered_map<const pqxx::connection_base*, PGconn* const*> slots;
};

Published& Handles() {
  static Published* published = new Published;  // never destroyed: leases may outlive static destruction
  return *published;
}

// largeobject::raw_connection is libpqxx's protected way for its large-object
// classes to reach the handle of a transaction's connection.
struct TransactionHandle : pqxx::largeobject {
  using pqxx::largeobject::raw_connection;
};

}  // namespace

PGconn* LibpqHandle(const pqxx::connection_base& connection) noexcept {
  Published& handles = Handles();
  std::shared_lock lock(handles.mutex);
  const auto it = handles.slots.find(&connection);
  return it == handles.slots.end() ? nullptr : *it->second;
}

PGconn* LibpqHandle(const pqxx::dbtransaction& transaction) noexcept {
  return TransactionHandle::raw_connection(transaction);
}

bool ReportsReadOnly(const pqxx::connection_base& connection) noexcept {
  PGconn* handle = LibpqHandle(connection);
  if (handle == nullptr) return false;
  const char* value = PQparameterStatus(handle, "default_transaction_read_only");
  return value != nullptr && std::string_view(value) == "on";
}

void PublishHandle(const pqxx::connection_base& connection, PGconn* const* slot) {
  Published& handles = Handles();
  std::unique_lock lock(handles.mutex);
  handles.slots[&connection] = slot;
}

void ForgetHandle(const pqxx::connection_base& connection) noexcept {
  Published& handles = Handles();
  std::unique_lock lock(handles.mutex);
  handles.slots.erase(&connection);
}

}  // namespace shardkit::detail
