// Private: a thin RAII wrapper around a libpq connection, for what libpqxx
// 6.4 does not offer: replication-protocol commands (CREATE_REPLICATION_SLOT
// ... EXPORT_SNAPSHOT) and streaming COPY from one server straight into
// another without parsing rows.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/core/dsn.hpp"

namespace shardkit::detail {

// Thrown for any failure; `sqlstate` is empty when there is none (a lost
// connection). The message is redacted (no passwords).
struct RawPgError : std::runtime_error {
  RawPgError(const std::string& message, std::string state, bool lost, bool timeout = false)
      : std::runtime_error(message), sqlstate(std::move(state)), connection_lost(lost), timed_out(timeout) {}
  std::string sqlstate;
  bool connection_lost = false;
  bool timed_out = false;
};

class RawConnection {
 public:
  // Connects (blocking); throws RawPgError naming `what` ("shard 2 (admin)").
  RawConnection(const Dsn& dsn, std::string what);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Runs SQL (simple protocol) and returns the rows of the last result as
  // text (NULL as an empty string, see IsNull on the rows' own flags).
  struct Rows {
    std::vector<std::string> columns;
    std::vector<std::vector<std::string>> values;
  };
  // With a timeout, a statement still running then is cancelled and
  // RawPgError says it timed out (timed_out set): for replication commands,
  // which statement_timeout does not cover.
  Rows Exec(const std::string& sql, std::optional<std::chrono::milliseconds> timeout = {});

  // COPY ... TO STDOUT on this connection into COPY ... FROM STDIN on `into`
  // (already in COPY IN mode after this call starts it). `on_chunk(bytes)`
  // is called now and then with the bytes moved so far. Returns the rows the
  // target reports ("COPY n").
  std::int64_t CopyInto(const std::string& copy_out_sql, RawConnection& into, const std::string& copy_in_sql,
                        const std::function<void(std::int64_t rows_so_far)>& on_progress = {});

  [[nodiscard]] const std::string& What() const noexcept { return what_; }
  [[nodiscard]] bool Alive() const noexcept;

 private:
  [[noreturn]] void Fail(const std::string& doing, PGresult* result);
  PGconn* conn_ = nullptr;
  std::string what_;
};

// dsn with `key=value` added (key=value form or URI query).
[[nodiscard]] Dsn WithConnectionOption(const Dsn& dsn, const std::string& key, const std::string& value);

}  // namespace shardkit::detail
