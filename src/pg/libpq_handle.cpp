// detail::LibpqHandle: reads libpqxx 6's private connection_base::m_conn;
// detail::AdoptResult calls its private (exported) make_result.
//
// An explicit instantiation may name a private member ([temp.spec.general]:
// access checking does not apply to the names in it), which is the standard
// way to reach a member a library keeps private without patching it. The
// alternatives were worse: libpqxx's own route (largeobject's protected
// raw_connection) needs an open dbtransaction, which the scatter's pipeline
// must not have; and the pool's tracked handle is private to the pool.
#include "pg/libpq_handle.hpp"

#include <pqxx/connection_base>
#include <type_traits>

namespace shardkit::detail {
namespace {

struct ConnMember {
  using type = pqxx::internal::pq::PGconn* pqxx::connection_base::*;
  friend type Member(ConnMember);
};
ConnMember::type Member(ConnMember);

template <class Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type Member(Tag) { return M; }
};

template struct Expose<ConnMember, &pqxx::connection_base::m_conn>;

// connection_base::make_result: private, exported by the library; builds a
// result with the connection's encoding group (which libpqxx keeps private).
struct MakeResultMember {
  using type = pqxx::result (pqxx::connection_base::*)(pqxx::internal::pq::PGresult*, const std::string&);
  friend type Member(MakeResultMember);
};
MakeResultMember::type Member(MakeResultMember);

template struct Expose<MakeResultMember, &pqxx::connection_base::make_result>;

static_assert(std::is_same_v<pqxx::internal::pq::PGconn, PGconn>, "libpqxx's PGconn is libpq's");

}  // namespace

PGconn* LibpqHandle(const pqxx::connection_base& connection) noexcept {
  return connection.*Member(ConnMember{});
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
