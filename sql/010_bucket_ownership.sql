-- shardkit-migration: targets = shard, reference
-- Bucket ownership on a shard: the fence that a stale router or raw SQL
-- cannot pass, and the visibility rule that keeps scatters exact while a
-- bucket's rows exist on two shards (include/shardkit/ownership.hpp).
--
-- A database becomes a fenced shard when it is enrolled
-- (shardkit_enroll_shard): it then knows its shard number and owns the
-- buckets the directory gives it. Until then (the reference server, a
-- database nobody enrolled) nothing here changes how it behaves.
--
-- Ownership states of a bucket on one shard (no row: not ours, no rows here):
--   owned     ours: writes and reads are served
--   incoming  rows are arriving by a move's copy and replication; not ours yet
--   retired   moved away (new_owner says where); the rows are still here, as
--             of the freeze, for routers that have not seen the new directory
--   cleaning  the rows are being deleted; nobody may read them any more
--
-- Errors (SQLSTATE class SK, "shardkit"), each naming the bucket, this shard,
-- and where known the new owner; the DETAIL line carries the same facts as
-- key=value pairs for programs (shardkit::FenceRefusal parses it):
--   SK001  write refused: the bucket is not owned here (moved, arriving, absent)
--   SK002  write refused: the bucket is frozen for a move's cutover; retry
--   SK003  read refused: a bucket the caller's directory assigns here is not
--          readable here any more (cleaning, absent) or not yet (incoming);
--          raised by shardkit_check_buckets() at the start of a transaction
--   SK004  a sharded table or a shardkit call is used wrongly (the message says how)
--
-- The freeze: every write takes pg_try_advisory_xact_lock_shared(21323, bucket)
-- (21323 = 'SK') and is refused if it cannot; a move freezes a bucket by
-- waiting for the exclusive lock (pg_advisory_lock(21323, bucket), bounded
-- by lock_timeout): it waits for the transactions that already wrote the
-- bucket (they hold the shared lock until they end), and while it waits or
-- holds it, every new write is refused at once.

CREATE TABLE IF NOT EXISTS shardkit_shard_identity (
  singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  shard       integer     NOT NULL CHECK (shard >= 0),
  enrolled_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE shardkit_shard_identity IS
  'shardkit: which shard this database is (one row once enrolled); absent on the reference server';

CREATE TABLE IF NOT EXISTS shardkit_bucket_ownership (
  bucket            smallint    PRIMARY KEY CHECK (bucket BETWEEN 0 AND 63),
  state             text        NOT NULL CHECK (state IN ('owned', 'incoming', 'retired', 'cleaning')),
  -- The directory version that gave the bucket to this shard (owned,
  -- incoming) or took it away (retired, cleaning).
  directory_version bigint      NOT NULL CHECK (directory_version >= 0),
  -- Set while a move of this bucket runs (on both shards) and once retired.
  new_owner         integer     CHECK (new_owner >= 0),
  move_id           bigint,
  updated_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE shardkit_bucket_ownership IS
  'shardkit: the buckets this shard owns, receives, or gave away; the fence reads it on every write';

-- What the fence guards, a move copies and verify checks: tables with a
-- bucket smallint NOT NULL column. Registered with shardkit_shard_table().
CREATE TABLE IF NOT EXISTS shardkit_sharded_tables (
  table_name    regclass    PRIMARY KEY,
  registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Barrier rows of moves: written on the source after the freeze and waited
-- for on the target, so that "the target has everything written before the
-- freeze" does not depend on replication feedback intervals. Published with
-- the bucket's rows (the row filter is on bucket, which the primary key,
-- hence the replica identity, contains).
CREATE TABLE IF NOT EXISTS shardkit_move_markers (
  move_id    bigint      NOT NULL,
  bucket     smallint    NOT NULL CHECK (bucket BETWEEN 0 AND 63),
  marker     integer     NOT NULL,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (move_id, bucket, marker)
);

-- Raises the documented error for a write to `p_bucket` of table `p_table`.
-- Called by the fence only when it refuses, so it may be slow and thorough.
CREATE OR REPLACE FUNCTION shardkit_fence_refuse(p_bucket smallint, p_table text, p_frozen boolean,
                                                 p_snapshot_too_old boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  me   integer;
  o    shardkit_bucket_ownership%ROWTYPE;
  facts text;
  owner_text text;
BEGIN
  SELECT shard INTO me FROM shardkit_shard_identity;
  SELECT * INTO o FROM shardkit_bucket_ownership WHERE bucket = p_bucket;
  -- With an old snapshot (p_snapshot_too_old) the row read here is the old
  -- one: say "changed" rather than a state that is no longer true.
  facts := format('bucket=%s shard=%s state=%s new_owner=%s directory_version=%s move_id=%s table=%s',
                  p_bucket, coalesce(me::text, ''),
                  CASE WHEN p_snapshot_too_old THEN 'changed' ELSE coalesce(o.state, 'absent') END,
                  coalesce(o.new_owner::text, ''), coalesce(o.directory_version::text, ''),
                  coalesce(o.move_id::text, ''), p_table);
  owner_text := CASE WHEN o.new_owner IS NULL THEN '' ELSE format(' to shard %s', o.new_owner) END;
  IF p_frozen THEN
    RAISE EXCEPTION USING ERRCODE = 'SK002',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is frozen on shard %s while it moves%s',
                       p_table, p_bucket, me, owner_text),
      DETAIL = facts,
      HINT = 'The cutover takes well under a second: retry the transaction (shardkit''s routed transactions do), '
             'then write where the directory sends it.';
  END IF;
  IF p_snapshot_too_old THEN
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: the ownership of bucket %s on shard %s changed after this '
                       '%s transaction took its snapshot', p_table, p_bucket, me,
                       current_setting('transaction_isolation')),
      DETAIL = facts,
      HINT = 'Retry the transaction; it will see the bucket''s current owner.';
  END IF;
  IF o.state = 'retired' OR o.state = 'cleaning' THEN
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s: it moved%s '
                       '(directory version %s)', p_table, p_bucket, me, owner_text, o.directory_version),
      DETAIL = facts,
      HINT = 'Refresh the directory and write to the new owner (shardkit''s routed transactions do).';
  ELSIF o.state = 'incoming' THEN
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s yet: a move (move %s) '
                       'is copying it here', p_table, p_bucket, me, o.move_id),
      DETAIL = facts,
      HINT = 'Write to the bucket''s current owner, as the directory says.';
  ELSE
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s', p_table, p_bucket, me),
      DETAIL = facts,
      HINT = 'Route the write through the bucket directory (shardctl route shows where a customer lives).';
  END IF;
END
$fn$;

-- The fence: BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW (COPY
-- included) on every registered table of an enrolled shard. Logical
-- replication's apply does not fire it (session_replication_role = replica),
-- so a move's rows still arrive on an incoming bucket.
--
-- READ COMMITTED: each statement of this VOLATILE function takes a fresh
-- snapshot, so it sees a 'retired' committed a moment ago; and the shared
-- lock, taken first, keeps the bucket from being frozen (hence retired)
-- until this transaction ends. REPEATABLE READ and SERIALIZABLE read the
-- ownership row with the transaction's old snapshot, so there it is locked
-- FOR SHARE: a change committed after the snapshot then raises a
-- serialization failure, reported as SK001.
CREATE OR REPLACE FUNCTION shardkit_fence() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  b smallint;
  st text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    b := OLD.bucket;
  ELSE
    b := NEW.bucket;
    IF TG_OP = 'UPDATE' AND OLD.bucket IS DISTINCT FROM NEW.bucket THEN
      PERFORM shardkit_fence_check(OLD.bucket, TG_TABLE_NAME);
    END IF;
  END IF;
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
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$fn$;

-- The fence for one bucket, as a function (the old bucket of an UPDATE that
-- changes it; programs that want to check before writing).
CREATE OR REPLACE FUNCTION shardkit_fence_check(p_bucket smallint, p_table text DEFAULT '')
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  st text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    RETURN;
  END IF;
  IF NOT pg_try_advisory_xact_lock_shared(21323, p_bucket) THEN
    PERFORM shardkit_fence_refuse(p_bucket, p_table, true);
  END IF;
  SELECT o.state INTO st FROM shardkit_bucket_ownership o WHERE o.bucket = p_bucket;
  IF st IS DISTINCT FROM 'owned' THEN
    PERFORM shardkit_fence_refuse(p_bucket, p_table, false);
  END IF;
END
$fn$;

-- TRUNCATE skips row triggers and would take an arriving or retired bucket's
-- rows with it: refused on an enrolled shard while a move runs.
CREATE OR REPLACE FUNCTION shardkit_fence_truncate() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  o shardkit_bucket_ownership%ROWTYPE;
BEGIN
  SELECT * INTO o FROM shardkit_bucket_ownership
  WHERE state <> 'owned' OR move_id IS NOT NULL ORDER BY bucket LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: TRUNCATE %s refused: bucket %s is %s (move %s); finish or abort the move first',
                       TG_TABLE_NAME, o.bucket, o.state, coalesce(o.move_id::text, '?')),
      DETAIL = format('bucket=%s state=%s move_id=%s table=%s', o.bucket, o.state, coalesce(o.move_id::text, ''),
                      TG_TABLE_NAME);
  END IF;
  RETURN NULL;
END
$fn$;

-- The buckets a statement may see, as a 64-bit mask (bit b = bucket b),
-- for the row-level security policies below. One call per statement (the
-- policies call it through a scalar subquery, an InitPlan, evaluated when a
-- row is first checked), in the statement's snapshot.
--
--   shardkit.buckets unset or ''   the buckets owned here (psql, raw SQL)
--   shardkit.buckets = 'all'       every row (verify, repair, debugging)
--   shardkit.buckets = '<mask>'    exactly these: the buckets the caller's
--                                  directory version assigns to this shard.
--                                  shardkit sets it with SET LOCAL, and
--                                  checks it with shardkit_check_buckets(),
--                                  in the same round trip as BEGIN.
CREATE OR REPLACE FUNCTION shardkit_visible_mask() RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
  requested text := current_setting('shardkit.buckets', true);
  owned     bigint;
BEGIN
  IF requested IS NULL OR requested = '' THEN
    SELECT coalesce(bit_or(1::bigint << bucket), 0) INTO owned
    FROM shardkit_bucket_ownership WHERE state = 'owned';
    RETURN owned;
  END IF;
  IF requested = 'all' THEN
    RETURN -1;
  END IF;
  IF requested !~ '^-?[0-9]{1,19}$' THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: shardkit.buckets = ''%s'' is not a bucket mask: set a 64-bit integer whose bit b '
                       'is bucket b, ''all'', or nothing', requested);
  END IF;
  RETURN requested::bigint;
END
$fn$;

-- Checks, at the start of a transaction, that every bucket of
-- shardkit.buckets is readable here: owned, or retired (its rows as of the
-- move's freeze, kept until no transaction that began before the cleanup
-- can still read them: the mover waits for those). Else SK003: the
-- caller's directory is out of date; it refreshes it and runs again. Once
-- this passed, the transaction's reads of those buckets are whole to its
-- end, however many statements it runs, and even if they find no row.
-- Returns the mask.
CREATE OR REPLACE FUNCTION shardkit_check_buckets() RETURNS bigint
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  wanted   bigint := shardkit_visible_mask();
  readable bigint;
  bad      smallint;
  me       integer;
  o        shardkit_bucket_ownership%ROWTYPE;
BEGIN
  IF coalesce(current_setting('shardkit.buckets', true), '') IN ('', 'all') THEN
    RETURN wanted;
  END IF;
  -- A database that is not enrolled knows no ownership (and has no fence
  -- nor visibility policies): whatever the caller's directory says.
  IF NOT EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    RETURN wanted;
  END IF;
  SELECT coalesce(bit_or(1::bigint << bucket), 0) INTO readable
  FROM shardkit_bucket_ownership WHERE state IN ('owned', 'retired');
  IF wanted & ~readable = 0 THEN
    RETURN wanted;
  END IF;
  SELECT g::smallint INTO bad FROM generate_series(0, 63) AS g
  WHERE ((wanted >> g) & 1) = 1 AND ((readable >> g) & 1) = 0 ORDER BY g LIMIT 1;
  SELECT shard INTO me FROM shardkit_shard_identity;
  SELECT * INTO o FROM shardkit_bucket_ownership WHERE bucket = bad;
  RAISE EXCEPTION USING ERRCODE = 'SK003',
    MESSAGE = format('shardkit: read refused: bucket %s is not readable on shard %s (%s)%s', bad,
                     coalesce(me::text, '?'), coalesce(o.state, 'not here'),
                     CASE WHEN o.new_owner IS NULL THEN '' ELSE format(': it moved to shard %s', o.new_owner) END),
    DETAIL = format('bucket=%s shard=%s state=%s new_owner=%s directory_version=%s move_id=%s', bad,
                    coalesce(me::text, ''), coalesce(o.state, 'absent'), coalesce(o.new_owner::text, ''),
                    coalesce(o.directory_version::text, ''), coalesce(o.move_id::text, '')),
    HINT = 'The directory this transaction was routed with is out of date: refresh it and run it again '
           '(shardkit does).';
END
$fn$;

-- Fence and visibility on one table of an enrolled shard (idempotent).
CREATE OR REPLACE FUNCTION shardkit_install_fence(t regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  visible constant text := '((((SELECT shardkit_visible_mask()) >> bucket) & 1) = 1)';
  policy name;
BEGIN
  EXECUTE format('CREATE OR REPLACE TRIGGER shardkit_fence BEFORE INSERT OR UPDATE OR DELETE ON %s '
                 'FOR EACH ROW EXECUTE FUNCTION shardkit_fence()', t);
  EXECUTE format('CREATE OR REPLACE TRIGGER shardkit_fence_truncate BEFORE TRUNCATE ON %s '
                 'FOR EACH STATEMENT EXECUTE FUNCTION shardkit_fence_truncate()', t);
  FOR policy IN SELECT polname FROM pg_policy WHERE polrelid = t AND polname LIKE 'shardkit\_%' LOOP
    EXECUTE format('DROP POLICY %I ON %s', policy, t);
  END LOOP;
  -- Writes are the fence's business (it names the bucket and the owner);
  -- the policies only keep rows of other buckets out of sight.
  EXECUTE format('CREATE POLICY shardkit_read ON %s FOR SELECT USING %s', t, visible);
  EXECUTE format('CREATE POLICY shardkit_insert ON %s FOR INSERT WITH CHECK (true)', t);
  EXECUTE format('CREATE POLICY shardkit_update ON %s FOR UPDATE USING %s WITH CHECK (true)', t, visible);
  EXECUTE format('CREATE POLICY shardkit_delete ON %s FOR DELETE USING %s', t, visible);
  -- FORCE: the application role usually owns its tables; superusers and
  -- logical replication's apply bypass row-level security.
  EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
  EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
END
$fn$;

-- Does the table's replica identity include the bucket column? PostgreSQL
-- 15 row filters (WHERE (bucket = 7)) on a publication of UPDATE and DELETE
-- need every filter column in the replica identity; without it every UPDATE
-- and DELETE on the table fails while the publication exists.
CREATE OR REPLACE FUNCTION shardkit_identity_has_bucket(t regclass) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT CASE c.relreplident
           WHEN 'f' THEN true
           WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a
                                   ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                                 WHERE i.indrelid = c.oid AND i.indisprimary AND a.attname = 'bucket')
           WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a
                                   ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                                 WHERE i.indrelid = c.oid AND i.indisreplident AND a.attname = 'bucket')
           ELSE false
         END
  FROM pg_class c WHERE c.oid = t
$fn$;

-- Registers a sharded table: the one call a migration makes for a new table
-- that is sharded by bucket (it must have bucket smallint NOT NULL and a
-- primary key). It makes the replica identity include bucket (a unique
-- constraint on bucket and the primary key columns, unless it already does),
-- records the table, and on an enrolled shard installs the fence and the
-- visibility policies. Idempotent.
--
--   SELECT shardkit_shard_table('shardkit_jobs');
CREATE OR REPLACE FUNCTION shardkit_shard_table(t regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  col        record;
  pk_columns text;
  ident_name text;
BEGIN
  SELECT a.atttypid, a.attnotnull INTO col
  FROM pg_attribute a WHERE a.attrelid = t AND a.attname = 'bucket' AND NOT a.attisdropped;
  IF NOT FOUND OR col.atttypid <> 'smallint'::regtype OR NOT col.attnotnull THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s cannot be sharded: it needs a column bucket smallint NOT NULL '
                       'CHECK (bucket = bucket_of(customer_id))', t);
  END IF;
  IF NOT shardkit_identity_has_bucket(t) THEN
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) INTO pk_columns
    FROM pg_index i
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
    WHERE i.indrelid = t AND i.indisprimary;
    IF pk_columns IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'SK004',
        MESSAGE = format('shardkit: table %s cannot be sharded: it has no primary key (a move''s replication '
                         'identifies rows by bucket and the primary key)', t);
    END IF;
    ident_name := left((SELECT relname FROM pg_class WHERE oid = t), 40) || '_shardkit_identity';
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I UNIQUE (bucket, %s)', t, ident_name, pk_columns);
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', t, ident_name);
  END IF;
  INSERT INTO shardkit_sharded_tables (table_name) VALUES (t) ON CONFLICT DO NOTHING;
  IF EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    PERFORM shardkit_install_fence(t);
  END IF;
END
$fn$;

-- Makes this database shard `p_shard`, owning `p_buckets` as of directory
-- version `p_directory_version`, and fences every registered table. Run once
-- per shard when the cluster is set up or a shard is added (shardctl shards
-- enroll; lab/cluster does it). Again with the same buckets: nothing changes.
-- p_replace replaces the ownership (a reset of an empty cluster); refused
-- while a move runs.
CREATE OR REPLACE FUNCTION shardkit_enroll_shard(p_shard integer, p_buckets integer[], p_directory_version bigint,
                                                 p_replace boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  current_shard integer;
  have integer[];
  want integer[];
  busy shardkit_bucket_ownership%ROWTYPE;
  t regclass;
BEGIN
  LOCK TABLE shardkit_bucket_ownership IN EXCLUSIVE MODE;
  SELECT shard INTO current_shard FROM shardkit_shard_identity;
  SELECT coalesce(array_agg(bucket::integer ORDER BY bucket), '{}') INTO have
  FROM shardkit_bucket_ownership WHERE state = 'owned';
  SELECT coalesce(array_agg(DISTINCT b ORDER BY b), '{}') INTO want FROM unnest(p_buckets) AS b;
  IF EXISTS (SELECT 1 FROM unnest(want) AS b WHERE b NOT BETWEEN 0 AND 63) THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004', MESSAGE = 'shardkit: buckets are 0..63';
  END IF;
  IF current_shard IS NOT NULL AND NOT p_replace THEN
    IF current_shard <> p_shard THEN
      RAISE EXCEPTION USING ERRCODE = 'SK004',
        MESSAGE = format('shardkit: this database is enrolled as shard %s, not %s; check the config''s shard order',
                         current_shard, p_shard);
    END IF;
    IF have <> want AND NOT EXISTS (SELECT 1 FROM shardkit_bucket_ownership WHERE state <> 'owned') THEN
      RAISE EXCEPTION USING ERRCODE = 'SK004',
        MESSAGE = format('shardkit: shard %s already owns buckets %s, not %s; re-enrolling with other buckets '
                         'needs replace (an empty cluster only: moves change ownership)', p_shard, have, want);
    END IF;
  ELSE
    SELECT * INTO busy FROM shardkit_bucket_ownership WHERE state <> 'owned' OR move_id IS NOT NULL LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION USING ERRCODE = 'SK004',
        MESSAGE = format('shardkit: cannot replace the ownership of shard %s: bucket %s is %s (move %s); finish '
                         'or abort the move first', coalesce(current_shard, p_shard), busy.bucket, busy.state,
                         coalesce(busy.move_id::text, '?'));
    END IF;
    DELETE FROM shardkit_bucket_ownership;
    INSERT INTO shardkit_shard_identity (singleton, shard) VALUES (true, p_shard)
    ON CONFLICT (singleton) DO UPDATE SET shard = EXCLUDED.shard, enrolled_at = clock_timestamp();
    INSERT INTO shardkit_bucket_ownership (bucket, state, directory_version)
    SELECT b, 'owned', p_directory_version FROM unnest(want) AS b;
  END IF;
  -- Every table with the shard key (customer_id and bucket, as verify
  -- finds them) is sharded: tables that later migrations created without
  -- calling shardkit_shard_table (the outbox tables of sql/020-022) are
  -- registered here, so a move carries them and the fence guards them.
  FOR t IN SELECT c.oid::regclass FROM pg_class c
           WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
             AND NOT c.relispartition
             AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'customer_id'
                         AND NOT a.attisdropped)
             AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'bucket'
                         AND NOT a.attisdropped)
             AND NOT EXISTS (SELECT 1 FROM shardkit_sharded_tables s WHERE s.table_name = c.oid)
           ORDER BY c.relname LOOP
    PERFORM shardkit_shard_table(t);
  END LOOP;
  FOR t IN SELECT s.table_name FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name LOOP
    PERFORM shardkit_install_fence(t);
  END LOOP;
END
$fn$;

-- Bulk loading with COPY (PostgreSQL refuses COPY FROM into a table with
-- row-level security): inside the loading transaction, call
-- shardkit_bulk_load_begin() first and shardkit_bulk_load_end() before
-- COMMIT. Between the two the fence's per-row trigger and the visibility
-- policies are off for the registered tables (ALTER TABLE: nobody else sees
-- the tables until COMMIT); the end checks that every row belongs to a
-- bucket owned here (SK001 otherwise) and puts both back. Refused while a
-- move runs. On a database that is not enrolled both do nothing.
CREATE OR REPLACE FUNCTION shardkit_bulk_load_begin() RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  t regclass;
  busy shardkit_bucket_ownership%ROWTYPE;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    RETURN;
  END IF;
  SELECT * INTO busy FROM shardkit_bucket_ownership WHERE state <> 'owned' OR move_id IS NOT NULL LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: bulk load refused: bucket %s is %s (move %s); finish or abort the move first',
                       busy.bucket, busy.state, coalesce(busy.move_id::text, '?'));
  END IF;
  FOR t IN SELECT s.table_name FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name LOOP
    EXECUTE format('ALTER TABLE %s DISABLE TRIGGER shardkit_fence', t);
    EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', t);
  END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION shardkit_bulk_load_end() RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  t regclass;
  owned bigint;
  stray smallint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    RETURN;
  END IF;
  SELECT coalesce(bit_or(1::bigint << bucket), 0) INTO owned FROM shardkit_bucket_ownership WHERE state = 'owned';
  FOR t IN SELECT s.table_name FROM shardkit_sharded_tables s JOIN pg_class c ON c.oid = s.table_name LOOP
    EXECUTE format('SELECT bucket FROM %s WHERE ((%s::bigint >> bucket) & 1) = 0 LIMIT 1', t, owned) INTO stray;
    IF stray IS NOT NULL THEN
      PERFORM shardkit_fence_refuse(stray, t::text, false);
    END IF;
    EXECUTE format('ALTER TABLE %s ENABLE TRIGGER shardkit_fence', t);
    PERFORM shardkit_install_fence(t);
  END LOOP;
END
$fn$;
