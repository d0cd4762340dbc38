-- shardkit-migration: targets = shard, reference
-- bucket_of(customer_id): the SQL twin of shardkit::BucketOf (include/shardkit/bucket.hpp).
--
--   bucket = (uint32(customer_id) * 2654435761 mod 2^32) >> 26
--
-- uint32(x) * 2654435761 can reach 2^64 and overflows bigint, so the
-- multiplier is split into its high and low 16 bits (2654435761 =
-- 40503 * 65536 + 31153); every intermediate stays below 2^49.
-- PostgreSQL gives & << >> the same precedence, hence the parentheses.
CREATE OR REPLACE FUNCTION bucket_of(customer_id integer) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (
  (
    ((customer_id::bigint & 4294967295) * 31153)
    + ((((customer_id::bigint & 4294967295) * 40503) & 65535) << 16)
  ) & 4294967295
) >> 26;

COMMENT ON FUNCTION bucket_of(integer) IS
  'shardkit bucket (0..63) of a customer: Knuth multiplicative hash, top 6 of 32 bits; equals shardkit::BucketOf';
