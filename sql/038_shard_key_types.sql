-- shardkit-migration: targets = shard, reference
-- A shard key of any name and of type integer, bigint, uuid or text: the
-- SQL twins of shardkit::ShardKey's bucket for each (include/shardkit/core/
-- shard_key.hpp), and each sharded table's key column recorded where the
-- SQL layer, moves and verify read it.
--
--   bucket_of(integer)        sql/001
--   bucket_of_bigint(bigint)  in the integer range: as that integer (a column
--                             widened from integer keeps its buckets); else
--                             (uint64(v) * 11400714819323198485 mod 2^64) >> 58
--   bucket_of_text(text)      FNV-1a (32 bits) of its UTF-8 bytes, then the integer rule
--   bucket_of_uuid(uuid)      FNV-1a (32 bits) of its 16 bytes, then the integer rule
--
-- Names of their own, not overloads of bucket_of: PostgreSQL would resolve
-- bucket_of('4242') or bucket_of($1) with an untyped parameter to text's
-- overload and answer another bucket without a word. With one bucket_of,
-- an untyped value is an integer as before, and a bigint column passed to
-- bucket_of is an error, not a wrong bucket.

-- numeric: the 64-bit product needs more than bigint holds.
CREATE OR REPLACE FUNCTION bucket_of_bigint(key bigint) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE
  WHEN key BETWEEN -2147483648 AND 2147483647 THEN bucket_of(key::integer)
  ELSE div(((key::numeric + 18446744073709551616) % 18446744073709551616) * 11400714819323198485
             % 18446744073709551616, 288230376151711744)::smallint
END;

-- FNV-1a: every intermediate (< 2^32 times 16777619) stays below 2^57.
CREATE OR REPLACE FUNCTION shardkit_bucket_of_bytes(bytes bytea) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
  hash bigint := 2166136261;
BEGIN
  FOR i IN 0 .. length(bytes) - 1 LOOP
    hash := ((hash # get_byte(bytes, i)) * 16777619) & 4294967295;
  END LOOP;
  RETURN bucket_of((hash - ((hash >> 31) << 32))::integer);
END
$fn$;

CREATE OR REPLACE FUNCTION bucket_of_text(key text) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN shardkit_bucket_of_bytes(convert_to(key, 'UTF8'));

CREATE OR REPLACE FUNCTION bucket_of_uuid(key uuid) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN shardkit_bucket_of_bytes(uuid_send(key));

COMMENT ON FUNCTION bucket_of_bigint(bigint) IS
  'shardkit bucket (0..63) of a bigint key; equals shardkit::BucketOfInt8';
COMMENT ON FUNCTION bucket_of_text(text) IS 'shardkit bucket (0..63) of a text key; equals shardkit::ShardKey::Text';
COMMENT ON FUNCTION bucket_of_uuid(uuid) IS 'shardkit bucket (0..63) of a uuid key; equals shardkit::ShardKey::Uuid';

ALTER TABLE shardkit_sharded_tables ADD COLUMN IF NOT EXISTS key_column name NOT NULL DEFAULT 'customer_id';

-- The shard key of a table: the one column other than bucket that a CHECK
-- constraint passes to a bucket function (CHECK (bucket =
-- bucket_of_bigint(tenant_id))), else customer_id when the table has it.
CREATE OR REPLACE FUNCTION shardkit_infer_key_column(t regclass) RETURNS name
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(
    (SELECT min(a.attname)
     FROM pg_constraint k JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)
     WHERE k.conrelid = t AND k.contype = 'c' AND pg_get_constraintdef(k.oid) LIKE '%bucket_of%(%'
       AND a.attname <> 'bucket'
     HAVING count(DISTINCT a.attname) = 1),
    (SELECT a.attname FROM pg_attribute a
     WHERE a.attrelid = t AND a.attname = 'customer_id' AND NOT a.attisdropped))
$fn$;

-- Registers a sharded table (see sql/010), now with its shard key column:
-- named, or found as shardkit_infer_key_column says. The key must be
-- integer, bigint, uuid, text or varchar, and the table needs bucket
-- smallint NOT NULL (CHECK (bucket = bucket_of_<type>(key)) keeps the two in step).
--
--   SELECT shardkit_shard_table('invoices', 'tenant_id');
DROP FUNCTION IF EXISTS shardkit_shard_table(regclass);
CREATE OR REPLACE FUNCTION shardkit_shard_table(t regclass, key_column name DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  key        name := coalesce(key_column, shardkit_infer_key_column(t));
  key_type   regtype;
  col        record;
  pk_columns text;
  ident_name text;
BEGIN
  IF to_regclass('shardkit_reference_tables') IS NOT NULL
     AND EXISTS (SELECT 1 FROM shardkit_reference_tables r WHERE r.table_name = t) THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s is registered as a reference table, so it cannot be sharded', t);
  END IF;
  IF key IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s cannot be sharded: its shard key is not known (no customer_id column, '
                       'no CHECK (bucket = bucket_of...(...)))', t),
      HINT = format('name it: SELECT shardkit_shard_table(%L, ''tenant_id'')', t::text);
  END IF;
  SELECT a.atttypid::regtype INTO key_type
  FROM pg_attribute a WHERE a.attrelid = t AND a.attname = key AND NOT a.attisdropped;
  IF key_type IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s cannot be sharded by %I: it has no such column', t, key);
  END IF;
  IF key_type NOT IN ('integer'::regtype, 'bigint'::regtype, 'uuid'::regtype, 'text'::regtype,
                      'character varying'::regtype) THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s cannot be sharded by %I: its type %s is not one of integer, bigint, '
                       'uuid, text, varchar', t, key, key_type);
  END IF;
  SELECT a.atttypid, a.attnotnull INTO col
  FROM pg_attribute a WHERE a.attrelid = t AND a.attname = 'bucket' AND NOT a.attisdropped;
  IF NOT FOUND OR col.atttypid <> 'smallint'::regtype OR NOT col.attnotnull THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s cannot be sharded: it needs a column bucket smallint NOT NULL '
                       'CHECK (bucket = %s(%I))', t,
                       CASE key_type WHEN 'bigint'::regtype THEN 'bucket_of_bigint'
                                     WHEN 'uuid'::regtype THEN 'bucket_of_uuid'
                                     WHEN 'integer'::regtype THEN 'bucket_of'
                                     ELSE 'bucket_of_text' END, key);
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
  INSERT INTO shardkit_sharded_tables (table_name, key_column) VALUES (t, key)
  ON CONFLICT (table_name) DO UPDATE SET key_column = EXCLUDED.key_column;
  IF EXISTS (SELECT 1 FROM shardkit_shard_identity) THEN
    PERFORM shardkit_install_fence(t);
  END IF;
END
$fn$;

-- Tables registered before this file: their key as it is inferred now.
UPDATE shardkit_sharded_tables s SET key_column = k.key
FROM (SELECT table_name, shardkit_infer_key_column(table_name) AS key FROM shardkit_sharded_tables) k
WHERE k.table_name = s.table_name AND k.key IS NOT NULL AND k.key <> s.key_column;

-- Reference tables: full copies on every shard, declared in the schema next
-- to the sharded ones (the configuration's [sql] reference_tables adds to
-- this list). Execute joins them to any shard's rows, verify compares
-- their copies; they are changed by migrations applied to every shard.
--
--   SELECT shardkit_reference_table('countries');
CREATE TABLE IF NOT EXISTS shardkit_reference_tables (
  table_name    regclass    PRIMARY KEY,
  registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE OR REPLACE FUNCTION shardkit_reference_table(t regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF EXISTS (SELECT 1 FROM shardkit_sharded_tables WHERE table_name = t) THEN
    RAISE EXCEPTION USING ERRCODE = 'SK004',
      MESSAGE = format('shardkit: table %s is registered as sharded, so it cannot be a reference table', t);
  END IF;
  INSERT INTO shardkit_reference_tables (table_name) VALUES (t) ON CONFLICT DO NOTHING;
END
$fn$;
