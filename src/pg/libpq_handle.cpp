// detail::LibpqHandle: the handles the pool's connection policy publishes,
// and libpqxx's own route to a transaction's handle. detail::AdoptResult:
// the one call into libpqxx's private members left (see below).
#include "pg/libpq_handle.hpp"

#include <mutex>
#include <pqxx/connection_base>
#include <pqxx/largeobject>
#include <shared_mutex>
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

// connection_base::make_result: private, exported by the library; builds a
// result with the connection's encoding group (which libpqxx keeps private).
// libpqxx has no public way to wrap a PGresult, and the scatter's results are
// pqxx::result in the public API (ShardResult::rows). An explicit
// instantiation may name a private member ([temp.spec.general]: access
// checking does not apply to the names in it).
struct MakeResultMember {
  using type = pqxx::result (pqxx::connection_base::*)(pqxx::internal::pq::PGresult*, const std::string&);
  friend type Member(MakeResultMember);
};
MakeResultMember::type Member(MakeResultMember);

template <class Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type Member(Tag) { return M; }
};

template struct Expose<MakeResultMember, &pqxx::connection_base::make_result>;

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

pqxx::result AdoptResult(pqxx::connection_base& connection, PGresult* result, const std::string& query) {
  try {
    return (connection.*Member(MakeResultMember{}))(result, query);
  } catch (...) {
    // make_result reads the client encoding before it owns the result, and
    // throws only then (a closed connection).
    PQclear(result);
    throw;
  }
}

}  // namespace shardkit::detail
