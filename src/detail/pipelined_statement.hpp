// One statement on a pooled connection in one round trip: libpq pipeline
// mode sends the transaction's BEGIN [READ ONLY] and SET LOCAL
// statement_timeout, the statement (extended protocol, text parameters, so a
// single statement is enforced and values are never spliced into SQL), the
// COMMIT and a Sync together, and reads the results back in order. The
// server runs them one after another as if sent one by one; after a failing
// step it skips the rest up to the Sync.
//
//   bool reusable = true;
//   pqxx::result rows = detail::RunPipelined(lease.Connection(),
//       {.sql = &sql, .values = &values, .statement_timeout_ms = 500}, reusable);
//   if (!reusable) lease.Discard();
#pragma once

#include <string>
#include <vector>

#include <pqxx/result>

namespace pqxx {
class connection_base;
}

namespace shardkit::detail {

struct PipelinedStatement {
  enum class Wrap {
    kTransaction,    // BEGIN [READ ONLY]; SET LOCAL statement_timeout; statement; COMMIT
    kStatementOnly,  // the statement alone (its own implicit transaction, or an open one's)
  };
  const std::string* sql = nullptr;
  const std::vector<const char*>* values = nullptr;  // text parameters; a null pointer is NULL
  Wrap wrap = Wrap::kTransaction;
  bool read_only = true;                 // kTransaction only
  long long statement_timeout_ms = 0;    // kTransaction only; at least 1
};

// The statement's rows. Failures are thrown as libpqxx throws them for the
// same steps sent one by one, so callers map them the same way:
// pqxx::sql_error carrying the first failing step's SQLSTATE (the server
// skipped the later ones), pqxx::broken_connection when the connection is
// lost or the server reports a class 08 error (for a lost COMMIT of a
// writing transaction it says that the outcome is unknown).
//
// Afterwards the connection is out of pipeline mode with nothing pending,
// and a transaction this call began and that failed is rolled back (one more
// round trip, on failure only). `reusable` is set to false when that could
// not be done: the caller must discard the connection.
[[nodiscard]] pqxx::result RunPipelined(pqxx::connection_base& connection, const PipelinedStatement& statement,
                                        bool& reusable);

}  // namespace shardkit::detail
