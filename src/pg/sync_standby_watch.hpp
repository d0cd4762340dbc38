// Whether a COMMIT came back without its synchronous standby's
// confirmation. A primary whose commit waits for a synchronous standby
// stops waiting when the statement is cancelled (statement_timeout
// included), warns, and reports the COMMIT as done: the transaction is
// durable on the primary only, and a failover to the standby can lose it.
// The warning comes from PostgreSQL's SyncRepWaitForLSN; its source-function
// field names it in any server language. The watch installs a libpq notice
// receiver on the connection for its lifetime (chained to the previous one,
// libpq's default that calls libpqxx's processor).
//
//   detail::SyncStandbyWatch watch(LibpqHandle(connection));
//   tx.exec("COMMIT");
//   if (watch.Unconfirmed()) throw OutcomeUnknown(... watch.Message() ...);
#pragma once

#include <libpq-fe.h>

#include <string>

namespace shardkit::detail {

class SyncStandbyWatch {
 public:
  explicit SyncStandbyWatch(PGconn* connection) noexcept;
  ~SyncStandbyWatch();
  SyncStandbyWatch(const SyncStandbyWatch&) = delete;
  SyncStandbyWatch& operator=(const SyncStandbyWatch&) = delete;

  [[nodiscard]] bool Unconfirmed() const noexcept { return unconfirmed_; }
  [[nodiscard]] const std::string& Message() const noexcept { return message_; }

 private:
  static void Receive(void* self, const PGresult* notice);
  PGconn* connection_;
  PQnoticeReceiver previous_ = nullptr;
  bool unconfirmed_ = false;
  std::string message_;
};

}  // namespace shardkit::detail
