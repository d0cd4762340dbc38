#include "pg/sync_standby_watch.hpp"

#include <cstring>

namespace shardkit::detail {

SyncStandbyWatch::SyncStandbyWatch(PGconn* connection) noexcept : connection_(connection) {
  if (connection_ != nullptr) previous_ = PQsetNoticeReceiver(connection_, &SyncStandbyWatch::Receive, this);
}

SyncStandbyWatch::~SyncStandbyWatch() {
  // libpq's default receiver ignores its argument (it calls the processor
  // the notice carries), so restoring it needs none.
  if (connection_ != nullptr) (void)PQsetNoticeReceiver(connection_, previous_, nullptr);
}

void SyncStandbyWatch::Receive(void* self, const PGresult* notice) {
  auto* watch = static_cast<SyncStandbyWatch*>(self);
  const char* function = PQresultErrorField(notice, PG_DIAG_SOURCE_FUNCTION);
  if (function != nullptr && std::strcmp(function, "SyncRepWaitForLSN") == 0) {
    watch->unconfirmed_ = true;
    const char* primary = PQresultErrorField(notice, PG_DIAG_MESSAGE_PRIMARY);
    const char* detail = PQresultErrorField(notice, PG_DIAG_MESSAGE_DETAIL);
    watch->message_ =
        std::string(primary != nullptr ? primary : "") + (detail != nullptr ? std::string(" ") + detail : "");
  }
  if (watch->previous_ != nullptr) watch->previous_(nullptr, notice);
}

}  // namespace shardkit::detail
