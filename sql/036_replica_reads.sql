-- shardkit-migration: targets = shard
-- Read-your-writes on a shard's replicas (include/shardkit/routing/read_token.hpp,
-- read_policy.hpp). A routed write returns the WAL position of its commit;
-- a read that must see that write may run on a replica only if the replica
-- had replayed that position before the read's snapshot was taken.
--
-- How the library checks it in one round trip (libpq pipeline mode): first,
-- in an implicit transaction of its own ended by a Sync,
--
--   SELECT set_config('shardkit.replayed', coalesce(pg_last_wal_replay_lsn()::text, ''), false);
--
-- then the read's transaction, whose first statement (the bucket fence,
-- which takes the REPEATABLE READ snapshot) also calls
-- shardkit_require_replayed('<position>'). The replay position only grows,
-- and a commit replayed before a snapshot is visible in it, so a position
-- read before the snapshot that is at or after the write's proves that the
-- snapshot sees the write. A position read inside the snapshot's statement
-- would prove nothing (the snapshot may be older than it). A failed first
-- step leaves an older value, which is still a true lower bound.
--
-- SQLSTATE SK005 (shardkit class, as SK001-SK004 of sql/010): the replica
-- has not replayed the position yet; the library reads the primary or waits.
-- The function exists on the primary too (migrations run there and reach the
-- replicas through their WAL); it is only called on replicas.

CREATE OR REPLACE FUNCTION shardkit_require_replayed(p_lsn pg_lsn) RETURNS pg_lsn
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  seen pg_lsn := nullif(current_setting('shardkit.replayed', true), '')::pg_lsn;
BEGIN
  IF seen IS NULL OR seen < p_lsn THEN
    RAISE EXCEPTION USING ERRCODE = 'SK005',
      MESSAGE = format('shardkit: read refused: this replica had replayed the WAL up to %s when the read began, '
                       'not yet %s, where the writes this read must see are',
                       coalesce(seen::text, 'an unknown position'), p_lsn),
      DETAIL = format('replayed=%s wanted=%s', coalesce(seen::text, ''), p_lsn),
      HINT = 'Read the primary, or wait for the replica to replay it (shardkit does one or the other).';
  END IF;
  RETURN seen;
END
$fn$;
