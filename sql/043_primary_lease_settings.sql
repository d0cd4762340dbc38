-- shardkit-migration: targets = catalog
-- Primary leases (sql/042, include/shardkit/routing/primary_leases.hpp):
-- on when this table has its row, with the lease's time to live. Routers
-- read it with every renewal, and a forced failover waits for it, so both
-- always use the same value. shardctl leases turns them on, changes the
-- time to live, and turns them off.
CREATE TABLE IF NOT EXISTS shardkit_lease_settings (
  singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  ttl_ms          integer     NOT NULL CHECK (ttl_ms BETWEEN 100 AND 600000),
  -- The value before the last change: a grant made with it may still run
  -- until changed_at + previous_ttl_ms, and a failover waits for that too.
  previous_ttl_ms integer,
  changed_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE OR REPLACE FUNCTION shardkit_lease_settings_changed() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.previous_ttl_ms := OLD.ttl_ms;
  NEW.changed_at := clock_timestamp();
  RETURN NEW;
END
$fn$;
DROP TRIGGER IF EXISTS shardkit_lease_settings_changed ON shardkit_lease_settings;
CREATE TRIGGER shardkit_lease_settings_changed BEFORE UPDATE ON shardkit_lease_settings
  FOR EACH ROW EXECUTE FUNCTION shardkit_lease_settings_changed();

-- What a renewal needs in one statement: the time to live, each shard's
-- primary as the catalog names it (no row: the configuration's), the shards
-- a failover is under way for (their primaries get no lease), and the
-- grant's end: the statement's start (before its snapshot: a failover
-- committed after it is not seen, and began later) plus the time to live,
-- in microseconds since the epoch on the catalog's clock. No row: leases
-- are off.
CREATE OR REPLACE FUNCTION shardkit_lease_grant()
RETURNS TABLE (ttl_ms integer, grant_until_us bigint, shards text[], servers text[], failing_over text[])
LANGUAGE sql STABLE AS $fn$
  SELECT s.ttl_ms,
         (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + s.ttl_ms::bigint * 1000,
         coalesce((SELECT array_agg(p.shard ORDER BY p.shard) FROM shardkit_primaries p), '{}'),
         coalesce((SELECT array_agg(p.server ORDER BY p.shard) FROM shardkit_primaries p), '{}'),
         coalesce((SELECT array_agg(DISTINCT f.shard) FROM shardkit_failovers f
                   WHERE f.state NOT IN ('done', 'failed')), '{}')
  FROM shardkit_lease_settings s
$fn$;
