// A move's replication objects on the source and the target: the slot, the
// publication, the subscription, the markers and the lag.
#include "resharding/move_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <thread>

#include "shardkit/config.hpp"
#include "shardkit/routing/ownership.hpp"
#include "shardkit/routing/primaries.hpp"

namespace shardkit::detail::mover {

void MoveRun::DropSlot() {
  pqxx::connection& c = Source();
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    pqxx::nontransaction tx{c};
    const auto rows =
        tx.exec_params("SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1", record.token);
    if (rows.empty()) return;
    if (!rows[0][0].as<bool>()) {
      try {
        tx.exec_params("SELECT pg_drop_replication_slot($1)", record.token);
        return;
      } catch (const pqxx::sql_error& e) {
        // Became active again between the two statements: look again.
        if (Clock::now() > give_up) throw;
      }
    } else if (Clock::now() > give_up) {
      // A walsender still serving a subscription that is gone or disabled.
      tx.exec_params("SELECT pg_terminate_backend($1)", rows[0][1].as<int>());
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void MoveRun::DropSubscription() {
  pqxx::connection& c = Target();
  if (!ObjectExists(c,
                    "SELECT 1 FROM pg_subscription WHERE subname = $1 AND subdbid = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())")) {
    return;
  }
  pqxx::nontransaction tx{c};
  const std::string name = tx.quote_name(record.token);
  // Detached from its slot first, so that DROP needs no connection to the
  // source (which may be down); the slot is dropped on the source by name.
  tx.exec("ALTER SUBSCRIPTION " + name + " DISABLE");
  tx.exec("ALTER SUBSCRIPTION " + name + " SET (slot_name = NONE)");
  tx.exec("DROP SUBSCRIPTION " + name);
}

std::optional<std::int64_t> MoveRun::Lag() {
  try {
    pqxx::nontransaction tx{Source()};
    const auto rows = tx.exec_params(
        "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
        record.token);
    if (rows.empty() || rows[0][0].is_null()) return std::nullopt;
    return std::max<std::int64_t>(0, rows[0][0].as<std::int64_t>());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool MoveRun::AwaitMarker(int marker, Clock::time_point deadline, bool report_lag) {
  pqxx::connection& c = Target();
  auto next_report = Clock::now();
  for (;;) {
    {
      pqxx::nontransaction tx{c};
      if (!tx.exec_params("SELECT 1 FROM shardkit_move_markers WHERE move_id = $1 AND bucket = $2 AND marker = $3",
                          record.move_id, ToInt(record.bucket), marker)
               .empty()) {
        return true;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (report_lag && now >= next_report) {
      Progress("catching up", Lag());
      next_report = now + milliseconds(250);
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

void MoveRun::Subscribe() {
  pqxx::connection& c = Target();
  if (!ObjectExists(c,
                    "SELECT 1 FROM pg_subscription WHERE subname = $1 AND subdbid = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())")) {
    pqxx::nontransaction tx{c};
    const std::string& source_dsn = impl.Shard(record.source).AdminDsn().Reveal();  // the subscription connects with it
    tx.exec(fmt::format(
        "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (create_slot = false, slot_name = {}, "
        "copy_data = false, enabled = true)",
        tx.quote_name(record.token), tx.quote(source_dsn), tx.quote_name(record.token), tx.quote(record.token)));
  }
  Journal(MoveState::kStreaming, "subscription on the target, streaming from the slot");
  AfterStep();
}

void MoveRun::DropReplication() {
  Progress("dropping the subscription, slot and publication");
  DropSubscription();
  DropSlot();
  DropPublication();
  for (pqxx::connection* c : {&Source(), &Target()}) {
    pqxx::nontransaction tx{*c};
    tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
  }
  // The catalog has the flip's version now: the source's refusals may
  // name it.
  if (record.directory_version) {
    pqxx::nontransaction tx{Source()};
    tx.exec_params(
        "UPDATE shardkit_bucket_ownership SET directory_version = $3, updated_at = clock_timestamp() "
        "WHERE bucket = $1 AND move_id = $2 AND state IN ('retired', 'cleaning')",
        ToInt(record.bucket), record.move_id, *record.directory_version);
  }
  // The target owns the bucket since the flip: its writes take the fence's
  // fast path from now on (sql/014; until this, the slow path admits them).
  SyncFence(Target());
  Journal(MoveState::kReplicationDropped, "no subscription, slot or publication left");
  AfterStep();
}

}  // namespace shardkit::detail::mover

namespace shardkit {

using detail::FirstLine;

std::vector<std::string> LeftoverReplicationObjects(const ClusterConfig& as_written) {
  const ClusterConfig config = AtCurrentPrimaries(as_written);
  std::vector<std::string> found;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    const auto& shard = config.shards[i];
    try {
      pqxx::connection c{WithConnectTimeout(shard.AdminDsn(), std::chrono::milliseconds(5000)).Reveal()};
      pqxx::read_transaction tx{c};
      for (const auto& row : tx.exec(
               "SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE slot_name LIKE 'shardkit\\_move\\_%' "
               "AND database = current_database() "
               "UNION ALL SELECT 'publication ' || pubname FROM pg_publication WHERE pubname LIKE "
               "'shardkit\\_move\\_%' "
               "UNION ALL SELECT 'subscription ' || subname FROM pg_subscription WHERE subname LIKE "
               "'shardkit\\_move\\_%' AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
               "ORDER BY 1")) {
        found.push_back(fmt::format("{} on {}", row[0].c_str(), shard.name));
      }
    } catch (const std::exception& e) {
      found.push_back(fmt::format("{} unreachable: {}", shard.name, FirstLine(e.what())));
    }
  }
  return found;
}

}  // namespace shardkit
