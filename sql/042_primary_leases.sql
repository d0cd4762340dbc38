-- shardkit-migration: targets = shard
-- Primary leases (include/shardkit/routing/primary_leases.hpp): a shard's
-- primary commits shardkit's routed writes only while it holds a lease the
-- catalog granted, so a primary deposed by a forced failover while it was
-- unreachable takes no routed write when it comes back, from a router that
-- follows the catalog or from one that does not.
--
-- The lease is one number: shardkit_primary_lease, microseconds since the
-- Unix epoch until which this server may commit. Never set (or 0): no lease
-- is in force here (leases are off in the catalog, or no router granted one
-- yet), and writes are admitted as before. Routers that read the catalog
-- extend it (shardkit_lease_extend) to the catalog's clock plus the lease's
-- time to live, only while the catalog names this server the shard's
-- primary and no failover of the shard is under way. A forced failover
-- that could not fence the old primary waits out the time to live (plus a
-- second for the clocks' difference) before it promotes.
--
-- Checked at COMMIT (and PREPARE TRANSACTION), not when the row is written:
-- a transaction admitted just before its lease ran out cannot commit after
-- it. Only shardkit's transactions are checked (those that ran the bucket
-- fence statement, which sets shardkit.buckets): a server's own sessions,
-- psql, backfills and moves' replication are not, and must be fenced by
-- the operator (a failover's fence does it when it reaches the server).
--
-- The refusal is SQLSTATE 25006 (read_only_sql_transaction), as a fenced
-- primary's: a router that follows the catalog reads the new primary and
-- retries there; one that does not gets the error at its deadline.
--
-- The check exists only while leases are on: shardkit_lease_enforce(true)
-- (shardctl leases --ttl-ms, on every primary before the catalog turns them
-- on) installs it on every sharded table and marks the shard, so a table
-- sharded later gets it too; shardkit_lease_enforce(false) (--off) removes
-- it. With leases off a write pays nothing for them. Both are replicated:
-- a promoted or rebuilt replica enforces as its primary did.
--
-- A sequence for the same reasons as sql/014's: shared by every session,
-- read without a snapshot, written at once (not at COMMIT) and replicated,
-- so a promoted replica starts with its old primary's lease (in force, and
-- extended by the routers once the catalog names it).

CREATE SEQUENCE IF NOT EXISTS shardkit_primary_lease AS bigint MINVALUE 0 START WITH 0 NO CYCLE;
COMMENT ON SEQUENCE shardkit_primary_lease IS
  'shardkit: microseconds since the epoch until which this primary commits shardkit''s writes (0: no lease in force); '
  'written only by shardkit_lease_extend() and shardkit_lease_release()';
GRANT SELECT ON SEQUENCE shardkit_primary_lease TO PUBLIC;

-- The lease's end here, in microseconds since the epoch; 0 if none is in force.
CREATE OR REPLACE FUNCTION shardkit_lease_until() RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
  SELECT coalesce(pg_sequence_last_value('shardkit_primary_lease'::regclass), 0)
$fn$;

-- Extends the lease to p_until_us (never shortens it: two routers' grants
-- race harmlessly). On a standby it does nothing: its lease comes with the
-- WAL. Returns the lease's end. SECURITY DEFINER: routers renew as the
-- application's role, which may not write the sequence itself.
CREATE OR REPLACE FUNCTION shardkit_lease_extend(p_until_us bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
DECLARE
  until_us bigint := shardkit_lease_until();
BEGIN
  IF pg_is_in_recovery() OR p_until_us <= until_us THEN
    RETURN until_us;
  END IF;
  PERFORM setval('shardkit_primary_lease', p_until_us);
  RETURN p_until_us;
END
$fn$;

-- No lease in force any more: writes are admitted without one (leases
-- turned off in the catalog: shardctl leases --off, and every router that
-- renewed one once it reads that they are off).
CREATE OR REPLACE FUNCTION shardkit_lease_release() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
  SELECT setval('shardkit_primary_lease', 0, false)
$fn$;

-- Whether this row's transaction must hold the lease at COMMIT: one of
-- shardkit's (the fence statement set shardkit.buckets) on a server with a
-- lease in force. The trigger's WHEN: false queues nothing. One check per
-- transaction, not per row: the first row that queues it marks the
-- transaction (shardkit.lease_queued, transaction-local), and the check
-- clears the mark when it runs (so rows written after SET CONSTRAINTS ...
-- IMMEDIATE queue one again). A savepoint rolled back drops the queued
-- check and the mark together. CASE: evaluated in this order.
CREATE OR REPLACE FUNCTION shardkit_lease_applies() RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$
  SELECT CASE
           WHEN coalesce(current_setting('shardkit.lease_queued', true), '') = 'on' THEN false
           WHEN coalesce(current_setting('shardkit.buckets', true), '') = '' THEN false
           WHEN shardkit_lease_until() <= 0 THEN false
           ELSE set_config('shardkit.lease_queued', 'on', true) = 'on'
         END
$fn$;

CREATE OR REPLACE FUNCTION shardkit_lease_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  until_us bigint := shardkit_lease_until();
  now_us   bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
  PERFORM set_config('shardkit.lease_queued', '', true);
  IF until_us > 0 AND now_us >= until_us AND NOT pg_is_in_recovery() THEN
    RAISE EXCEPTION USING ERRCODE = '25006',
      MESSAGE = format('shardkit: write refused: this server''s lease as its shard''s primary ran out %s ms ago '
                       '(at %s)', (now_us - until_us) / 1000, to_timestamp(until_us / 1000000.0)),
      DETAIL = format('lease_until_us=%s now_us=%s', until_us, now_us),
      HINT = 'The catalog no longer names this server the shard''s primary (a failover deposed it), or no router '
             'that reads the catalog has renewed its lease: check shardctl shards and shardctl leases.';
  END IF;
  RETURN NULL;
END
$fn$;

-- Present (one row) while this shard enforces leases: tables sharded from
-- then on get the check when they are fenced.
CREATE TABLE IF NOT EXISTS shardkit_lease_enforced (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  since     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The lease's check at COMMIT on one table: a constraint trigger, deferred
-- to the end of the transaction. Created only where it is missing (the
-- CREATE takes a lock that waits for the table's writes in flight).
CREATE OR REPLACE FUNCTION shardkit_install_lease(t regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = t AND tgname = 'shardkit_lease') THEN
    EXECUTE format('CREATE CONSTRAINT TRIGGER shardkit_lease AFTER INSERT OR UPDATE OR DELETE ON %s '
                   'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (shardkit_lease_applies()) '
                   'EXECUTE FUNCTION shardkit_lease_at_commit()', t);
  END IF;
END
$fn$;

-- Leases on (true) or off (false) on this shard's primary: the check on
-- every sharded table and the mark, or neither and no lease in force.
-- Returns how many tables it changed. Refused on a standby (it follows its
-- primary's).
CREATE OR REPLACE FUNCTION shardkit_lease_enforce(p_on boolean) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  t       regclass;
  changed integer := 0;
BEGIN
  IF pg_is_in_recovery() THEN
    RAISE EXCEPTION USING ERRCODE = '25006',
      MESSAGE = 'shardkit: leases are turned on and off on a shard''s primary, not on a standby';
  END IF;
  IF p_on THEN
    INSERT INTO shardkit_lease_enforced DEFAULT VALUES ON CONFLICT (singleton) DO NOTHING;
  ELSE
    DELETE FROM shardkit_lease_enforced;
    PERFORM shardkit_lease_release();
  END IF;
  FOR t IN SELECT s.table_name FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name LOOP
    IF p_on AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = t AND tgname = 'shardkit_lease') THEN
      PERFORM shardkit_install_lease(t);
      changed := changed + 1;
    ELSIF NOT p_on AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = t AND tgname = 'shardkit_lease') THEN
      EXECUTE format('DROP TRIGGER shardkit_lease ON %s', t);
      changed := changed + 1;
    END IF;
  END LOOP;
  RETURN changed;
END
$fn$;

-- Whether this shard enforces leases, and on how many of its sharded tables.
CREATE OR REPLACE FUNCTION shardkit_lease_enforcement(OUT enforced boolean, OUT tables integer, OUT checked integer)
LANGUAGE sql STABLE AS $fn$
  SELECT EXISTS (SELECT 1 FROM shardkit_lease_enforced),
         (SELECT count(*)::integer FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name),
         (SELECT count(*)::integer FROM shardkit_sharded_tables s JOIN pg_trigger g ON g.tgrelid = s.table_name
          WHERE g.tgname = 'shardkit_lease')
$fn$;

-- Every table fenced from now on gets it too while leases are on: sql/010's
-- fence and visibility keep their body under the name
-- shardkit_install_row_fence, and shardkit_install_fence (what enrolling
-- and sharding a table call) installs both.
DO $do$
BEGIN
  IF to_regprocedure('shardkit_install_row_fence(regclass)') IS NULL THEN
    ALTER FUNCTION shardkit_install_fence(regclass) RENAME TO shardkit_install_row_fence;
  END IF;
END
$do$;

CREATE OR REPLACE FUNCTION shardkit_install_fence(t regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM shardkit_install_row_fence(t);
  IF EXISTS (SELECT 1 FROM shardkit_lease_enforced) THEN
    PERFORM shardkit_install_lease(t);
  END IF;
END
$fn$;
