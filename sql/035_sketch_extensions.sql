-- shardkit-migration: targets = shard, reference
--
-- The sketches behind the approximate functions, used only when a caller
-- names them (approx_count_distinct: HyperLogLog, postgresql-15-hll;
-- approx_percentile: t-digest, postgresql-15-tdigest); exact percentiles and
-- COUNT(DISTINCT) never use them. Neither extension is trusted, so a
-- superuser creates them first (lab/cluster does, in template1 and the
-- bookstore database; scripts/bootstrap installs the packages), and then
-- this finds them. On a server without the packages (a plain postgres
-- image) it creates nothing: the approximate functions then fail naming
-- the missing function, and everything else works.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_available_extensions WHERE name = 'hll') THEN
    CREATE EXTENSION IF NOT EXISTS hll;
  END IF;
  IF EXISTS (SELECT FROM pg_available_extensions WHERE name = 'tdigest') THEN
    CREATE EXTENSION IF NOT EXISTS tdigest;
  END IF;
END
$$;
