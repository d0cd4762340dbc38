-- shardkit-migration: targets = shard, reference
-- Read tokens of routed writes by transaction (include/shardkit/routing/
-- read_token.hpp): a write's token no longer needs a statement after its
-- COMMIT. Its bucket check, shardkit_check_buckets(true) below, returns
-- "X H P" as text:
--
--   pg_current_xact_id()                           the write's transaction X
--   pg_snapshot_xmin(pg_current_snapshot())        its horizon H: every
--                                                  transaction older than H
--                                                  had finished by then
--   pg_current_wal_insert_lsn()                    a position P before its commit
--
-- Inside the check, not as columns of its SELECT: measured with pgbench
-- (pipelined BEGIN; the setup; a one-row INSERT; COMMIT, scripts
-- interleaved), the write took +35 us with a SELECT of the position after
-- COMMIT, +25 us with the three values as columns (any column costs a few
-- microseconds of parsing and description, even a constant), +4-5 us
-- computed inside a PL/pgSQL function already called (+11 us more if that
-- function is another one the check calls). So the check takes an
-- argument: shardkit_check_buckets(false) returns the buckets as before,
-- shardkit_check_buckets(true) the token; the argument-less one of
-- sql/044 stays for routers of earlier versions.
--
-- A replica shows the write once it shows X finished (X committed: the
-- write was acknowledged). Two ways to know it, both before the read's
-- snapshot or in it:
--
--   * X is older than the snapshot's xmin: every transaction up to X has
--     finished on the replica (a standby counts a transaction as running
--     from the first WAL record that names it or a later one, until its
--     commit or abort record). Exact for one write or many, but a long
--     transaction on the primary older than X keeps it false.
--   * pg_xact_status(X) said 'committed' in the step before the snapshot
--     (in progress first, then the commit log, so 'committed' means gone
--     from the running set: the snapshot taken after sees it). That shows
--     X only; the token's earlier writes too only if each had finished
--     before X began, i.e. is older than H, which the token keeps (H = 0
--     when it cannot say: concurrent writes combined).
--
-- pg_visible_in_snapshot(X, pg_current_snapshot()) would say it in one
-- call, but on a standby PostgreSQL 15 keeps the running transactions
-- outside the snapshot's list that pg_current_snapshot() shows (all in its
-- subtransaction array), so it answers true for a transaction still running
-- there: measured on this project's local replicas.
--
-- The step before the snapshot (an implicit transaction of its own, ended
-- by a pipeline Sync) becomes
--
--   SELECT set_config('shardkit.replayed', coalesce(pg_last_wal_replay_lsn()::text, ''), false),
--          set_config('shardkit.token_xact', X || ':' || coalesce(CASE WHEN X < pg_snapshot_xmax(pg_current_snapshot())
--                                            THEN pg_xact_status(X) END, ''), false)
--
-- (the guard: pg_xact_status raises for a transaction the replica has not
-- heard of), and the read's first statement calls the function below with
-- (P, X, H). The status is kept with its X, so a value left by an earlier
-- read of the session never answers for another transaction.
--
-- The check (sql/044's body, plus the token).
CREATE OR REPLACE FUNCTION shardkit_check_buckets(p_with_token boolean) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  requested text := current_setting('shardkit.buckets', true);
  wanted    bigint;
  checked   bigint;
  b         integer;
BEGIN
  IF requested ~ '^-?[0-9]{1,19}$' AND current_setting('transaction_isolation') = 'read committed' THEN
    wanted := requested::bigint;
    -- The lowest bit set; the fast path when it is the only one.
    b := position('1' IN reverse(wanted::bit(64)::text)) - 1;
    IF b >= 0 AND wanted = 1::bigint << b THEN
      IF NOT pg_try_advisory_xact_lock_shared(21326, b) THEN
        PERFORM shardkit_read_refuse(b::smallint, true);
      END IF;
      IF (coalesce(pg_sequence_last_value('shardkit_fence_writable'::regclass), 0) >> b) & 1 = 1 THEN
        PERFORM set_config('shardkit.checked', requested, true);
        checked := wanted;
      END IF;
    END IF;
  END IF;
  IF checked IS NULL THEN
    checked := shardkit_check_buckets_by_table();
  END IF;
  IF p_with_token THEN
    RETURN pg_current_xact_id()::text || ' ' || pg_snapshot_xmin(pg_current_snapshot())::text || ' ' ||
           pg_current_wal_insert_lsn()::text;
  END IF;
  RETURN checked::text;
END
$fn$;

-- SQLSTATE SK005 as sql/036: not yet; the library reads the primary or
-- waits. Tokens without a transaction (v1, cross-shard writes) still call
-- the one-argument function of sql/036.

CREATE OR REPLACE FUNCTION shardkit_require_replayed(p_lsn pg_lsn, p_xid xid8, p_horizon xid8) RETURNS pg_lsn
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  seen pg_lsn := shardkit_require_replayed(p_lsn);  -- the position, as sql/036 checks it
  status text := current_setting('shardkit.token_xact', true);
  oldest xid8 := pg_snapshot_xmin(pg_current_snapshot());
BEGIN
  IF p_xid < oldest OR (p_horizon <> '0'::xid8 AND status = p_xid::text || ':committed') THEN
    RETURN seen;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'SK005',
    MESSAGE = format('shardkit: read refused: this replica did not show transaction %s (the writes this read must '
                     'see) finished when the read began (its oldest running transaction: %s)', p_xid, oldest),
    DETAIL = format('status=%s wanted=%s', coalesce(status, ''), p_xid),
    HINT = 'Read the primary, or wait for the replica to replay it (shardkit does one or the other).';
END
$fn$;
