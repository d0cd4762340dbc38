// Rolling a move back, on the target first, then on the source.
#include "resharding/move_run.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

#include "shardkit/errors.hpp"
#include "shardkit/routing/ownership.hpp"

namespace shardkit::detail::mover {

void MoveRun::Abort(const std::string& reason) {
  // Past the point of no return in fact, whatever the journal says?
  std::optional<BucketOwnership> at_source;
  bool source_up = true;
  if (!source_known_clean) {
    try {
      at_source = OwnershipOf(Source());
    } catch (const ShardUnavailable&) {
      source_up = false;
    }
  }
  // A retired source takes the bucket back only while the target has not
  // owned it (it may have accepted writes since): read on the target, which
  // only this run (holding the move's lock) could change.
  bool take_back = false;
  if (at_source && at_source->move_id == record.move_id && at_source->state != OwnershipState::kOwned) {
    std::optional<BucketOwnership> at_target;
    std::string target_unknown;
    try {
      at_target = OwnershipOf(Target());
    } catch (const std::exception& e) {
      target_unknown = FirstLine(e.what());
    }
    const bool target_took_it = at_target && at_target->state != OwnershipState::kIncoming;
    if (at_source->state != OwnershipState::kRetired || target_took_it || !target_unknown.empty()) {
      throw MoveError(
          fmt::format("{}: cannot abort: the source has retired the bucket ({}) and {}; finish it with shardctl move "
                      "resume {}, then move the bucket back",
                      Where(), OwnershipStateName(at_source->state),
                      !target_unknown.empty()
                          ? fmt::format("whether the target owns it is unknown ({})", target_unknown)
                      : target_took_it ? std::string("the target owns it (it may have accepted writes)")
                                       : std::string("its old rows are being deleted"),
                      record.move_id),
          record.move_id, record.bucket);
    }
    take_back = true;
  }
  record.error = reason;
  if (record.state != MoveState::kAborting) {
    Journal(MoveState::kAborting, reason);
    AfterStep();
  }
  std::vector<std::string> pending;
  // The target: subscription first (it would re-apply what we delete), then
  // the copied rows and the 'incoming' row of this move.
  if (!target_known_clean) try {
      DropSubscription();
      pqxx::connection& c = Target();
      const auto mine = OwnershipOf(c);
      if (!mine || (mine->state == OwnershipState::kIncoming && mine->move_id == record.move_id)) {
        const auto tables = RegisteredTables(c);
        pqxx::work tx{c};
        tx.exec("SET LOCAL session_replication_role = replica");
        for (const auto& t : tables) {
          tx.exec(fmt::format("DELETE FROM {} WHERE bucket = {}", t.table, ToInt(record.bucket)));
        }
        tx.exec_params("DELETE FROM shardkit_bucket_ownership WHERE bucket = $1 AND move_id = $2", ToInt(record.bucket),
                       record.move_id);
        tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
        tx.commit();
      }
    } catch (const std::exception& e) {
      pending.push_back(fmt::format("{} (the subscription, copied rows and 'incoming' row of the bucket): {}",
                                    impl.ShardLabel(record.target), FirstLine(e.what())));
    }
  // The source: slot, publication, markers, and the move's mark; a retired
  // bucket is owned again only once the target's copy is gone (else the
  // next abort does it).
  if (!source_known_clean) try {
      if (!source_up) (void)OwnershipOf(Source());
      DropSlot();
      DropPublication();
      const bool target_clean = pending.empty();
      {
        pqxx::work tx{Source()};
        tx.exec_params("DELETE FROM shardkit_move_markers WHERE move_id = $1", record.move_id);
        tx.exec_params(
            "UPDATE shardkit_bucket_ownership SET state = 'owned', move_id = NULL, new_owner = NULL, "
            "updated_at = clock_timestamp() WHERE bucket = $1 AND move_id = $2 AND "
            "(state = 'owned' OR (state = 'retired' AND $3))",
            ToInt(record.bucket), record.move_id, take_back && target_clean);
        tx.commit();
      }
      if (take_back && target_clean) SyncFence(Source());
    } catch (const std::exception& e) {
      pending.push_back(fmt::format("{} (the replication slot and publication {}): {}", impl.ShardLabel(record.source),
                                    record.token, FirstLine(e.what())));
    }
  if (!pending.empty()) {
    const std::string message = fmt::format(
        "{}: the abort could not clean up {}; run shardctl move abort {} again once that is reachable "
        "(a replication slot left on a source keeps its WAL)",
        Where(), Join(pending, "; "), record.move_id);
    try {
      record.error = reason + "; " + message;
      Journal(MoveState::kAborting, message);
    } catch (const std::exception&) {
    }
    throw MoveError(message, record.move_id, record.bucket);
  }
  Journal(MoveState::kAborted, reason);
  AfterStep();
}

}  // namespace shardkit::detail::mover
