-- shardkit-migration: targets = shard, reference
-- The fence of sql/010 and 013 (same triggers, guarantees and errors) with a
-- fast path that reads no table: a write to a bucket whose bit is set in the
-- sequence shardkit_fence_writable is admitted after the shared advisory
-- lock and one read of that word; every other write takes 013's path
-- (shardkit_fence_admit: the ownership row, then refusal or admission).
--
-- The word: bit b set means "bucket b is owned here, and its ownership has
-- not changed since the word was last synchronised with the table". A
-- sequence because its value is shared by all sessions, read by
-- pg_sequence_last_value() as a plain expression (no query, no snapshot), and
-- written by setval() at once, not at COMMIT.
--   - A bit is cleared by any change of its bucket's 'owned' row (delete,
--     update of state or bucket, truncate: the trigger below, ENABLE ALWAYS
--     so replica mode does not skip it), immediately, before the change can
--     commit. A change that then rolls back leaves the bit clear: the writes
--     take the slow path, which is right, until the next sync. (A bucket
--     without an 'owned' row has its bit clear already.)
--   - Bits are set only by shardkit_fence_sync(), which recomputes the whole
--     word from the committed 'owned' rows. Both hold the advisory lock
--     (21323, 64) to the end of their transaction, so a sync reads the table
--     only after every change that cleared a bit has committed or rolled back,
--     and no change can clear a bit between its read and its setval. A change
--     that makes a bucket owned takes no lock: a sync that misses it because
--     it has not committed yet leaves the bit clear, which is safe.
-- Hence a set bit is never older than the ownership row it stands for. A
-- move retires a bucket only while it holds the freeze (the exclusive lock
-- the fast path's shared lock excludes), so a writer admitted by the word
-- keeps the bucket to the end of its transaction exactly as with 013. The
-- fast path is for READ COMMITTED only: REPEATABLE READ and SERIALIZABLE keep
-- 013's check against the transaction's snapshot.
--
-- shardkit calls shardkit_fence_sync() after enrolling a shard (shardctl
-- shards enroll, every lab/cluster start) and when a move made the target
-- the owner; after editing shardkit_bucket_ownership by hand, call it
-- yourself (until then the edited buckets are checked the slow way,
-- correctly). After restoring a shard from a dump, call it before writers
-- come back: pg_dump saves a sequence's value outside the snapshot of the
-- tables, so a dump taken during a move can carry a bit its ownership rows
-- do not justify. The sequence is shardkit's own: never call nextval() or
-- setval() on it.
--
-- Measured with bench/move_bench (one order + 3 items per transaction, one
-- statement per row, fenced / unfenced shard, the client and the server
-- backends pinned): the figures are in bench/README.md.

CREATE SEQUENCE IF NOT EXISTS shardkit_fence_writable AS bigint
  MINVALUE -9223372036854775808 MAXVALUE 9223372036854775807 START WITH 0 NO CYCLE;
COMMENT ON SEQUENCE shardkit_fence_writable IS
  'shardkit: bit b set = bucket b is owned here (the fence''s fast path); written only by shardkit_fence_sync() '
  'and the ownership trigger';
GRANT SELECT ON SEQUENCE shardkit_fence_writable TO PUBLIC;

-- Clears the bit of an owned bucket whose ownership row changes (row
-- trigger), or every bit (TRUNCATE). Rows that were not 'owned' have their
-- bit clear already, so inserting, or changing an incoming or retired row,
-- takes no lock: a move's copy transaction (which inserts the incoming row
-- and then copies for seconds) must not hold up another move's cutover.
-- Every change marks the transaction, for shardkit_fence_sync()'s check.
CREATE OR REPLACE FUNCTION shardkit_fence_unmark() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  keep bigint := 0;
BEGIN
  PERFORM set_config('shardkit.ownership_changed', 'on', true);
  IF TG_LEVEL = 'ROW' THEN
    IF TG_OP = 'INSERT' THEN
      RETURN NULL;
    END IF;
    IF OLD.state <> 'owned' THEN
      RETURN NULL;
    END IF;
    keep := ~(1::bigint << OLD.bucket);
  END IF;
  PERFORM pg_advisory_xact_lock(21323, 64);
  PERFORM setval('shardkit_fence_writable', coalesce(pg_sequence_last_value('shardkit_fence_writable'), 0) & keep);
  RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS shardkit_fence_unmark ON shardkit_bucket_ownership;
CREATE TRIGGER shardkit_fence_unmark AFTER INSERT OR DELETE OR UPDATE OF state, bucket ON shardkit_bucket_ownership
  FOR EACH ROW EXECUTE FUNCTION shardkit_fence_unmark();
ALTER TABLE shardkit_bucket_ownership ENABLE ALWAYS TRIGGER shardkit_fence_unmark;
DROP TRIGGER IF EXISTS shardkit_fence_unmark_all ON shardkit_bucket_ownership;
CREATE TRIGGER shardkit_fence_unmark_all BEFORE TRUNCATE ON shardkit_bucket_ownership
  FOR EACH STATEMENT EXECUTE FUNCTION shardkit_fence_unmark();
ALTER TABLE shardkit_bucket_ownership ENABLE ALWAYS TRIGGER shardkit_fence_unmark_all;

-- Sets the word to the buckets owned here, as committed; returns it. Call it
-- in READ COMMITTED, in a transaction that has not changed the ownership
-- (after that transaction's COMMIT): SK004 otherwise.
CREATE OR REPLACE FUNCTION shardkit_fence_sync() RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  word bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed'
     OR current_setting('shardkit.ownership_changed', true) = 'on' THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = 'shardkit: shardkit_fence_sync() must run in READ COMMITTED, after the COMMIT of any change '
                'of shardkit_bucket_ownership',
      HINT = 'Commit first, then run SELECT shardkit_fence_sync() in a transaction of its own.';
  END IF;
  PERFORM pg_advisory_xact_lock(21323, 64);
  -- A statement after the lock: its snapshot includes every change that
  -- held the lock before.
  SELECT coalesce(bit_or(1::bigint << bucket), 0) INTO word FROM shardkit_bucket_ownership WHERE state = 'owned';
  PERFORM setval('shardkit_fence_writable', word);
  RETURN word;
END
$fn$;

-- The fast path, inlined by the planner where it is used. CASE, not AND: the
-- shared lock must be held before the word is read.
CREATE OR REPLACE FUNCTION shardkit_fence_fast(b smallint) RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$
  SELECT CASE WHEN pg_try_advisory_xact_lock_shared(21323, b)
              THEN ((pg_sequence_last_value('shardkit_fence_writable'::regclass) >> b) & 1) = 1
                   AND current_setting('transaction_isolation') = 'read committed'
              ELSE false END
$fn$;

-- Whether sql/013's slow path already admitted this transaction to `b`.
CREATE OR REPLACE FUNCTION shardkit_fence_admitted(b smallint) RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$
  SELECT ((coalesce(nullif(current_setting('shardkit.fence_admitted', true), ''), '0')::bigint >> b) & 1) = 1
$fn$;

-- The row trigger (sql/010 installs it: BEFORE INSERT OR UPDATE OR DELETE,
-- FOR EACH ROW; COPY included; not fired by logical replication's apply):
-- the row's bucket (an UPDATE's or DELETE's old one, and an UPDATE's new one
-- when it changes) passes the fast path, or was admitted earlier in the
-- transaction, or goes through shardkit_fence_admit().
CREATE OR REPLACE FUNCTION shardkit_fence() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NOT shardkit_fence_fast(NEW.bucket) AND NOT shardkit_fence_admitted(NEW.bucket) THEN
      PERFORM shardkit_fence_admit(NEW.bucket, TG_TABLE_NAME);
    END IF;
    RETURN NEW;
  END IF;
  IF NOT shardkit_fence_fast(OLD.bucket) AND NOT shardkit_fence_admitted(OLD.bucket) THEN
    PERFORM shardkit_fence_admit(OLD.bucket, TG_TABLE_NAME);
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  IF NEW.bucket IS DISTINCT FROM OLD.bucket
     AND NOT shardkit_fence_fast(NEW.bucket) AND NOT shardkit_fence_admitted(NEW.bucket) THEN
    PERFORM shardkit_fence_admit(NEW.bucket, TG_TABLE_NAME);
  END IF;
  RETURN NEW;
END
$fn$;

SELECT shardkit_fence_sync();
