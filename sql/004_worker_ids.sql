-- shardkit-migration: targets = catalog
-- Worker-id leases for shardkit's Snowflake and bucketed ID generators
-- (include/shardkit/worker_lease.hpp). One table for the whole fleet: all
-- processes that write IDs into the same columns must claim from the same
-- table, so it lives in one database, the catalog ([catalog] dsn), never
-- one per shard.
--
-- A row per (id_space, worker_id) that was ever claimed; rows are never
-- deleted, so claim_version (the fencing token) only grows. owner is NULL
-- once released. lease_until is set by the server's clock: until then the
-- holder may issue IDs; after a release it records the last millisecond the
-- holder issued, so the next holder starts after it.
CREATE TABLE IF NOT EXISTS shardkit_worker_ids (
  id_space      text        NOT NULL CHECK (id_space <> ''),
  worker_id     integer     NOT NULL CHECK (worker_id BETWEEN 0 AND 1023),
  owner         text,
  lease_until   timestamptz NOT NULL,
  claim_version bigint      NOT NULL CHECK (claim_version >= 1),
  claimed_at    timestamptz NOT NULL,
  PRIMARY KEY (id_space, worker_id)
);

COMMENT ON TABLE shardkit_worker_ids IS
  'shardkit worker-id leases: one row per claimed (id_space, worker_id); claim_version is the fencing token';
COMMENT ON COLUMN shardkit_worker_ids.lease_until IS
  'server time until which the holder may issue IDs; after release, the last millisecond it issued';
