-- shardkit-migration: targets = shard, reference
-- Reads of a bucket are answered only by the shard that holds every
-- acknowledged write of it (include/shardkit/ownership.hpp, move.hpp).
--
-- A bucket is readable on a shard while the shard owns it ('owned'), and
-- only then. A move hands a bucket over in this order, all while the source
-- is frozen for writes: the readers that checked the bucket are drained,
-- the source retires it, the target owns it, the catalog's directory flips.
-- So no instant has two shards serving the bucket, and the one serving it
-- has every acknowledged write: the source up to the retirement (no write
-- is acknowledged anywhere between the freeze and the target's ownership),
-- the target after it. A source that has retired the bucket refuses its
-- reads (SK003, naming the new owner and the move), whatever directory the
-- caller has; a target refuses them until it owns the bucket.
--
-- The read hold: shardkit_check_buckets() (the library sends it with BEGIN)
-- takes pg_try_advisory_xact_lock_shared(21326, bucket) for each asked
-- bucket that a move is taking away from this shard, so a READ COMMITTED
-- transaction that checked a bucket keeps a whole view of it to its end
-- (REPEATABLE READ and SERIALIZABLE ones read as of the checked snapshot
-- and need none). The move waits for those holds (pg_advisory_lock(21326,
-- bucket), bounded by its drain timeout) before it retires the bucket;
-- while it waits or holds it, new readers of the bucket are refused at once
-- (SK003, state=frozen: retry shortly), as writers are by the freeze.
--
-- Raw SQL: the row-level security policies call shardkit_visible_mask()
-- once per statement, and that now refuses (SK003) a shardkit.buckets mask
-- naming a bucket this shard does not serve, in the statement's own
-- snapshot. PostgreSQL evaluates a policy's condition only on the rows a
-- scan reaches (it never makes it a one-time filter), so a statement that
-- reaches no row at all cannot be refused that way: a caller's own SQL must
-- run shardkit_check_buckets() after setting the mask, as the library does.
--
--   SELECT set_config('shardkit.buckets', '<mask>', true), shardkit_check_buckets();

-- Raises SK003 for a read of p_bucket, which this shard does not serve;
-- p_frozen: the bucket is being handed over (a move's cutover).
CREATE OR REPLACE FUNCTION shardkit_read_refuse(p_bucket smallint, p_frozen boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
  me   integer;
  o    shardkit_bucket_ownership%ROWTYPE;
  why  text;
  hint text;
  resume text := '';
BEGIN
  SELECT shard INTO me FROM shardkit_shard_identity;
  SELECT * INTO o FROM shardkit_bucket_ownership WHERE bucket = p_bucket;
  IF o.move_id IS NOT NULL THEN
    resume := format(' If this lasts, move %s stopped: shardctl move show %s, then shardctl move resume %s '
                     '(or shardctl move abort %s while the target does not own the bucket).',
                     o.move_id, o.move_id, o.move_id, o.move_id);
  END IF;
  IF p_frozen THEN
    why := format('it is frozen for the cutover of move %s to shard %s', coalesce(o.move_id::text, '?'),
                  coalesce(o.new_owner::text, '?'));
    hint := 'The cutover takes well under a second: retry (shardkit''s routed transactions and scatters do).';
  ELSIF o.state IN ('retired', 'cleaning') THEN
    why := format('it moved to shard %s%s', coalesce(o.new_owner::text, '?'),
                  CASE WHEN o.move_id IS NULL THEN '' ELSE format(' (move %s)', o.move_id) END);
    hint := format('Read it on shard %s: refresh the directory and run again (shardkit''s routed transactions '
                   'and scatters do).', coalesce(o.new_owner::text, '?'));
  ELSIF o.state = 'incoming' THEN
    why := format('it is arriving by move %s and is not served here yet', coalesce(o.move_id::text, '?'));
    hint := 'Read it where the catalog''s directory places it.';
  ELSE
    why := 'it is not on this shard';
    hint := 'The directory this read was routed with is out of date: refresh it and run again (shardkit does).';
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'SK003',
    MESSAGE = format('shardkit: read refused: bucket %s is not served by shard %s: %s', p_bucket,
                     coalesce(me::text, '?'), why),
    DETAIL = format('bucket=%s shard=%s state=%s new_owner=%s directory_version=%s move_id=%s', p_bucket,
                    coalesce(me::text, ''), CASE WHEN p_frozen THEN 'frozen' ELSE coalesce(o.state, 'absent') END,
                    coalesce(o.new_owner::text, ''), coalesce(o.directory_version::text, ''),
                    coalesce(o.move_id::text, '')),
    HINT = hint || resume;
END
$fn$;

-- The buckets a statement may see (the row-level security policies call it
-- once per statement), as in sql/010; a mask must name only buckets this
-- shard owns in the statement's snapshot, else SK003.
CREATE OR REPLACE FUNCTION shardkit_visible_mask() RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
  requested text := current_setting('shardkit.buckets', true);
  wanted    bigint;
  owned     bigint;
  enrolled  boolean;
  bad       smallint;
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
  wanted := requested::bigint;
  -- Checked by shardkit_check_buckets() in this transaction (which holds
  -- the buckets to its end): nothing to read again.
  IF current_setting('shardkit.checked', true) = requested THEN
    RETURN wanted;
  END IF;
  SELECT EXISTS (SELECT 1 FROM shardkit_shard_identity),
         (SELECT coalesce(bit_or(1::bigint << bucket), 0) FROM shardkit_bucket_ownership WHERE state = 'owned')
  INTO enrolled, owned;
  -- A database that is not enrolled knows no ownership: the caller's mask.
  IF NOT enrolled OR wanted & ~owned = 0 THEN
    RETURN wanted;
  END IF;
  SELECT g::smallint INTO bad FROM generate_series(0, 63) AS g
  WHERE (((wanted & ~owned) >> g) & 1) = 1 ORDER BY g LIMIT 1;
  PERFORM shardkit_read_refuse(bad);
  RETURN wanted;
END
$fn$;

-- The check the library sends with BEGIN (and a caller's own SQL must send
-- after setting the mask): every bucket of shardkit.buckets is owned here,
-- else SK003; and the read hold on each of them that a move is taking away
-- (see the top). Returns the mask.
--
-- It records the mask it checked in shardkit.checked (transaction-local,
-- shardkit's own: do not set it), so that the policies' per-statement check
-- of the same mask reads nothing again: the transaction holds it anyway.
--
-- Why the hold is enough: a bucket that is owned with no move marked in the
-- snapshot read here gets its move's mark only after this transaction
-- began, and a move waits, before it freezes, for every transaction older
-- than its mark (move.cpp). A marked bucket is held; a handover that began
-- meanwhile makes the try fail (refused); one that ended before it retired
-- the bucket, which READ COMMITTED sees in a fresh snapshot after the hold.
CREATE OR REPLACE FUNCTION shardkit_check_buckets() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  requested text := current_setting('shardkit.buckets', true);
  wanted   bigint;
  enrolled boolean;
  owned    bigint;
  moving   bigint;
  bad      smallint;
  b        smallint;
BEGIN
  -- Unset, 'all' or not a mask: shardkit_visible_mask() says what (SK004
  -- for a malformed one); a mask is checked here, with one read.
  IF coalesce(requested, '') IN ('', 'all') OR requested !~ '^-?[0-9]{1,19}$' THEN
    RETURN shardkit_visible_mask();
  END IF;
  wanted := requested::bigint;
  SELECT EXISTS (SELECT 1 FROM shardkit_shard_identity),
         coalesce(bit_or(1::bigint << bucket) FILTER (WHERE state = 'owned'), 0),
         coalesce(bit_or(1::bigint << bucket) FILTER (WHERE state = 'owned' AND move_id IS NOT NULL), 0)
  INTO enrolled, owned, moving FROM shardkit_bucket_ownership;
  -- A database that is not enrolled knows no ownership (and has no fence
  -- nor visibility policies): whatever the caller's directory says.
  IF NOT enrolled THEN
    RETURN wanted;
  END IF;
  IF wanted & ~owned <> 0 THEN
    SELECT g::smallint INTO bad FROM generate_series(0, 63) AS g
    WHERE (((wanted & ~owned) >> g) & 1) = 1 ORDER BY g LIMIT 1;
    PERFORM shardkit_read_refuse(bad);
  END IF;
  -- REPEATABLE READ and SERIALIZABLE read as of this snapshot, in which
  -- the buckets are owned: whole to the end without a hold.
  IF wanted & moving = 0 OR current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM set_config('shardkit.checked', requested, true);
    RETURN wanted;
  END IF;
  FOR b IN SELECT g::smallint FROM generate_series(0, 63) AS g WHERE (((wanted & moving) >> g) & 1) = 1 LOOP
    IF NOT pg_try_advisory_xact_lock_shared(21326, b) THEN
      PERFORM shardkit_read_refuse(b, true);
    END IF;
  END LOOP;
  SELECT coalesce(bit_or(1::bigint << bucket), 0) INTO owned FROM shardkit_bucket_ownership WHERE state = 'owned';
  IF wanted & ~owned <> 0 THEN
    SELECT g::smallint INTO bad FROM generate_series(0, 63) AS g
    WHERE (((wanted & ~owned) >> g) & 1) = 1 ORDER BY g LIMIT 1;
    PERFORM shardkit_read_refuse(bad);
  END IF;
  PERFORM set_config('shardkit.checked', requested, true);
  RETURN wanted;
END
$fn$;

-- Write refusals (the fence, sql/010) name the move and what to run when a
-- refusal lasts, and no directory version the catalog may not have yet.
CREATE OR REPLACE FUNCTION shardkit_fence_refuse(p_bucket smallint, p_table text, p_frozen boolean,
                                                 p_snapshot_too_old boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  me   integer;
  o    shardkit_bucket_ownership%ROWTYPE;
  facts text;
  owner_text text;
  resume text := '';
BEGIN
  SELECT shard INTO me FROM shardkit_shard_identity;
  SELECT * INTO o FROM shardkit_bucket_ownership WHERE bucket = p_bucket;
  facts := format('bucket=%s shard=%s state=%s new_owner=%s directory_version=%s move_id=%s table=%s',
                  p_bucket, coalesce(me::text, ''),
                  CASE WHEN p_snapshot_too_old THEN 'changed' ELSE coalesce(o.state, 'absent') END,
                  coalesce(o.new_owner::text, ''), coalesce(o.directory_version::text, ''),
                  coalesce(o.move_id::text, ''), p_table);
  owner_text := CASE WHEN o.new_owner IS NULL THEN '' ELSE format(' to shard %s', o.new_owner) END;
  IF o.move_id IS NOT NULL THEN
    resume := format(' If this lasts, move %s stopped: shardctl move show %s, then shardctl move resume %s '
                     '(or shardctl move abort %s while the target does not own the bucket).',
                     o.move_id, o.move_id, o.move_id, o.move_id);
  END IF;
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
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s: it moved%s%s',
                       p_table, p_bucket, me, owner_text,
                       CASE WHEN o.move_id IS NULL THEN '' ELSE format(' (move %s)', o.move_id) END),
      DETAIL = facts,
      HINT = 'Refresh the directory and write to the new owner (shardkit''s routed transactions do).' || resume;
  ELSIF o.state = 'incoming' THEN
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s yet: a move (move %s) '
                       'is copying it here', p_table, p_bucket, me, o.move_id),
      DETAIL = facts,
      HINT = 'Write to the bucket''s current owner, as the directory says.' || resume;
  ELSE
    RAISE EXCEPTION USING ERRCODE = 'SK001',
      MESSAGE = format('shardkit: write to %s refused: bucket %s is not owned by shard %s', p_table, p_bucket, me),
      DETAIL = facts,
      HINT = 'Route the write through the bucket directory (shardctl route shows where a customer lives).';
  END IF;
END
$fn$;
