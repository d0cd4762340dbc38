-- shardkit-migration: targets = shard, reference
-- The fence of sql/010 (same triggers, guarantees and errors), checked once
-- per (transaction, bucket) instead of once per row.
--
-- Why it may: the first write of a bucket in a transaction takes the shared
-- advisory lock (21323, bucket) and finds the bucket owned. From then on
-- until the transaction ends the bucket cannot be frozen (a freeze waits for
-- that shared lock), hence not retired: a move changes an owned bucket only
-- while it holds the freeze; in REPEATABLE READ and SERIALIZABLE the
-- ownership row is locked FOR SHARE as well. Checking again on the next rows
-- of the same bucket could only find the same answer. (Editing
-- shardkit_bucket_ownership by hand bypasses the freeze, and so this
-- reasoning: a transaction that began writing a bucket before such an edit
-- may keep writing it to its end.)
--
-- How: the buckets a transaction has been admitted to are a 64-bit mask in
-- the transaction-local setting shardkit.fence_admitted (set_config(...,
-- true)): gone at COMMIT or ROLLBACK, and undone with a rolled-back
-- subtransaction, exactly like the advisory lock taken in it. The row
-- trigger tests that bit first, one plain expression; only the first write
-- of each bucket in a transaction takes the lock and reads the ownership.
-- The setting is shardkit's own: do not set it.
--
-- Measured with bench/move_bench (one order + 3 items per transaction,
-- one statement per row, fenced / unfenced shard): sql/010's fence 1.18-1.20x,
-- this one 1.14-1.15x. What the rest is (the same benchmark, parts swapped
-- in): the row-level security policies alone 1.02x, an empty PL/pgSQL row
-- trigger 1.05-1.06x, and the first write of a bucket in each transaction
-- (the shared advisory lock and the ownership read: table and index locks,
-- an executor run) about 0.08x, paid once per transaction: most of it is
-- the first touch of the lock and the table in the transaction, so checking
-- once instead of on all 4 rows saves only the ~0.04x above; transactions
-- with more rows per bucket save more. Measured and not
-- taken: a WHEN clause on the trigger (PostgreSQL prepares a trigger's WHEN
-- expression once per statement: dearer than the call it saves for one-row
-- statements); the check in the INSERT policy's WITH CHECK instead of the
-- trigger (no cheaper: the per-transaction check dominates; and superusers
-- bypass policies); a statement-level trigger with transition tables (one
-- call per statement as well, plus the tables). The row-level security
-- policies stay as sql/010 made them: an INSERT's is WITH CHECK (true);
-- UPDATE and DELETE keep to the visible buckets.

-- Admits the current transaction to writing `p_bucket` (the fence's check,
-- then the mask), or raises SK001/SK002 through shardkit_fence_refuse().
CREATE OR REPLACE FUNCTION shardkit_fence_admit(p_bucket smallint, p_table text DEFAULT '')
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  st text;
  admitted text;
BEGIN
  IF NOT pg_try_advisory_xact_lock_shared(21323, p_bucket) THEN
    PERFORM shardkit_fence_refuse(p_bucket, p_table, true);
  END IF;
  -- READ COMMITTED: a fresh snapshot, taken after the lock was granted.
  -- REPEATABLE READ, SERIALIZABLE: the transaction's snapshot, so the row is
  -- locked FOR SHARE, and a change committed after the snapshot is a
  -- serialization failure, reported as SK001.
  IF current_setting('transaction_isolation') = 'read committed' THEN
    SELECT o.state INTO st FROM shardkit_bucket_ownership o WHERE o.bucket = p_bucket;
  ELSE
    BEGIN
      SELECT o.state INTO st FROM shardkit_bucket_ownership o WHERE o.bucket = p_bucket FOR SHARE;
    EXCEPTION WHEN serialization_failure THEN
      PERFORM shardkit_fence_refuse(p_bucket, p_table, false, true);
    END;
  END IF;
  IF st IS DISTINCT FROM 'owned' THEN
    PERFORM shardkit_fence_refuse(p_bucket, p_table, false);
  END IF;
  admitted := set_config('shardkit.fence_admitted',
                         (coalesce(nullif(current_setting('shardkit.fence_admitted', true), ''), '0')::bigint
                          | (1::bigint << p_bucket))::text,
                         true);
END
$fn$;

-- The row trigger (sql/010 installs it: BEFORE INSERT OR UPDATE OR DELETE,
-- FOR EACH ROW; COPY included; not fired by logical replication's apply).
-- The row's bucket (an UPDATE's or DELETE's old one) is checked unless the
-- transaction was admitted to it; an UPDATE that changes the bucket needs
-- the new one as well.
CREATE OR REPLACE FUNCTION shardkit_fence() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  b smallint;
  st text;
  admitted text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    b := NEW.bucket;
  ELSE
    b := OLD.bucket;
  END IF;
  IF ((coalesce(nullif(current_setting('shardkit.fence_admitted', true), ''), '0')::bigint >> b) & 1) = 0 THEN
    IF NOT pg_try_advisory_xact_lock_shared(21323, b) THEN
      PERFORM shardkit_fence_refuse(b, TG_TABLE_NAME, true);
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
      SELECT o.state INTO st FROM shardkit_bucket_ownership o WHERE o.bucket = b;
    ELSE
      BEGIN
        SELECT o.state INTO st FROM shardkit_bucket_ownership o WHERE o.bucket = b FOR SHARE;
      EXCEPTION WHEN serialization_failure THEN
        PERFORM shardkit_fence_refuse(b, TG_TABLE_NAME, false, true);
      END;
    END IF;
    IF st IS DISTINCT FROM 'owned' THEN
      PERFORM shardkit_fence_refuse(b, TG_TABLE_NAME, false);
    END IF;
    admitted := set_config('shardkit.fence_admitted',
                           (coalesce(nullif(current_setting('shardkit.fence_admitted', true), ''), '0')::bigint
                            | (1::bigint << b))::text,
                           true);
  END IF;
  IF TG_OP = 'INSERT' THEN
    RETURN NEW;
  ELSIF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  IF NEW.bucket IS DISTINCT FROM OLD.bucket THEN
    PERFORM shardkit_fence_admit(NEW.bucket, TG_TABLE_NAME);
  END IF;
  RETURN NEW;
END
$fn$;

-- The fence for one bucket, as a function (programs that want to check
-- before writing); admits the transaction to it. Nothing on a database that
-- is not enrolled.
CREATE OR REPLACE FUNCTION shardkit_fence_check(p_bucket smallint, p_table text DEFAULT '')
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    RETURN;
  END IF;
  PERFORM shardkit_fence_admit(p_bucket, p_table);
END
$fn$;
