-- shardkit-migration: targets = catalog
--
-- Worker partition ownership (include/shardkit/partition_lease.hpp): which
-- worker process handles which of a worker group's partitions (64 = the
-- buckets by default). One set of tables for the whole fleet, in the catalog.
--
-- A group's partition count is fixed when its first worker joins; every
-- later worker must agree.
CREATE TABLE IF NOT EXISTS shardkit_partition_groups (
  worker_group    text        PRIMARY KEY CHECK (worker_group <> ''),
  partition_count integer     NOT NULL CHECK (partition_count BETWEEN 1 AND 1024),
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The seed's shard_ownership table: one row per partition, never deleted,
-- so claim_version (the fencing token) only grows. owner is NULL once
-- released; lease_until is the server's time until which the owner may work.
CREATE TABLE IF NOT EXISTS shardkit_partition_leases (
  worker_group  text        NOT NULL REFERENCES shardkit_partition_groups ON DELETE CASCADE,
  partition     integer     NOT NULL CHECK (partition BETWEEN 0 AND 1023),
  owner         text,
  lease_until   timestamptz NOT NULL DEFAULT '-infinity',
  claim_version bigint      NOT NULL DEFAULT 0 CHECK (claim_version >= 0),
  claimed_at    timestamptz,
  released_at   timestamptz,
  PRIMARY KEY (worker_group, partition)
);
CREATE INDEX IF NOT EXISTS shardkit_partition_leases_owner_idx ON shardkit_partition_leases (worker_group, owner);

-- Live workers of a group: a membership lease renewed with the partition
-- leases. A worker that holds no partition yet (it just joined) still
-- counts, so the others make room for it. Shares follow join order.
CREATE TABLE IF NOT EXISTS shardkit_partition_workers (
  worker_group text        NOT NULL REFERENCES shardkit_partition_groups ON DELETE CASCADE,
  owner        text        NOT NULL CHECK (owner <> ''),
  joined_at    timestamptz NOT NULL,
  lease_until  timestamptz NOT NULL,
  PRIMARY KEY (worker_group, owner)
);

-- Salted hot keys of a job queue (include/shardkit/hot_keys.hpp): a salted
-- customer's jobs spread over `salt` partitions. max_salt never decreases:
-- jobs written under an earlier, larger salt may still be pending in those
-- partitions, and readers must keep looking there.
CREATE TABLE IF NOT EXISTS shardkit_hot_keys (
  queue       text        NOT NULL CHECK (queue <> ''),
  customer_id integer     NOT NULL,
  salt        integer     NOT NULL CHECK (salt BETWEEN 1 AND 1024),
  max_salt    integer     NOT NULL CHECK (max_salt >= salt),
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (queue, customer_id)
);

COMMENT ON TABLE shardkit_partition_leases IS
  'shardkit worker partition leases: claim_version is the fencing token written into shardkit_jobs.fence';
